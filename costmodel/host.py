"""The engine's host time per step, and how much of it the GPU's time hides (mixed into CostModel).

Kernel tables see only the GPU. A serving engine also spends CPU time on every step: scheduling,
building the input tensors, launching, sampling and detokenizing. Step-level timings (``calibrate
--from steps`` / ``--from vllm-log``) reveal it as four terms of the Hardware profile:

  host = host_step_s + host_per_seq_s · B + host_per_prefill_seq_s · B_prefill
         + host_prefill_step_s · [B_prefill > 0]

with B the step's sequences and B_prefill those with more than one new token (q > 1): the last term
is paid once by a step that holds any prefill (the engine's prefill path; in Splitwise's prompt
times, what a batch's time to first token holds beyond its forward pass).

How a step's wall time combines the two depends on the engine's loop:
  serial   (``overlap_host=False``)  wall = gpu + host: the CPU prepares step n+1 after step n's
           results are back (vLLM's synchronous ``EngineCore.step``, SGLang's normal loop)
  overlap  (``overlap_host=True``)   wall = max(gpu, host): step n+1's host work runs while step n
           is on the GPU (vLLM's ``--async-scheduling`` / ``EngineCore.step_with_batch_queue``,
           SGLang's overlap scheduler ``event_loop_overlap``), so only host time beyond the
           GPU's shows
A replica prices with overlap when its policy says ``overlaps_host`` is True
(simcore/replica.py). With the four terms zero (every built-in profile) the price is the GPU
time exactly, bit for bit, in both modes: every path returns its GPU time unchanged.

An engine that launches every kernel from Python (eager mode) also spends host time per kernel,
``host_per_launch_s`` times the pass's kernels (costmodel/execution.py, ``model_launches``:
counted per layer from the model's architecture, so one constant carries across models). The GPU
runs each kernel while the host launches the next, so that time hides under the GPU's: a pass takes
max(gpu, launches) (serial: + host; overlap: max(gpu, launches + host)). A launch-bound pass costs
the same at any tp and batch, as Splitwise's Llama-2-70B A100 decodes do at tp 4 and 8
(docs/calibration.md).

With an engine execution profile (``execution``, costmodel/execution.py: CUDA-graph regime, its
padding, the kernels launched from the host) the GPU time first grows by that profile's terms;
the host time then combines with it as above. Without one (``None``, the default) nothing changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

HOST_FIELDS = ("host_step_s", "host_per_seq_s", "host_per_prefill_seq_s", "host_prefill_step_s")


class HostTime:
    """Needs ``self.hw`` and ``self.overlap_host``; sets ``self.has_host`` in ``_init_host``."""

    if TYPE_CHECKING:  # the CostModel this mixes into provides these; declared for mypy only
        counting: Any
        _fixed_part: Any
        hw: Any
        model: Any
        tp: Any

    def _init_host(self, overlap_host: bool, execution=None) -> None:
        hw = self.hw
        self.overlap_host = bool(overlap_host)
        self.execution = execution
        self._exec_memo: dict = {}
        if execution is not None:
            from .execution import check_model

            check_model(self.model, execution)
        self.host_step, self.host_seq, self.host_prefill = hw.host_step_s, hw.host_per_seq_s, hw.host_per_prefill_seq_s
        self.host_prefill_step = hw.host_prefill_step_s
        self.host_launch = self._launch_host(hw.host_per_launch_s)
        self.has_host = bool(self.host_step or self.host_seq or self.host_prefill or self.host_prefill_step)
        self.has_host = self.has_host or bool(self.host_launch)
        self.has_host = self.has_host or execution is not None
        self._twin = None

    def _launch_host(self, per_launch: float) -> float:
        """Host seconds to launch one eager pass's kernels (0 without ``host_per_launch_s``)."""
        if not per_launch:
            return 0.0
        from .errors import InputError
        from .execution import model_launches

        if self.model.is_moe or self.model.linear_layers or self.model.is_mla:
            raise InputError(
                "host_per_launch_s",
                per_launch,
                f"{self.model.name} has MoE, linear-attention or MLA layers, whose eager kernels per layer "
                "are not counted (dense decoders only, costmodel/execution.py)",
            )
        return per_launch * model_launches(self.model, self.tp)

    def host_time(self, seqs: int, prefill_seqs: int = 0) -> float:
        """Seconds of host work for a step of `seqs` sequences, `prefill_seqs` of them with q > 1."""
        return (
            self.host_step
            + self.host_seq * seqs
            + self.host_prefill * prefill_seqs
            + (self.host_prefill_step if prefill_seqs else 0.0)
        )

    def execution_terms(self, rows: int, seqs: int, prefill_seqs: int) -> tuple[str, int, float, float]:
        """(regime, padded rows, padding seconds, launch seconds) of a pass under the execution
        profile: the padding is the weight operators' price at the padded rows and sequences
        minus theirs at the true ones (attention sees only the true sequences)."""
        ex = self.execution
        regime, prows, pseqs = ex.regime(rows, seqs, prefill_seqs)
        pad = self._fixed_part(prows, pseqs) - self._fixed_part(rows, seqs) if prows != rows else 0.0
        return regime, prows, pad, ex.launches(regime, self.model.L, self.tp) * ex.launch_s

    def _execution_s(self, rows: int, seqs: int, prefill_seqs: int) -> float:
        key = (rows, seqs, prefill_seqs > 0)
        t = self._exec_memo.get(key)
        if t is None:
            if len(self._exec_memo) >= 1 << 17:
                self._exec_memo.clear()
            _, _, pad, launch = self.execution_terms(rows, seqs, prefill_seqs)
            t = self._exec_memo[key] = pad + launch
        return t

    def _with_host(self, gpu: float, seqs: int, prefill_seqs: int, rows: int | None = None) -> float:
        if self.execution is not None:
            gpu += self._execution_s(seqs if rows is None else rows, seqs, prefill_seqs)
        h = self.host_step + self.host_seq * seqs + self.host_prefill * prefill_seqs
        if prefill_seqs:
            h += self.host_prefill_step
        if self.overlap_host:
            h += self.host_launch
            return gpu if gpu >= h else h
        return (gpu if gpu >= self.host_launch else self.host_launch) + h

    def _with_host_array(self, gpu: np.ndarray, seqs: int) -> np.ndarray:
        """Decode-only passes of `seqs` sequences (no prefill), in place."""
        if self.execution is not None:
            gpu += self._execution_s(seqs, seqs, 0)
        h = self.host_step + self.host_seq * seqs
        if self.overlap_host:
            np.maximum(gpu, h + self.host_launch, out=gpu)
        else:
            np.maximum(gpu, self.host_launch, out=gpu)
            gpu += h
        return gpu

    def exposed_host(self, gpu: float, seqs: int, prefill_seqs: int) -> float:
        """The host time a step's wall time shows beyond its GPU time (the ``host`` operator)."""
        h = self.host_time(seqs, prefill_seqs)
        if self.overlap_host:
            return max(h + self.host_launch - gpu, 0.0)
        return max(self.host_launch - gpu, 0.0) + h

    def with_host_overlap(self, overlap: bool):
        """This cost model pricing with (or without) host/GPU overlap: itself when that changes
        nothing (no host terms, or already so), else one twin kept for every replica to share."""
        if not self.has_host or bool(overlap) == self.overlap_host:
            return self
        if self._twin is None:
            self._twin = type(self)(
                self.model, self.hw, self.tp, self.counting, overlap_host=bool(overlap), execution=self.execution
            )  # type: ignore[assignment, call-arg]
            self._twin._twin = self  # type: ignore[attr-defined]
        return self._twin
