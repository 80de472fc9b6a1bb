"""One all-reduce call's time from a profile's regimes (``allreduce_regimes[tp]``: latency,
bandwidth per line, flattened), as ``calibration/allreduce_model.py`` fits them: the fastest line
the engine may run at this size, the first two (one-shot) only up to ``oneshot_tokens`` rows
(and alone there where ``alone``). ``CostModel.allreduce_s`` prices a step with the scalar form,
the step fit (``calibration/step_pricing.py``) with the array form: the same float operations."""
from __future__ import annotations

import numpy as np


def call_time(r, size: float, rows: int, oneshot_tokens: int, alone: bool) -> float:
    """Seconds of one call of ``size`` bytes carrying ``rows`` tokens."""
    capped = bool(oneshot_tokens) and len(r) > 4
    first = 4 if (capped and rows > oneshot_tokens) else 0
    last = 4 if (capped and rows <= oneshot_tokens and alone) else len(r)
    return min(r[i] + size / r[i + 1] for i in range(first, last, 2))


def call_times(r, size: np.ndarray, rows: np.ndarray, oneshot_tokens: int, alone: bool) -> np.ndarray:
    """``call_time`` elementwise."""
    cands = np.stack([r[i] + size / r[i + 1] for i in range(0, len(r), 2)])
    low = cands.min(0)
    if oneshot_tokens and len(r) > 4:
        low = np.where(rows > oneshot_tokens, cands[2:].min(0), cands[:2].min(0) if alone else low)
    return low
