"""The step fit's second GEMM regime in rows (calibration/steps.py): which breaks and budgets to
try, and whether the best one pays for its two parameters."""

from __future__ import annotations

import numpy as np
import pandas as pd

MIN_REGIME = 0.02  # a break that moves π by less is no second regime
SCREEN = 4000  # steps a fit runs on (every k-th of a larger table)
SCREEN_BREAKS = 1000  # steps the candidate breaks are compared on


def pays(cost: float, one_regime: float, n: int) -> bool:
    """BIC: the break's two parameters (s_rows and b) must lower n·ln(cost) by more than 2·ln n."""
    return cost < one_regime * np.exp(-2 * np.log(n) / n)


def screen(n: int, most: int = SCREEN) -> slice:
    """Every k-th of n steps, at most ``most`` of them (all when n <= most)."""
    return slice(None) if n <= most else slice(None, None, -(-n // most))


NONE = ("", 0)  # no rows regime
BUDGETS_PER_OCTAVE = 2  # the grid of budgets the fit starts from (it then frees the budget)


def pick_break(solve, regimes, one, m: int, idx):
    """(regime, its solve) of least loss on the screened steps ``idx`` (m of them) that pays for
    itself against the one-regime solve ``one`` (warm-started from it); (NONE, None) if none.
    A regime is ("break", b) or ("budget", B)."""
    if not regimes:
        return NONE, None
    start = dict(zip(one[1], one[0].x))
    trials = {r: solve(r, start, idx) for r in regimes}
    r = min(trials, key=lambda k: trials[k][0].cost)
    return (r, trials[r]) if pays(trials[r][0].cost, one[0].cost, m) else (NONE, None)


def _prefill_rows(steps: pd.DataFrame) -> np.ndarray:
    return np.unique(steps.loc[steps["prefill_seqs"].to_numpy() > 0, "rows"].to_numpy(np.int64))


def budget_grid(steps: pd.DataFrame) -> list[int]:
    """Budgets to start from: BUDGETS_PER_OCTAVE per factor of two between the least and the
    second-largest distinct row count of steps with a prefill, each with a row count at or below it
    and two above (the scale beyond it is then seen by two)."""
    rows = _prefill_rows(steps)
    if len(rows) < 3:
        return []
    k = np.arange(np.ceil(np.log2(rows[0]) * BUDGETS_PER_OCTAVE), np.log2(rows[-2]) * BUDGETS_PER_OCTAVE + 1)
    grid = np.unique(np.round(2.0 ** (k / BUDGETS_PER_OCTAVE)).astype(np.int64))
    return [int(b) for b in grid if (rows <= b).sum() >= 1 and (rows > b).sum() >= 2]


def budget_bounds(steps: pd.DataFrame, b: int) -> tuple[float, float]:
    """The range a budget started at the grid point ``b`` is freed in: the grid's neighbours."""
    step = 2.0 ** (1.0 / BUDGETS_PER_OCTAVE)
    rows = _prefill_rows(steps)
    return max(float(rows[0]), b / step), min(float(rows[-2]), b * step)


def rows_breaks(steps: pd.DataFrame) -> list[int]:
    """Candidate breaks b = 2^k with at least two distinct row counts of steps with a prefill
    sequence on each side (rows <= b, rows > b)."""
    rows = _prefill_rows(steps)
    if len(rows) < 4:
        return []
    out = []
    for k in range(int(np.log2(rows[1])), int(np.log2(rows[-2])) + 1):
        b = 1 << k
        if (rows <= b).sum() >= 2 and (rows > b).sum() >= 2:
            out.append(b)
    return out
