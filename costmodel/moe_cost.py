"""The fused-MoE layer's time, as fitted to AIConfigurator's measured fused-MoE table and as the
roofline prices a MoE model's routed experts (per MoE layer, SGLang's ``fused_moe`` Triton path:
routing, the gate/up grouped GEMM, SiLU-and-mul, the down grouped GEMM, the weighted sum).

T tokens, each routed to k of E experts (E/ep on this GPU), experts of H×I split tp ways
(N = I/tp; P = 3·H·N weights each: gate, up, down):
  touched  u = (E/ep)·(1 - (1 - k/E)^T)     distinct local experts, uniform routing (expected)
  rows     r = T·k/ep + pad·u               token-expert rows; each touched expert's rows are padded
                                            to the grouped GEMM's row tile (moe_align_block_size),
                                            ``pad`` rows per expert on average
  F        2·r·(3·H·N + depth·(2N + H))     the MMAs, plus a fixed cost per output tile (pipeline
                                            fill, epilogue) worth ``depth`` steps of reduction on each
                                            of the r·(2N + H) outputs: what makes thin experts slow
                                            (N = 48 at tp 32 of a 128-expert model)
  t = floor + √((F / π)² + ((b·P·u + b·2H·T·k/ep) / β)²)
every touched expert's weights streamed once, each routed row's activations read and written;
``floor`` is the layer's fixed cost (its five kernels' launches). ``pi`` is the rate of the
engine's default kernel config; shapes it ships a tuned config for run at their own rate
(``calibration/moe_fit.py``: the profile's moe_tuned_pi and moe_tuned_shapes). A held-out shape
cannot tell whether the engine ships a tuned config for it. The held-out figures: docs/kernel-notes.md.
"""

from __future__ import annotations

import numpy as np

PARAMS = ("pi", "beta", "floor", "pad", "depth")
UNITS = {"pi": "FLOP/s", "beta": "B/s", "floor": "s", "pad": "rows", "depth": "elements"}
FIELDS = {"pi": "moe_pi", "beta": "moe_beta", "floor": "moe_floor_s", "pad": "moe_pad_rows", "depth": "moe_tile_depth"}


def experts_touched(tokens, k: float, experts: float, ep: float = 1.0):
    """Expected distinct experts on one GPU that T tokens touch, each routed to k of E uniformly."""
    t = np.asarray(tokens, float)
    return np.where(t > 0, experts / ep * (1.0 - (1.0 - k / experts) ** t), 0.0)


def moe_time(tokens, hidden, inter, tp, ep, k, touched, pi, beta, floor, pad, depth, b: float = 2.0):
    """Seconds for one fused-MoE layer (arrays or floats); ``touched``: local experts touched."""
    n = inter / tp
    rows = tokens * k / ep + pad * touched
    comp = 2.0 * rows * (3.0 * hidden * n + depth * (2.0 * n + hidden)) / pi
    mem = (b * 3.0 * hidden * n * touched + b * 2.0 * hidden * tokens * k / ep) / beta
    return floor + np.hypot(comp, mem)


GROUPED_PARAMS = ("pi", "beta", "floor", "pad", "tok_s", "knee")


def grouped_moe_time(rows, touched, received, hidden, inter, params: dict, w_b: float = 1.0, a_b: float = 1.0):
    """Seconds of one expert-parallel MoE layer on one rank (DeepEP + DeepGEMM's grouped GEMM, SGLang
    ``DeepEPMoE``): ``rows`` token-expert rows of its ``touched`` local experts (each padded by ``pad``
    rows), every touched expert's 3·H·I weights streamed at ``w_b`` bytes, rows in and out at ``a_b``;
    plus the permute/un-permute of the ``received`` tokens, ``tok_s`` seconds per token per 1,024 of
    hidden (a separate kernel pass over each received token, serial with the GEMMs). The work meets
    the layer's fixed cost ``floor`` in a p-norm of exponent ``knee``: 1 adds them (decode, under a
    CUDA graph); above 1 the work hides inside a fixed cost that runs beside it (the prefill table's
    1.3 ms, host work inside the timed region)."""
    p = params
    comp = 2.0 * (rows + p["pad"] * touched) * 3.0 * hidden * inter / p["pi"]
    mem = (w_b * 3.0 * hidden * inter * touched + a_b * 2.0 * hidden * rows) / p["beta"]
    work = np.hypot(comp, mem) + p["tok_s"] * received * hidden / 1024.0
    return (p["floor"] ** p["knee"] + work ** p["knee"]) ** (1.0 / p["knee"])


def hot_rank_load(tokens: float, k: int, experts: int, ep: int, skew: float = 0.0, eplb: bool = False):
    """(rows, touched experts) on the most loaded of ep ranks, which sets an EP layer's time.

    skew 0: uniform routing, every rank T·k/ep rows and E/ep·(1 - (1-k/E)^T) touched experts
    (expected). skew s > 0: expert i (of E) draws a share ∝ (i+1)^-s of the T·k rows (a Zipf law);
    experts sit on ranks in contiguous blocks of E/ep (SGLang's static placement), so the hottest
    rank holds the s-heaviest block; with ``eplb`` the experts are spread so every rank carries
    the same share (EPLB's balanced placement, no redundant experts): uniform rows again, touched
    experts as with skew."""
    local = experts / ep
    if skew <= 0 or ep == 1:
        return tokens * k / ep, float(experts_touched(tokens, k, experts, ep))
    w = np.arange(1, experts + 1, dtype=float) ** -skew
    w /= w.sum()
    share = w.reshape(ep, -1).sum(axis=1).max() if not eplb else 1.0 / ep
    hot = w[: int(local)] if not eplb else w.reshape(-1, ep).T[0]  # the hot rank's experts
    touched = float((1.0 - (1.0 - np.minimum(1.0, k * hot)) ** tokens).sum())
    return tokens * k * share, touched
