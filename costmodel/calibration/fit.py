"""Fit the roofline's constants to measured kernel times, with 1σ from the Jacobian.

Each operator class c has its own small model, the same one ``costmodel/roofline.py`` prices with.
Three forms of the compute/memory roofline (the default is "smooth"):
  max       t = max(F/π_c, B/β_c, floor_c)                       (the seed's roofline, floor inside)
  offset    t = max(F/π_c, B/β_c) + floor_c                      (floor = additive per-kernel overhead)
  smooth    t = sqrt((F'/π_c)² + (B/β_c)²) + floor_c, F' = F·⌈m/128⌉·128/m for GEMMs
memory-bound classes have no F, so offset and smooth are both B/β_c + floor_c;
  allreduce             t = B/bw + 2(n-1)·ℓ    (B = 2(n-1)/n·size, ℓ per ring step)
  norm (row kernels)    t = floor·(1 + w) + B_w/β_L2   if B ≤ L2,   B_w/β_HBM otherwise
                        w = ⌈rows/R⌉ waves of R = SMs × blocks-per-SM rows, B_w = B·w·R/rows
"norm" is RMSNorm, one thread block per row (vLLM's kernel: grid = tokens, block = min(h, 1024)
threads), so its blocks run in waves of R rows (H100: 132 SMs × 2 blocks of 1024 threads = 264;
Vidur's H100 norm times step at 264, 528, 792, 1056 tokens for every hidden size). A wave costs a
fixed latency (block dispatch, the two dependent passes around the block reduction, drain) plus its
bytes. Llama's single hidden size cannot separate that latency from the bytes (both ∝ w), so the
model ties it to the kernel's launch floor: the floor is paid once per launch and once per wave,
which the intercept (w = 1) identifies. The kernel's working set B (input + output) is served from
the L2 while it fits (H100: 50 MB, ``Device.l2_bytes``), from HBM beyond. The GPU constants are documented (``Device``), not fitted. (In the "max" form the floor
term competes instead of adding: max(floor·(1 + w), B_w/β).)
"smooth" is two pieces of GPU physics the hard roofline leaves out. (1) Tensor-core GEMMs run in
CTA tiles of 128 rows (the M of cuBLAS/CUTLASS's sm90 tiles), so m rows cost ⌈m/128⌉·128 rows of
MMA work. (2) Streaming the weights and the MMAs overlap only partly near the ridge (finite pipeline
stages, kernel choice), so the two times add in quadrature instead of the larger one winning: the
same as max far from the ridge, √2× at it. Neither adds a fitted parameter. What each
cuts from the held-out error (``benchmarks/calibration_bench.py``): docs/kernel-notes.md.
"physical" is "smooth" with the row tile of one tensor-core MMA instruction (16 rows) instead of a CTA
tile: skinny GEMMs run split-K / small-tile kernels, and padding a 1-token GEMM to 128 rows made it
look compute-bound, so the memory regime was never fitted (an A100 fit returned β above the spec
sheet). Whatever the form, ``fit(spec=...)`` caps π at the spec peak, β at the spec bandwidth and
an all-reduce's bandwidth at the interconnect's; a fit that lands on a cap says so (clamped).
Residuals are log(t_model/t_measured), so every kernel counts by its relative error whatever its
size. Parameters are fitted as x = ln(p/p0), p0 a data-derived start: O(1), positive, and the
covariance of x is directly the relative variance of p. Classes share no parameters, so each is
fitted alone (its own residual scale s²) and the covariance is block-diagonal.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.optimize import least_squares
from threadpoolctl import threadpool_limits

from ..errors import require
from .kernel_shapes import H100, Device, padded_flops, row_waves  # noqa: F401  (re-exported)
from .timings import validate

ROOFLINE_FULL = ("pi", "beta", "floor")
COMPUTE_CLASSES = ("gemm", "attention_prefill", "attention_decode")
ROW_CLASSES = ("norm",)  # one thread block per row: waves of blocks, L2 working set
ROW_PARAMS = ("floor", "beta_l2", "beta")
UNITS = {"pi": "FLOP/s", "beta": "B/s", "beta_l2": "B/s", "floor": "s", "bandwidth": "B/s", "latency": "s"}
LOG_BOUND = np.log(1e4)
LOSS, F_SCALE = "soft_l1", 0.1  # residuals beyond ~10 % count linearly, not squared
POOR_REL_SIGMA = 0.5
FORMS = ("max", "offset", "smooth", "physical")
DEFAULT_FORM = "smooth"
TILE_ROWS = 128  # GEMM row tile of the "smooth" form
MMA_ROWS = 16  # GEMM row tile of the "physical" form: the m of mma.sync m16n8k16
QUADRATURE_FORMS = ("smooth", "physical")
CAPPED_CLASSES = ("gemm", "moe", "attention", "attention_prefill", "attention_decode", "allreduce")  # stream HBM
# (norms, activations, rope and the like are often served from the L2, so HBM's spec does not cap them)


def class_params(op_class: str) -> tuple[str, ...]:
    if op_class == "allreduce":
        return ("bandwidth", "latency")
    if op_class in ROW_CLASSES:
        return ROW_PARAMS
    return ROOFLINE_FULL if op_class in COMPUTE_CLASSES else ("beta", "floor")


def tile_rows(form: str, op_class: str) -> int:
    """Rows a GEMM's MMA work is padded up to (1: none)."""
    if op_class != "gemm":
        return 1
    return {"smooth": TILE_ROWS, "physical": MMA_ROWS}.get(form, 1)


def _terms(params: tuple[str, ...], df: pd.DataFrame, tile: int = 1, device: Device = H100) -> np.ndarray:
    """Per row and parameter, the quantity q with term time = q/p (floor and latency: q·p)."""
    F, B = df["flops"].to_numpy(float), df["bytes"].to_numpy(float)
    F = padded_flops(F, df["m"].to_numpy(float), tile) if "m" in df.columns else F
    hops = 2.0 * (df["workers"].to_numpy(float) - 1.0)
    cols = {"pi": F, "beta": B, "floor": np.ones_like(F), "bandwidth": B, "latency": hops}
    if "beta_l2" in params:
        w, Bw, l2 = row_waves(df, device)
        cols.update(floor=1.0 + w, beta_l2=np.where(l2, Bw, 0.0), beta=np.where(l2, 0.0, Bw))
    return np.stack([cols[p] for p in params], axis=1)


def _is_rate(p: str) -> bool:
    return p in ("pi", "beta", "beta_l2", "bandwidth")


def _added(form: str, p: str) -> bool:
    """Parameters whose term adds to the others' maximum rather than competing with it."""
    return p == "latency" or (p == "floor" and form in ("offset", *QUADRATURE_FORMS))


def _parts(params, values, q) -> np.ndarray:
    return np.stack([q[:, j] / v if _is_rate(p) else q[:, j] * v for j, (p, v) in enumerate(zip(params, values))], 1)


def _combine(form: str, params, parts: np.ndarray):
    """(time, d ln t / d ln p): the competing terms' max (smooth: their quadrature sum) plus the
    added ones."""
    add = np.array([_added(form, p) for p in params])
    sign = np.array([-1.0 if _is_rate(p) else 1.0 for p in params])
    if form in QUADRATURE_FORMS:
        sq = np.where(add, 0.0, parts * parts)
        peak = np.sqrt(sq.sum(1, keepdims=True))
        t = peak[:, 0] + parts[:, add].sum(1)
        share = np.where(add, parts, sq / np.where(peak > 0, peak, 1.0)) / t[:, None]
        return t, sign * share
    peak = parts[:, ~add].max(1, keepdims=True)
    t = peak[:, 0] + parts[:, add].sum(1)
    share = np.where(add, parts, parts * (parts == peak)) / t[:, None]
    return t, sign * share


def model_times(params: tuple[str, ...], values: np.ndarray, q: np.ndarray, form: str = "max") -> np.ndarray:
    """Seconds per row for the class's parameter values (SI)."""
    return _combine(form, params, _parts(params, values, q))[0]


def _start(form, params, q, t) -> np.ndarray:
    """Upper envelopes for rates; the smallest time for a competing floor (so that it decides at
    least one point and has a gradient), half of it for an added one."""
    out = []
    for j, p in enumerate(params):
        pos = q[:, j] > 0
        if _is_rate(p):
            out.append(np.max(q[pos, j] / t[pos]) if pos.any() else 1.0)
        else:
            out.append((0.5 if _added(form, p) else 1.0) * np.min(t[pos] / q[pos, j]) if pos.any() else 1e-6)
    return np.array(out)


@dataclass(frozen=True)
class ClassFit:
    op_class: str
    form: str
    params: tuple[str, ...]
    values: np.ndarray  # SI
    log_cov: np.ndarray  # covariance of ln(values); inf where not identified
    s: float  # residual scale, log time
    active: dict  # points at which each parameter's term matters (wins, or is >= 10 %)
    errors: dict  # n, mape, median_ape, p90_ape (percent)
    warnings: tuple[str, ...]
    device: Device = H100  # constants of the row-kernel model (norm)

    @property
    def rel_sigma(self) -> np.ndarray:
        return np.sqrt(np.diag(self.log_cov))

    @property
    def tile_rows(self) -> int:
        return tile_rows(self.form, self.op_class)

    def predict(self, df: pd.DataFrame) -> np.ndarray:
        return model_times(self.params, self.values, _terms(self.params, df, self.tile_rows, self.device), self.form)


def ape_stats(pred: np.ndarray, meas: np.ndarray) -> dict:
    ape = 100.0 * np.abs(pred - meas) / meas
    return {
        "n": int(ape.size),
        "mape": float(ape.mean()),
        "median_ape": float(np.median(ape)),
        "p90_ape": float(np.percentile(ape, 90)),
    }


def _covariance(res, ok: np.ndarray, dof: int):
    """inv(JᵀJ)·s² over the identified parameters (J is least_squares' loss-weighted Jacobian)."""
    n = ok.size
    cov = np.full((n, n), np.inf)
    s2 = 2.0 * res.cost / dof
    sub = (res.jac.T @ res.jac)[np.ix_(ok, ok)]
    cond = np.linalg.cond(sub) if ok.any() else np.inf
    if cond < 1e12:
        cov[np.ix_(ok, ok)] = np.linalg.inv(sub) * s2
    return cov, s2, cond


def _warnings(op_class, params, values, x, cov, active, cond) -> list[str]:
    out = []
    if not np.isfinite(cond) or cond >= 1e12:
        out.append(
            f"{op_class}: covariance is singular (condition {cond:.1e}); parameters are not separately identified"
        )
    kinds = {
        "pi": "compute-bound",
        "beta": "memory-bound",
        "floor": "at the launch floor",
        "beta_l2": "memory-bound with its working set inside the L2",
        "latency": "latency-dominated",
        "bandwidth": "bandwidth-dominated",
    }
    for j, p in enumerate(params):
        if not active[p]:
            side = "from below" if _is_rate(p) else "from above"
            out.append(f"{op_class}.{p} not identified: no point is {kinds[p]}; the data only bound it {side}")
        elif np.sqrt(cov[j, j]) > POOR_REL_SIGMA:
            out.append(f"{op_class}.{p} poorly identified: 1σ is {100 * np.sqrt(cov[j, j]):.0f} %")
        if abs(x[j]) > LOG_BOUND - 1e-3:
            out.append(f"{op_class}.{p} hit its bound ({values[j]:.3g} {UNITS[p]})")
    return out


def clamp_warning(op_class: str, p: str, cap: float, unit: str) -> str:
    return (
        f"{op_class}.{p} clamped at the spec sheet's {cap:.4g} {unit}: the data want more "
        f"(faster than the GPU can be; check the table's dtype and units)"
    )


def upper_bounds(spec) -> dict:
    """Caps by parameter name from a spec (a Hardware): π ≤ peak_flops, β ≤ peak_bandwidth,
    an all-reduce's bandwidth ≤ interconnect_bandwidth (when the spec has one)."""
    if spec is None:
        return {}
    out = {
        "pi": spec.peak_flops,
        "beta": spec.peak_bandwidth,
        "pi_prefill": spec.peak_flops,
        "pi_decode": spec.peak_flops,
        "beta_prefill": np.inf,
        "beta_prefill_kv": spec.peak_bandwidth,
        "beta_decode": spec.peak_bandwidth,
        "beta_decode_mha": spec.peak_bandwidth,
        "cta_decode": spec.peak_bandwidth,
        "pi_decode_mha": spec.peak_flops,
        "pi_moe": spec.peak_flops,
        "pi_tuned_moe": spec.peak_flops,
        "beta_moe": spec.peak_bandwidth,
    }
    if spec.interconnect_bandwidth:
        out.update(
            {
                k: spec.interconnect_bandwidth
                for k in (
                    "bandwidth",
                    "bandwidth_small",
                    "bandwidth_mid",
                    "bandwidth_mid2",
                    "bandwidth_large",
                    "bandwidth_large2",
                )
            }
        )
    return out


def fit_class(
    df: pd.DataFrame, op_class: str, form: str = DEFAULT_FORM, device: Device = H100, upper: dict | None = None
) -> ClassFit:
    require(form in FORMS, "form", form, f"must be one of {FORMS}")
    params = class_params(op_class)
    df = validate(df, f"timings:{op_class}")
    q, t = _terms(params, df, tile_rows(form, op_class), device), df["time_s"].to_numpy(float)
    require(
        len(t) > len(params),
        f"timings:{op_class}",
        len(t),
        f"{len(t)} points cannot fit {len(params)} parameters {list(params)}",
    )
    p0 = _start(form, params, q, t)
    cap = np.array([(upper or {}).get(p, np.inf) for p in params])
    p0 = np.where(p0 >= cap, 0.5 * cap, p0)
    hi = np.minimum(LOG_BOUND, np.log(cap / p0))
    res = least_squares(
        lambda x: np.log(model_times(params, p0 * np.exp(x), q, form) / t),
        np.zeros(len(params)),
        jac=lambda x: _combine(form, params, _parts(params, p0 * np.exp(x), q))[1],
        bounds=(-LOG_BOUND, hi),
        loss=LOSS,
        f_scale=F_SCALE,
        method="trf",
    )
    values = p0 * np.exp(res.x)
    share = np.abs(_combine(form, params, _parts(params, values, q))[1])
    active = {p: int((share[:, j] >= (0.1 if _added(form, p) else 0.5)).sum()) for j, p in enumerate(params)}
    ok = np.array([active[p] > 0 for p in params])
    cov, s2, cond = _covariance(res, ok, max(len(t) - len(params), 1))
    warns = _warnings(op_class, params, values, res.x, cov, active, cond)
    warns += [
        clamp_warning(op_class, p, cap[j], UNITS[p])
        for j, p in enumerate(params)
        if np.isfinite(cap[j]) and values[j] >= cap[j] * (1 - 1e-6)
    ]
    errors = ape_stats(model_times(params, values, q, form), t)
    return ClassFit(op_class, form, params, values, cov, float(np.sqrt(s2)), active, errors, tuple(warns), device)


@dataclass(frozen=True)
class Fit:
    classes: dict[str, ClassFit]
    seconds: float
    sources: tuple[str, ...] = field(default=())

    @property
    def warnings(self) -> list[str]:
        return [w for c in self.classes.values() for w in c.warnings]

    def _at(self, name: str):
        cls, p = name.rsplit(".", 1)
        c = self.classes[cls]
        return c, c.params.index(p)

    def value(self, name: str) -> float:
        c, j = self._at(name)
        return float(c.values[j])

    def rel_sigma(self, name: str) -> float:
        c, j = self._at(name)
        return float(c.rel_sigma[j])

    def predict(self, df: pd.DataFrame) -> np.ndarray:
        """Seconds per row; NaN for rows of a class the fit has not seen."""
        out = np.full(len(df), np.nan)
        for cls, idx in df.groupby("op_class").indices.items():
            if cls in self.classes:
                out[idx] = self.classes[cls].predict(df.iloc[idx])
        return out

    def errors(self, df: pd.DataFrame) -> pd.DataFrame:
        """APE statistics per class of ``df`` (held-out data, or the fitted data)."""
        pred, meas = self.predict(df), df["time_s"].to_numpy(float)
        return pd.DataFrame(
            [
                {"op_class": cls, **ape_stats(pred[idx], meas[idx])}
                for cls, idx in df.groupby("op_class").indices.items()
                if cls in self.classes
            ]
        )

    def table(self) -> pd.DataFrame:
        return pd.DataFrame(
            [
                {
                    "parameter": f"{c.op_class}.{p}",
                    "value": c.values[j],
                    "unit": (getattr(c, "units", None) or UNITS)[p],
                    "rel_sigma": c.rel_sigma[j],
                    "active_points": c.active[p],
                }
                for c in self.classes.values()
                for j, p in enumerate(c.params)
            ]
        )


def fit(df: pd.DataFrame, classes=None, form: str = DEFAULT_FORM, device: Device = H100, spec=None) -> Fit:
    """Fit every operator class in the tidy table (or those named); ``device`` holds the GPU
    constants of the norm model (default H100); ``spec`` (a Hardware) caps the rates at its spec
    sheet. Attention, the sampler and the fused MoE (``moe_fit``) always use their own models; the
    all-reduce does under the "physical" form (regimes per GPU count), and so does the GEMM when
    the spec gives the SM count and L2 size (the tile/wave model, ``costmodel/gemm_tiles.py``)."""
    t0 = time.perf_counter()
    df = validate(df)
    have = sorted(df["op_class"].unique())
    upper = upper_bounds(spec)
    with threadpool_limits(1, user_api="blas"):  # see ONE_BLAS_THREAD
        fits = _fit_classes(df, list(classes) if classes else have, have, form, device, spec, upper)
    return Fit(fits, time.perf_counter() - t0, tuple(sorted(df["source"].astype(str).unique())))


ONE_BLAS_THREAD = None
"""Why a fit runs on one BLAS thread: the solver's linear algebra is matrix-vector products on
tall, thin Jacobians (40k × 25), which a threaded BLAS splits across threads that spin-wait for
each other (on a shared 2-core machine one product took 2.4 ms on two threads, 0.16 ms on one).
One thread also makes a fit's rounding, and so its poorly identified parameters, independent of
the machine's core count. ``threadpoolctl`` restores the counts afterwards."""


def _fit_classes(df, classes, have, form, device, spec, upper) -> dict:
    from .operator_models import CUSTOM_CLASSES, fit_model_class

    fits = {}
    for cls in classes:
        require(cls in have, "classes", cls, f"no timings of this class; have {have}")
        sub = df[df["op_class"] == cls]
        cap = upper if cls in CAPPED_CLASSES else {}
        if cls == "gemm" and form == "physical" and getattr(spec, "sms", 0) and getattr(spec, "l2_bytes", 0):
            from .gemm_fit import fit_gemm_tiles

            fits[cls] = fit_gemm_tiles(sub.reset_index(drop=True), form, cap, spec.sms, spec.l2_bytes)
        elif cls == "moe":
            from .moe_fit import fit_moe

            fits[cls] = fit_moe(sub.reset_index(drop=True), form, cap)  # type: ignore[assignment]
        elif cls == "allreduce" and form == "physical":
            from .allreduce_model import fit_allreduce

            fits[cls] = fit_allreduce(sub.reset_index(drop=True), form, cap, getattr(spec, "sms", 0) or 0)  # type: ignore[assignment]
        elif cls in CUSTOM_CLASSES:
            fits[cls] = fit_model_class(
                sub.reset_index(drop=True),
                cls,
                form,
                cap,
                getattr(spec, "sms", 0) or 0,  # type: ignore[assignment]
                getattr(spec, "l2_bytes", 0.0) or 0.0,
                getattr(spec, "attn_q_tile", 0) or 0,
            )
        else:
            fits[cls] = fit_class(sub, cls, form, device, cap)  # type: ignore[assignment]
    return fits
