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

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from ..errors import require
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
    "host_step_s",
    "host_per_seq_s",
    "host_per_prefill_seq_s",
    "host_prefill_step_s",
)
SCALES = PARAMS[:4]
HOST = PARAMS[4:]
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

    def gpu(self, s_pi, s_beta, s_pa, regime, s_rows) -> np.ndarray:
        key = (s_pi, s_beta, s_pa, regime, s_rows)
        g = self.memo.get(key)
        if g is None:
            if len(self.memo) > 16:
                self.memo.clear()
            g = self.memo[key] = np.full(len(self.shapes.batches), np.nan)
        miss = self.used[np.isnan(g[self.used])]
        if len(miss):
            kind, n = regime
            hw = scaled_hardware(
                self.base, s_pi, s_beta, s_pa, n if kind == "break" else 0, s_rows, budget=n if kind == "budget" else 0
            )
            g[miss] = batch_times(self.shapes, self.model, hw, self.tp, miss, self.used)
        return g[self.shapes.inv]

    def times(self, scales, host, overlap: bool, regime=NONE) -> np.ndarray:
        s_pi, s_beta, s_pa, s_rows = scales
        regime = regime if regime[1] else NONE
        return with_host(self.gpu(s_pi, s_beta, s_pa, regime, s_rows if regime[1] else 1.0), self.shapes, host, overlap)

    def part(self, idx) -> _Pricer:
        return (
            self if idx == slice(None) else _Pricer(subset(self.shapes, idx), self.model, self.base, self.tp, self.memo)
        )


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
            [v[k] for k in HOST],
            self.rows_budget,
        )
        return hw.replace(
            name=name or f"{b.name}-steps",
            description=f"{b.description or b.name}, step-calibrated",
            notes=f"FLOP rates, HBM rates (x{v['s_pi']:.4g}, x{v['s_beta']:.4g} of {b.name}), attention's FLOP rates "
            f"(x{v['s_pi_attn']:.4g}), "
            + (f"GEMMs above {self.rows_break} rows at x{v['s_rows']:.4g} π, " if self.rows_break else "")
            + (f"a step's GEMM rows past {self.rows_budget} at x{v['s_rows']:.4g} π, " if self.rows_budget else "")
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
        units = {**{k: "x" for k in SCALES}, **{k: "s" for k in HOST}}
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
    model: ModelSpec,
    base: Hardware,
    tp: int | None = None,
    overlap: bool = False,
    fixed: dict | None = None,
    sessions: bool = False,
) -> StepFit:
    """Fit PARAMS (minus those in ``fixed``, held at the given values) to the step table, with a
    GEMM rows regime where one pays for itself (module docstring); ``sessions``: one s_rows per
    value of the table's ``session`` column (``by_session``)."""
    t0 = time.perf_counter()
    missing = [c for c in STEP_COLUMNS if c not in steps.columns]
    require(not missing, "steps:columns", missing, "not a step table (costmodel/calibration/step_timings.py)")
    tps = sorted(set(steps["tp"].astype(int)))
    tp = int(tp or (tps[0] if len(tps) == 1 else 0))
    require(tps == [tp], "tp", tps, f"the steps were measured at tp {tps}; fit one tensor-parallel size at a time")
    require(len(steps) >= 3, "steps", len(steps), "need at least 3 step timings")
    require(
        not sessions or "session" in steps.columns,
        "sessions",
        list(steps.columns),
        "the step table has no session column",
    )
    shapes = step_shapes(steps)
    pricer = _Pricer(shapes, model, base, tp)
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
                [v[k] * (scale if k in free else 1.0) for k in HOST],
                (("budget", float(np.exp(v["budget"]))) if free_budget else regime),
                {k: float(np.exp(v[f"s_rows@{k}"])) for k in own},
            )

        def resid(x):
            scales, host, reg, by_label = unpack(x)
            scales = [float(v) for v in scales]
            out = pr.times(scales, host, overlap, reg)
            for k, s_k in by_label.items():
                at = labels == k
                out[at] = pr.times(scales[:3] + [s_k], host, overlap, reg)[at]
            return np.log(out / tt)

        rows_scale = lambda p: p in SCALES or p.startswith("s_rows@")  # noqa: E731
        lo = [LOG_LOW if rows_scale(p) else np.log(free_budget[0]) if p == "budget" else 0.0 for p in free]
        hi = [
            np.log(up[p.split("@")[0]]) if rows_scale(p) else np.log(free_budget[1]) if p == "budget" else np.inf
            for p in free
        ]
        x0 = [min(0.0, h - 1e-6) if p in SCALES else 0.01 for p, h in zip(free, hi)]
        if start is not None:  # the one-regime solution, s_rows at 1
            x0 = [float(np.clip(start.get(p, -1e-6), lo_, h - 1e-6)) for p, lo_, h in zip(free, lo, hi)]
        res = least_squares(resid, x0, bounds=(lo, hi), loss=LOSS, f_scale=F_SCALE, method="trf", x_scale="jac")
        return res, free, hi, unpack

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
    (s_pi, s_beta, s_pa, s_rows), host, regime, by_label = unpack(res.x)
    host = [h if h > 1e-9 * scale else 0.0 for h in host]  # at the bound: zero, not a denormal
    if by_session:
        by_session = {k: by_label.get(k, float(s_rows)) for k in by_session["sessions"]}
    values = {
        "s_pi": float(s_pi),
        "s_beta": float(s_beta),
        "s_pi_attn": float(s_pa),
        "s_rows": float(s_rows),
        **{k: float(h) for k, h in zip(HOST, host)},
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
        if p in HOST and values[p] == 0.0:
            rel[p] = np.inf
            warns.append(f"{p} fitted at its bound 0")
    rel.update({p: np.inf for p in PARAMS if p not in free})
    pred = pricer.times((float(s_pi), float(s_beta), float(s_pa), float(s_rows)), host, overlap, regime)
    kind, at = regime
    if by_session:
        lab = steps["session"].astype(str).to_numpy()
        for k, s_k in by_session.items():
            mine = lab == k
            pred[mine] = pricer.times((float(s_pi), float(s_beta), float(s_pa), s_k), host, overlap, regime)[mine]
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
    )


LOW_BETA_START = float(np.log(0.5))
"""A second start for s_beta, from below: where a unit-model decode is bound by its thread blocks'
flow (min(β, flow), costmodel/decode_units.py) the residuals do not move with s_beta, so a solve
from s_beta = 1 can stop on that flat side with the host terms absorbing the rest; the lower of the
two solutions is kept. Tried only when the first solution has such a decode (``_flat_decodes``)."""
BETA_STEP = 1e-3


def _attention_moves(pricer: _Pricer, overlap: bool) -> bool:
    """Whether quartering attention's π moves some step by ATTN_SHARE (else s_pi_attn is tied)."""
    zero = [0.0] * len(HOST)
    moved = pricer.times((1.0, 1.0, 0.25, 1.0), zero, overlap) / pricer.times((1.0, 1.0, 1.0, 1.0), zero, overlap) - 1.0
    return bool((moved >= ATTN_SHARE).any())


def _flat_decodes(pricer: _Pricer, scales) -> bool:
    """Whether the unit decode model (costmodel/decode_units.py) prices some decode of these steps at
    these scales with an attention time that s_beta does not move (raised by BETA_STEP): one bound
    by its thread blocks' flow."""
    s_pi, s_beta, s_pa, _ = (float(v) for v in scales)
    cm = CostModel(pricer.model, scaled_hardware(pricer.base, s_pi, s_beta, s_pa), pricer.tp)
    if not cm.units:
        return False
    up = CostModel(pricer.model, scaled_hardware(pricer.base, s_pi, s_beta * (1 + BETA_STEP), s_pa), pricer.tp)
    for j in pricer.used:
        q, kv, d, tok = pricer.shapes.batches[j]
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


def predict_steps(steps: pd.DataFrame, model: ModelSpec, hw: Hardware, tp: int, overlap: bool = False) -> np.ndarray:
    """Seconds per step as the simulator prices each batch with ``hw`` (a fitted profile), host
    time included (calibration/step_pricing.py)."""
    return price_steps(steps, model, hw, tp, overlap)
