"""Skinny GEMMs the library runs unsplit, one k step after another at memory latency.

On AIConfigurator's L40S table (TensorRT-LLM, cuBLASLt) a GEMM of a few rows (m = 2-64) and a
narrow output (n = 32-1,024) costs about 2.2 µs plus 4.0-4.1 ns per unit of k, whatever m and n,
up to a k where the library switches to a split-K kernel 3-7× faster (m = 2: n = 32 between k =
8,192 and 10,240, 35.0 → 5.1 µs; n = 128 between 7,168 and 8,192; n = 256 between 3,584 and
4,096; n = 512 between 1,536 and 2,048): the unsplit kernel's k loop waits on each k tile's loads
(no latency the pipeline hides), so its time is t₀ + τ·k. The switch sits near n·k = 2²⁰ (the
weight's elements) for n = 128-512 and at k ≈ 8-10k for n = 32, so the library's choice is taken
as a region: 2 ≤ m ≤ M, n·k < S and k ≤ K (m = 1 runs a GEMV kernel of its own), inside which the
GEMM costs max(tile model, t₀ + τ·k).

Wide outputs never switch: at n ≥ 1,536 the same table runs the unsplit kernel at every k, on the
same line, until the weights' bytes take longer (m = 8: n = 1,536 at k = 6,144 in 24.0 µs, n =
2,048 at 4,096 in 16.4 µs, n = 3,072 at 3,072 in 14.4 µs, while n = 1,024 splits from k = 3,072 on,
5.4 µs), where the tile model prices the split kernel at L2 speed, 15-50 % fast. The library
splits K only while the output grid leaves most SMs idle, so the wide branch is a second region,
2 ≤ m ≤ M_w and n ≥ N, under the same max. The regions (or none) are chosen by a search on the
fitted rows (``calibration/gemm_fit.py``), t₀ and τ by least squares on their rows; a profile
ships [t₀, τ, S, K, M] or [t₀, τ, S, K, M, N, M_w] as ``gemm_serial`` (empty: none).
"""

from __future__ import annotations

import numpy as np


def region(m, n, k, serial) -> np.ndarray:
    """Whether each GEMM lies in the unsplit kernel's region."""
    _, _, s_max, k_max, m_max = serial[:5]
    inside = (m >= 2) & (m <= m_max) & (n * k < s_max) & (k <= k_max)
    if len(serial) > 5:
        inside = inside | ((m >= 2) & (m <= serial[6]) & (n >= serial[5]))
    return inside


def apply(t: np.ndarray, m, n, k, serial) -> np.ndarray:
    """The tile model's times ``t`` with the unsplit kernel's time in its region."""
    if not serial:
        return t
    m, n, k = (np.asarray(x, float) for x in (m, n, k))
    t0, tau = float(serial[0]), float(serial[1])
    return np.where(region(m, n, k, serial), np.maximum(t, t0 + tau * k), t)


def check(serial, source: str = "gemm_serial") -> None:
    """Five values [t0, tau, S, K, M] or seven [.., N, M_w], each > 0, or none (else InputError)."""
    from .errors import require

    if not serial:
        return
    require(
        len(serial) in (5, 7)
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in serial),
        source,
        serial,
        "must be [t0_s, tau_s_per_k, max_nk, max_k, max_m] or those and [min_n_wide, max_m_wide], "
        "each a number > 0, or empty",
    )
