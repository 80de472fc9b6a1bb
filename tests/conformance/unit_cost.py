"""A cost model in which every forward pass lasts exactly 1 s, so a step's start time is its
index: what the conformance drivers run chunksim over. It answers every pricing call the replica
and its fast-forward paths make (``step_time``, decode runs, chunked leads) with the same clock."""

from __future__ import annotations

import math

import numpy as np


class UnitCost:
    has_host = False

    def with_host_overlap(self, overlap: bool) -> UnitCost:
        return self

    def step_time(self, *args, **kwargs) -> float:
        return 1.0

    def decode_run(self, n, decode_kv0, steps) -> np.ndarray:
        return np.ones(steps)

    def decode_ends_list(self, n, decode_kv0, steps, t, stop=math.inf) -> list[float]:
        """Steps that start before `stop` (the first always does), as CostModel.decode_ends_list."""
        out = []
        for _ in range(steps):
            t += 1.0
            out.append(t)
            if t >= stop:
                break
        return out

    def prefill_lead_ends(self, m, decode_kv0, qs, kv, t, stop=math.inf, sealed=0, leaves=(), head=()) -> list[float]:
        """Steps 1 … len(qs) − 1 of a chunked lead, as CostModel.prefill_lead_ends stops them."""
        out = []
        for j in range(1, len(qs)):
            if t >= stop and j > sealed:
                break
            t += 1.0
            out.append(t)
        return out

    def prefill_step_end(self, m, decode_kv0, q, kv, t) -> float:
        """One step's end, as CostModel.prefill_step_end."""
        return t + 1.0

    def decode_run_ends(self, n, decode_kv0, steps, t, lead=False) -> np.ndarray:
        """End times of `steps` unit passes from t, or with `lead` t itself first, as
        CostModel.decode_run_ends."""
        d = np.ones(steps)
        if lead:
            d[0] = t
        else:
            d[0] += t
        return np.add.accumulate(d, out=d)
