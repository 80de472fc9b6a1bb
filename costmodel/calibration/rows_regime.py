"""The step fit's second GEMM regime in rows (calibration/steps.py): which breaks to try, and
whether the best one pays for its two parameters."""
from __future__ import annotations

import numpy as np
import pandas as pd

MIN_REGIME = 0.02   # a break that moves π by less is no second regime
SCREEN = 4000       # steps a fit runs on (every k-th of a larger table)
SCREEN_BREAKS = 1000   # steps the candidate breaks are compared on


def pays(cost: float, one_regime: float, n: int) -> bool:
    """BIC: the break's two parameters (s_rows and b) must lower n·ln(cost) by more than 2·ln n."""
    return cost < one_regime * np.exp(-2 * np.log(n) / n)


def screen(n: int, most: int = SCREEN) -> slice:
    """Every k-th of n steps, at most ``most`` of them (all when n <= most)."""
    return slice(None) if n <= most else slice(None, None, -(-n // most))


def pick_break(solve, breaks, one, m: int, idx):
    """(break, its solve) of least loss on the screened steps ``idx`` (m of them) that pays for
    itself against the one-regime solve ``one`` (warm-started from it); (0, None) if none."""
    if not breaks:
        return 0, None
    start = dict(zip(one[1], one[0].x))
    trials = {b: solve(b, start, idx) for b in breaks}
    b = min(trials, key=lambda k: trials[k][0].cost)
    return (b, trials[b]) if pays(trials[b][0].cost, one[0].cost, m) else (0, None)


def rows_breaks(steps: pd.DataFrame) -> list[int]:
    """Candidate breaks b = 2^k with at least two distinct row counts of steps with a prefill
    sequence on each side (rows <= b, rows > b)."""
    rows = np.unique(steps.loc[steps["prefill_seqs"].to_numpy() > 0, "rows"].to_numpy(np.int64))
    if len(rows) < 4:
        return []
    out = []
    for k in range(int(np.log2(rows[1])), int(np.log2(rows[-2])) + 1):
        b = 1 << k
        if (rows <= b).sum() >= 2 and (rows > b).sum() >= 2:
            out.append(b)
    return out
