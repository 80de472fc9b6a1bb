"""A fine log-spaced histogram: latency distributions in O(bins) memory, never a list per token.

Bins are geometric with ratio 10**(1/bins_per_decade); at the default 2000 per decade a
quantile is within 0.12 % of the exact sample quantile. Count, sum and max are kept exactly.

BINNING without a logarithm per value. A value's bin is defined by the formula
``floor(log10(x / lo) * per_decade) + 1`` (clipped to the bins), but a log per value was most of
a day's binning. ``_bins`` finds once, for each bin, its lower edge: the smallest float the
formula puts in it. A value's float bits, cut to a few mantissa bits, then index a table of the
bin each such bucket starts in; a bucket is narrower than a bin, so one comparison with the next
edge finishes the job. This is the formula wherever the formula is monotone in x (numpy's log10
is, to the last bit, on the values tested); zero, negatives and values below ``lo`` land in the
first bin, values at or past ``hi`` in the last, and NaN by its sign bit: ``np.nan`` in the last,
the NaN that arithmetic gives (0/0, inf - inf: the sign set on x86) in the first. Counting
raises NaNValue for a NaN: a latency that is not a number is a bug upstream (a cost model's
constant, a step time), never a value to bin.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

BLOCK = 16384  # values indexed at a time: their temporaries stay in the cache (twice as fast as 65,536 at once)


class NaNValue(ValueError):
    """A NaN added to a histogram (found when values are binned: adding is buffered)."""


def _formula(x: np.ndarray, lo: float, per_decade: int, nbins: int) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.floor(np.log10(x / lo) * per_decade)
    return np.clip(y, -1, nbins - 2).astype(np.int64) + 1


@lru_cache(maxsize=8)
def _bins(lo: float, per_decade: int, nbins: int) -> tuple[np.ndarray, np.ndarray, int, int]:
    """(bucket table, next edges, shift, first bucket's key); ``next edges[j]`` is bin j + 1's
    lower edge (``next edges[nbins - 1]`` is NaN, above every value). Bins are int32: half the
    bytes through the cache of an int64 index."""
    j = np.arange(1, nbins, dtype=np.float64)
    want = np.arange(1, nbins, dtype=np.int64)
    guess = (lo * 10.0 ** ((j - 1) / per_decade)).view(np.int64)
    below, above = guess - 1024, guess + 1024  # float bits: the formula is < want at below, >= want at above
    if (_formula(below.view(np.float64), lo, per_decade, nbins) >= want).any() or (
        _formula(above.view(np.float64), lo, per_decade, nbins) < want
    ).any():
        raise RuntimeError("histogram edges are not within 1024 ulps of lo * 10**(i / per_decade)")
    while (above - below > 1).any():
        mid = below + (above - below) // 2
        up = _formula(mid.view(np.float64), lo, per_decade, nbins) >= want
        above, below = np.where(up, mid, above), np.where(up, below, mid)
    edge = above.view(np.float64)
    edges = np.concatenate([[-np.inf], edge, [np.inf]])
    mantissa = max(math.ceil(-math.log2(10.0 ** (1.0 / per_decade) - 1.0)) + 1, 0)  # a bucket at most a binade
    shift = 52 - mantissa
    first = int(np.array(lo / 4).view(np.int64)) >> shift
    last = int(np.array(float(edge[-1]) * 4).view(np.int64)) >> shift
    starts = (np.arange(first, last + 1, dtype=np.int64) << shift).view(np.float64)
    table = (np.searchsorted(edges, starts, side="right") - 1).astype(np.int64)
    edges[-1] = np.nan  # +inf stays in the last bin: nothing compares >= NaN
    return table.astype(np.int32), edges[1:].copy(), shift, first


class LogHistogram:
    def __init__(self, lo: float = 1e-6, hi: float = 1e5, bins_per_decade: int = 2000):
        self.lo, self.per_decade = lo, bins_per_decade
        self.nbins = int(np.ceil(np.log10(hi / lo) * bins_per_decade)) + 2
        self._counts = np.zeros(self.nbins, dtype=np.int64)
        self._count, self._total, self._max = 0, 0.0, 0.0
        self._unit_values: list[float] = []  # weight 1 (most gaps: one request's)
        self._unit_chunks: list = []  # arrays of weight-1 values
        self._values: list[float] = []
        self._weights: list[int] = []
        self._chunks: list = []  # (array of values, weight)
        self._weighted: list = []  # (array of values, array of weights)
        self._pending = 0

    def _index(self, x: np.ndarray) -> np.ndarray:
        """Bin of each value (see BINNING)."""
        table, above, shift, first = _bins(self.lo, self.per_decade, self.nbins)
        k = x.view(np.int64) >> shift
        k -= first
        i = table.take(k, mode="clip")
        i += x >= above.take(i)
        return i

    def add(self, value: float, weight: int = 1) -> None:
        if weight == 1:
            self._unit_values.append(value)
        else:
            self._values.append(value)
            self._weights.append(weight)
        self._pending += 1
        if self._pending >= 65536:
            self._flush()

    def add_many(self, values, weight: int = 1) -> None:
        """Values are buffered and binned in bulk: adding is cheap, reading flushes."""
        n = len(values)
        if not n:
            return
        if type(values) is list:
            if weight == 1:
                self._unit_values += values
            else:
                self._values += values
                self._weights += [weight] * n
        elif weight == 1:
            self._unit_chunks.append(values)
        else:
            self._chunks.append((values, weight))
        self._pending += n
        if self._pending >= 65536:
            self._flush()

    def add_weighted(self, values: np.ndarray, weights: np.ndarray) -> None:
        """Each value with its own integer weight (arrays of one length), buffered as add_many's."""
        n = len(values)
        if not n:
            return
        self._weighted.append((values, weights))
        self._pending += n
        if self._pending >= 65536:
            self._flush()

    def _flush(self) -> None:
        """Bin the buffered values: weight-1 values without weights (the cheaper bincount). The
        buffers are emptied first, so values are counted once even if binning raises (NaNValue)."""
        units, unit_chunks, values, weights = self._unit_values, self._unit_chunks, self._values, self._weights
        chunks, weighted = self._chunks, self._weighted
        self._unit_values, self._unit_chunks, self._values, self._weights, self._chunks = [], [], [], [], []
        self._weighted = []
        self._pending = 0
        if units or unit_chunks:
            self._bin(np.concatenate([np.asarray(units, dtype=np.float64)] + unit_chunks, dtype=np.float64))
        if values or chunks or weighted:
            v = np.concatenate(
                [np.asarray(values, dtype=np.float64)] + [c for c, _ in chunks] + [c for c, _ in weighted],
                dtype=np.float64,
            )
            w = np.concatenate(
                [
                    np.asarray(weights, dtype=np.float64),
                    np.repeat(np.array([w for _, w in chunks], dtype=np.float64), [len(c) for c, _ in chunks]),
                ]
                + [w for _, w in weighted],
                dtype=np.float64,
            )
            self._bin(v, w)

    def _bin(self, v: np.ndarray, w: np.ndarray | None = None) -> None:
        """Count values v (a fresh array, overwritten), each with weight w (None: 1).

        The weighted total is numpy's own sum, not a BLAS dot: OpenBLAS threads a long dot, which
        spins a second core and makes the last bits depend on the thread count."""
        top = float(v.max())  # NaN if any value is
        if top != top:
            raise NaNValue(
                f"latency histogram: {int(np.isnan(v).sum())} of {len(v)} values are NaN "
                "(a step time or gap that is not a number: check the cost model's constants)"
            )
        self._max = max(self._max, top)
        counts, index = self._counts, self._index
        if w is None:
            self._count += len(v)
            self._total += float(v.sum())
        else:
            self._count += int(w.sum())
            self._total += float(np.multiply(v, w).sum())
        for s in range(0, len(v), BLOCK):
            i = index(v[s : s + BLOCK])
            low = int(i.min())  # the bins a block spans are few: count only from the lowest
            i -= low
            c = np.bincount(i) if w is None else np.bincount(i, weights=w[s : s + BLOCK]).astype(np.int64)
            counts[low : low + len(c)] += c

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

    def merge(self, other: LogHistogram) -> None:
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
        return float(min(self._center(np.array(i))[()], self.max))  # type: ignore[arg-type]
