"""The MoE layers of a lockstep data-parallel group under expert parallelism.

``size`` GPUs (a divisor of the group's n = dp·tp) each hold E/size whole routed experts, each
expert's width split n/size ways (size = n: every GPU its own experts). vLLM
``--enable-expert-parallel``: size = dp·tp (``FusedMoEParallelConfig.make``,
vllm/model_executor/layers/fused_moe/config.py: ep_size = the flattened tp, tp_size = 1). SGLang
``--ep-size``: any divisor of --tp-size; ``--moe-a2a-backend deepep`` makes it tp_size
(``_a2a_ep_size``, srt/arg_groups/overrides.py). Per MoE layer of one step:

  experts   the most loaded rank's rows and touched experts of all Σ_r rows the group routes
            (``moe_cost.hot_rank_load``: uniform, or a Zipf skew, EPLB on or off), on the roofline
            with the weights' format; the most loaded rank sets the layer's time
  tokens    how they reach the experts, per backend:
            ``allgather``  all-gather + reduce-scatter of Σ_r rows over the n GPUs (vLLM's default
                           ``all2all_backend="allgather_reducescatter"``; SGLang
                           ``--moe-a2a-backend none``), as without EP
            ``deepep``     DeepEP dispatch + combine of the busiest rank's rows / tp per GPU
                           (``costmodel/deepep.py``): normal mode or low-latency by ``mode``;
                           ``auto`` is SGLang's ``DeepEPMode.resolve(is_extend_in_batch)``
                           (srt/layers/moe/utils.py, called by token_dispatcher/deepep.py) with
                           is_extend_in_batch the max of the all-gathered flags of the DP ranks
                           (managers/scheduler_components/dp_attn.py): normal when any rank's
                           batch holds a prefill chunk. On a GPU
                           whose profile has no DeepEP constants (not Hopper HGX), one node at
                           most, ncclAllToAll of the routed copies.

Two-batch overlap (SGLang ``--enable-two-batch-overlap``): the batch runs as two micro-batches, the
communication C of one beside the computation W of the other, so the step takes
max(s·W, C) + min(W, C)/2 (the first half's compute and the last half's communication have nothing
to overlap), W and C summed over the two micro-batches (``tbo_halves``), each priced at its own rows. s: beside DeepEP's normal mode the compute has the SMs DeepEP leaves it,
s = 132/(132 - 20) on the Hopper GPUs DeepEP runs on (``deep_ep.Buffer.num_sms``; the LMSYS blog of
May 2025 names the SMs TBO takes as one reason its prefill kernels run slower); low-latency mode
holds SMs only while sending (s = 1), as is the NCCL path. Each micro-batch's GEMMs read the
weights again, so a memory-bound (decode) step's compute grows under TBO: the blog's decode
breakdown shows GEMMs faster without TBO at the same total batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import deepep, moe_cost
from .errors import require
from .expert_parallel import DEEPEP_GPUS
from .roofline import CostModel

BACKENDS = ("allgather", "deepep")
HOPPER_SMS = 132  # H100 / H200 SXM, the GPUs DeepEP's constants were measured on
MODES = ("auto", "normal", "low_latency")
TBO_THRESHOLD = 0.48  # SGLang --tbo-token-distribution-threshold default (srt/layers/moe/utils.py)


@dataclass(frozen=True)
class ExpertParallelism:
    """How a lockstep group runs its MoE layers: ``size`` GPUs share the experts, tokens move by
    ``backend`` (DeepEP in ``mode``), routing ``skew`` / ``eplb`` (moe_cost.hot_rank_load),
    ``tbo`` two-batch overlap."""

    size: int
    backend: str = "allgather"
    mode: str = "auto"
    skew: float = 0.0
    eplb: bool = False
    tbo: bool = False
    ll_nvlink: bool = True  # DeepEP low-latency mode sends same-node copies over NVLink (deepep.copies)

    def __post_init__(self):
        require(isinstance(self.size, int) and self.size >= 1, "ep_size", self.size, "must be a positive integer")
        require(self.backend in BACKENDS, "moe_a2a_backend", self.backend, f"must be one of {', '.join(BACKENDS)}")
        require(self.mode in MODES, "deepep_mode", self.mode, f"must be one of {', '.join(MODES)}")
        require(self.skew >= 0 and math.isfinite(self.skew), "moe_skew", self.skew, "must be a finite number >= 0")


class ExpertLayers:
    """Prices a step's MoE layers over a lockstep group of ``n`` GPUs (ranks of ``rank_cm.tp``)."""

    def __init__(self, rank_cm: CostModel, group_cm: CostModel, n: int, ep: ExpertParallelism):
        m, hw = rank_cm.model, rank_cm.hw
        require(n % ep.size == 0, "ep_size", ep.size, f"must divide the group's {n} GPUs (dp x tp)")
        require(m.num_experts % ep.size == 0, "ep_size", ep.size, f"must divide the {m.num_experts} experts")
        require(
            ep.backend != "deepep" or ep.size == n,
            "ep_size",
            ep.size,
            f"DeepEP spans every GPU of the group: ep_size = {n} (SGLang sets ep_size = tp_size)",
        )
        self.rank, self.group, self.n, self.ep = rank_cm, group_cm, n, ep
        self.dp = n // rank_cm.tp
        self.width = m.expert_ffn / (n // ep.size)
        self.layers, self.k, self.E = m.moe_layers, m.experts_per_tok, m.num_experts
        self.gather_calls = m.moe_layers / group_cm.ar_calls if n > 1 else 0.0
        self.nodes = -(-n // max(1, hw.gpus_per_node))
        self.deepep = hw.name in DEEPEP_GPUS
        require(
            ep.ll_nvlink or self.nodes > 1,
            "ll_nvlink",
            ep.ll_nvlink,
            "DeepEP low-latency over RDMA alone is measured across nodes only (the group fits one node)",
        )
        require(
            ep.backend != "deepep" or self.deepep or self.nodes == 1,
            "moe_a2a_backend",
            "deepep",
            f"spans {self.nodes} nodes of {hw.name}, whose profile has no inter-node bandwidth "
            f"(DeepEP's measured constants hold for {', '.join(DEEPEP_GPUS)})",
        )

    def experts_s(self, rows_all: int) -> float:
        """The routed experts of every MoE layer on the most loaded GPU."""
        cm, m, hw = self.rank, self.rank.model, self.rank.hw
        if rows_all == 0:
            return 0.0
        hot_rows, touched = moe_cost.hot_rank_load(rows_all, self.k, self.E, self.ep.size, self.ep.skew, self.ep.eplb)
        pi = cm._pi_rows(hw.pi_eff, -(-rows_all // self.dp))  # π of a rank's mean rows, as CostModel(ep=…)
        qpi, wb = (pi * cm.q_ratio, cm.w_b) if cm.q_ratio else (pi, m.b)
        fl = self.layers * 2.0 * 3.0 * m.H * self.width * hot_rows
        by = self.layers * wb * 3.0 * m.H * self.width * touched
        return cm._op_time(fl, by, qpi, hw.beta_eff, cm.floor_layers, cm.over_moe)

    def mode(self, prefill: bool) -> str:
        """DeepEP's mode for a step (``prefill``: some rank's batch holds a prefill chunk)."""
        if self.ep.mode != "auto":
            return self.ep.mode
        return "normal" if prefill else "low_latency"

    def tokens_s(self, rows_all: int, rows_max: int, prefill: bool) -> float:
        """Moving the tokens to the experts and back, every MoE layer: ``rows_all`` over the group,
        ``rows_max`` on the busiest rank."""
        if self.ep.backend == "allgather":
            return self.group.allreduce_s(rows_all) * self.gather_calls
        mode = self.mode(prefill) if self.deepep else None
        d, c = deepep.layer_a2a_s(
            rows_max / self.rank.tp,
            self.n,
            self.k,
            self.E,
            self.rank.model.H,
            self.rank.hw,
            self.nodes,
            mode,
            self.ep.ll_nvlink,
        )
        return self.layers * (d + c)

    def step(self, rest: float, rows_all: int, rows_max: int, prefill: bool) -> float:
        """The group's step without two-batch overlap: ``rest`` (the slowest rank without its MoE
        layers), the experts and the token movement, one after the other."""
        return rest + self.experts_s(rows_all) + self.tokens_s(rows_all, rows_max, prefill)

    def overlapped_step(self, rest: float, halves: list[tuple[int, int]], prefill: bool) -> float:
        """The group's step under two-batch overlap: ``rest`` is the slowest rank's two micro-batches
        without their MoE layers, ``halves`` each micro-batch's (rows over the group, rows on the
        busiest rank); each micro-batch's experts and token movement are priced at its own rows
        (its GEMMs read the weights again), then compute and communication overlap."""
        work = rest + sum(self.experts_s(a) for a, _ in halves)
        comm = sum(self.tokens_s(a, b, prefill) for a, b in halves)
        normal = self.ep.backend == "deepep" and self.deepep and self.mode(prefill) == "normal"
        s = HOPPER_SMS / (HOPPER_SMS - deepep.DEFAULT_SMS) if normal else 1.0
        return max(s * work, comm) + min(work, comm) / 2.0


def tbo_halves(q: list[int], kv: list[int]) -> tuple[tuple[list[int], list[int]], ...] | None:
    """The two micro-batches SGLang's two-batch overlap cuts one rank's batch into, as (q_lens,
    kv_lens) each, or None when it cannot be cut (SGLang then runs the whole group without it).
    ``compute_split_seq_index`` / ``compute_split_token_index`` (srt/batch_overlap/
    two_batch_overlap.py): a decode batch (one token a sequence) at n // 2 sequences; an extend
    batch at the sequence boundary that best balances the tokens, or, when that leaves either side
    outside [0.48, 0.52] of them (``--tbo-token-distribution-threshold``), at half the tokens, the
    sequence that straddles the cut split in two (its second part's prefix grows by the first)."""
    n, total = len(q), sum(q)
    if total < 2:
        return None
    if total == n:
        cut = n // 2
        return (q[:cut], kv[:cut]), (q[cut:], kv[cut:])
    left, best, diff = 0, 0, math.inf
    for i in range(1, n):  # _split_array_by_balanced_sum
        left += q[i - 1]
        d = abs(2 * left - total)
        if d > diff:
            break
        best, diff = i, d
    left = sum(q[:best])
    if TBO_THRESHOLD * total <= left <= (1 - TBO_THRESHOLD) * total:
        return (q[:best], kv[:best]), (q[best:], kv[best:])
    half, acc = total // 2, 0
    for i, qi in enumerate(q):  # two-chunk split: sequence i straddles the cut
        if acc + qi > half:
            a = half - acc
            first = (q[:i] + [a], kv[:i] + [kv[i]]) if a else (q[:i], kv[:i])
            return first, ([qi - a] + q[i + 1 :], [kv[i] + a] + kv[i + 1 :])
        acc += qi
    return None
