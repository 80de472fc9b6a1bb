"""Importers of other projects' kernel tables into the tidy timing table (``timings.COLUMNS``).

Each returns ``(table, notes)``: the rows of the dtype modelled, and one line per thing skipped
(other dtypes, failed measurements), so that a fit says what it did not use.
"""
from __future__ import annotations

from .aiconfigurator import read_aiconfigurator
from .llmservingsim import read_llmservingsim

__all__ = ["read_aiconfigurator", "read_llmservingsim"]
