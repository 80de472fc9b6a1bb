"""Fit the step model's few constants to step-level timings (calibration/step_timings.py).

A step costs what the simulator charges its batch (``CostModel``, costmodel/roofline.py, on the
base profile with the fit's constants applied: calibration/step_pricing.py) plus the engine's host
time (costmodel/host.py). Kernel tables fix the operator shapes; step timings can only tell a few
constants apart, so this fits these:

  s_π, s_β       scale factors on the base profile's FLOP rates and HBM rates (step_pricing.py
                 names the fields): whatever form the profile prices GEMMs and attention with
                 (roofline, tile/wave GEMMs, fitted or unit-model attention), it is that form at
                 the scaled rates, so the profile the fit writes prices the steps as the fit did
  s_π,attn       the scale on attention's FLOP rates: the engine's attention kernels need not run
                 at its GEMMs' efficiency (BLOOM's ALiBi bias kept an engine off FlashAttention); tied to
                 s_π when quartering attention's π moves no step by ATTN_SHARE (not identified)
  host_step_s, host_per_seq_s, host_per_prefill_seq_s, host_prefill_step_s   the host terms
                 (costmodel/host.py)

  t = GPU(batch; scaled profile) + host      (serial)
  t = max(GPU, host)                         (``overlap=True``)

Residuals are ln(t_model/t_measured) under a soft-l1 loss, as for kernels (calibration/fit.py).
Physical bounds: no fitted π above the
spec sheet's peak_flops, no β above its peak_bandwidth; a fit that presses against them says so
and is clamped there. A parameter no step can see (no prefill steps: host_per_prefill_seq_s and
host_prefill_step_s; one batch size only: host_per_seq_s against host_step_s; every step with a
prefill, or every prefill step with as many prefill sequences: host_prefill_step_s against
host_step_s or host_per_prefill_seq_s) is held at 0 and reported. Tables of more than SCREEN steps
are fitted on every k-th step (SCREEN of them); the errors are over all.

A second GEMM regime in rows: measured prefills need not follow one π. Splitwise's BLOOM-176B
tp 8 steps cost the same per token at any split of the rows into prompts (512×16 ≈ 8192×1,
512×8 ≈ 4096×1) but 25–30 % more per token above 2048 rows than at 2048, on A100 and H100 alike,
which no tile or wave count can do (those only make a row cheaper as rows grow). So the fit also
tries a break: GEMMs of more rows than b run at s_rows·π (s_rows ≤ 1),

  b ∈ {2^k}: powers of two with at least two distinct prefill row counts of the fit set on each side

or a budget: a step's GEMMs run their first B rows at π and the rest at s_rows·π, B from a grid of
BUDGETS_PER_OCTAVE per factor of two (rows_regime.py) and then freed between its neighbours (rounded to
whole rows). The budget is the physical one: a GPU at its power limit holds its clock for a budget of
work and then pulls it down, so each row past B costs 1/s_rows times a row within it (Splitwise's A100 rows follow
the rows alone, not attention's b·p², and reach TDP from 1024 rows: bench_steps.py prints the
evidence); the break is what a kernel switch at some row count would do. Every candidate is fitted
and the best kept only if it pays for its two parameters (BIC on the loss) and moves π by at least
MIN_REGIME (none is tried when one π already fits every step within MIN_REGIME/10). The result goes
to the profile as gemm_rows_break or gemm_rows_budget, and gemm_rows_pi_scale
(costmodel/roofline.py, ``_pi_rows``), so a simulation prices the regime the fit saw.

Sessions (``sessions=True``): steps recorded in separate runs (the table's ``session`` column;
Splitwise's rows with and without power logging) may throttle to different depths. One s_rows per
session is then fitted, each from that session's steps only; a step of a session is predicted with
``StepFit.hardware(session=...)``. The label is how a run was set up, known for every step before
its time is seen, so using it on held-out steps of a session leaks no held-out time; it predicts no
new session, so ``chunksim calibrate`` writes the pooled fit.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from ..errors import require
from ..execution import model_launches
from ..hardware import Hardware
from ..model import ModelSpec
from ..roofline import CostModel
from .fit import F_SCALE, LOSS, ape_stats
from .rows_regime import (
    MIN_REGIME,
    NONE,
    SCREEN_BREAKS,
    budget_bounds,
    budget_grid,
    pays,
    pick_break,
    rows_breaks,
    screen,
)
from .step_pricing import batch_times, price_steps, scale_bounds, scaled_hardware, step_shapes, subset, with_host
from .step_timings import STEP_COLUMNS

PARAMS = (
    "s_pi",
    "s_beta",
    "s_pi_attn",
    "s_rows",
    "kernel_launch_s",
    "hop_latency_s",
    "host_step_s",
    "host_per_seq_s",
    "host_per_prefill_seq_s",
    "host_prefill_step_s",
    "host_per_launch_s",
)
SCALES = PARAMS[:4]
LAYER = PARAMS[4:6]
HOST = PARAMS[6:10]
LAUNCH = PARAMS[10]  # host seconds per eager kernel launch, hidden under the GPU's (costmodel/host.py)
LAYER_UNIT = 1e-6  # the per-layer terms' unit in the solver (seconds)
PER_LAYER = ("step", "layer", "launch")
BETA_LOW = 0.5  # a fitted β_eff below this share of the spec sheet's is reported
ATTN_SHARE = 0.05
LOG_LOW = np.log(1e-3)
AT_BOUND = 1e-3  # relative distance from a bound that counts as pressing on it


class _Pricer:
    """GPU seconds of a set of steps at given scales. Each priced batch is kept, by scales, for the
    last few scales and for every subset of the table (a second start, a solve on fewer steps or
    the errors over all reuse what was priced; the finite-difference Jacobian moves one parameter
    at a time, mostly host terms that leave the GPU time alone)."""

    def __init__(self, shapes, model: ModelSpec, base: Hardware, tp: int, memo: dict | None = None):
        self.shapes, self.model, self.base, self.tp = shapes, model, base, tp
        self.memo = {} if memo is None else memo
        self.used = np.unique(shapes.inv)

    @property
    def groups(self) -> list:
        return [(self, slice(None))]

    @cached_property
    def launches(self) -> int:
        """Kernels an eager pass launches (costmodel/execution.py); counted only where the launch
        term is fitted (dense decoders: other layer kinds are refused there)."""
        return model_launches(self.model, self.tp)

    def gpu(self, s_pi, s_beta, s_pa, regime, s_rows, layer=None) -> np.ndarray:
        key = (s_pi, s_beta, s_pa, regime, s_rows, layer)
        g = self.memo.get(key)
        if g is None:
            if len(self.memo) > 16:
                self.memo.clear()
            g = self.memo[key] = np.full(len(self.shapes.batches), np.nan)
        miss = self.used[np.isnan(g[self.used])]
        if len(miss):
            kind, n = regime
            hw = scaled_hardware(
                self.base,
                s_pi,
                s_beta,
                s_pa,
                n if kind == "break" else 0,
                s_rows,
                budget=n if kind == "budget" else 0,
                layer=layer,
            )
            g[miss] = batch_times(self.shapes, self.model, hw, self.tp, miss, self.used)
        return g[self.shapes.inv]

    def times(self, scales, host, overlap: bool, regime=NONE, layer=None) -> np.ndarray:
        s_pi, s_beta, s_pa, s_rows = scales
        regime = regime if regime[1] else NONE
        layer = None if layer is None else tuple(float(v) for v in layer)
        gpu = self.gpu(s_pi, s_beta, s_pa, regime, s_rows if regime[1] else 1.0, layer)
        per = float(host[len(HOST)]) if len(host) > len(HOST) else 0.0
        launch = per * self.launches if per else 0.0
        return with_host(gpu, self.shapes, host[: len(HOST)], overlap, launch)

    def part(self, idx) -> _Pricer:
        if isinstance(idx, slice) and idx == slice(None):
            return self
        return _Pricer(subset(self.shapes, idx), self.model, self.base, self.tp, self.memo)


class _Joint:
    """Several step tables, one per (model, tp), priced by one set of constants: each step's time
    from its own group's ``_Pricer``, in the joint table's order (``pos``: the group's rows)."""

    def __init__(self, parts: list, n: int):
        self.parts, self.n = parts, n  # [(_Pricer, positions in the joint table)]

    @property
    def groups(self) -> list:
        return self.parts

    def times(self, scales, host, overlap: bool, regime=NONE, layer=None) -> np.ndarray:
        out = np.empty(self.n)
        for pr, pos in self.parts:
            out[pos] = pr.times(scales, host, overlap, regime, layer)
        return out

    def part(self, idx) -> _Joint:
        if isinstance(idx, slice) and idx == slice(None):
            return self
        take = np.zeros(self.n, bool)
        take[np.arange(self.n)[idx]] = True
        rank = np.cumsum(take) - 1
        parts = []
        for pr, pos in self.parts:
            mine = pos[take[pos]]
            if len(mine):
                parts.append((pr.part(np.nonzero(take[pos])[0]), rank[mine]))
        return _Joint(parts, int(take.sum()))


@dataclass(frozen=True)
class StepFit:
    values: dict  # PARAMS -> fitted value (SI; scales dimensionless)
    rel_sigma: dict  # PARAMS -> 1σ / value (inf where not identified)
    base: Hardware
    tp: int
    overlap: bool
    errors: pd.DataFrame  # per kind: n, mape, median_ape, p90_ape on the fitted steps
    warnings: tuple[str, ...]
    seconds: float
    points: int
    sources: tuple = field(default=())
    rows_break: int = 0  # GEMMs of more rows run at s_rows·s_pi·π (0: one regime)
    fitted_on: int = 0  # steps the fit ran on (every k-th of a table over SCREEN; 0: all)
    rows_budget: int = 0  # a step's rows past it run at s_rows·s_pi·π (0: none; not with rows_break)
    session_rows: dict = field(default_factory=dict)  # session -> its s_rows (fit_steps(sessions=True))
    layered: bool = False  # the per-layer terms were fitted (the profile carries them: step_pricing.py)
    groups: tuple = ()  # (model, tp) of each table fitted jointly
    group_errors: pd.DataFrame | None = None  # per model, tp and kind: n, mape, ... on the fitted steps

    @property
    def pi_eff(self) -> float:
        return self.values["s_pi"] * self.base.pi_eff

    @property
    def beta_eff(self) -> float:
        return self.values["s_beta"] * self.base.beta_eff

    def hardware(self, name: str | None = None, session: str | None = None) -> Hardware:
        """The base profile with π, β (and attention's) scaled and the host terms set; with
        ``session``, that recording session's s_rows (``session_rows``)."""
        b, v = self.base, dict(self.values)
        if session is not None:
            require(
                session in self.session_rows,
                "session",
                session,
                f"not a fitted session; fitted: {', '.join(self.session_rows) or 'none (fit_steps(sessions=True))'}",
            )
            v["s_rows"] = self.session_rows[session]
        tied = v["s_pi_attn"] == v["s_pi"]
        hw = scaled_hardware(
            b,
            v["s_pi"],
            v["s_beta"],
            None if tied else v["s_pi_attn"],
            self.rows_break,
            v["s_rows"],
            [v[k] for k in (*HOST, LAUNCH)],
            self.rows_budget,
            [v[k] for k in LAYER] if self.layered else None,
        )
        return hw.replace(
            name=name or f"{b.name}-steps",
            description=f"{b.description or b.name}, step-calibrated",
            notes=f"FLOP rates, HBM rates (x{v['s_pi']:.4g}, x{v['s_beta']:.4g} of {b.name}), attention's FLOP rates "
            f"(x{v['s_pi_attn']:.4g}), "
            + (f"GEMMs above {self.rows_break} rows at x{v['s_rows']:.4g} π, " if self.rows_break else "")
            + (f"a step's GEMM rows past {self.rows_budget} at x{v['s_rows']:.4g} π, " if self.rows_budget else "")
            + (
                f"per-layer elementwise kernels at +{v['kernel_launch_s'] * 1e6:.4g} µs each, all-reduces at "
                f"+{v['hop_latency_s'] * 1e6:.4g} µs per ring hop, "
                if self.layered
                else ""
            )
            + (f"host {v[LAUNCH] * 1e6:.4g} µs per eager kernel launch, " if v[LAUNCH] else "")
            + f"and the host terms fitted "
            f"to {self.points} step timings by chunksim calibrate; the other fields are {b.name}'s.",
            calibration=self._calibration(),
        )

    def _calibration(self) -> dict:
        """The step fit's record; a kernel fit the base carried is kept beside it without its
        covariance, whose π and β the scales have moved (so no parameter draws are offered)."""
        kernel = {k: v for k, v in (self.base.calibration or {}).items() if k != "log_covariance"}
        return {"step_fit": self.record(), **({"kernel_fit": kernel} if kernel else {})}

    def record(self) -> dict:
        return {
            "parameters": {
                k: {
                    "value": float(self.values[k]),
                    "rel_sigma": float(self.rel_sigma[k]) if np.isfinite(self.rel_sigma[k]) else None,
                }
                for k in PARAMS
            },
            "gemm_rows_break": int(self.rows_break),
            "gemm_rows_budget": int(self.rows_budget),
            "overlap_host": self.overlap,
            "tp": self.tp,
            "groups": [{"model": m, "tp": int(t)} for m, t in self.groups],
            "per_layer_terms": self.layered,
            "points": self.points,
            "fitted_on": int(self.fitted_on or self.points),
            "session_rows": {k: float(v) for k, v in self.session_rows.items()},
            "errors_percent": self.errors.to_dict("records"),
            "warnings": list(self.warnings),
            "sources": list(self.sources),
            "fit_seconds": self.seconds,
            "method": "scipy.optimize.least_squares on ln(t_model/t_measured), soft_l1 loss; "
            "π, β bounded by the spec peaks",
        }

    def table(self) -> pd.DataFrame:
        units = {**{k: "x" for k in SCALES}, **{k: "s" for k in (*LAYER, *HOST, LAUNCH)}}
        return pd.DataFrame(
            [
                {"parameter": k, "value": self.values[k], "unit": units[k], "rel_sigma": self.rel_sigma[k]}
                for k in PARAMS
            ]
        )


def errors_by_kind(pred: np.ndarray, steps: pd.DataFrame) -> pd.DataFrame:
    meas = steps["time_s"].to_numpy(float)
    return pd.DataFrame(
        [{"kind": k, **ape_stats(pred[idx], meas[idx])} for k, idx in steps.groupby("kind").indices.items()]
    )


def missing_kinds(kinds: pd.Series) -> list[str]:
    """Warnings for a step table without decode-only steps, or without steps that prefill: the
    other kind's steps are then priced by scales and host terms only these steps fixed."""
    have = set(kinds)
    out = []
    if "decode" not in have:
        out.append(
            "no decode-only steps: decode steps are extrapolated from prefill steps (their fixed host "
            "time per step is taken for a decode step's; add decode steps to fit it)"
        )
    if not have & {"prefill", "mixed"}:
        out.append("no step with a prefill: prefill steps are extrapolated from decode steps")
    return out


def fit_steps(
    steps: pd.DataFrame,
    model,
    base: Hardware,
    tp: int | None = None,
    overlap: bool = False,
    fixed: dict | None = None,
    sessions: bool = False,
    per_layer: str = "step",
) -> StepFit:
    """Fit PARAMS (minus those in ``fixed``, held at the given values) to the step table, with a
    GEMM rows regime where one pays for itself (module docstring); ``sessions``: one s_rows per
    value of the table's ``session`` column (``by_session``). ``model``: a ModelSpec, or a dict of
    them by the table's ``model`` column, whose steps (of any tp sizes, the ``tp`` column) are then
    fitted jointly (``joint_groups``); ``per_layer``: where a fixed time the steps cannot place goes
    when the tables hold one model, so that per-layer and per-step time are one (``layer_terms``):
    "step" to host_step_s, "layer" to kernel_launch_s, "launch" to host_per_launch_s (host time per
    eager kernel launch, hidden under the GPU's: costmodel/host.py)."""
    t0 = time.perf_counter()
    missing = [c for c in STEP_COLUMNS if c not in steps.columns]
    require(not missing, "steps:columns", missing, "not a step table (costmodel/calibration/step_timings.py)")
    require(per_layer in PER_LAYER, "per_layer", per_layer, f"must be one of {', '.join(PER_LAYER)}")
    groups = joint_groups(steps, model, tp)
    tps = sorted({g[1] for g in groups})
    tp = tps[0] if len(tps) == 1 else 0
    require(len(steps) >= 3, "steps", len(steps), "need at least 3 step timings")
    require(
        not sessions or "session" in steps.columns,
        "sessions",
        list(steps.columns),
        "the step table has no session column",
    )
    parts = []
    for (_, g_tp, spec), pos in groups.items():
        parts.append((_Pricer(step_shapes(steps.iloc[pos]), spec, base, g_tp), pos))
    pricer = _Joint(parts, len(steps)) if len(parts) > 1 else parts[0][0]
    shapes = step_shapes(steps)
    t = steps["time_s"].to_numpy(float)
    scale = float(np.median(t))
    fixed = dict(fixed or {})
    warns = []
    n = len(t)
    idx, idx_b = screen(n), screen(n, SCREEN_BREAKS)
    tied = "s_pi_attn" not in fixed and not any(_attention_moves(pricer.part(i), overlap) for i in (idx, slice(None)))
    if tied:
        warns.append(
            f"s_pi_attn not identified: quartering attention's π moves no step by {ATTN_SHARE:.0%}; tied to s_pi"
        )
    up = dict(zip(SCALES, scale_bounds(base, tied) + (1.0,)))
    warns += missing_kinds(steps["kind"])
    if per_layer != "launch":
        fixed.setdefault(LAUNCH, 0.0)  # the launch term is fitted only where asked for
    for k, why in layer_terms(list(groups), per_layer, fixed):
        fixed[k] = 0.0
        warns.append(why)
    layered = any(k not in fixed or fixed[k] for k in LAYER)
    for k, why in _unseen_host_terms(shapes.host_cols):
        if k not in fixed:
            fixed[k] = 0.0
            warns.append(f"{k} not identified: {why}; held at 0")
    own = "s_rows" in fixed or base.gemm_rows_break or base.gemm_rows_budget
    regimes = [] if own else [("break", b) for b in rows_breaks(steps)] + [("budget", b) for b in budget_grid(steps)]

    def solve(regime, start=None, idx=slice(None), free_budget=None, by=None):
        pr, tt = pricer.part(idx), t[idx]
        fx = dict(fixed) if regime[1] else {**fixed, "s_rows": 1.0}
        free = [p for p in PARAMS if p not in fx and not (tied and p == "s_pi_attn")] + (
            ["budget"] if free_budget else []
        )
        labels, own = by if by else (None, [])
        free += [f"s_rows@{k}" for k in own]

        def unpack(x):
            v = dict(fx)
            v.update(zip(free, x))
            sc = [np.exp(v[k]) if k in free else v.get(k) for k in SCALES]
            if tied:
                sc[2] = sc[0]
            return (
                sc,
                [v[k] * (scale if k in free else 1.0) for k in HOST]
                + [v[LAUNCH] * (LAYER_UNIT if LAUNCH in free else 1.0)],
                (("budget", float(np.exp(v["budget"]))) if free_budget else regime),
                {k: float(np.exp(v[f"s_rows@{k}"])) for k in own},
                [v[k] * (LAYER_UNIT if k in free else 1.0) for k in LAYER] if layered else None,
            )

        def resid(x):
            scales, host, reg, by_label, layer = unpack(x)
            scales = [float(v) for v in scales]
            out = pr.times(scales, host, overlap, reg, layer)
            for k, s_k in by_label.items():
                at = labels == k
                out[at] = pr.times(scales[:3] + [s_k], host, overlap, reg, layer)[at]
            return np.log(out / tt)

        rows_scale = lambda p: p in SCALES or p.startswith("s_rows@")  # noqa: E731
        lo = [LOG_LOW if rows_scale(p) else np.log(free_budget[0]) if p == "budget" else 0.0 for p in free]
        hi = [
            np.log(up[p.split("@")[0]]) if rows_scale(p) else np.log(free_budget[1]) if p == "budget" else np.inf
            for p in free
        ]
        x0 = [
            min(0.0, h - 1e-6) if p in SCALES else 1.0 if p in LAYER else launch0 if p == LAUNCH else 0.01
            for p, h in zip(free, hi)
        ]
        if start is not None:  # the one-regime solution, s_rows at 1
            x0 = [float(np.clip(start.get(p, -1e-6), lo_, h - 1e-6)) for p, lo_, h in zip(free, lo, hi)]
        res = least_squares(resid, x0, bounds=(lo, hi), loss=LOSS, f_scale=F_SCALE, method="trf", x_scale="jac")
        return res, free, hi, unpack

    # the launch term starts where the fastest step is launch-bound: max(GPU, launches) has no slope
    # in it while the GPU's time is the larger
    launch0 = (
        float(t.min() / max(pr.launches for pr, _ in pricer.groups) / LAYER_UNIT) if per_layer == "launch" else 0.0
    )
    m = len(t[idx])
    best = solve(NONE, None, idx)
    if _flat_decodes(pricer.part(idx), best[3](best[0].x)[0]):  # see LOW_BETA_START
        low = solve(NONE, {**_start(best), "s_beta": LOW_BETA_START}, idx)
        best = low if low[0].cost < best[0].cost else best
    if regimes and np.abs(best[0].fun).max() < MIN_REGIME / 10:
        regimes = []
        warns.append(f"no GEMM rows regime: one π fits every step within {MIN_REGIME / 10:.1%}")
    one_b = best if idx_b == idx else solve(NONE, _start(best), idx_b)
    regime, trial = pick_break(solve, regimes, one_b, len(t[idx_b]), idx_b)
    if regime[0] == "budget":
        trial = _free_budget(solve, regime, trial, idx, budget_bounds(steps, regime[1]))
        regime = trial[3](trial[0].x)[2]
    elif regime[1] and idx_b != idx:
        trial = solve(regime, _start(trial), idx)
    if regime[1]:
        s_rows = trial[3](trial[0].x)[0][3]
        regime = regime if pays(trial[0].cost, best[0].cost, m) and s_rows < 1.0 - MIN_REGIME else NONE
        best = trial if regime[1] else best
    res, free, hi, unpack = best
    if regimes and not regime[1]:
        warns.append("no GEMM rows regime: no break or budget in rows paid for its two parameters (BIC); held at one π")
    by_session = {}
    if sessions and regime[1]:
        best, by_session = _by_session(solve, best, regime, steps, idx, warns)
        res, free, hi, unpack = best
    elif sessions:
        warns.append("no rows regime: no scale per session")
    (s_pi, s_beta, s_pa, s_rows), host, regime, by_label, layer = unpack(res.x)
    host = [h if h > 1e-9 * scale else 0.0 for h in host]  # at the bound: zero, not a denormal
    layer = None if layer is None else [float(v) if v > 1e-12 else 0.0 for v in layer]
    if by_session:
        by_session = {k: by_label.get(k, float(s_rows)) for k in by_session["sessions"]}
    values = {
        "s_pi": float(s_pi),
        "s_beta": float(s_beta),
        "s_pi_attn": float(s_pa),
        "s_rows": float(s_rows),
        **{k: float(h) for k, h in zip(LAYER, layer or (0.0, 0.0))},
        **{k: float(h) for k, h in zip((*HOST, LAUNCH), host)},
    }
    for p, x, h in zip(free, res.x, hi):
        if p in SCALES[:3] and x >= h - AT_BOUND:
            what = {
                "s_pi": "pi_eff at peak_flops",
                "s_beta": "beta_eff at peak_bandwidth",
                "s_pi_attn": "pi_attn at peak_flops",
            }[p]
            warns.append(f"{p} pressed against the spec sheet and was clamped: {what}")
    rel = _rel_sigma(res, free, values, m)
    for p in free:
        if p in (*HOST, *LAYER, LAUNCH) and values[p] == 0.0:
            rel[p] = np.inf
            warns.append(f"{p} fitted at its bound 0")
    rel.update({p: np.inf for p in PARAMS if p not in free})
    sc = (float(s_pi), float(s_beta), float(s_pa), float(s_rows))
    pred = pricer.times(sc, host, overlap, regime, layer)
    kind, at = regime
    if by_session:
        lab = steps["session"].astype(str).to_numpy()
        for k, s_k in by_session.items():
            mine = lab == k
            pred[mine] = pricer.times(sc[:3] + (s_k,), host, overlap, regime, layer)[mine]
    warns += _low_beta(pricer, sc, host, overlap, regime, layer, pred, steps, base, fixed)
    return StepFit(
        values,
        rel,
        base,
        tp,
        overlap,
        errors_by_kind(pred, steps),
        tuple(warns),
        time.perf_counter() - t0,
        n,
        tuple(sorted({s.rsplit(":", 1)[0] for s in steps["source"]})),
        at if kind == "break" else 0,
        m if m < n else 0,
        at if kind == "budget" else 0,
        by_session,
        layered,
        tuple((g[0], g[1]) for g in groups),
        errors_by_group(pred, steps, groups),
    )


def joint_groups(steps: pd.DataFrame, model, tp: int | None = None) -> dict:
    """(model name, tp, ModelSpec) -> positions of its steps in the table. ``model``: one ModelSpec
    for every step, or a dict of them by the table's ``model`` column; ``tp``: the one tp size the
    table must hold (None: whatever the ``tp`` column holds)."""
    tps = steps["tp"].astype(int).to_numpy()
    if tp:
        have = sorted(set(tps.tolist()))
        require(have == [int(tp)], "tp", have, f"the steps were measured at tp {have}, not {tp}")
    if isinstance(model, ModelSpec):
        names = np.full(len(steps), model.name, dtype=object)
        specs = {model.name: model}
    else:
        require("model" in steps.columns, "steps:model", list(steps.columns), "several models need a model column")
        names = steps["model"].astype(str).to_numpy()
        specs = dict(model)
        lack = sorted(set(names) - set(specs))
        require(not lack, "model", lack, f"no model given for these; given: {', '.join(specs)}")
    out: dict = {}
    for i, key in enumerate(zip(names.tolist(), tps.tolist())):
        out.setdefault(key, []).append(i)
    return {(m, t, specs[m]): np.asarray(pos, dtype=np.int64) for (m, t), pos in sorted(out.items())}


def elementwise_kernels(model: ModelSpec) -> int:
    """The per-layer elementwise kernels of one pass (roofline.py's elementwise operator)."""
    return int(2 * model.L + model.dense_layers + (model.kv_layers or 0))


def layer_terms(groups: list, per_layer: str, fixed: dict) -> list[tuple[str, str]]:
    """(term, why) for each of kernel_launch_s, hop_latency_s and host_step_s to hold at 0, from the
    fixed time per step each puts on every step of a (model, tp) group: host_step_s 1,
    kernel_launch_s the model's elementwise kernels, hop_latency_s 4·L·(tp − 1) (2·L all-reduces of
    2·(tp − 1) hops). A term whose column is a combination of the others' over the groups cannot be
    told from them: with one model, kernel_launch_s is host_step_s times the kernel count, and
    per_layer says which of the two keeps the time ("step": host_step_s, today's fit; "layer":
    kernel_launch_s, which carries to another model; "launch": host_per_launch_s, the host's time per
    eager kernel launch, L·layer_kernels + 2 of them, costmodel/execution.py); with one tp,
    hop_latency_s is held."""
    cols = {
        "host_step_s": np.ones(len(groups)),
        "kernel_launch_s": np.array([float(elementwise_kernels(s)) for _, _, s in groups]),
        "hop_latency_s": np.array([4.0 * s.L * (t - 1) for _, t, s in groups]),
    }
    if per_layer == "launch":
        cols[LAUNCH] = np.array([float(model_launches(s, t)) for _, t, s in groups])
    first: tuple = ("kernel_launch_s", "host_step_s") if per_layer == "layer" else ("host_step_s", "kernel_launch_s")
    if per_layer == "launch":  # host_per_launch_s first: the others only where the groups tell them apart
        first = (LAUNCH, "host_step_s", "kernel_launch_s")
    kept: list = []
    out = []
    for k in (*first, "hop_latency_s"):
        if k in fixed:
            if fixed[k]:
                kept.append(cols[k])
            continue
        if not cols[k].any():
            out.append((k, f"{k} not identified: no step pays it (tp 1); held at 0"))
            continue
        trial = np.stack(kept + [cols[k]], 1)
        if np.linalg.matrix_rank(trial) == len(kept) + 1:
            kept.append(cols[k])
            continue
        if k == "hop_latency_s":
            why = "one tensor-parallel size: its all-reduces' latency is the per-layer or per-step time; held at 0"
        elif per_layer == "launch":
            why = (
                "one model: its fixed time is put per eager kernel launch (per_layer='launch', "
                "host_per_launch_s); held at 0"
            )
        elif k == "kernel_launch_s":
            why = (
                "one model: its per-layer kernels' time is a per-step time (host_step_s has it; "
                "per_layer='layer' puts it per layer); held at 0"
            )
        else:
            why = "one model: its per-step time is put per layer (per_layer='layer', kernel_launch_s); held at 0"
        out.append((k, f"{k} not identified: {why}"))
    return out


def errors_by_group(pred: np.ndarray, steps: pd.DataFrame, groups: dict) -> pd.DataFrame:
    """errors_by_kind of each (model, tp) group."""
    rows = []
    for (m, t, _), pos in groups.items():
        e = errors_by_kind(pred[pos], steps.iloc[pos])
        rows += [{"model": m, "tp": int(t), **r} for r in e.to_dict("records")]
    return pd.DataFrame(rows)


def _low_beta(pricer, sc, host, overlap, regime, layer, pred, steps, base, fixed) -> list[str]:
    """A warning where the fitted β_eff is below BETA_LOW of the spec sheet's, naming what it
    absorbed: the time the steps lose when β is raised to BETA_LOW·peak_bandwidth, by kind."""
    beta = sc[1] * base.beta_eff
    if beta >= BETA_LOW * base.peak_bandwidth:
        return []
    up = (sc[0], BETA_LOW * base.peak_bandwidth / base.beta_eff, sc[2], sc[3])
    lost = 1.0 - pricer.times(up, host, overlap, regime, layer) / pred
    by = [
        f"{k} steps {100 * float(lost[i].mean()):.0f} %"
        for k, i in steps.groupby("kind").indices.items()
        if float(lost[i].mean()) > 0.005
    ]
    held = [k for k in LAYER + HOST[:1] if fixed.get(k) == 0.0]
    return [
        f"beta_eff {beta / 1e12:.3g} TB/s is below {BETA_LOW:.0%} of the spec sheet's "
        f"{base.peak_bandwidth / 1e12:.3g} TB/s: it absorbed fixed time the memory-bound steps pay, "
        f"{', '.join(by) or 'under 0.5 % of any kind'} of their time at {BETA_LOW:.0%} of spec"
        + (f" (held, so unable to take it: {', '.join(held)})" if held else "")
    ]


LOW_BETA_START = float(np.log(0.5))
"""A second start for s_beta, from below: where a unit-model decode is bound by its thread blocks'
flow (min(β, flow), costmodel/decode_units.py) the residuals do not move with s_beta, so a solve
from s_beta = 1 can stop on that flat side with the host terms absorbing the rest; the lower of the
two solutions is kept. Tried only when the first solution has such a decode (``_flat_decodes``)."""
BETA_STEP = 1e-3


def _attention_moves(pricer: _Pricer | _Joint, overlap: bool) -> bool:
    """Whether quartering attention's π moves some step by ATTN_SHARE (else s_pi_attn is tied)."""
    zero = [0.0] * len(HOST)
    moved = pricer.times((1.0, 1.0, 0.25, 1.0), zero, overlap) / pricer.times((1.0, 1.0, 1.0, 1.0), zero, overlap) - 1.0
    return bool((moved >= ATTN_SHARE).any())


def _flat_decodes(pricer: _Pricer | _Joint, scales) -> bool:
    """Whether the unit decode model (costmodel/decode_units.py) prices some decode of these steps at
    these scales with an attention time that s_beta does not move (raised by BETA_STEP): one bound
    by its thread blocks' flow."""
    s_pi, s_beta, s_pa, _ = (float(v) for v in scales)
    for pr, _ in pricer.groups:
        cm = CostModel(pr.model, scaled_hardware(pr.base, s_pi, s_beta, s_pa), pr.tp)
        if not cm.units:
            continue
        up = CostModel(pr.model, scaled_hardware(pr.base, s_pi, s_beta * (1 + BETA_STEP), s_pa), pr.tp)
        for j in pr.used:
            q, kv, d, tok = pr.shapes.batches[j]
            if d and not (q and cm.varlen):  # varlen: decodes beside a chunk ride the prefill kernel
                a, b = (c.breakdown(c.shape(q, kv, d, tok)).op("attention_decode").time_s for c in (cm, up))
                if abs(b / a - 1.0) < 1e-9:
                    return True
    return False


def _free_budget(solve, regime, trial, idx, bounds, by=None):
    """The budget's solve with the budget itself free within ``bounds`` (started at the grid point
    that won), then held at the whole row count nearest its optimum: the profile's integer field."""
    free = solve(regime, {**_start(trial), "budget": float(np.log(regime[1]))}, idx, bounds, by)
    b = int(round(free[3](free[0].x)[2][1]))
    return solve(("budget", b), _start(free), idx, by=by)


def _by_session(solve, best, regime, steps: pd.DataFrame, idx, warns: list):
    """The fit with one s_rows per recording session (the table's ``session`` column): sessions
    with a prefill step past the regime get their own, the one with most such steps keeps s_rows,
    and a budget is searched again (grid, then freed) with them. Returns (solve, sessions)."""
    sub = steps.iloc[idx] if isinstance(idx, slice) and idx != slice(None) else steps
    lab = sub["session"].astype(str).to_numpy()
    past = (sub["prefill_seqs"].to_numpy() > 0) & (sub["rows"].to_numpy() > regime[1])
    counts = {k: int((past & (lab == k)).sum()) for k in sorted(set(lab))}
    seen = [k for k, c in counts.items() if c]
    for k in (k for k, c in counts.items() if not c):
        warns.append(f"session {k}: no prefill step past the rows regime; its s_rows is the reference session's")
    if len(seen) < 2:
        warns.append("one session past the rows regime: no scale per session")
        return best, {}
    ref = max(seen, key=lambda k: counts[k])
    by = (lab, [k for k in seen if k != ref])
    start = _start(best)
    if regime[0] == "budget":
        trials = {b: solve(("budget", b), start, idx, by=by) for b in budget_grid(sub)}
        b = min(trials, key=lambda k: trials[k][0].cost)
        best = _free_budget(solve, ("budget", b), trials[b], idx, budget_bounds(sub, b), by)
    else:
        best = solve(regime, start, idx, by=by)
    return best, {"reference": ref, "sessions": sorted(counts)}


def _start(solution) -> dict:
    """A solve's free parameters -> values, to warm-start another solve from."""
    return dict(zip(solution[1], solution[0].x))


def _unseen_host_terms(cols: np.ndarray) -> list[tuple[str, str]]:
    """(host term, why) for each host term the steps cannot tell apart from the others."""
    seqs, pseqs, has = cols[:, 1], cols[:, 2], cols[:, 3] > 0
    out = []
    if not has.any():
        out += [
            ("host_per_prefill_seq_s", "no step has a prefill sequence"),
            ("host_prefill_step_s", "no step has a prefill sequence"),
        ]
    elif has.all():
        out.append(("host_prefill_step_s", "every step has a prefill sequence (it is host_step_s)"))
    elif np.ptp(pseqs[has]) == 0:
        out.append(
            ("host_prefill_step_s", "every prefill step has as many prefill sequences (it is host_per_prefill_seq_s)")
        )
    if np.ptp(seqs) == 0:
        out.append(("host_per_seq_s", "every step has the same number of sequences"))
    return out


def _rel_sigma(res, free, values, n) -> dict:
    """1σ of each free parameter relative to its value, from inv(JᵀJ)·s² (x is ln s for the scales,
    host/median(t) for the host terms)."""
    out = {p: np.inf for p in free}
    J = res.jac
    dof = max(n - len(free), 1)
    s2 = 2.0 * res.cost / dof
    try:
        cov = np.linalg.inv(J.T @ J) * s2
    except np.linalg.LinAlgError:
        return out
    for j, p in enumerate(free):
        sd = float(np.sqrt(max(cov[j, j], 0.0)))
        out[p] = sd if p in SCALES else (sd / res.x[j] if res.x[j] > 0 else np.inf)
    return out


def predict_steps(steps: pd.DataFrame, model, hw: Hardware, tp: int | None = None, overlap: bool = False) -> np.ndarray:
    """Seconds per step as the simulator prices each batch with ``hw`` (a fitted profile), host
    time included (calibration/step_pricing.py); ``model`` and ``tp`` as fit_steps takes them (a
    dict of models by the table's model column; tp None: the table's tp column)."""
    out = np.empty(len(steps))
    for (_, g_tp, spec), pos in joint_groups(steps, model, tp).items():
        out[pos] = price_steps(steps.iloc[pos], spec, hw, g_tp, overlap)
    return out
