"""NCCL over PCIe as runs of lines with switches between them (``allreduce_model``'s switched counts).

Without NVLink (L40S) TensorRT-LLM runs NCCL at every size (``thop/allreduceOp.cpp``,
``ifFallbackToNCCL``), and NCCL's tuner picks each size's algorithm and protocol by its own
latency + bandwidth model (``src/graph/tuning.cc``, ``ncclTopoTuneModel``; LL128 is off on PCIe),
not by the measured times, so the measured curve is not their minimum: it steps down in time per
byte where the tuner switches (L40S, 8 GPUs, custom table: 297 µs at 64K elements, 320 µs at 128K;
20.3 ms at 8M, 26.0 ms at 16M, then 2.1 GB/s of bus bandwidth against 1.0 from 1M to 8M), which no
concave curve follows. So each side of the engine's token switch (``ONESHOT_MAX_TOKENS``, where
both of the L40S's tables jump 3.5x / 3.0x from 512K to 1M elements) is cut into runs of message
sizes, each priced by its own line ℓ + B/bw (B the bus bytes, 2(n-1)/n · size). Where a switch
falls between two measured sizes is not known, so between the last size of one run and the first
of the next the time blends from one line to the other, linearly in log size and log time (where
the two lines cross inside that gap, their minimum: ``costmodel/allreduce.py``, ``crossing``).

The runs are the sizes' cut (each run at least two sizes) whose lines, fitted in relative error
in closed form, fit best; their number (1 to MAX_RUNS per side) the one that best predicts each
measured size left out in turn. No line's latency may exceed LAT_SLACK times NCCL's own model of
a Simple-protocol ring over PCIe, baseLat + 2(n-1)·hwLat (``tuning.cc``: 8.4 µs and 5.7 µs per
step; 88 µs on 8 GPUs): without that bound two sizes of a run after a switch (4M and 8M elements,
12.8 and 20.3 ms) draw a 5 ms latency that prices a held-out 1M at twice its 3.4 ms.
"""

from __future__ import annotations

import numpy as np

from ..allreduce import run_times

NCCL_PCIE = "nccl_pcie"  # the engine's all-reduce rows where it runs NCCL at every size (no NVLink)
PCIE_RING_SIMPLE = (8.4e-6, 5.7e-6)  # NCCL tuning.cc: baseLat[Ring][Simple], hwLat[PCI][Ring][Simple] (s)
LAT_SLACK = 10.0
MAX_RUNS = 4
MIN_SIZES = 2


def latency_bound(n: int) -> float:
    """The largest latency of a switched line on n GPUs (s)."""
    return LAT_SLACK * (PCIE_RING_SIMPLE[0] + 2 * (n - 1) * PCIE_RING_SIMPLE[1])


def rel_line(B: np.ndarray, t: np.ndarray, latmax: float) -> tuple[tuple[float, float], float]:
    """(ℓ, 1/bw) of the line minimising Σ((ℓ + B/bw)/t - 1)² with 0 ≤ ℓ ≤ latmax and 1/bw ≥ 0, and that sum."""
    a = np.stack([1.0 / t, B / t], axis=1)
    lat, slope = np.linalg.lstsq(a, np.ones_like(t), rcond=None)[0]
    if not 0.0 <= lat <= latmax:
        lat = min(max(lat, 0.0), latmax)
        w = B / t
        slope = float(w @ (1.0 - lat / t) / (w @ w))
    if slope <= 0.0:
        lat, slope = min(float(np.sum(1 / t) / np.sum(1 / t**2)), latmax), 0.0
    return (float(lat), float(slope)), float(((a @ np.array([lat, slope]) - 1.0) ** 2).sum())


def cut_runs(B: np.ndarray, t: np.ndarray, k: int, latmax: float) -> list[tuple[int, tuple[float, float]]]:
    """The sorted sizes cut into k runs of at least MIN_SIZES (fewer if they are too few):
    [(first index of the run, its line)], the cut of least summed relative squared error."""
    n, memo = len(B), {}

    def best(i: int, j: int):
        if (i, j) not in memo:
            if j == 1:
                x, e = rel_line(B[i:], t[i:], latmax)
                memo[(i, j)] = (e, [(i, x)])
            else:
                memo[(i, j)] = min(
                    (
                        (e + r[0], [(i, x)] + r[1])
                        for c in range(i + MIN_SIZES, n - MIN_SIZES * (j - 1) + 1)
                        for (x, e), r in [(rel_line(B[i:c], t[i:c], latmax), best(c, j - 1))]
                    ),
                    key=lambda z: z[0],
                )
        return memo[(i, j)]

    return best(0, max(1, min(k, n // MIN_SIZES)))[1]


def lines_and_gaps(B: np.ndarray, t: np.ndarray, k: int, latmax: float):
    """(lines [(ℓ, bw)], gaps [(B of a run's last size, B of the next run's first)]) of sorted sizes."""
    runs = cut_runs(B, t, k, latmax)
    lines = [(lat, 1.0 / slope if slope > 0 else np.inf) for _, (lat, slope) in runs]
    return lines, [(float(B[i - 1]), float(B[i])) for i, _ in runs[1:]]


def _predict(B, t, Bq, k, latmax) -> np.ndarray:
    lines, gaps = lines_and_gaps(B, t, k, latmax)
    lat, bw = np.array([x[0] for x in lines]), np.array([x[1] for x in lines])
    return run_times(lat, bw, [g for gap in gaps for g in gap], Bq)


def choose_runs(B: np.ndarray, t: np.ndarray, latmax: float) -> int:
    """The number of runs (1 to MAX_RUNS) whose fit best predicts each size left out in turn
    (mean |relative error|)."""
    best = (np.inf, 1)
    for k in range(1, MAX_RUNS + 1):
        if len(B) < MIN_SIZES * k + 1:
            break
        keep = ~np.eye(len(B), dtype=bool)
        err = np.mean([abs(_predict(B[m], t[m], B[i : i + 1], k, latmax)[0] / t[i] - 1) for i, m in enumerate(keep)])
        best = min(best, (err, k))
    return best[1]


def side_runs(B: np.ndarray, t: np.ndarray, n: int):
    """A side's lines and gaps: one time per size (the median of its rows), sizes sorted."""
    sizes = np.unique(B)
    med = np.array([np.median(t[B == s]) for s in sizes])
    latmax = latency_bound(n)
    return lines_and_gaps(sizes, med, choose_runs(sizes, med, latmax), latmax)
