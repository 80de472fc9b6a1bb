"""Fit the step model's few constants to step-level timings (calibration/step_timings.py).

A step costs what ``CostModel`` prices (costmodel/roofline.py) plus the engine's host time
(costmodel/host.py). Kernel tables fix the operator shapes; step timings can only tell a few
constants apart, so this fits these:

  s_π, s_β       scale factors on the base profile's π (pi_eff) and β (beta_eff and beta_attn): every
                 operator's compute time F/π becomes F/(s_π·π), memory time B/(s_β·β)
  s_π,attn       the scale on attention's π (pi_attn): the engine's attention kernels need not run at
                 its GEMMs' efficiency (BLOOM's ALiBi bias kept an engine off FlashAttention); tied to
                 s_π when quartering attention's π moves no step by ATTN_SHARE (not identified)
  host_step_s, host_per_seq_s, host_per_prefill_seq_s, host_prefill_step_s   the host terms
                 (costmodel/host.py)

  t = Σ_ops combine(F/(s_π π), B/(s_β β), floor) + overhead + allreduce + step_overhead + host      (serial)
  t = max(GPU, host)                                                               (``overlap=True``)

with combine the base profile's (max, or quadrature). Residuals are ln(t_model/t_measured) under
a soft-l1 loss, as for kernels (calibration/fit.py). Physical bounds: no fitted π above the
spec sheet's peak_flops, no β above its peak_bandwidth; a fit that presses against them says so
and is clamped there. A parameter no step can see (no prefill steps: host_per_prefill_seq_s and
host_prefill_step_s; one batch size only: host_per_seq_s against host_step_s; every step with a
prefill, or every prefill step with as many prefill sequences: host_prefill_step_s against
host_step_s or host_per_prefill_seq_s) is held at 0 and reported.

A second GEMM regime in rows: measured prefills need not follow one π. Splitwise's BLOOM-176B
tp 8 steps cost the same per token at any split of the rows into prompts (512×16 ≈ 8192×1,
512×8 ≈ 4096×1) but 25–30 % more per token above 2048 rows than at 2048, on A100 and H100 alike,
which no tile or wave count can do (those only make a row cheaper as rows grow). So the fit also
tries a break: GEMMs of more rows than b run at s_rows·π (s_rows ≤ 1),

  b ∈ {2^k}: powers of two with at least two distinct prefill row counts of the fit set on each side

fitting every candidate and keeping the best only if it pays for its two parameters (BIC on the
loss) and moves π by at least MIN_REGIME. The result goes to the profile as gemm_rows_break /
gemm_rows_pi_scale (costmodel/roofline.py, ``_pi_rows``), so a simulation prices the regime the fit saw.
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
from .rows_regime import MIN_REGIME, pays, pick_break, rows_breaks, screen, subset
from .step_timings import STEP_COLUMNS

PARAMS = ("s_pi", "s_beta", "s_pi_attn", "s_rows", "host_step_s", "host_per_seq_s", "host_per_prefill_seq_s",
          "host_prefill_step_s")
SCALES = PARAMS[:4]
HOST = PARAMS[4:]
ATTN_SHARE = 0.05
LOG_LOW = np.log(1e-3)
AT_BOUND = 1e-3   # relative distance from a bound that counts as pressing on it
GEMMS = ("linear", "moe_experts", "embedding", "lm_head")   # the ops priced at CostModel._pi_rows


@dataclass(frozen=True)
class StepTerms:
    """Per step, per operator, the base profile's compute and memory seconds, and the constants."""
    tc: np.ndarray        # (steps, ops) F/π at the base profile
    tm: np.ndarray        # (steps, ops) B/β at the base profile
    floor: np.ndarray     # (ops,)
    over: np.ndarray      # (ops,)
    const: np.ndarray     # (steps,) allreduce + step_overhead
    host_cols: np.ndarray  # (steps, 4): 1, seqs, prefill_seqs, [prefill_seqs > 0]
    quadrature: bool
    gemm_rows: np.ndarray = None   # (steps, ops): rows of each op's GEMM (0: not a GEMM on pi_eff)


def step_terms(steps: pd.DataFrame, cm: CostModel) -> StepTerms:
    """What ``cm`` charges each step, split so that π and β can be scaled (vectorized over steps;
    the weight operators once per distinct (rows, seqs))."""
    hw = cm.hw
    rows, seqs = steps["rows"].to_numpy(np.int64), steps["seqs"].to_numpy(np.int64)
    keys, inv = np.unique(np.stack([rows, seqs], 1), axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    names, per_key = None, []
    for r, s in keys:
        terms = cm._weight_terms(int(r), int(s))
        names = names or [t[0] for t in terms]
        per_key.append([(fl / pi, by / beta) for _, fl, by, pi, beta, _, _ in terms])
    w = np.array(per_key)                                   # (keys, ops, 2)
    base = cm._weight_terms(1, 1)
    floor = [t[5] for t in base] + [cm.floor_attn] * 2
    over = [t[6] for t in base] + [cm.over_layers] * 2
    pa, ba = hw.pi_attention, hw.beta_attention
    att_c = np.stack([cm.attn_coef * steps["prefill_pairs"].to_numpy(float) / pa,
                      cm.attn_coef * steps["decode_pairs"].to_numpy(float) / pa], 1)
    att_m = np.stack([cm.kv_coef * steps["prefill_kv"].to_numpy(float) / ba,
                      cm.kv_coef * steps["decode_kv"].to_numpy(float) / ba], 1)
    tc = np.concatenate([w[inv, :, 0], att_c], 1)
    tm = np.concatenate([w[inv, :, 1], att_m], 1)
    # an attention operator is charged only when the step has such sequences (its floor/overhead too)
    has = np.concatenate([np.ones((len(rows), len(base)), bool),
                          np.stack([steps["prefill_kv"].to_numpy() > 0, steps["decode_kv"].to_numpy() > 0], 1)], 1)
    const = np.array([cm.allreduce_s(int(r)) for r in keys[:, 0]])[inv] + hw.step_overhead_s
    pseqs = steps["prefill_seqs"].to_numpy(float)
    host = np.stack([np.ones(len(rows)), seqs.astype(float), pseqs, (pseqs > 0).astype(float)], 1)
    floor_m = np.where(has, np.array(floor), 0.0)
    over_m = np.where(has, np.array(over), 0.0)
    gemm = np.zeros(tc.shape)
    for j, name in enumerate(names):
        if name in GEMMS:
            gemm[:, j] = seqs if (name == "lm_head" and cm.counting != "seed") else rows
    return StepTerms(np.where(has, tc, 0.0), np.where(has, tm, 0.0), floor_m, over_m, const, host, cm.quadrature, gemm)


def step_times(terms: StepTerms, s_pi: float, s_beta: float, host, overlap: bool = False,
               s_pi_attn: float | None = None, rows_break: int = 0, s_rows: float = 1.0) -> np.ndarray:
    """Seconds per step at these constants (host: the HOST terms; attention's π scale is
    s_pi unless s_pi_attn is given; GEMMs of more rows than ``rows_break`` at s_rows·s_pi). The
    last two operators are attention's."""
    a, m = terms.tc / s_pi, terms.tm / s_beta
    if rows_break and s_rows != 1.0:
        a = np.where(terms.gemm_rows > rows_break, a / s_rows, a)
    if s_pi_attn is not None and s_pi_attn != s_pi:
        a[:, -2:] = terms.tc[:, -2:] / s_pi_attn
    op = np.sqrt(a * a + m * m) if terms.quadrature else np.maximum(a, m)
    gpu = (np.maximum(op, terms.floor) + terms.over).sum(1) + terms.const
    h = terms.host_cols @ np.asarray(host, dtype=float)
    return np.maximum(gpu, h) if overlap else gpu + h


@dataclass(frozen=True)
class StepFit:
    values: dict                 # PARAMS -> fitted value (SI; scales dimensionless)
    rel_sigma: dict              # PARAMS -> 1σ / value (inf where not identified)
    base: Hardware
    tp: int
    overlap: bool
    errors: pd.DataFrame         # per kind: n, mape, median_ape, p90_ape on the fitted steps
    warnings: tuple[str, ...]
    seconds: float
    points: int
    sources: tuple = field(default=())
    rows_break: int = 0          # GEMMs of more rows run at s_rows·s_pi·π (0: one regime)

    @property
    def pi_eff(self) -> float:
        return self.values["s_pi"] * self.base.pi_eff

    @property
    def beta_eff(self) -> float:
        return self.values["s_beta"] * self.base.beta_eff

    def hardware(self, name: str | None = None) -> Hardware:
        """The base profile with π, β (and attention's) scaled and the host terms set."""
        b, v = self.base, self.values
        tied = v["s_pi_attn"] == v["s_pi"]
        return b.replace(
            name=name or f"{b.name}-steps", pi_eff=self.pi_eff, beta_eff=self.beta_eff,
            pi_attn=(b.pi_attn * v["s_pi"] if b.pi_attn else None) if tied else b.pi_attention * v["s_pi_attn"],
            beta_attn=b.beta_attn * v["s_beta"] if b.beta_attn else None,
            **{k: float(v[k]) for k in HOST},
            **({"gemm_rows_break": int(self.rows_break), "gemm_rows_pi_scale": float(v["s_rows"])} if self.rows_break else {}),
            description=f"{b.description or b.name}, step-calibrated",
            notes=f"pi_eff, beta_eff (x{v['s_pi']:.4g}, x{v['s_beta']:.4g} of {b.name}), attention's π "
                  f"(x{v['s_pi_attn']:.4g}), "
                  + (f"GEMMs above {self.rows_break} rows at x{v['s_rows']:.4g} π, " if self.rows_break else "")
                  + f"and the host terms fitted "
                  f"to {self.points} step timings by chunksim calibrate; the other fields are {b.name}'s.",
            calibration=self._calibration())

    def _calibration(self) -> dict:
        """The step fit's record; a kernel fit the base carried is kept beside it without its
        covariance, whose π and β the scales have moved (so no parameter draws are offered)."""
        kernel = {k: v for k, v in (self.base.calibration or {}).items() if k != "log_covariance"}
        return {"step_fit": self.record(), **({"kernel_fit": kernel} if kernel else {})}

    def record(self) -> dict:
        return {"parameters": {k: {"value": float(self.values[k]),
                                   "rel_sigma": float(self.rel_sigma[k]) if np.isfinite(self.rel_sigma[k]) else None}
                               for k in PARAMS},
                "gemm_rows_break": int(self.rows_break), "overlap_host": self.overlap, "tp": self.tp, "points": self.points,
                "errors_percent": self.errors.to_dict("records"), "warnings": list(self.warnings),
                "sources": list(self.sources), "fit_seconds": self.seconds,
                "method": "scipy.optimize.least_squares on ln(t_model/t_measured), soft_l1 loss; "
                          "π, β bounded by the spec peaks"}

    def table(self) -> pd.DataFrame:
        units = {**{k: "x" for k in SCALES}, **{k: "s" for k in HOST}}
        return pd.DataFrame([{"parameter": k, "value": self.values[k], "unit": units[k],
                              "rel_sigma": self.rel_sigma[k]} for k in PARAMS])


def errors_by_kind(pred: np.ndarray, steps: pd.DataFrame) -> pd.DataFrame:
    meas = steps["time_s"].to_numpy(float)
    return pd.DataFrame([{"kind": k, **ape_stats(pred[idx], meas[idx])}
                         for k, idx in steps.groupby("kind").indices.items()])


def _upper(base: Hardware, tied: bool) -> tuple[float, float, float]:
    """Largest scales (s_pi, s_beta, s_pi_attn) that keep every π below peak_flops and every β
    below peak_bandwidth (s_pi carries attention's π too when the two are tied)."""
    pi = base.peak_flops / (max(base.pi_eff, base.pi_attention) if tied else base.pi_eff)
    return pi, base.peak_bandwidth / max(base.beta_eff, base.beta_attention), base.peak_flops / base.pi_attention


def fit_steps(steps: pd.DataFrame, model: ModelSpec, base: Hardware, tp: int | None = None, overlap: bool = False,
              fixed: dict | None = None) -> StepFit:
    """Fit PARAMS (minus those in ``fixed``, held at the given values) to the step table, with a
    GEMM rows regime where one pays for itself (module docstring)."""
    t0 = time.perf_counter()
    missing = [c for c in STEP_COLUMNS if c not in steps.columns]
    require(not missing, "steps:columns", missing, "not a step table (costmodel/calibration/step_timings.py)")
    tps = sorted(set(steps["tp"].astype(int)))
    tp = int(tp or (tps[0] if len(tps) == 1 else 0))
    require(tps == [tp], "tp", tps, f"the steps were measured at tp {tps}; fit one tensor-parallel size at a time")
    require(len(steps) >= 3, "steps", len(steps), "need at least 3 step timings")
    cm = CostModel(model, base, tp)
    terms = step_terms(steps, cm)
    t = steps["time_s"].to_numpy(float)
    scale = float(np.median(t))
    fixed = dict(fixed or {})
    warns = []
    zero = [0.0] * len(HOST)
    moved = step_times(terms, 1.0, 1.0, zero, overlap, 0.25) / step_times(terms, 1.0, 1.0, zero, overlap) - 1.0
    tied = "s_pi_attn" not in fixed and not (moved >= ATTN_SHARE).any()
    if tied:
        warns.append(f"s_pi_attn not identified: quartering attention's π moves no step by {ATTN_SHARE:.0%}; tied to s_pi")
    up = dict(zip(SCALES, _upper(base, tied) + (1.0,)))
    for k, why in _unseen_host_terms(terms.host_cols):
        if k not in fixed:
            fixed[k] = 0.0
            warns.append(f"{k} not identified: {why}; held at 0")
    breaks = [] if ("s_rows" in fixed or base.gemm_rows_break) else rows_breaks(steps)

    def solve(brk: int, start=None, idx=slice(None)):
        tm, tt = subset(terms, idx), t[idx]
        fx = dict(fixed) if brk else {**fixed, "s_rows": 1.0}
        free = [p for p in PARAMS if p not in fx and not (tied and p == "s_pi_attn")]

        def unpack(x):
            v = dict(fx)
            v.update(zip(free, x))
            sc = [np.exp(v[k]) if k in free else v.get(k) for k in SCALES]
            if tied:
                sc[2] = sc[0]
            return sc, [v[k] * (scale if k in free else 1.0) for k in HOST]

        def resid(x):
            (s_pi, s_beta, s_pa, s_rows), host = unpack(x)
            return np.log(step_times(tm, s_pi, s_beta, host, overlap, s_pa, brk, s_rows) / tt)

        lo = [LOG_LOW if p in SCALES else 0.0 for p in free]
        hi = [np.log(up[p]) if p in SCALES else np.inf for p in free]
        x0 = [min(0.0, h - 1e-6) if p in SCALES else 0.01 for p, h in zip(free, hi)]
        if start is not None:   # the one-regime solution, s_rows at 1
            x0 = [float(np.clip(start.get(p, -1e-6), lo_, h - 1e-6)) for p, lo_, h in zip(free, lo, hi)]
        res = least_squares(resid, x0, bounds=(lo, hi), loss=LOSS, f_scale=F_SCALE, method="trf", x_scale="jac")
        return res, free, hi, unpack

    n = len(t)
    idx = screen(n)
    sub = solve(0, None, idx)
    brk, sub_brk = pick_break(solve, breaks, sub, len(t[idx]), idx)
    best = sub if idx == slice(None) else solve(0, _start(sub), slice(None))
    if brk:
        trial = sub_brk if idx == slice(None) else solve(brk, _start(sub_brk))
        s_rows = trial[3](trial[0].x)[0][3]
        brk = brk if pays(trial[0].cost, best[0].cost, n) and s_rows < 1.0 - MIN_REGIME else 0
        best = trial if brk else best
    res, free, hi, unpack = best
    if breaks and not brk:
        warns.append("no GEMM rows regime: no break in rows paid for its two parameters (BIC); held at one π")
    (s_pi, s_beta, s_pa, s_rows), host = unpack(res.x)
    host = [h if h > 1e-9 * scale else 0.0 for h in host]   # at the bound: zero, not a denormal
    values = {"s_pi": float(s_pi), "s_beta": float(s_beta), "s_pi_attn": float(s_pa), "s_rows": float(s_rows),
              **{k: float(h) for k, h in zip(HOST, host)}}
    for p, x, h in zip(free, res.x, hi):
        if p in SCALES[:3] and x >= h - AT_BOUND:
            what = {"s_pi": "pi_eff at peak_flops", "s_beta": "beta_eff at peak_bandwidth",
                    "s_pi_attn": "pi_attn at peak_flops"}[p]
            warns.append(f"{p} pressed against the spec sheet and was clamped: {what}")
    rel = _rel_sigma(res, free, values, n)
    for p in free:
        if p in HOST and values[p] == 0.0:
            rel[p] = np.inf
            warns.append(f"{p} fitted at its bound 0")
    rel.update({p: np.inf for p in PARAMS if p not in free})
    pred = step_times(terms, s_pi, s_beta, host, overlap, s_pa, brk, s_rows)
    return StepFit(values, rel, base, tp, overlap, errors_by_kind(pred, steps), tuple(warns),
                   time.perf_counter() - t0, n, tuple(sorted({s.rsplit(":", 1)[0] for s in steps["source"]})), brk)


def _start(solution) -> dict:
    """A solve's free parameters -> values, to warm-start another solve from."""
    return dict(zip(solution[1], solution[0].x))


def _unseen_host_terms(cols: np.ndarray) -> list[tuple[str, str]]:
    """(host term, why) for each host term the steps cannot tell apart from the others."""
    seqs, pseqs, has = cols[:, 1], cols[:, 2], cols[:, 3] > 0
    out = []
    if not has.any():
        out += [("host_per_prefill_seq_s", "no step has a prefill sequence"),
                ("host_prefill_step_s", "no step has a prefill sequence")]
    elif has.all():
        out.append(("host_prefill_step_s", "every step has a prefill sequence (it is host_step_s)"))
    elif np.ptp(pseqs[has]) == 0:
        out.append(("host_prefill_step_s", "every prefill step has as many prefill sequences "
                                           "(it is host_per_prefill_seq_s)"))
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
    """Seconds per step priced by ``hw`` (a fitted profile): the same arithmetic as the fit."""
    terms = step_terms(steps, CostModel(model, hw, tp))
    return step_times(terms, 1.0, 1.0, [getattr(hw, k) for k in HOST], overlap)
