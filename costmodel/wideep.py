"""The shipped wide-EP kernel constants (``wideep_h200.json``, written by
``benchmarks/fit_profiles.py --wideep`` from AIConfigurator's H200 SGLang tables): DeepEP's
dispatch and combine, the grouped-GEMM MoE layer and the MLA kernels, one dict of constants per
family (``calibration/wideep_fit.py`` names them)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

WIDEEP_FILE = Path(__file__).parent / "wideep_h200.json"


@cache
def constants() -> dict:
    """family -> constants (SI), as fitted on every row of the family's table."""
    doc = json.loads(WIDEEP_FILE.read_text())
    return {k: v for k, v in doc.items() if not k.startswith("_")}
