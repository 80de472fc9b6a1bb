"""The step fit's second GEMM regime in rows (calibration/steps.py): which breaks to try, and
whether the best one pays for its two parameters."""
from __future__ import annotations

import numpy as np
import pandas as pd

MIN_REGIME = 0.02   # a break that moves π by less is no second regime
SCREEN = 4000       # steps a candidate break is screened on (every k-th of a larger table)


def pays(cost: float, one_regime: float, n: int) -> bool:
    """BIC: the break's two parameters (s_rows and b) must lower n·ln(cost) by more than 2·ln n."""
    return cost < one_regime * np.exp(-2 * np.log(n) / n)


def pick_break(solve, breaks, one, n: int) -> int:
    """The candidate break of least loss that pays for itself, screened on at most SCREEN steps
    (every k-th; warm-started from the one-regime solution); 0 if none."""
    if not breaks:
        return 0
    idx = slice(None, None, -(-n // SCREEN))
    m = len(range(n)[idx])
    base = one if m == n else solve(0, dict(zip(one[1], one[0].x)), idx)
    start = dict(zip(base[1], base[0].x))
    costs = {b: solve(b, start, idx)[0].cost for b in breaks}
    b = min(costs, key=costs.get)
    return b if pays(costs[b], base[0].cost, m) else 0


def subset(terms, idx):
    """The steps ``idx`` of a StepTerms (calibration/steps.py)."""
    if idx == slice(None):
        return terms
    return type(terms)(terms.tc[idx], terms.tm[idx], terms.floor[idx], terms.over[idx], terms.const[idx],
                      terms.host_cols[idx], terms.quadrature, terms.gemm_rows[idx])


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
