"""One all-reduce call's time from a profile's regimes (``allreduce_regimes[tp]``: latency,
bandwidth per line, flattened), as ``calibration/allreduce_model.py`` fits them: the fastest line
the engine may run at this size, the first two (one-shot) only up to ``oneshot_tokens`` rows
(and alone there where ``alone``). A tp with ``allreduce_switches`` (NCCL over PCIe:
``calibration/allreduce_runs.py``) takes its lines as runs instead: each line from where the
previous run's sizes end, blended across the gap between them, or their minimum where the two
cross inside it (``run_times``), a (0, 0) gap
marking the token switch (lines before it up to ``oneshot_tokens`` rows, those after it beyond).
A tp in ``allreduce_soft`` takes the lines after the first two (NCCL's, and two-shot's on 2 GPUs)
as their soft minimum (``soft_min``). A tp in ``allreduce_oneshot_max`` takes the larger of its
two one-shot lines (a latency floor, then a rate: ``allreduce_model.HINGE``), not the smaller. A
tp with an ``allreduce_wave_s`` time adds it to the one-shot lines past ``sms`` rows (the fusion
kernel's grid capped at the SM count: ``calibration/allreduce_model.py``, ``wave_rows``).
``CostModel.allreduce_s`` prices a step with the scalar form, the step fit
(``calibration/step_pricing.py``) with the array form: the same float operations; the logits
all-gather (NCCL, ``gather_rows``) the same way."""

from __future__ import annotations

import numpy as np

SOFT_P = 8.0  # the NCCL lines' soft minimum: (Σ t_i^-p)^(-1/p), 2^(-1/p) = 0.917 of the lines' time where two cross


def soft_min(t: np.ndarray, axis: int = 0) -> np.ndarray:
    """The NCCL lines' soft minimum along ``axis`` (``SOFT_P``; inf where every line is)."""
    t = np.asarray(t, float)
    m = t.min(axis=axis, keepdims=True)
    safe = np.where(np.isfinite(m), m, 1.0)
    with np.errstate(divide="ignore", over="ignore"):
        out = safe * np.sum((t / safe) ** -SOFT_P, axis=axis, keepdims=True) ** (-1.0 / SOFT_P)
    return np.squeeze(np.where(np.isfinite(m), out, np.inf), axis=axis)


def run_times(lat: np.ndarray, bw: np.ndarray, gaps, B: np.ndarray) -> np.ndarray:
    """Lines in size order, ``gaps`` = [a_1, b_1, a_2, b_2, ...] (bus bytes: the last size of run i
    and the first of run i + 1): line i + 1 from b_i on; between a_i and b_i the time blends from
    line i to line i + 1, linearly in log B and log time, except where the two cross inside the gap
    (``crossing``): there their minimum, the switch at the crossing that NCCL's tuner makes where
    its model of the protocols holds, and the one that keeps each run's line the faster at its
    own end. Elsewhere the switch lies wherever the tuner's own model puts it, unknown here."""
    t = lat[None, :] + B[:, None] / bw[None, :]
    a, b = np.asarray(gaps[0::2], float), np.asarray(gaps[1::2], float)
    past = (B[:, None] >= b[None, :]).sum(axis=1)
    out = t[np.arange(len(B)), past]
    if len(a):
        g = np.minimum(past, len(a) - 1)
        inside = (B > a[g]) & (B < b[g])
        gi, ti = g[inside], t[inside]
        w = np.log(B[inside] / a[gi]) / np.log(b[gi] / a[gi])
        t0, t1 = ti[np.arange(len(gi)), gi], ti[np.arange(len(gi)), gi + 1]
        out[inside] = np.where(
            crossing(lat, bw, a, b)[gi], np.minimum(t0, t1), np.exp((1.0 - w) * np.log(t0) + w * np.log(t1))
        )
    return out


def crossing(lat: np.ndarray, bw: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per gap, whether line i + 1 is the slower at a and line i the slower at b: they cross inside
    the gap, so their minimum keeps each run's own line at its end."""
    i = np.arange(len(a))
    t = lambda B, j: lat[j] + B / bw[j]  # noqa: E731
    return (t(a, i) <= t(a, i + 1)) & (t(b, i) >= t(b, i + 1))


def _sides(r, sw):
    """(below lines, their gaps), (above lines, their gaps) of a switched tp; above is None where
    the gaps have no token switch (a (0, 0) pair)."""
    lat, bw, gaps = np.asarray(r[0::2], float), np.asarray(r[1::2], float), list(sw)
    pairs = [(gaps[2 * i], gaps[2 * i + 1]) for i in range(len(gaps) // 2)]
    cut = next((i for i, p in enumerate(pairs) if p == (0.0, 0.0) or p == (0, 0)), None)
    if cut is None:
        return (lat, bw, gaps), None
    return (lat[: cut + 1], bw[: cut + 1], gaps[: 2 * cut]), (lat[cut + 1 :], bw[cut + 1 :], gaps[2 * cut + 2 :])


def switched_times(r, sw, size: np.ndarray, rows: np.ndarray, oneshot_tokens: int) -> np.ndarray:
    """A switched tp's call times (``run_times`` on each side of the token switch)."""
    below, above = _sides(r, sw)
    if above is None or not oneshot_tokens:
        return run_times(*below, size)  # type: ignore[call-arg]
    out = np.empty(len(size))
    low = (rows <= oneshot_tokens) | (rows <= 0)
    out[low], out[~low] = run_times(*below, size[low]), run_times(*above, size[~low])  # type: ignore[call-arg]
    return out


def call_time(
    r,
    size: float,
    rows: int,
    oneshot_tokens: int,
    alone: bool,
    switches=None,
    wave: float = 0.0,
    sms: int = 0,
    hinge: bool = False,
    soft: bool = False,
) -> float:
    """Seconds of one call of ``size`` bytes carrying ``rows`` tokens."""
    if switches is not None:
        return float(switched_times(r, switches, np.array([float(size)]), np.array([rows]), oneshot_tokens)[0])
    capped = bool(oneshot_tokens) and len(r) > 4
    first = 4 if (capped and rows > oneshot_tokens) else 0
    last = 4 if (capped and rows <= oneshot_tokens and alone) else len(r)
    extra = wave if (capped and sms > 0 and sms < rows <= oneshot_tokens) else 0.0
    t = [r[i] + size / r[i + 1] + (extra if i < 4 else 0.0) for i in range(first, last, 2)]
    if capped and hinge and first == 0:
        t[:2] = [max(t[0], t[1])]
    if soft and len(r) > 4 and last > 4:
        k = 0 if first else (1 if capped and hinge else 2)
        return min(t[:k] + [float(soft_min(np.array(t[k:])))])
    return min(t)


def call_times(
    r,
    size: np.ndarray,
    rows: np.ndarray,
    oneshot_tokens: int,
    alone: bool,
    switches=None,
    wave: float = 0.0,
    sms: int = 0,
    hinge: bool = False,
    soft: bool = False,
) -> np.ndarray:
    """``call_time`` elementwise."""
    if switches is not None:
        return switched_times(r, switches, np.asarray(size, float), np.asarray(rows), oneshot_tokens)
    cands = np.stack([r[i] + size / r[i + 1] for i in range(0, len(r), 2)])
    if wave and sms > 0 and oneshot_tokens and len(r) > 4:
        cands[:2] += np.where((rows > sms) & (rows <= oneshot_tokens), wave, 0.0)
    if hinge and oneshot_tokens and len(r) > 4:
        cands[:2] = np.maximum(cands[0], cands[1])
    if len(r) <= 4:  # one or two lines: no later ones
        return cands.min(0)
    rest = soft_min(cands[2:]) if soft else cands[2:].min(0)
    low = np.minimum(cands[:2].min(0), rest)
    if oneshot_tokens and len(r) > 4:
        low = np.where(rows > oneshot_tokens, rest, cands[:2].min(0) if alone else low)
    return low


def gather_rows(size, bytes_per_row: float, oneshot_tokens: int, switches=None):
    """The rows an NCCL all-gather of ``size`` bus bytes is priced at by ``call_time`` (vLLM's
    logits gather, PyNCCL: never the engine's own kernel): past the one-shot cap on a tp whose
    lines are a minimum (its NCCL lines); on a switched tp (NCCL at every size, where the token
    switch stands for NCCL's own switch by size) the rows of an all-reduce of the same bus bytes,
    ``bytes_per_row`` each, so that each line prices only its own run's sizes."""
    if switches is not None:
        return size / bytes_per_row
    return oneshot_tokens + 1
