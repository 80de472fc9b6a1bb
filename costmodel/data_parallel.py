"""One lockstep step of a MoE engine's data-parallel ranks, priced from per-rank cost models.

vLLM ``--data-parallel-size`` without ``--enable-expert-parallel``: each rank is a full tp-way
copy except the experts, sharded over all dp·tp GPUs (``FusedMoEParallelConfig.
flatten_tp_across_dp_and_pcp``, vllm/model_executor/layers/fused_moe/config.py); each MoE layer
gathers every rank's tokens and reduce-scatters the result (``ParallelConfig.all2all_backend =
"allgather_reducescatter"``, vllm/config/parallel.py). SGLang ``--enable-dp-attention --dp N --tp
T``: attention runs T/N ways per rank, the MLPs T ways over every rank's gathered tokens
(``prepare_mlp_sync_batch_raw``, managers/scheduler_components/dp_attn.py). Either way

  step = max over ranks r of (r's step without its MoE layers)   attention, dense layers, collectives
       + the MoE layers over Σ_r rows, experts sharded over every GPU of the group
       + per MoE layer, one all-gather + reduce-scatter of Σ_r rows over those GPUs (an all-reduce call)

Dense MLP layers of a MoE model (DeepSeek's first three, shared experts) stay priced per rank.
An idle rank runs vLLM's dummy batch of one token (``Worker.execute_dummy_batch``,
vllm/v1/worker/gpu_worker.py) or SGLang's idle batch of none (``get_idle_batch``).

With expert parallelism (``ep``: vLLM ``--enable-expert-parallel``, SGLang ``--ep-size``) the MoE
layers' experts and token movement are priced by ``costmodel/lockstep_ep.py`` instead; without it
the price is the one above, bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import replace

from .errors import require
from .lockstep_ep import ExpertLayers, ExpertParallelism, tbo_halves
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
    """Prices a data-parallel group's step from each rank's batch shape (``None``: idle)."""

    def __init__(self, rank_cm: CostModel, dp: int, engine: str = "vllm", ep: ExpertParallelism | None = None):
        require(dp >= 2, "data_parallel_size", dp, "a lockstep group needs at least 2 ranks")
        require(rank_cm.model.is_moe, "model", rank_cm.model.name, "DP ranks step in lockstep only for MoE models")
        require(engine in ("vllm", "sglang"), "engine", engine, "must be vllm or sglang")
        self.rank, self.dp, self.engine = rank_cm, dp, engine
        self.idle: tuple[list[int], list[int]] | None = ([1], [0]) if engine == "vllm" else None
        n = rank_cm.tp * dp
        # experts over every GPU of the group; only its MoE and collective terms are read, so the heads
        # are set to divide n (attention is priced per rank, by rank_cm)
        self.moe = CostModel(replace(rank_cm.model, h=n, h_kv=n), rank_cm.hw, n)
        self.dispatch_calls = rank_cm.model.moe_layers / self.moe.ar_calls if n > 1 else 0.0
        self.experts = ExpertLayers(rank_cm, self.moe, n, ep) if ep is not None else None

    @property
    def weight_bytes_per_gpu(self) -> float:
        """Weight bytes on one GPU (what a rank's KV pool is sized after): vLLM, a rank's own
        weights tp ways and the routed experts over every GPU; SGLang DP attention, attention per
        rank and everything else over every GPU."""
        m = self.rank.model
        if self.engine == "sglang":
            attn = m.L * m.attn_params_per_layer * m.w_b
            return attn / self.rank.tp + (m.weight_bytes - attn) / self.moe.tp
        experts = m.moe_layers * m.num_experts * m.expert_params * m.w_b
        return (m.weight_bytes - experts) / self.rank.tp + experts / self.moe.tp

    def step_time(self, shapes: list[tuple[list[int], list[int]] | None]) -> float:
        """Seconds of one lockstep step; ``shapes[r]`` is rank r's (q_lens, kv_lens) or None."""
        if self.experts is not None and self.experts.ep.tbo:
            t = self._overlapped_step_time(shapes)
            if t is not None:
                return t
        cm, rest, rows_all, seqs_all = self.rank, 0.0, 0, 0
        rows_max, prefill = 0, False
        for shape in shapes:
            if shape is None:
                if self.idle is None:
                    continue  # SGLang's idle batch: no tokens, only the MoE layers' collectives
                shape = self.idle
            q, kv = shape
            rows, seqs = sum(q), len(q)
            rest = max(rest, cm.step_time(q, kv) - moe_layers_s(cm, rows, seqs))
            rows_all += rows
            seqs_all += seqs
            rows_max, prefill = max(rows_max, rows), prefill or rows > seqs
        if self.experts is not None:
            return self.experts.step(rest, rows_all, rows_max, prefill)
        t = rest + moe_layers_s(self.moe, rows_all, seqs_all) + self.moe.allreduce_s(rows_all) * self.dispatch_calls
        assert math.isfinite(t)
        return t

    def _overlapped_step_time(self, shapes) -> float | None:
        """Two-batch overlap: every rank's batch as its two micro-batches (``tbo_halves``), each
        priced on its own rows; None when some rank's batch cannot be cut (SGLang agrees across the
        DP ranks, ``can_run_tbo``, and then runs the step without it)."""
        assert self.experts is not None
        cm, rest, prefill = self.rank, 0.0, False
        rows_all, rows_max = [0, 0], [0, 0]
        for shape in shapes:
            if shape is None:
                if self.idle is None:
                    continue
                shape = self.idle
            halves = tbo_halves(*shape)
            if halves is None:
                return None
            r = 0.0
            for i, (q, kv) in enumerate(halves):
                rows = sum(q)
                r += cm.step_time(q, kv) - moe_layers_s(cm, rows, len(q))
                rows_all[i] += rows
                rows_max[i] = max(rows_max[i], rows)
                prefill = prefill or rows > len(q)
            rest = max(rest, r)
        if rows_all == [0, 0]:
            return None
        return self.experts.overlapped_step(rest, list(zip(rows_all, rows_max)), prefill)
