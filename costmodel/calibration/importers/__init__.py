"""Importers of other projects' kernel tables into the tidy timing table (``timings.COLUMNS``).

Each returns ``(table, notes)``: the rows of the dtype modelled, and one line per thing skipped
(other dtypes, failed measurements), so that a fit says what it did not use.
"""

from __future__ import annotations

from .aiconfigurator import read_aiconfigurator, spec_hardware
from .llmservingsim import read_llmservingsim, skew_alpha

__all__ = ["read_aiconfigurator", "read_llmservingsim", "skew_alpha", "load_source", "spec_hardware", "FORMATS"]
FORMATS = ("vidur", "timings", "aiconfigurator", "llmservingsim")


def load_source(fmt: str, path):
    """(table, notes) of one ``calibrate --from FORMAT PATH``."""
    from ...errors import require
    from ..timings import load_timings

    require(fmt in FORMATS, "from", fmt, f"unknown format; known: {', '.join(FORMATS)}")
    if fmt == "aiconfigurator":
        return read_aiconfigurator(path)
    if fmt == "llmservingsim":
        return read_llmservingsim(path)
    return load_timings(path), []
