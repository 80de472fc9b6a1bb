"""All-reduce as latency + bandwidth lines per GPU count, fitted like ``operator_models``' classes
(log residuals, soft_l1, parameters as ln(p/p0), 1σ from the Jacobian) and priced by
``costmodel/roofline.py`` from a profile's ``allreduce_regimes``.

Per GPU count n, the fastest of four (five) lines that the engine may run at this size:
  t = min_{i allowed} (ℓ_i + B/bw_i),  B = 2(n-1)/n · size
lines 1-2: the one-shot kernel, allowed only for messages of at most ONESHOT_MAX_TOKENS
tokens; lines 3-4 at every size: two-shot and NCCL (its protocols, LL / LL128 / Simple,
each a line, the tuner taking the fastest: a minimum of lines). On GPU counts with NCCL
reference rows (the NCCL table below the engine's switch, NVLink, 4 and 8 GPUs:
``importers/aiconfigurator.py``, ``_engine_rows``) the NCCL lines are fitted on them too,
priced by lines 3-5 alone; there a fifth line (NCCL over 256 to 512M elements), the
one-shot sizes priced by lines 1-2 alone (``oneshot_alone``: AUTO runs one-shot there
whatever NCCL would take), and a one-shot line that is the fastest at fewer than three
sizes turned off and the fit redone (``lone_lines``). AIConfigurator's
custom tables time TensorRT-LLM's AUTO dispatch (``importers/aiconfigurator.py``,
``_engine_rows``): one-shot up to 128 tokens (``thop/allreduceOp.cpp``,
``selectImplementation``; the fusion kernels' ``use_oneshot``: token_num <=
kOneShotMaxToken), beyond it two-shot on 2 GPUs up to the 16 MB workspace and NCCL
past it, NCCL on 4 and 8; the collector lays each message out as [size / 4096, 4096]
(``collect_all_reduce.py``, ``get_input_shape_and_comm_size``): the step up at 1M
elements (H100, 2 GPUs: 6.8 µs at 512K, 20.1 µs at 1M) is that switch, which no
concave curve can follow. Physical traffic per GPU: one-shot pushes the message to
the n - 1 peers' buffers and reduces the n copies locally, (n - 1)·size (H100, 8 GPUs,
128 tokens: 7.3 MB in 26.5 µs past the latency, 277 GB/s of 450); two-shot
(reduce-scatter, then all-gather through the peers' buffers) and NCCL's ring move B.
B is every line's bytes, so a one-shot line's physical rate is bw·n/2; the cap
(``_bus_factor``: size/t at most the link's) holds for all three. On 2 GPUs (no
reference rows) lines 3-4 never undercut the one-shot lines at 128 tokens or fewer in
the fitted profiles (H100, A100, B200). On 2 GPUs lines 3-4 carry two-shot
(1M-4M elements) and NCCL (8M up) both: three two-shot sizes are too few for a line
of their own once a quarter of the sizes is held out. Without NVLink (L40S) the engine
runs NCCL at every size (``ifFallbackToNCCL``; the importer labels those rows
``allreduce_runs.NCCL_PCIE``), and such a count is priced by runs of lines instead of their
minimum (``allreduce_runs``: NCCL's tuner there picks protocols whose measured curve is not
concave); the token cap there stands for NCCL's own switch, at the same size in both its
tables (8 GPUs: 978 → 3,440 µs custom, 863 → 2,618 µs nccl-tests, from 512K to 1M elements),
which the product places at 128 tokens (1 MB only at hidden 4096). Rows without a token count
(a timing of NCCL alone) leave every line allowed. The start is global: each family's sizes are cut
into as many runs as it has lines by the cuts whose lines (fitted in relative error, in
closed form) fit best.

Three refinements of those minima (their held-out figures: docs/kernel-notes.md). One-shot
rows of more tokens than SMs (``wave_rows``: the fusion kernel's grid is capped at the SM count,
so A100's 128 tokens run a second round) get a fitted time of their own per count (WAVE) instead
of bending the one-shot lines. A count's two one-shot lines
may combine as their maximum, a latency floor and then a rate (HINGE, ``hinged``: at 8 GPUs the
one-shot sizes sit flat up to 32K elements, then rise: a convex curve), where that fits its
training rows better than their minimum. And the later lines (NCCL's; two-shot's and NCCL's on 2
GPUs) combine as a soft minimum (``costmodel/allreduce.py``, ``soft_min``): NCCL's measured
curve turns gradually where its tuner switches, and two hard lines fitted either side of a size
they never saw cross above it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from ..allreduce import soft_min, switched_times
from .allreduce_runs import NCCL_PCIE, latency_bound, side_runs
from .fit import F_SCALE, LOSS, ClassFit, ape_stats
from .identify import identify
from .operator_models import _Residuals, base_name

ALLREDUCE_REGIME = (
    "latency_small",
    "bandwidth_small",
    "latency_mid",
    "bandwidth_mid",
    "latency_mid2",
    "bandwidth_mid2",
    "latency_large",
    "bandwidth_large",
    "latency_large2",
    "bandwidth_large2",
)
R = len(ALLREDUCE_REGIME)
CAPPED_LINES = 2  # the first lines of ALLREDUCE_REGIME: one-shot, at most ONESHOT_MAX_TOKENS tokens
ONESHOT_MAX_TOKENS = 128  # TensorRT-LLM kOneShotMaxToken (allReduceFusionKernels.h)
NCCL_REFERENCE = "nccl_reference"  # NCCL-table rows where the engine runs one-shot: NCCL lines only
WAVE = "latency_wave"  # a count's extra one-shot time past the SM count (``wave_rows``)
HINGE = ("latency_floor", "bandwidth_floor")  # a count's first one-shot line where the two combine as a maximum


def units_of(p: str) -> str:
    return "s" if base_name(p).startswith("latency") else "B/s"


def allreduce_params(df: pd.DataFrame, runs: dict | None = None, waves=(), hinges=()) -> tuple[str, ...]:
    """Per GPU count, ALLREDUCE_REGIME's four lines, and a fifth where the count has NCCL reference
    rows: NCCL's lines then span its whole range (8 GPUs: 256 to 512M elements), where each of its
    protocols (LL, LL128, Simple) is the fastest somewhere; a switched count (``runs``: NCCL over
    PCIe, ``allreduce_runs``) one line per run, ``latency_run<i>``, ``bandwidth_run<i>``; a count in
    ``waves`` (it has ``wave_rows``) then its WAVE parameter, last; a count in ``hinges`` names its
    first line HINGE (``hinged``)."""
    ref = df["op"].to_numpy(str) == NCCL_REFERENCE if "op" in df else np.zeros(len(df), bool)
    w = df["workers"].to_numpy(float)
    runs = runs or {}
    return tuple(
        f"{p}@{int(n)}"
        for n in sorted(np.unique(w))
        for p in (
            [f"{q}_run{i}" for i in range(len(runs[int(n)][0])) for q in ("latency", "bandwidth")]
            if int(n) in runs
            else (list(HINGE) if int(n) in hinges else list(ALLREDUCE_REGIME[:CAPPED_LINES]))
            + list(
                ALLREDUCE_REGIME[CAPPED_LINES:] if (ref & (w == n)).any() else ALLREDUCE_REGIME[CAPPED_LINES : R - 2]
            )
            + ([WAVE] if int(n) in waves else [])
        )
    )


def hinged(params, sl: slice) -> bool:
    """Whether a count's one-shot lines combine as their maximum (HINGE), not their minimum."""
    return base_name(params[sl.start]) == HINGE[0]


def wave_rows(df: pd.DataFrame, cap_tokens: int, sms: int) -> np.ndarray:
    """One-shot rows (``oneshot_allowed``) of more tokens than the GPU has SMs. TensorRT-LLM's fusion
    kernels launch a cluster of blocks per token, shrinking the cluster to one block while the
    grid would exceed the SM count, and cap the grid at that count (``allReduceFusionKernels.cu``,
    ``allreduce_fusion_kernel_launcher``: grid = min(SMs, tokens·cluster)); past it the blocks
    loop over a second round of tokens. At 128 tokens (the one-shot cap) only the A100's 108 SMs
    are too few: 8 GPUs 83.2 µs at 128 tokens against 28.3 at 64 (2 and 4 GPUs: 11.6 against
    7.8, 23.1 against 13.9, about the lines' own rise), a step that no line of the smaller sizes
    follows and that, priced by the one-shot lines, bent them (held out at 8 GPUs 8.1 %, 3.8 %
    with those rows out of the fit)."""
    tok = df["tokens"].to_numpy(float) if "tokens" in df else np.zeros(len(df))
    return oneshot_allowed(df, cap_tokens) & (tok > sms) & (sms > 0) & (cap_tokens > 0)


def line_values(params, values: np.ndarray, sl: slice) -> tuple[np.ndarray, float]:
    """A count's line parameters (pairs) and its WAVE time (0 without one)."""
    v = values[sl]
    if base_name(params[sl.stop - 1]) == WAVE:
        return v[:-1], float(v[-1])
    return v, 0.0


def switched_runs(df: pd.DataFrame, cap_tokens: int) -> dict:
    """Per GPU count whose rows are all ``NCCL_PCIE``: (lines [(ℓ, bw)], gaps [a, b, ...]) of its
    runs (``allreduce_runs.side_runs``) on each side of the token switch, a (0, 0) gap between
    the sides."""
    if "op" not in df:
        return {}
    out = {}
    op, w = df["op"].to_numpy(str), df["workers"].to_numpy(float)
    B, t = df["bytes"].to_numpy(float), df["time_s"].to_numpy(float)
    tok = df["tokens"].to_numpy(float) if "tokens" in df else np.zeros(len(df))
    for n in np.unique(w):
        sel = w == n
        if not (op[sel] == NCCL_PCIE).all():
            continue
        low = (tok <= cap_tokens) | (tok <= 0) | (cap_tokens <= 0)
        lines, gaps = [], []  # type: ignore[var-annotated]
        for side in (sel & low, sel & ~low):
            if len(np.unique(B[side])) == 0:
                continue
            ln, gp = side_runs(B[side], t[side], int(n))
            tmin = float(t[side].min())
            ln = [
                (max(lat, 0.01 * tmin), bw if np.isfinite(bw) else float(B[side].max()) / (0.01 * tmin))
                for lat, bw in ln
            ]
            gaps += ([0.0, 0.0] if lines else []) + [g for pair in gp for g in pair]
            lines += ln
        out[int(n)] = (lines, gaps)
    return out


def count_slices(params) -> list[tuple[int, slice]]:
    """(GPU count, its slice of ``params``), in order."""
    counts = [int(p.split("@")[1]) for p in params]
    return [(n, slice(counts.index(n), len(counts) - counts[::-1].index(n))) for n in dict.fromkeys(counts)]


def oneshot_allowed(df: pd.DataFrame, cap_tokens: int) -> np.ndarray:
    """Rows whose message the one-shot lines may carry: at most ``cap_tokens`` tokens (0: no cap;
    rows with no token count: allowed), and never an NCCL reference row (``NCCL_REFERENCE``: a
    timing of NCCL at a size where the engine runs its own kernel)."""
    tok = df["tokens"].to_numpy(float) if "tokens" in df else np.zeros(len(df))
    ref = df["op"].to_numpy(str) == NCCL_REFERENCE if "op" in df else np.zeros(len(df), bool)
    return ((tok <= cap_tokens) | (tok <= 0) | (cap_tokens <= 0)) & ~ref


def regime_times(
    lat: np.ndarray,
    bw: np.ndarray,
    B: np.ndarray,
    capped_ok: np.ndarray,
    alone: bool = False,
    wave=0.0,
    hinge: bool = False,
    soft: bool = False,
) -> np.ndarray:
    """min over the allowed lines of ℓ_i + B/bw_i (the first CAPPED_LINES only where capped_ok;
    ``alone``: there, those lines only); ``wave`` (per row) added to the first CAPPED_LINES;
    ``hinge``: those taken as their maximum; ``soft``: the later lines' soft minimum (``soft_min``)."""
    t = lat[None, :] + B[:, None] / bw[None, :]
    if len(lat) > CAPPED_LINES:
        t[:, :CAPPED_LINES] += np.asarray(wave, float).reshape(-1, 1) if np.ndim(wave) else wave
        if hinge:
            t[:, :CAPPED_LINES] = t[:, :CAPPED_LINES].max(axis=1, keepdims=True)
        t[:, :CAPPED_LINES] = np.where(capped_ok[:, None], t[:, :CAPPED_LINES], np.inf)
        if alone:
            t[:, CAPPED_LINES:] = np.where(capped_ok[:, None], np.inf, t[:, CAPPED_LINES:])
        if soft:
            return np.minimum(t[:, :CAPPED_LINES].min(axis=1), soft_min(t[:, CAPPED_LINES:], axis=1))
    return t.min(axis=1)


def oneshot_alone(params, sl: slice) -> bool:
    """Whether a GPU count's one-shot lines price its one-shot sizes alone: the counts with a fifth
    line, i.e. with NCCL reference rows (NVLink, more than 2 GPUs), where TensorRT-LLM's AUTO runs
    one-shot up to 128 tokens whatever NCCL would take (A100, 8 GPUs, 128 tokens: 83.2 µs
    one-shot, 38.8 µs NCCL); elsewhere the lines' minimum."""
    return any(base_name(p) == "latency_large2" for p in params[sl])


def allreduce_times(
    v: np.ndarray, df: pd.DataFrame, params, cap_tokens: int = 0, switches: dict | None = None, sms: int = 0, soft=()
) -> np.ndarray:
    """Per row, its count's price: the minimum of its allowed lines (its WAVE time added to the
    one-shot lines on ``wave_rows``), or for a count in ``switches`` (n -> gaps) its runs
    (``costmodel/allreduce.py``, ``switched_times``)."""
    B, w = df["bytes"].to_numpy(float), df["workers"].to_numpy(float)
    ok = oneshot_allowed(df, cap_tokens)
    waved = wave_rows(df, cap_tokens, sms)
    out = np.full(len(df), np.nan)
    for n, sl in count_slices(params):
        sel = w == n
        if switches and n in switches:
            tok = df["tokens"].to_numpy(float)[sel] if "tokens" in df else np.zeros(int(sel.sum()))
            out[sel] = switched_times(v[sl], switches[n], B[sel], tok, cap_tokens)
        else:
            lines, wave = line_values(params, v, sl)
            out[sel] = regime_times(
                lines[::2],
                lines[1::2],
                B[sel],
                ok[sel],
                oneshot_alone(params, sl),
                wave * waved[sel],
                hinged(params, sl),
                n in soft,
            )
    return out


LINE_OFF = 1e3  # an all-reduce line turned off: its latency this many times the slowest row's time


def lone_lines(params, values: np.ndarray, df: pd.DataFrame, cap_tokens: int) -> list[int]:
    """Indices (of the latency) of the one-shot lines, on GPU counts with NCCL reference rows (NVLink,
    more than 2 GPUs: the capped lines are the one-shot kernel alone), that are the fastest line at
    fewer than three of the count's message sizes: a line through two sizes has no residual, so
    a second one-shot regime seen there cannot be told from their noise (H100, 8 GPUs, 256
    elements in 3.4 µs between 5.1 and 5.0 µs drew a 1.7 µs, 0.5 GB/s line that priced a held-out
    128 elements at 2.5 µs)."""
    B, w, m = df["bytes"].to_numpy(float), df["workers"].to_numpy(float), df["m"].to_numpy(float)
    ok = oneshot_allowed(df, cap_tokens)
    out = []
    for n, sl in count_slices(params):
        if not oneshot_alone(params, sl) or hinged(params, sl):
            continue
        sel = w == n
        lines = line_values(params, values, sl)[0]
        lat, bw = lines[::2], lines[1::2]
        t = lat[None, :] + B[sel][:, None] / bw[None, :]
        t[:, :CAPPED_LINES] = np.where(ok[sel][:, None], t[:, :CAPPED_LINES], np.inf)
        t[:, CAPPED_LINES:] = np.where(ok[sel][:, None], np.inf, t[:, CAPPED_LINES:])
        win = np.argmin(t, axis=1)
        for i in range(CAPPED_LINES):
            if len(np.unique(m[sel][win == i])) < 3:
                out.append(sl.start + 2 * i)
    return out


def _rel_line(B: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, float]:
    """(ℓ, 1/bw) of the line minimising Σ((ℓ + B/bw)/t - 1)², and that sum."""
    a = np.stack([1.0 / t, B / t], axis=1)
    x = np.linalg.lstsq(a, np.ones_like(t), rcond=None)[0]
    return x, float(((a @ x - 1.0) ** 2).sum())


def _lines(B: np.ndarray, t: np.ndarray, k: int = 2) -> list:
    """k (ℓ, bw) lines through the sorted sizes cut into k runs (each ≥ 2 sizes) at the cuts that
    fit best; too few sizes for k runs: as many runs as they allow, the last line repeated."""
    o = np.argsort(B)
    B, t = B[o], t[o]
    if len(B) < 2:
        return [(0.5 * float(t[0]) if len(t) else 1e-6, 1e12)] * k
    k_fit = max(1, min(k, len(B) // 2))
    best = {}  # type: ignore[var-annotated]  # (start, runs) -> (sum, fits)

    def runs(i: int, j: int) -> tuple:
        if (i, j) in best:
            return best[(i, j)]
        if j == 1:
            x, e = _rel_line(B[i:], t[i:])
            best[(i, j)] = (e, [x])
        else:
            best[(i, j)] = min(
                (
                    (e0 + r[0], [x0] + r[1])
                    for c in range(i + 2, len(B) - 2 * (j - 1) + 1)
                    for (x0, e0), r in [(_rel_line(B[i:c], t[i:c]), runs(c, j - 1))]
                ),
                key=lambda x: x[0],
            )
        return best[(i, j)]

    fits = runs(0, k_fit)[1]
    fits = fits + [fits[-1]] * (k - len(fits))
    tmin = float(t.min())
    return [(max(float(x[0]), 0.05 * tmin), 1.0 / max(float(x[1]), 1e-16)) for x in fits]


def _start(params, df: pd.DataFrame, t: np.ndarray, cap_tokens: int = 0, sms: int = 0) -> np.ndarray:
    out = []
    B, w = df["bytes"].to_numpy(float), df["workers"].to_numpy(float)
    ok, waved = oneshot_allowed(df, cap_tokens), wave_rows(df, cap_tokens, sms)
    for n, sl in count_slices(params):
        sel = w == n
        small = (ok & ~waved)[sel] if cap_tokens else B[sel] <= np.median(B[sel])
        wave = base_name(params[sl.stop - 1]) == WAVE
        for part, k in ((small, CAPPED_LINES), (~small & ~waved[sel], (sl.stop - sl.start - wave) // 2 - CAPPED_LINES)):
            lines = _lines(B[sel][part], t[sel][part], k)
            if k == CAPPED_LINES and hinged(params, sl) and part.sum() >= 4:
                Bs, ts = B[sel][part], t[sel][part]
                low = Bs <= np.median(Bs)
                lines = [
                    (float(np.median(ts[low])), 1e3 * float(Bs.max() / ts.min())),
                    _lines(Bs[~low], ts[~low], 1)[0],
                ]
            for lat, bw in lines:
                out += [lat, bw]
        if wave:
            out.append(0.5 * float(np.median(t[sel][waved[sel]])))
    return np.array(out)


@dataclass(frozen=True)
class AllreduceFit(ClassFit):
    """A ClassFit whose times are ``allreduce_times``."""

    units: dict = None  # type: ignore[assignment]
    oneshot_tokens: int = 0  # the one-shot lines' token cap (0: none)
    switches: dict = None  # type: ignore[assignment]  # switched counts: n -> their runs' gaps (``switched_runs``)
    sms: int = 0  # the GPU's SM count (``wave_rows``; 0: none)
    soft: tuple = ()  # counts whose NCCL lines combine as their soft minimum (``_soft_counts``)

    def predict(self, df: pd.DataFrame) -> np.ndarray:
        return allreduce_times(self.values, df, self.params, self.oneshot_tokens, self.switches, self.sms, self.soft)


def fit_allreduce(df: pd.DataFrame, form: str, upper: dict, sms: int = 0) -> AllreduceFit:
    """Fit the regimes; ``upper`` caps parameters (SI) by their base name (the physical bounds,
    each bandwidth's times ``_bus_factor``); a capped parameter whose fit lands on its cap is
    reported as clamped. ``sms``: the GPU's SM count, for the counts with ``wave_rows``."""
    t = df["time_s"].to_numpy(float)
    cap_tok = ONESHOT_MAX_TOKENS if (df["tokens"].to_numpy(float) > 0).any() else 0
    runs = switched_runs(df, cap_tok)
    switches = {n: gaps for n, (_, gaps) in runs.items()} or None
    waves = {int(n) for n in np.unique(df["workers"].to_numpy(float)[wave_rows(df, cap_tok, sms)])} - set(runs)
    counts = {int(n) for n in np.unique(df["workers"].to_numpy(float))} - set(runs)
    soft = tuple(sorted(counts))
    fits = [
        _fit_form(df, form, upper, sms, cap_tok, runs, switches, allreduce_params(df, runs, waves, h), soft)
        for h in ((), counts if cap_tok else ())
    ]
    best = fits[0]
    if len(fits) > 1:
        ape = [np.abs(f.predict(df) / t - 1) for f in fits]
        w, own = (
            df["workers"].to_numpy(float),
            oneshot_allowed(df, cap_tok) | (df["op"].to_numpy(str) != NCCL_REFERENCE),
        )
        pick = {n for n in counts if ape[1][(w == n) & own].mean() < ape[0][(w == n) & own].mean()}
        best = (
            fits[0]
            if not pick
            else fits[1]
            if pick == counts
            else _fit_form(df, form, upper, sms, cap_tok, runs, switches, allreduce_params(df, runs, waves, pick), soft)
        )
    return best


def _fit_form(
    df: pd.DataFrame, form: str, upper: dict, sms: int, cap_tok: int, runs: dict, switches, params, soft=()
) -> AllreduceFit:
    t = df["time_s"].to_numpy(float)
    p0 = np.concatenate(
        [
            np.array([x for line in runs[n][0] for x in line])
            if n in runs
            else _start(params[sl], df[df["workers"] == n], t[(df["workers"] == n).to_numpy()], cap_tok, sms)
            for n, sl in count_slices(params)
        ]
    )
    cap = np.array(
        [
            upper.get("bandwidth" if base_name(p).startswith("bandwidth_run") else base_name(p), np.inf)
            * _bus_factor(p)
            for p in params
        ]
    )
    cap = np.array(
        [
            min(c, latency_bound(int(p.split("@")[1]))) if base_name(p).startswith("latency_run") else c
            for c, p in zip(cap, params)
        ]
    )
    p0 = np.where(p0 >= cap, 0.5 * cap, p0)
    hi = np.log(cap / p0)
    lo = np.full(len(params), -np.log(1e6))
    x0 = np.zeros(len(params))
    times = lambda x, d: allreduce_times(p0 * np.exp(x), d, params, cap_tok, switches, sms, soft)  # noqa: E731
    fn = _Residuals(times, df, t, params, "allreduce", lo, hi)
    res = least_squares(
        fn, np.clip(x0, lo, hi), jac=fn.jac, bounds=(lo, hi), loss=LOSS, f_scale=F_SCALE, method="trf", x_scale=1.0
    )
    values = p0 * np.exp(res.x)
    lone = lone_lines(params, values, df, cap_tok)
    if lone:  # refit with them off: a latency no message reaches, both fixed
        x = res.x.copy()
        for j in lone:
            x[j] = np.log(LINE_OFF * float(t.max()) / p0[j])
        lo, hi = lo.copy(), hi.copy()
        for j in lone + [j + 1 for j in lone]:
            lo[j], hi[j] = x[j], x[j] + 1e-12
        fn = _Residuals(times, df, t, params, "allreduce", lo, hi)
        res = least_squares(fn, x, jac=fn.jac, bounds=(lo, hi), loss=LOSS, f_scale=F_SCALE, method="trf", x_scale=1.0)
        values = p0 * np.exp(res.x)
    units = {p: units_of(p) for p in params}
    active, cov, s2, warns = identify(
        "allreduce",
        params,
        values,
        lambda v: allreduce_times(v, df, params, cap_tok, switches, sms, soft),
        res,
        len(t),
        cap,
        units,
    )
    errors = ape_stats(allreduce_times(values, df, params, cap_tok, switches, sms, soft), t)
    return AllreduceFit(
        "allreduce",
        form,
        params,
        values,
        cov,
        float(np.sqrt(s2)),
        active,
        errors,
        tuple(warns),
        units=units,
        oneshot_tokens=cap_tok,
        switches=switches,
        sms=sms,
        soft=tuple(soft),
    )


def _bus_factor(p: str) -> float:
    """An all-reduce line's bandwidth is over the ring's bus bytes B = 2(n-1)/n·size, but the
    physical bound is on the algorithm bandwidth, size/t ≤ the link's: NVLink SHARP reduces in
    the switch, so each GPU moves the message once each way (AIConfigurator's H100 table, 8 GPUs:
    478 GB/s of bus bandwidth from 128M to 256M elements, on 450 GB/s links). The cap on bw is the
    link's times 2(n-1)/n."""
    if "@" not in p or not base_name(p).startswith("bandwidth_"):
        return 1.0
    n = int(p.split("@")[1])
    return 2 * (n - 1) / n
