"""How far a profile's prices are expected to fall from a real run, by the kind of profile.

A fit's covariance says how well its constants are pinned by its own data, not how well the
model prices a run it never saw: validation runs miss by 1-30 % where the covariance says ±1 %.
So every profile carries an expected error taken from the accuracy ledger
(``costmodel/expected_error.yaml``, written by ``benchmarks/error_ledger.py`` from real runs the
profiles were not fitted on), by kind:

- ``kernel-calibrated``: a kernel fit (``calibration.form``), from kernel tables;
- ``step-calibrated``: a step fit (``calibration.step_fit``), from measured step times;
- ``spec-sheet``: spec-sheet peaks with the seed's efficiency ratios, no fit (the seed's ``h100`` too).

``sigma_log`` is the RMS of ln(simulated / measured) over the ledger's figures for that kind: the
scale of a lognormal error on every step's time, which ``--uncertainty`` draws beside the fit's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

LEDGER_FILE = Path(__file__).parent / "expected_error.yaml"
KINDS = ("kernel-calibrated", "step-calibrated", "spec-sheet")


@dataclass(frozen=True)
class ExpectedError:
    kind: str
    sigma_log: float  # RMS of ln(simulated / measured) over the ledger's figures of this kind
    mean_abs_pct: float  # their mean |relative error|, percent
    figures: int  # how many figures the ledger holds for this kind
    evidence: str  # which runs, where

    def line(self, name: str) -> str:
        return (
            f"{name}: {self.kind} profile, expected error ±{self.mean_abs_pct:.0f} % "
            f"(mean |error| of {self.figures} validation figures; 1σ {self.sigma_log:.2f} in ln; {self.evidence})"
        )

    def as_dict(self) -> dict:
        return {
            "kind": self.kind,
            "sigma_log": self.sigma_log,
            "mean_abs_pct": self.mean_abs_pct,
            "figures": self.figures,
            "evidence": self.evidence,
        }


def profile_kind(hw) -> str:
    cal = hw.calibration or {}
    if "step_fit" in cal:
        return "step-calibrated"
    if cal.get("form"):
        return "kernel-calibrated"
    return "spec-sheet"


def _ledger() -> dict:
    return yaml.safe_load(LEDGER_FILE.read_text())["kinds"]


def expected_error(hw) -> ExpectedError:
    kind = profile_kind(hw)
    e = _ledger()[kind]
    return ExpectedError(kind, float(e["sigma_log"]), float(e["mean_abs_pct"]), int(e["figures"]), str(e["evidence"]))


def time_scales(sigma_log: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` draws of the model error as a factor on every step's time (lognormal, median 1)."""
    return np.exp(sigma_log * rng.standard_normal(n))
