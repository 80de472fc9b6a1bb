"""Which fitted parameters the data pin down, and how well: shared by the kernel-model fits."""

from __future__ import annotations

import numpy as np

from .fit import POOR_REL_SIGMA, _covariance, clamp_warning

EPS = 1e-3


def identify(op_class: str, params, values: np.ndarray, times, res, n_points: int, cap: np.ndarray, units: dict):
    """(active, cov, s2, warnings): a parameter is active at a point whose modelled time moves by
    ≥ 10 % of a relative bump; inactive ones, 1σ above POOR_REL_SIGMA and values at their spec cap
    are said. `times(values)` models every point; `units[p]` names p's unit for the cap."""
    base = np.log(times(values))
    active = {}
    for j, p in enumerate(params):
        bumped = values.copy()
        bumped[j] *= np.exp(EPS)
        active[p] = int((np.abs(np.log(times(bumped)) - base) / EPS >= 0.1).sum())
    ok = np.array([active[p] > 0 for p in params])
    cov, s2, _ = _covariance(res, ok, max(n_points - len(params), 1))
    warns = []
    for j, p in enumerate(params):
        if not active[p]:
            warns.append(f"{op_class}.{p} not identified: no point depends on it by 10 %")
        elif np.isfinite(cov[j, j]) and np.sqrt(cov[j, j]) > POOR_REL_SIGMA:
            warns.append(f"{op_class}.{p} poorly identified: 1σ is {100 * np.sqrt(cov[j, j]):.0f} %")
        if np.isfinite(cap[j]) and values[j] >= cap[j] * (1 - 1e-6):
            warns.append(clamp_warning(op_class, p, cap[j], units[p]))
    return active, cov, s2, warns
