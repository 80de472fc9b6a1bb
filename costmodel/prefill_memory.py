"""Context attention's bytes (``fitted_attention`` and ``calibration.operator_models.attention_times``):
the share of a replayed working set the L2 holds, and how the DRAM part's time meets the compute.
The K/V part of the bytes takes its share of a capacity of its own (``attn_prefill_kv_l2_bytes``,
fitted): on the L40S it loses its residency at a smaller working set than Q and O do."""

from __future__ import annotations

import math

import numpy as np

_EDGE = 1.0 + 1e-9  # W₀ at its branch point -1/e (x = 1) returns nan
OVERLAP_P = 4.0  # the soft maximum's power in ``overlap_dram`` (a hard max: the fit took 155 steps, not 23)


def l2_resident_share(x):
    """The share of a working set x times the L2's resident capacity that each replay finds in the
    L2: 1 while it fits; beyond, the fixed point h = exp(-(1 - h)·x) of a cache that evicts a random
    line per miss under a cyclic stream (between two uses of a line come (1 - h)·x·C misses, each
    sparing it with probability 1 - 1/C): h = -W₀(-x·e⁻ˣ)/x, 0.20 at x = 2, 0.02 at x = 4. The
    collector replays each call with nothing evicting the L2 in between (``attention_times``).
    The 1/(1 + x⁶) cliff it replaces gave rows that fit a share they never had (x = 0.8: 0.79) and
    rows just beyond none (x = 1.5: 0.08 against 0.42): L40S context rows just past 96 MiB ran up
    to 20 % faster than it priced them."""
    x = np.asarray(x, float)
    y = np.maximum(x, _EDGE)
    return np.where(x > _EDGE, -_w0(-y * np.exp(-y)) / y, 1.0)


def _w0(z):
    """Lambert W₀ on [-1/e, 0) (scipy's lambertw is complex and ~250× slower): Halley's method from
    the branch-point series (z < -0.25) or the Taylor series at 0; 4 steps reach 1e-15."""
    p = np.sqrt(np.maximum(2.0 * (math.e * z + 1.0), 0.0))
    w = np.where(z < -0.25, -1.0 + p * (1.0 - p * (1.0 / 3.0 - 11.0 / 72.0 * p)), z * (1.0 - z * (1.0 - 1.5 * z)))
    live = p > 1e-4  # nearer the branch point the series is exact to rounding (and Halley's step 0/0)
    for _ in range(4):
        ew = np.exp(w)
        f = w * ew - z
        d = ew * (w + 1.0) - (w + 2.0) * f / np.where(live, 2.0 * w + 2.0, 1.0)
        w = np.where(live, w - f / np.where(live, d, 1.0), w)
    return w


def l2_resident_share_one(x: float) -> float:
    """``l2_resident_share`` of one float (the cost model's hot path), the same steps in floats."""
    if x <= _EDGE:
        return 1.0
    z = -x * math.exp(-x)
    p = math.sqrt(max(2.0 * (math.e * z + 1.0), 0.0))
    w = -1.0 + p * (1.0 - p * (1.0 / 3.0 - 11.0 / 72.0 * p)) if z < -0.25 else z * (1.0 - z * (1.0 - 1.5 * z))
    if p > 1e-4:
        for _ in range(4):
            ew = math.exp(w)
            f = w * ew - z
            w = w - f / (ew * (w + 1.0) - (w + 2.0) * f / (2.0 * w + 2.0))
    return -w / x


def overlap_dram(comp, dram, exposed):
    """Prefill compute and the time of its bytes from DRAM: a share ``exposed`` of the DRAM time
    adds, the rest runs under the compute: exposed·D + (comp⁴ + ((1 - exposed)·D)⁴)^¼, a soft
    max(comp, (1 - exposed)·D) (exposed = 1: the two add). Beyond the L2
    the time per query row·head of short chunks stays flat while their FLOPs grow (L40S, d = 128,
    one KV head per head, 8× the L2: 4.0 ns from 32 to 512 rows, while the additive form rose
    3.6 → 4.2), then grows with the FLOPs at a slope that leaves part of the DRAM time on top
    (2.5 of the 4.0 ns at 8-16k rows): a flash kernel loads its next K/V blocks under the current
    block's MMAs, not its first loads or its epilogue's stores. ``row_prefill`` adds a cost per
    query row·head to D (L40S beyond the L2: d = 64 rows ran 5-10 % slower than their bytes gave
    them, d = 128 ones as much faster)."""
    hidden = (1.0 - exposed) * dram
    return exposed * dram + (comp**OVERLAP_P + hidden**OVERLAP_P) ** (1.0 / OVERLAP_P)
