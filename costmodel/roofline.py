"""Price one forward pass from its batch shape: Σ over operators of max(FLOPs/π_eff, bytes/β_eff).

Symbols are seed 000's: L, h, h_kv, d_h, P, b, k = 2·L·h_kv·d_h·b, π_eff, β_eff. Per GPU under
tensor parallelism tp: weights and heads are split tp ways and each layer pays two ring
all-reduces of its activations (Megatron-LM: one after attention, one after the MLP).

Operators (each one kernel family, summed over layers):
  linear            weight GEMMs every row uses: 2·P_lin FLOPs per row, P_lin·b bytes once per pass
  moe_experts       routed experts: 2·k_e·P_e FLOPs per row; only the experts the batch touches
                    are streamed, E·(1-(1-k_e/E)^T) per MoE layer in expectation (uniform routing);
                    profiles with a fitted MoE layer (moe_pi, moe_beta: ``costmodel/moe_cost.py``)
                    price each MoE layer as that fit: floor + √((F'/π_moe)² + (B/β_moe)²), F' with
                    each touched expert's padded rows and the per-tile depth, B the touched experts'
                    weights and the routed rows' activations; π_moe is moe_tuned_pi for the
                    (experts, expert width per GPU) shapes in moe_tuned_shapes
                    ep > 1 (costmodel/expert_parallel.py): the most loaded of ep ranks' experts, and
                    a2a_dispatch / a2a_combine, DeepEP's all-to-all per MoE layer (deepep.py)
  embedding         seed convention: a GEMM on every row (2·V·H); faithful: a gather of T rows
  lm_head           seed convention: every row; faithful: only the sampled rows (one per sequence,
                    as vLLM's logits_indices = query_start_loc[1:] - 1)
  attention_prefill sequences with q > 1: causal attention over a cached prefix,
                    4·L·h·d_h·(q·kv + q(q+1)/2) FLOPs (seed 000: the FLOPs_tok term summed over
                    positions), k·(kv + q) bytes of KV read and written
  attention_decode  sequences with q = 1: same formulas; at one row per sequence they stream KV
                    (hybrid models: L is the number of full-attention layers, kv_layers)
  linear_attention  hybrid models only, their L - kv_layers Gated DeltaNet layers: linear in tokens.
                    FLOPs 6·h_v·d_k·d_v per row and layer from the gated delta rule's recurrence
                    S_t = S_{t-1}·α_t(I - β_t k_t k_tᵀ) + β_t v_t k_tᵀ, o_t = S_t q_t (Yang, Kautz,
                    Hatamizadeh, "Gated Delta Networks", ICLR 2025, arXiv:2412.06464, the recurrent form): three
                    passes over the d_k×d_v state per head (S·k, the rank-1 write, S·q), 2 FLOPs per
                    element each, plus the short convolution's 2·K per channel; bytes: each sequence's
                    fixed state read and written once per pass (recurrent state in float32, SGLang's
                    default mamba_ssm_dtype; conv state in b)
  allreduce         2·L ring all-reduces of T·H·b bytes: 2(tp-1)/tp·bytes/bw + 2(tp-1)·latency each;
                    profiles with allreduce_regimes for this tp: min_i(ℓ_i + B/bw_i) each
                    (``calibration/allreduce_model.py``: the engine's faster algorithm by size), the
                    first two (one-shot) only for passes of at most allreduce_oneshot_tokens tokens
                    (and, for the tps in allreduce_oneshot_alone, those two alone there; the tps in
                    allreduce_oneshot_max take those two's maximum, those in allreduce_soft the later
                    lines' soft minimum, allreduce_wave_s adds to the two past sms tokens:
                    ``costmodel/allreduce.py``); faithful counting adds the vocab-parallel
                    embedding's (vLLM VocabParallelEmbedding.forward)
  logits_gather     faithful counting at tp > 1: each rank's seqs x vocab/tp logits all-gathered
                    (vLLM LogitsProcessor._gather_logits, tensor_model_parallel_all_gather; through
                    PyNCCL, CudaCommunicator.all_gather), (tp-1)/tp of the gathered bytes per link at
                    the all-reduce's link or its NCCL regimes (not the one-shot ones; on a tp with
                    allreduce_switches, the runs of an all-reduce of the same bus bytes)
  elementwise       fitted profiles only: each layer's two RMSNorms (in and out, 2·H per row each),
                    SiLU-and-mul (dense layers: 2·ffn in, ffn out) and rotary embedding (q and k
                    read and written), bytes/elementwise_beta + elementwise_floor_s per kernel
  sampler           fitted profiles only: sampler_s + sampler_seq_s per sampled sequence
  step_overhead     the profile's fixed per-pass cost
  graph_padding,    with an engine execution profile only (costmodel/execution.py): the weight
  launch_<regime>   operators' extra price at the CUDA graph's padded size, and the kernels the
                    host launches outside a graph (full, piecewise or eager regime)
  host              the engine's host time not hidden by the GPU (costmodel/host.py): all of it
                    serially, the part beyond the GPU time with host/GPU overlap

Profiles with attn_form "separate" or "varlen" price attention with the fitted kernel models of
``calibration/operator_models.py`` instead (L layers, per layer): prefill chunks (q > 1)
F/π_attn + B/attn_prefill_beta + overhead (B: KV read and written, Q read and O written); decodes (q = 1) √((F/attn_decode_pi)² + (B/β_attn)²)
+ attn_decode_seq_s per sequence + overhead; "varlen" (one FlashAttention call for the batch):
beside a prefill chunk, decodes cost F/attn_mixed_pi + attn_mixed_seq_s each, in the prefill kernel.

Each operator costs combine(F/π, B/β), at least kernel_floor_s per kernel, plus kernel_overhead_s per
kernel: combine is max (the seed's roofline) or, for profiles calibrated with the "smooth" form,
quadrature √(a²+b²); a GEMM's time pays for its rows padded up to gemm_tile_rows (its reported
FLOPs stay the true ones), and a GEMM of more rows than gemm_rows_break (step-fitted profiles) runs
at gemm_rows_pi_scale·π; with gemm_rows_budget B instead, a step's GEMMs run their first B rows at π
and the rest at gemm_rows_pi_scale·π (a clock held for a budget of work, then throttled:
calibration/steps.py). An operator stands for several kernels (linear: QKV, O, gate/up and down, 4 per layer), so the floor scales with
layers and the overhead with kernels; the combine is applied to the operator's summed F and B (the
kernels of one operator share their F/B ratio, so the quadrature sum barely differs from per-kernel).
With the defaults (max, floor 0, overhead 0, tile 1) this is exactly the seed's Σ max(F/π, B/β).
Profiles with gemm_form "tiles" price the weight GEMMs of linear and lm_head with the tile/wave
model instead (``costmodel/gemm_tiles.py``: CTA tiles in waves over the SMs, split-K, L2 residency,
and the profile's fitted shape correction, ``costmodel/gemm_correction.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .allreduce import call_time, gather_rows
from .decode_runs import DecodeRuns
from .errors import require
from .execution import Execution
from .expert_parallel import ExpertParallel
from .fitted_attention import FittedAttention
from .gemm_tiles import GemmTiles, layer_gemms
from .hardware import Hardware
from .host import HostTime
from .model import ModelSpec
from .pcie import PcieNccl, uses_pcie
from .precision import PrecisionError, gemm_rate
from .shape import ShapeStats, attention_sums

COUNTINGS = ("seed", "faithful")
LINEAR_STATE_BYTES = 4  # Gated DeltaNet recurrent state: float32 (SGLang --mamba-ssm-dtype default)


@dataclass(frozen=True)
class Operator:
    name: str
    flops: float
    bytes: float
    time_s: float
    bound: str  # "compute", "memory", "interconnect" or "overhead"


@dataclass(frozen=True)
class Breakdown:
    operators: tuple[Operator, ...]

    @property
    def time_s(self) -> float:
        return sum(op.time_s for op in self.operators)

    @property
    def flops(self) -> float:
        return sum(op.flops for op in self.operators)

    @property
    def bytes(self) -> float:
        return sum(op.bytes for op in self.operators)

    def op(self, name: str) -> Operator:
        return next(o for o in self.operators if o.name == name)

    def to_dict(self) -> dict:
        return {
            "time_s": self.time_s,
            "flops": self.flops,
            "bytes": self.bytes,
            "operators": [op.__dict__.copy() for op in self.operators],
        }


class CostModel(DecodeRuns, FittedAttention, HostTime, ExpertParallel):
    """One (model, hardware, tp, counting) bound once; prices many batch shapes (with
    ``overlap_host``, a step's host time hides behind its GPU time: costmodel/host.py)."""

    def __init__(
        self,
        model: ModelSpec,
        hw: Hardware,
        tp: int = 1,
        counting: str | None = None,
        overlap_host: bool = False,
        execution: Execution | None = None,
        ep: int = 1,
        skew: float = 0.0,
        eplb: bool = False,
    ):
        counting = counting or hw.counting
        require(counting in COUNTINGS, "counting", counting, f"must be one of {COUNTINGS}")
        require(isinstance(tp, int) and tp >= 1, "tp", tp, "must be a positive integer")
        require(model.h % tp == 0, "tp", tp, f"must divide the {model.h} attention heads of {model.name}")
        require(
            model.h_kv % tp == 0 or tp % model.h_kv == 0,
            "tp",
            tp,
            f"must divide, or be a multiple of, the {model.h_kv} KV heads of {model.name}",
        )
        require(
            tp == 1 or hw.interconnect_bandwidth > 0,
            "tp",
            tp,
            f"hardware {hw.name} has no interconnect_bandwidth for tensor parallelism",
        )
        self.model, self.hw, self.tp, self.counting = model, hw, tp, counting
        self._init_host(overlap_host, execution)  # execution: the engine's graph regimes (costmodel/execution.py)
        m, b = model, model.b
        self.lin_params = m.always_on_layer_params / tp
        self.expert_params = m.moe_layers * m.expert_params / tp  # one expert in every MoE layer
        self.vocab_params = m.vocab * m.H / tp  # vocab-parallel
        self.embed_gemm_params = m.embed_params / tp
        self.head_gemm_params = m.head_params / tp
        La = m.kv_layers  # full-attention layers
        self.attn_coef = 4 * La * (m.h // tp) * m.d_h  # type: ignore[operator]  # FLOPs per query-key pair
        self.dec_coef = self.attn_coef  # the same in the decode (memory-bound class) kernel; MLA: _init_mla
        self.kv_coef = 2 * La * max(1, m.h_kv // tp) * m.d_h * m.kv_elem_bytes  # type: ignore[operator]  # k per GPU, bytes per token
        self.w_b, self.q_ratio = m.w_b, gemm_rate(m.weights, hw)
        self.floor_layers = m.L * hw.kernel_floor_s
        self.floor_attn = La * hw.kernel_floor_s  # type: ignore[operator]
        over = hw.kernel_overhead_s
        self.over_linear, self.over_moe, self.over_layers = 4 * m.L * over, 2 * m.moe_layers * over, La * over  # type: ignore[operator]
        Ll = m.linear_layers  # Gated DeltaNet layers
        hv = m.lin_v_heads / tp if Ll else 0.0
        conv = m.linear_conv_dim / tp
        self.lin_attn_flops_per_row = Ll * (6 * hv * m.lin_k_dim * m.lin_v_dim + 2 * conv * m.lin_conv_kernel)
        self.lin_state_bytes_per_seq = Ll * (
            hv * m.lin_k_dim * m.lin_v_dim * LINEAR_STATE_BYTES + conv * max(0, m.lin_conv_kernel - 1) * b
        )
        self.floor_lin_attn, self.over_lin_attn = Ll * hw.kernel_floor_s, Ll * over
        self.tile = hw.gemm_tile_rows
        self.rows_break, self.rows_pi_scale = hw.gemm_rows_break, hw.gemm_rows_pi_scale
        self.rows_budget = hw.gemm_rows_budget
        self.tiles = None
        self.qtiles = self.qtiles_above = None  # tile profiles: the decoder's quantized GEMMs' own fit
        if hw.gemm_form == "tiles" and m.weights != "bf16":
            d = {"int8": "sq"}.get(m.weights, m.weights)  # W8A8 int8 is AIConfigurator's "sq"
            self.qtiles = GemmTiles.from_profile(hw, d)
            if self.qtiles is None:
                fitted = ", ".join(sorted(hw.gemm_dtypes)) or "none"
                raise PrecisionError(
                    "quantization",
                    m.weights,
                    f"{hw.name} has no GEMM fit for it (fitted: {fitted}); use a spec-sheet profile",
                )
            self.qtiles_above = GemmTiles.from_profile(hw, d, self.rows_pi_scale) if self.rows_break else self.qtiles
        if hw.gemm_form == "tiles":  # weight GEMMs by the tile/wave model (costmodel/gemm_tiles.py)
            self.tiles = GemmTiles.from_profile(hw)
            self.tiles_above = GemmTiles.from_profile(hw, None, self.rows_pi_scale) if self.rows_break else self.tiles
            self.tile_k, self.tile_n, self.tile_count = layer_gemms(m, tp)
            self.lin_rest = max(0.0, self.lin_params - float((self.tile_k * self.tile_n * self.tile_count).sum()))
        self.quadrature = hw.roofline_combine == "quadrature"
        self._init_mla()
        self.attn_bound = (self.kv_coef * hw.pi_attention) / (self.attn_coef * hw.beta_attention)
        self._init_fitted_attention(m, hw, tp, La, b)  # type: ignore[arg-type]
        # With the max combine, a decode's memory time exceeds its compute time at every kv when the
        # per-token ratio does by more than rounding can blur: decode_run may then skip the compute side.
        self._decode_memory_bound = (
            not self.quadrature
            and not self.attn_fitted
            and self.kv_coef / hw.beta_attention > self.dec_coef / hw.pi_attention * (1 + 1e-9)
        )
        self._fixed: dict = {}
        self._tiled_memo: dict = {}  # _tiled_time by (operator, the count it reads)
        self._lead_fixed: dict = {}  # _fixed_time by rows << 20 | seqs (DecodeRuns.prefill_lead_ends)
        self._step_lengths: dict = {}  # one lead step's length by shape (DecodeRuns.prefill_step_end)
        self._decode_attention = np.empty(0)
        self._decode_by_n: dict = {}  # n -> _decode_attention + the fixed part of n (DecodeRuns.decode_run_ends)
        self._fixed_uses_seqs = (
            self.counting != "seed"
            or bool(self.lin_attn_flops_per_row)  # else rows alone decide it
            or bool(hw.sampler_seq_s)
        )
        ring = 2 * (tp - 1) / tp
        faithful_tp = tp > 1 and counting != "seed"
        calls = 2 * m.L + faithful_tp  # + the embedding's all-reduce
        self.ar_bytes_per_row = calls * ring * m.H * b  # bytes each GPU sends per row
        self.ar_latency = calls * 2 * (tp - 1) * hw.interconnect_latency_s
        self.gather_bytes_per_seq = (tp - 1) / tp * m.vocab * b if faithful_tp else 0.0
        self.ar_regimes = (hw.allreduce_regimes or {}).get(tp)
        self.ar_oneshot_tokens = hw.allreduce_oneshot_tokens
        self.ar_oneshot_alone = tp in (hw.allreduce_oneshot_alone or [])
        self.ar_switches = (hw.allreduce_switches or {}).get(tp)
        self.ar_wave, self.ar_sms = float((hw.allreduce_wave_s or {}).get(tp, 0.0)), hw.sms
        self.ar_hinge = tp in (hw.allreduce_oneshot_max or [])
        self.ar_soft = tp in (hw.allreduce_soft or [])
        # PCIe profiles without measured regimes for this tp: NCCL's tuning model (costmodel/pcie.py)
        self.pcie = PcieNccl.from_hardware(hw, tp) if uses_pcie(hw, tp) else None
        self.ar_call_bytes_per_row = m.H * b  # one all-reduce's message per row
        self.gather_out_bytes_per_seq = m.vocab * b if faithful_tp else 0.0  # all-gather output per sequence
        self.moe_fitted = m.is_moe and hw.moe_pi > 0
        if self.moe_fitted:  # per MoE layer and GPU: costmodel/moe_cost.py
            n = m.expert_ffn / tp
            tuned = [m.num_experts, round(n)] in [list(x) for x in hw.moe_tuned_shapes]
            self.moe_pi = (hw.moe_tuned_pi if tuned else hw.moe_pi) * (self.q_ratio or 1.0)
            self.moe_row_flops = 2.0 * (3.0 * m.H * n + hw.moe_tile_depth * (2.0 * n + m.H))
            self.moe_expert_bytes, self.moe_row_bytes = m.w_b * 3.0 * m.H * n, b * 2.0 * m.H
        qkv_cols = (m.h // tp + max(1, m.h_kv // tp)) * m.d_h
        self.elem_bytes_per_row = b * (m.L * 2 * 2 * m.H + m.dense_layers * 3 * m.ffn / tp + m.kv_layers * 2 * qkv_cols)  # type: ignore[operator]
        self.elem_over = (2 * m.L + m.dense_layers + m.kv_layers) * hw.elementwise_floor_s  # type: ignore[operator]
        self.ar_calls, self.ar_bytes_per_call_row = calls, ring * m.H * b
        self._init_ep(ep, skew, eplb)  # costmodel/expert_parallel.py

    def shape(self, q_lens, kv_lens, decodes: int = 0, decode_tokens: int = 0) -> ShapeStats:
        """The batch's stats, attention split at this model's and GPU's compute/memory bound
        (plus `decodes` sequences of one new token given by their Σ(kv + 1), `decode_tokens`)."""
        return ShapeStats.of(
            q_lens, kv_lens, self.attn_bound, decodes, decode_tokens, self.q_tile, self.decode_skew > 0
        )

    @property
    def weight_bytes_per_gpu(self) -> float:
        return self.model.weight_bytes / self.tp

    def _pi_rows(self, pi: float, rows: int) -> float:
        """π as seen by a GEMM of ``rows`` rows whose MMA work is padded up to the profile's row tile
        (the reported FLOPs stay the true ones; the time pays for the padded rows), scaled beyond
        the profile's gemm_rows_break, or past its gemm_rows_budget (``budget_factor``)."""
        if self.rows_break and rows > self.rows_break:
            pi = pi * self.rows_pi_scale
        elif self.rows_budget and rows > self.rows_budget:
            pi = pi / self.budget_factor(rows)
        t = self.tile
        if t <= 1 or rows <= 0 or rows % t == 0:
            return pi
        return pi * rows / (-(-rows // t) * t)

    def budget_factor(self, rows: int) -> float:
        """Compute time of ``rows`` GEMM rows over their time at π: B rows at π, the rest at
        gemm_rows_pi_scale·π (1 within the budget)."""
        b = self.rows_budget
        if not b or rows <= b:
            return 1.0
        return (b + (rows - b) / self.rows_pi_scale) / rows

    def weight_terms(self, s: ShapeStats):
        """(name, flops, bytes, π, β, floor, overhead) for the operators that depend only on rows and sequences."""
        return self._weight_terms(s.rows, s.seqs)

    def _weight_terms(self, rows: int, seqs: int):
        hw, b, m = self.hw, self.model.b, self.model
        beta, over = hw.beta_eff, hw.kernel_overhead_s
        pi = self._pi_rows(hw.pi_eff, rows)
        qpi, wb = (pi * self.q_ratio, self.w_b) if self.q_ratio else (pi, b)  # the decoder's weights' format
        out = [
            ("linear", 2 * self.lin_params * rows, wb * self.lin_params, qpi, beta, self.floor_layers, self.over_linear)
        ]
        if self.moe_fitted:  # the fit's F'/π_moe as true FLOPs over an effective π
            true, eff, by = self._moe_terms(rows)
            out.append(
                (
                    "moe_experts",
                    true,
                    by,
                    self.moe_pi * true / eff if eff else self.moe_pi,
                    hw.moe_beta,
                    0.0,
                    m.moe_layers * hw.moe_floor_s,
                )
            )
        elif m.is_moe:
            out.append(
                (
                    "moe_experts",
                    2 * m.experts_per_tok * self.expert_params * rows,
                    wb * self.expert_params * self._experts_touched(rows),
                    qpi,
                    beta,
                    self.floor_layers,
                    self.over_moe,
                )
            )
        if self.counting == "seed":
            out.append(
                (
                    "embedding",
                    2 * self.embed_gemm_params * rows,
                    b * self.embed_gemm_params,
                    pi,
                    beta,
                    hw.kernel_floor_s,
                    over,
                )
            )
            if self.head_gemm_params:
                out.append(
                    (
                        "lm_head",
                        2 * self.head_gemm_params * rows,
                        b * self.head_gemm_params,
                        pi,
                        beta,
                        hw.kernel_floor_s,
                        over,
                    )
                )
        else:
            out.append(("embedding", 0.0, b * m.H * rows, pi, beta, hw.kernel_floor_s, over))
            out.append(
                (
                    "lm_head",
                    2 * self.vocab_params * seqs,
                    b * self.vocab_params,
                    self._pi_rows(hw.pi_eff, seqs),
                    beta,
                    hw.kernel_floor_s,
                    over,
                )
            )
        if hw.elementwise_beta:
            out.append(
                ("elementwise", 0.0, self.elem_bytes_per_row * rows, pi, hw.elementwise_beta, 0.0, self.elem_over)
            )
        if hw.sampler_s or hw.sampler_seq_s:
            out.append(("sampler", 0.0, 0.0, pi, beta, 0.0, hw.sampler_s + hw.sampler_seq_s * seqs))
        if self.lin_attn_flops_per_row:  # rows and sequences only, so decode_run's per-n fixed part holds it
            out.append(
                (
                    "linear_attention",
                    self.lin_attn_flops_per_row * rows,
                    2 * self.lin_state_bytes_per_seq * seqs,
                    hw.pi_attention,
                    hw.beta_attention,
                    self.floor_lin_attn,
                    self.over_lin_attn,
                )
            )
        return self._ep_terms(out, rows, seqs) if self.ep > 1 else out

    def attention_terms(self, s: ShapeStats):
        hw = self.hw
        out = []
        if s.prefill_kv:
            out.append(
                (
                    "attention_prefill",
                    self.attn_coef * s.prefill_pairs,
                    self.kv_coef * s.prefill_kv,
                    hw.pi_attention,
                    hw.beta_attention,
                    self.floor_attn,
                    self.over_layers,
                )
            )
        if s.decode_kv:
            out.append(
                (
                    "attention_decode",
                    self.dec_coef * s.memory_bound_pairs,
                    self.kv_coef * s.decode_kv,
                    hw.pi_attention,
                    hw.beta_attention,
                    self.floor_attn,
                    self.over_layers,
                )
            )
        return out

    def _op_time(self, fl: float, by: float, pi: float, beta: float, floor: float, over: float) -> float:
        """One operator: combine(F/π, B/β), at least the floor, plus the overhead (plain floats;
        ``decode_run`` repeats these exact operations with numpy)."""
        a, m = fl / pi, by / beta
        return (max(math.sqrt(a * a + m * m), floor) if self.quadrature else max(a, m, floor)) + over

    def allreduce_s(self, rows: int) -> float:
        if self.tp == 1:
            return 0.0
        if self.ar_regimes:
            return self.ar_calls * call_time(
                self.ar_regimes,
                self.ar_bytes_per_call_row * rows,
                rows,
                self.ar_oneshot_tokens,
                self.ar_oneshot_alone,
                self.ar_switches,
                self.ar_wave,
                self.ar_sms,
                self.ar_hinge,
                self.ar_soft,
            )
        if self.pcie is not None:
            return self.ar_calls * self.pcie.allreduce_us(self.ar_call_bytes_per_row * rows)[0] * 1e-6
        return self.ar_bytes_per_row * rows / self.hw.interconnect_bandwidth + self.ar_latency

    def gather_s(self, seqs: int) -> float:
        """The logits all-gather of ``seqs`` sampled rows (module docstring: logits_gather)."""
        if not self.gather_bytes_per_seq:
            return 0.0
        size, r = self.gather_bytes_per_seq * seqs, self.ar_regimes
        if r:
            rows = gather_rows(size, self.ar_bytes_per_call_row, self.ar_oneshot_tokens, self.ar_switches)
            return call_time(r, size, rows, self.ar_oneshot_tokens, False, self.ar_switches, soft=self.ar_soft)
        if self.pcie is not None:
            return self.pcie.allgather_us(self.gather_out_bytes_per_seq * seqs)[0] * 1e-6
        return size / self.hw.interconnect_bandwidth + (self.tp - 1) * self.hw.interconnect_latency_s

    def _tiled_time(self, name: str, rows: int, seqs: int) -> float:
        """Tile-model profiles: the linear operator's weight GEMMs (plus the rest of its weights on
        the roofline) or the LM head, by ``gemm_tiles``."""
        hw, b = self.hw, self.model.b
        m = rows if name != "lm_head" or self.counting == "seed" else seqs
        above = bool(self.rows_break) and m > self.rows_break  # gemm_rows_break: π scaled, as in _pi_rows
        tiles = self.tiles_above if above else self.tiles
        if name == "lm_head":
            return tiles.time(m, self.vocab_params / self.model.H, self.model.H, b) * self.budget_factor(m)  # type: ignore[union-attr]
        if self.qtiles is not None:
            tiles = self.qtiles_above if above else self.qtiles
        t = float((tiles.times(np.full(len(self.tile_k), rows), self.tile_n, self.tile_k, b) * self.tile_count).sum())  # type: ignore[union-attr]
        t *= self.budget_factor(rows)  # past the budget the tiles' time, compute-bound there, as π scaled
        if self.lin_rest:
            pi = hw.pi_eff * self.rows_pi_scale if above else hw.pi_eff / self.budget_factor(rows)
            t += math.hypot(2 * self.lin_rest * rows / pi, self.w_b * self.lin_rest / hw.beta_eff)
        return t

    def _tiled_part(self, name: str, rows: int, seqs: int) -> float:
        """``_tiled_time``, memoized by the one count it reads (the linear GEMMs' rows, the LM head's
        rows or sequences): a (rows, seqs) that ``_fixed_part`` has not seen mostly shares them."""
        key = (name, rows if name != "lm_head" or self.counting == "seed" else seqs)
        t = self._tiled_memo.get(key)
        if t is None:
            if len(self._tiled_memo) >= 1 << 17:
                self._tiled_memo.clear()
            t = self._tiled_memo[key] = self._tiled_time(name, rows, seqs)
        return t

    def _fixed_time(self, rows: int, seqs: int) -> float:
        t = self.hw.step_overhead_s
        for name, fl, by, pi, beta, floor, over in self._weight_terms(rows, seqs):  # _op_time, inlined (hot path)
            if self.tiles is not None and name in ("linear", "lm_head"):
                t += self._tiled_part(name, rows, seqs)
                continue
            if self.moe_fitted and name == "moe_experts":
                t += self._moe_time(rows)
                continue
            a, m = fl / pi, by / beta
            t += (max(math.sqrt(a * a + m * m), floor) if self.quadrature else max(a, m, floor)) + over
        return t + self.allreduce_s(rows) + self.gather_s(seqs)

    def _fixed_part(self, rows: int, seqs: int) -> float:
        """``_fixed_time`` of a pass with these rows and sequences, memoized (under seed counting
        without linear attention the rows alone decide it)."""
        key = (rows, seqs) if self._fixed_uses_seqs else rows
        t = self._fixed.get(key)
        if t is None:
            if len(self._fixed) >= 1 << 17:
                self._fixed.clear()
            t = self._fixed[key] = self._fixed_time(rows, seqs)
        return t

    def _attention_time(
        self,
        prefill_pairs: float,
        prefill_kv: float,
        decode_pairs: float,
        decode_kv: float,
        decodes: int = 0,
        rows: int = 0,
        compute: float | None = None,
    ) -> float:
        """The attention operators of ``attention_terms``, priced as ``_op_time`` does (hot path: inlined);
        `decodes` (memory-bound sequences), the pass's `rows` and prefill's `compute` time (the wave
        model's, from ``_prefill_compute``) matter to fitted attention only."""
        pi, beta, floor, over = self.hw.pi_attention, self.hw.beta_attention, self.floor_attn, self.over_layers
        if self.attn_fitted:
            return self._fitted_attention_time(
                prefill_pairs, prefill_kv, decode_pairs, decode_kv, decodes, rows, compute
            )
        t = 0.0
        if prefill_kv:
            a, m = (self.attn_coef * prefill_pairs) / pi, (self.kv_coef * prefill_kv) / beta
            t += (max(math.sqrt(a * a + m * m), floor) if self.quadrature else max(a, m, floor)) + over
        if decode_kv:
            a, m = (self.dec_coef * decode_pairs) / pi, (self.kv_coef * decode_kv) / beta
            t += (max(math.sqrt(a * a + m * m), floor) if self.quadrature else max(a, m, floor)) + over
        return t

    def time(self, s: ShapeStats) -> float:
        """Seconds for one forward pass (the simulator's hot path: plain floats)."""
        gpu = self._fixed_part(s.rows, s.seqs) + self._attention_time(
            s.prefill_pairs,
            s.prefill_kv,
            s.memory_bound_pairs,
            s.decode_kv,
            s.seqs - s.prefill_seqs,
            s.rows,
            self._prefill_compute(s) if self.q_tile else None,
        )
        if self.decode_skew:
            gpu += self._decode_skew(s)
        return self._with_host(gpu, s.seqs, s.prefill_seqs, s.rows) if self.has_host else gpu

    @property
    def needs_stepping(self) -> bool:
        """Whether only the reference loop prices this model: the decode skew needs each decode's
        context, which the fast paths pass as totals."""
        return bool(self.decode_skew)

    def step_time(self, q_lens, kv_lens, decodes: int = 0, decode_tokens: int = 0) -> float:
        """``time(shape(q_lens, kv_lens, decodes, decode_tokens))`` without building the ShapeStats:
        the same integer sums and the same float operations, so the same bits (the replica's hot path)."""
        if len(q_lens) > 48 or self.q_tile or self.decode_skew:
            return self.time(self.shape(q_lens, kv_lens, decodes, decode_tokens))
        rows, pairs, pkv, dkv, dpairs, pseqs = attention_sums(q_lens, kv_lens, self.attn_bound, decodes, decode_tokens)
        seqs = len(q_lens) + decodes
        gpu = self._fixed_part(rows, seqs) + self._attention_time(
            float(pairs), float(pkv), float(dpairs), float(dkv), seqs - pseqs, rows
        )
        return self._with_host(gpu, seqs, pseqs, rows) if self.has_host else gpu

    def breakdown(self, s: ShapeStats) -> Breakdown:
        ops = []
        fitted = self._fitted_attention_terms(s) if self.attn_fitted else []
        for name, fl, by, pi, beta, floor, over in self.weight_terms(s) + ([] if fitted else self.attention_terms(s)):
            tc, tm = fl / pi, by / beta
            t = (
                self._tiled_time(name, s.rows, s.seqs)
                if self.tiles is not None and name in ("linear", "lm_head")
                else self._moe_time(s.rows)
                if self.moe_fitted and name == "moe_experts"
                else self._op_time(fl, by, pi, beta, floor, over)
            )
            ops.append(
                Operator(name, fl, by, t, "interconnect" if name[:3] == "a2a" else "compute" if tc >= tm else "memory")
            )
        ops += [
            Operator(name, fl, by, t, "memory" if name == "attention_decode" else "compute")
            for name, fl, by, t in fitted
        ]
        if self.tp > 1:
            ops.append(
                Operator("allreduce", 0.0, self.ar_bytes_per_row * s.rows, self.allreduce_s(s.rows), "interconnect")
            )
        if self.gather_bytes_per_seq:
            ops.append(
                Operator(
                    "logits_gather", 0.0, self.gather_bytes_per_seq * s.seqs, self.gather_s(s.seqs), "interconnect"
                )
            )
        if self.hw.step_overhead_s:
            ops.append(Operator("step_overhead", 0.0, 0.0, self.hw.step_overhead_s, "overhead"))
        if self.execution is not None:  # the graph regime's padding and host launches (costmodel/execution.py)
            regime, _, pad, launch = self.execution_terms(s.rows, s.seqs, s.prefill_seqs)
            ops.append(Operator("graph_padding", 0.0, 0.0, pad, "overhead"))
            ops.append(Operator(f"launch_{regime}", 0.0, 0.0, launch, "overhead"))
        if self.has_host:
            gpu = sum(o.time_s for o in ops)
            ops.append(Operator("host", 0.0, 0.0, self.exposed_host(gpu, s.seqs, s.prefill_seqs), "host"))
        return Breakdown(tuple(ops))


def cost(
    model: ModelSpec,
    hardware: Hardware,
    q_lens,
    kv_lens,
    tp: int = 1,
    counting: str | None = None,
    overlap_host: bool = False,
    ep: int = 1,
    skew: float = 0.0,
    eplb: bool = False,
) -> Breakdown:
    """Price one forward pass of the batch whose sequences have q_lens new and kv_lens cached tokens."""
    q, kv = np.asarray(q_lens), np.asarray(kv_lens)
    require(q.shape == kv.shape, "kv_lens", list(kv_lens), f"has {kv.size} entries but q_lens has {q.size}")
    require(q.size > 0, "q_lens", list(q_lens), "batch is empty")
    require(bool((q > 0).all()), "q_lens", list(q_lens), "every sequence needs at least one new token")
    require(bool((kv >= 0).all()), "kv_lens", list(kv_lens), "cached tokens cannot be negative")
    cm = CostModel(model, hardware, tp, counting, overlap_host, ep=ep, skew=skew, eplb=eplb)
    return cm.breakdown(cm.shape(q, kv))
