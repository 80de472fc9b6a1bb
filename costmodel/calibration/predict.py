"""Carry the fit's uncertainty to what the simulator prices.

Parameters are drawn from N(ln p̂, Σ) (the fit's covariance of log-parameters, so every draw is
positive), giving whole ``Hardware`` profiles the cost model and the simulator use unchanged. A
prediction interval on one forward pass adds the fit's residual scatter s on top: the pass is
priced by one set of kernels, so that error is taken as shared by all its operators (one draw
per pass), which is the conservative choice.
"""

from __future__ import annotations

import numpy as np

from ..errors import require
from ..hardware import Hardware
from ..model import ModelSpec
from ..roofline import CostModel
from .profile import fitted_parameters, hw_fields

PERCENTILES = (2.5, 16.0, 50.0, 84.0, 97.5)


def _require_fitted(hw: Hardware):
    names, values, cov = fitted_parameters(hw)
    require(
        len(names) > 0,
        "hardware",
        hw.name,
        "profile has no fitted covariance; write one with `chunksim calibrate --out DIR`",
    )
    return names, values, cov


UNIDENTIFIED_VAR = 1.0
"""A parameter whose 1σ in ln exceeds 1 (a factor e) is one the data did not pin down (the fit warns
of it): drawn, it would swing by factors of e^σ that no point measured; it is kept at its value."""


def sample_hardware(profile: Hardware, n: int, rng: np.random.Generator) -> list[Hardware]:
    """``n`` profiles whose fitted fields are drawn from the calibration's covariance (the
    identified ones: ``UNIDENTIFIED_VAR``)."""
    require(isinstance(n, int) and n >= 1, "n", n, "must be a positive integer")
    names, values, cov = _require_fitted(profile)
    fields = hw_fields((profile.calibration or {}).get("form", "offset"))
    keep = [i for i, nm in enumerate(names) if nm in fields and cov[i, i] <= UNIDENTIFIED_VAR]
    if not keep:
        return [profile] * n
    mu, sub = np.log(values[keep]), cov[np.ix_(keep, keep)]
    draws = np.exp(rng.multivariate_normal(mu, sub, size=n, method="eigh"))
    return [profile.replace(**{fields[names[i]]: float(v) for i, v in zip(keep, row)}) for row in draws]


def forward_interval(
    model: ModelSpec,
    profile: Hardware,
    q_lens,
    kv_lens,
    tp: int = 1,
    counting: str | None = None,
    n: int = 400,
    seed: int = 0,
) -> dict:
    """Percentiles (seconds) of one forward pass's time over parameter draws and residual scatter."""
    rng = np.random.default_rng(seed)
    stats = CostModel(model, profile, tp, counting).shape(q_lens, kv_lens)
    times = np.array([CostModel(model, hw, tp, counting).time(stats) for hw in sample_hardware(profile, n, rng)])
    s = float((profile.calibration.get("residual_scale_log") or {}).get("gemm", 0.0))
    times = times * np.exp(s * rng.standard_normal(n))
    point = CostModel(model, profile, tp, counting).time(stats)
    return {
        "time_s": point,
        "draws": n,
        "residual_scale_log": s,
        **{f"p{p:g}_s": float(np.percentile(times, p)) for p in PERCENTILES},
    }
