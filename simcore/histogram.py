"""A fine log-spaced histogram: latency distributions in O(bins) memory, never a list per token.

Bins are geometric with ratio 10**(1/bins_per_decade); at the default 2000 per decade a
quantile is within 0.12 % of the exact sample quantile. Count, sum and max are kept exactly.
"""
from __future__ import annotations

import numpy as np


class LogHistogram:
    def __init__(self, lo: float = 1e-6, hi: float = 1e5, bins_per_decade: int = 2000):
        self.lo, self.per_decade = lo, bins_per_decade
        self.nbins = int(np.ceil(np.log10(hi / lo) * bins_per_decade)) + 2
        self.counts = np.zeros(self.nbins, dtype=np.int64)
        self.count, self.total, self.max = 0, 0.0, 0.0

    def _index(self, x):
        return np.clip(np.floor(np.log10(np.maximum(x, self.lo * 0.5) / self.lo) * self.per_decade).astype(np.int64) + 1,
                       0, self.nbins - 1)

    def add(self, value: float, weight: int = 1) -> None:
        self.add_many(np.array([value]), weight)

    def add_many(self, values: np.ndarray, weight: int = 1) -> None:
        if len(values) == 0 or weight == 0:
            return
        values = np.asarray(values, dtype=np.float64)
        np.add.at(self.counts, self._index(values), weight)
        self.count += len(values) * weight
        self.total += float(values.sum()) * weight
        self.max = max(self.max, float(values.max()))

    def merge(self, other: "LogHistogram") -> None:
        self.counts += other.counts
        self.count += other.count
        self.total += other.total
        self.max = max(self.max, other.max)

    def _center(self, i: np.ndarray) -> np.ndarray:
        return self.lo * 10 ** ((i - 0.5) / self.per_decade)

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0

    def quantile(self, q: float) -> float:
        """q in [0, 1]; the geometric centre of the bin holding the q-th sample, capped at the exact max."""
        if not self.count:
            return 0.0
        rank = q * (self.count - 1)
        i = int(np.searchsorted(np.cumsum(self.counts), rank, side="right"))
        return float(min(self._center(np.array(i))[()], self.max))
