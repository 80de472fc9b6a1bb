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
        self._counts = np.zeros(self.nbins, dtype=np.int64)
        self._count, self._total, self._max = 0, 0.0, 0.0
        self._values: list[float] = []
        self._weights: list[int] = []
        self._chunks: list = []        # (array of values, weight)
        self._pending = 0
        self._unit = True              # every buffered weight is 1

    def _index(self, x: np.ndarray) -> np.ndarray:
        """Bin of each value (x is overwritten; zero falls to -inf and is clipped into the first bin)."""
        x /= self.lo
        with np.errstate(divide="ignore"):
            np.log10(x, out=x)
        x *= self.per_decade
        np.floor(x, out=x)
        np.clip(x, -1, self.nbins - 2, out=x)
        i = x.astype(np.int64)
        i += 1
        return i

    def add(self, value: float, weight: int = 1) -> None:
        self._values.append(value)
        self._weights.append(weight)
        if weight != 1:
            self._unit = False
        self._pending += 1
        if self._pending >= 65536:
            self._flush()

    def add_many(self, values, weight: int = 1) -> None:
        """Values are buffered and binned in bulk: adding is cheap, reading flushes."""
        if type(values) is list:
            self._values += values
            self._weights += [weight] * len(values)
        elif len(values):
            self._chunks.append((values, weight))
        else:
            return
        if weight != 1:
            self._unit = False
        self._pending += len(values)
        if self._pending >= 65536:
            self._flush()

    def _flush(self) -> None:
        """Bin the buffered values; with every weight 1 (one request's gaps) the weights are skipped."""
        if not self._values and not self._chunks:
            return
        chunks = self._chunks
        v = np.concatenate([np.asarray(self._values, dtype=np.float64)] + [c for c, _ in chunks], dtype=np.float64)
        self._max = max(self._max, float(v.max()))
        if self._unit:
            self._count += len(v)
            self._total += float(v.sum())
            self._counts += np.bincount(self._index(v), minlength=self.nbins)
        else:
            w = np.concatenate((np.asarray(self._weights, dtype=np.float64),
                                np.repeat(np.array([w for _, w in chunks], dtype=np.float64), [len(c) for c, _ in chunks])))
            self._count += int(w.sum())
            self._total += float(v @ w)
            self._counts += np.bincount(self._index(v), weights=w, minlength=self.nbins).astype(np.int64)
        self._values, self._weights, self._chunks, self._pending, self._unit = [], [], [], 0, True

    @property
    def counts(self) -> np.ndarray:
        self._flush()
        return self._counts

    @property
    def count(self) -> int:
        self._flush()
        return self._count

    @property
    def total(self) -> float:
        self._flush()
        return self._total

    @property
    def max(self) -> float:
        self._flush()
        return self._max

    def merge(self, other: "LogHistogram") -> None:
        self._flush()
        other._flush()
        self._counts += other._counts
        self._count += other._count
        self._total += other._total
        self._max = max(self._max, other._max)

    def _center(self, i: np.ndarray) -> np.ndarray:
        return self.lo * 10 ** ((i - 0.5) / self.per_decade)

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0

    def quantile(self, q: float) -> float:
        """q in [0, 1]; the geometric centre of the bin holding the q-th sample, capped at the exact max."""
        if not self.count:
            return 0.0
        if q >= 1.0:
            return self.max
        rank = q * (self.count - 1)
        i = int(np.searchsorted(np.cumsum(self.counts), rank, side="right"))
        return float(min(self._center(np.array(i))[()], self.max))
