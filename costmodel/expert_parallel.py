"""Expert parallelism and MLA in a step's price (the roofline's ``ep`` and MLA terms).

``ep`` GPUs share a model's routed experts, E/ep each. With tp the attention's tensor-parallel size,
ep = 1 is today's model; ep a divisor of tp splits experts ep ways and each expert's width tp/ep
ways; ep a multiple of tp runs ep/tp data-parallel attention groups of tp GPUs (SGLang
``--enable-dp-attention``), each assumed to carry a batch of this step's shape (a DP group steps as
its slowest rank: the simulator's later DP scheduling will pass unequal shapes). Per MoE layer:
  experts   the most loaded rank's rows and touched experts (``moe_cost.hot_rank_load``: uniform
            routing, or a Zipf ``skew``, EPLB on or off) of the G = rows·max(1, ep/tp) tokens the
            group routes, on the roofline (π, β of the weights' format)
  a2a       DeepEP dispatch and combine of rows/tp tokens per rank (``costmodel/deepep.py``): normal
            mode for a step with a prefill chunk, low-latency for a decode-only step (SGLang's
            ``--deepep-mode auto``), nodes = ep / gpus_per_node, the constants fitted on Hopper HGX
            nodes (``wideep_h200.json``); other GPUs: ncclAllToAll over the profile's NVLink, one
            node at most. The combine replaces the MoE layer's all-reduce.
MLA models (``model.is_mla``): attention FLOPs per query-key pair 2·h/tp·(d_n + d_r + d_v) in the
expanded form prefill runs, 2·h/tp·(2r + d_r) in decode's absorbed form (``dec_coef``: 3.4 times
as many; at tp 1, DP attention's layout, compute-bound: AIConfigurator's H100 SGLang table,
128 heads, 256 sequences at 2,047 tokens, 0.327 ms a layer, is 447 TFLOP/s of absorbed FLOPs and
no bound of the expanded form), and a KV cache of one (r + d_r)-element latent per token and
layer on every rank (``costmodel/mla.py``).
"""

from __future__ import annotations

import math

from . import deepep, mla, moe_cost
from .errors import require
from .hardware import Hardware
from .model import ModelSpec

DEEPEP_GPUS = ("h100", "h100-sxm", "h200")  # Hopper HGX profiles: the nodes DeepEP's constants were measured on


class ExpertParallel:
    """Mixed into the roofline's CostModel: the MoE layers' pricing. ``_init_mla`` sets MLA's
    attention coefficients, ``_init_ep`` binds ep, skew and EPLB; ``_ep_terms`` prices a pass's MoE
    layers under EP; ``_moe_terms`` / ``_moe_time`` the fitted fused-MoE layer (ep = 1)."""

    model: ModelSpec
    hw: Hardware
    tp: int
    attn_coef: float
    dec_coef: float
    kv_coef: float
    attn_fitted: bool
    moe_fitted: bool
    moe_pi: float
    moe_row_flops: float
    moe_expert_bytes: float
    moe_row_bytes: float
    ar_calls: int
    ar_bytes_per_row: float
    ar_latency: float

    def _init_mla(self) -> None:
        m, tp, La = self.model, self.tp, int(self.model.kv_layers or 0)
        if m.is_mla:  # costmodel/mla.py: expanded-form FLOPs, one latent per token on every rank
            nope = m.d_h - m.qk_rope_dim
            self.attn_coef = La * mla.context_flops_per_pair(m.h // tp, nope, m.qk_rope_dim, m.v_head_dim)
            self.dec_coef = La * mla.generation_flops_per_pair(m.h // tp, m.kv_lora_rank, m.qk_rope_dim)
            self.kv_coef = La * mla.latent_elems(m.kv_lora_rank, m.qk_rope_dim) * m.kv_elem_bytes

    def _init_ep(self, ep: int, skew: float = 0.0, eplb: bool = False) -> None:
        m, hw, tp = self.model, self.hw, self.tp
        require(
            not (m.is_mla and self.attn_fitted),
            "hardware",
            hw.name,
            f"its fitted attention kernels are GQA kernels; {m.name}'s MLA is priced on spec-sheet profiles only",
        )
        require(isinstance(ep, int) and ep >= 1, "ep", ep, "must be a positive integer")
        require(ep == 1 or m.is_moe, "ep", ep, f"{m.name} has no routed experts to split")
        require(ep == 1 or m.num_experts % ep == 0, "ep", ep, f"must divide the {m.num_experts} experts")
        require(ep == 1 or tp % ep == 0 or ep % tp == 0, "ep", ep, f"must divide, or be a multiple of, tp={tp}")
        require(skew >= 0 and math.isfinite(skew), "skew", skew, "must be a finite number >= 0")
        self.ep, self.skew, self.eplb = ep, skew, eplb
        if ep == 1:
            return
        self.nodes = -(-ep // max(1, hw.gpus_per_node))
        self.deepep = hw.name in DEEPEP_GPUS
        require(
            self.deepep or self.nodes == 1,
            "ep",
            ep,
            f"spans {self.nodes} nodes of {hw.name}, whose profile has no inter-node bandwidth "
            f"(DeepEP's measured constants hold for {', '.join(DEEPEP_GPUS)})",
        )
        self.moe_fitted = False  # the fused-MoE fit is a tp-only layer; under EP the hot rank on the roofline
        drop = m.moe_layers * (tp > 1)  # the MoE layers' all-reduce becomes the combine
        per_call = self.ar_bytes_per_row / self.ar_calls
        self.ar_calls -= drop
        self.ar_bytes_per_row, self.ar_latency = (
            per_call * self.ar_calls,
            self.ar_latency * self.ar_calls / (self.ar_calls + drop),
        )

    def _a2a_s(self, rows: int, decode_only: bool) -> tuple[float, float]:
        """(dispatch, combine) seconds per MoE layer for a pass of ``rows`` tokens."""
        m, mode = self.model, ("low_latency" if decode_only else "normal") if self.deepep else None
        d, c = deepep.layer_a2a_s(
            rows / self.tp, self.ep, m.experts_per_tok, m.num_experts, m.H, self.hw, self.nodes, mode
        )
        return d, c

    def _ep_terms(self, terms: list, rows: int, seqs: int) -> list:
        """``terms`` (the roofline's weight terms) with moe_experts as the hot rank's and the two
        all-to-alls added, each as (name, flops, bytes, π, β, floor, overhead); the all-to-alls'
        seconds ride in the overhead slot."""
        m, tp, ep = self.model, self.tp, self.ep
        G = rows * max(1, ep // tp)
        hot_rows, touched = moe_cost.hot_rank_load(G, m.experts_per_tok, m.num_experts, ep, self.skew, self.eplb)
        width = m.expert_ffn / max(1, tp // ep)
        out = []
        for name, fl, by, pi, beta, floor, over in terms:
            if name == "moe_experts":
                fl = m.moe_layers * 2.0 * 3.0 * m.H * width * hot_rows
                by = m.moe_layers * m.w_b * 3.0 * m.H * width * touched
            out.append((name, fl, by, pi, beta, floor, over))
        disp, comb = self._a2a_s(rows, rows == seqs)
        inf = math.inf
        out.append(("a2a_dispatch", 0.0, 0.0, 1.0, inf, 0.0, m.moe_layers * disp))
        out.append(("a2a_combine", 0.0, 0.0, 1.0, inf, 0.0, m.moe_layers * comb))
        return out

    def _experts_touched(self, rows: int) -> float:
        m = self.model
        if not m.is_moe or rows == 0:
            return 0.0
        return m.num_experts * (1.0 - (1.0 - m.experts_per_tok / m.num_experts) ** rows)  # moe_cost.experts_touched

    def _moe_terms(self, rows: int) -> tuple[float, float, float]:
        """Fitted MoE, summed over the MoE layers: (true FLOPs, the fit's FLOPs F', bytes)."""
        m, k = self.model, self.model.experts_per_tok
        u = self._experts_touched(rows)
        routed = rows * k
        true = 2.0 * 3.0 * m.H * (m.expert_ffn / self.tp) * routed
        eff = self.moe_row_flops * (routed + self.hw.moe_pad_rows * u)
        by = self.moe_expert_bytes * u + self.moe_row_bytes * routed
        return m.moe_layers * true, m.moe_layers * eff, m.moe_layers * by

    def _moe_time(self, rows: int) -> float:
        """The fitted MoE layers' seconds (quadrature, whatever the profile's combine)."""
        _, eff, by = self._moe_terms(rows)
        return math.hypot(eff / self.moe_pi, by / self.hw.moe_beta) + self.model.moe_layers * self.hw.moe_floor_s
