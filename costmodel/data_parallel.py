"""One lockstep step of vLLM's data-parallel ranks serving a MoE model (no expert parallel).

Without ``--enable-expert-parallel`` vLLM shards every expert across all dp·tp GPUs
(``FusedMoEParallelConfig.flatten_tp_across_dp_and_pcp``, vllm/model_executor/layers/fused_moe/
config.py) and each MoE layer first gathers every rank's tokens and reduce-scatters the result
(``ParallelConfig.all2all_backend = "allgather_reducescatter"``, vllm/config/parallel.py). So

  step = max over ranks r of (r's step without its MoE layers)   attention, dense layers, TP all-reduces
       + the MoE layers over Σ_r rows, experts sharded dp·tp ways
       + per MoE layer, one all-gather + reduce-scatter of Σ_r rows over dp·tp GPUs (an all-reduce call)

A rank with nothing scheduled runs a dummy batch of one token (``Worker.execute_dummy_batch``,
vllm/v1/worker/gpu_worker.py), priced as a one-token step.
"""

from __future__ import annotations

import math
from dataclasses import replace

from .errors import require
from .roofline import CostModel


def moe_layers_s(cm: CostModel, rows: int, seqs: int) -> float:
    """The MoE expert layers' share of ``cm``'s step time for ``rows`` rows (0 for a dense model):
    the ``moe_experts`` term ``CostModel._fixed_time`` adds."""
    if not cm.model.is_moe or rows == 0:
        return 0.0
    if cm.moe_fitted:
        return cm._moe_time(rows)
    for name, fl, by, pi, beta, floor, over in cm._weight_terms(rows, seqs):
        if name == "moe_experts":
            return cm._op_time(fl, by, pi, beta, floor, over)
    return 0.0


class LockstepCost:
    """Prices a data-parallel group's step from each rank's batch shape (``None``: a dummy batch)."""

    def __init__(self, rank_cm: CostModel, dp: int):
        require(dp >= 2, "data_parallel_size", dp, "a lockstep group needs at least 2 ranks")
        require(
            rank_cm.model.is_moe, "model", rank_cm.model.name, "vLLM steps DP ranks in lockstep only for MoE models"
        )
        self.rank, self.dp = rank_cm, dp
        n = rank_cm.tp * dp
        # experts over every GPU of the group; only its MoE and collective terms are read, so the heads
        # are set to divide n (attention is priced per rank, by rank_cm)
        self.moe = CostModel(replace(rank_cm.model, h=n, h_kv=n), rank_cm.hw, n)
        m = rank_cm.model
        self.dispatch_calls = m.moe_layers / self.moe.ar_calls if self.moe.tp > 1 else 0.0

    @property
    def weight_bytes_per_gpu(self) -> float:
        """A rank's GPUs hold the dense weights tp ways and the routed experts dp·tp ways (what
        its KV pool is sized after)."""
        m = self.rank.model
        experts = m.moe_layers * m.num_experts * m.expert_params * m.w_b
        return (m.weight_bytes - experts) / self.rank.tp + experts / self.moe.tp

    def step_time(self, shapes: list[tuple[list[int], list[int]] | None]) -> float:
        """Seconds of one lockstep step; ``shapes[r]`` is rank r's (q_lens, kv_lens) or None."""
        cm, rest, rows_all, seqs_all = self.rank, 0.0, 0, 0
        for shape in shapes:
            q, kv = shape if shape is not None else ([1], [0])
            rows, seqs = sum(q), len(q)
            rest = max(rest, cm.step_time(q, kv) - moe_layers_s(cm, rows, seqs))
            rows_all += rows
            seqs_all += seqs
        moe = moe_layers_s(self.moe, rows_all, seqs_all)
        dispatch = self.moe.allreduce_s(rows_all) * self.dispatch_calls
        t = rest + moe + dispatch
        assert math.isfinite(t)
        return t
