"""Chunk or disaggregate: colocated chunked prefill against xPyD splits, by goodput per GPU.

The seed's question ("chunked prefill is the single-node answer; disaggregation is the
multi-node one") asked of one workload, two SLOs and a GPU budget. Each candidate is a
deployment unit that fits the budget: one colocated replica of ``tp`` GPUs at a token budget
(vLLM's ``max_num_batched_tokens``, SGLang's ``chunked_prefill_size``), or a disaggregated split
of ``x`` prefill replicas of ``tp_p`` GPUs and ``y`` decode replicas of ``tp_d`` GPUs of the same
engine (simcore/disagg.py, vLLM with a NixlConnector; simcore/disagg_sglang.py, SGLang's
``--disaggregation-mode`` servers on mooncake). A
unit is simulated alone; a budget of N GPUs runs N // gpus copies of it behind a balancing router,
so its goodput per GPU is the unit's.

Goodput is DistServe's (Zhong et al., OSDI'24, §2): the highest request rate at which at least
``attainment`` of the requests meet both SLOs, found by doubling then bisecting the rate on
the same workload rescaled (one seed, so attainment falls with the rate rather than with the
draw); divided by the unit's GPUs. A request meets the TTFT SLO when its TTFT is within it, the
ITL SLO when its TPOT (DistServe's per-request mean) or, with ``itl_per_request="max"``, every
gap is within it; a rejected request meets neither. Just above the goodput rate, the SLO met by
fewer requests is the one that binds.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import pandas as pd

from costmodel.errors import require

ENGINES = ("vllm", "sglang")
BUDGET_FLAG = {"vllm": "max_num_batched_tokens", "sglang": "chunked_prefill_size"}
ITL_PER_REQUEST = ("mean", "max")
DEFAULT_WORKLOAD = {"kind": "chat_with_long_prompts", "num_prompts": 300, "output_len": 128}
"""Seed 000's chat traffic (512-token prompts, a 32k-token prompt every 100th) with 128-token answers:
short lives keep a 20-candidate study within a minute and the runs long against them."""


@dataclass(frozen=True)
class Candidate:
    """A deployment unit: colocated (``tp``, ``budget``) or disaggregated (x prefill of tp_p, y decode of tp_d)."""

    kind: str  # colocated | disaggregated
    tp: int = 1
    budget: int | None = None  # colocated: the engine's token budget (None: the engine's default)
    prefill: int = 0
    prefill_tp: int = 0
    decode: int = 0
    decode_tp: int = 0

    @property
    def gpus(self) -> int:
        return self.tp if self.kind == "colocated" else self.prefill * self.prefill_tp + self.decode * self.decode_tp

    @property
    def label(self) -> str:
        if self.kind == "colocated":
            return f"colocated tp{self.tp} budget {self.budget if self.budget else 'default'}"
        tps = f"tp{self.prefill_tp}" if self.prefill_tp == self.decode_tp else f"tp{self.prefill_tp}/{self.decode_tp}"
        return f"{self.prefill}P{self.decode}D {tps}"


@dataclass(frozen=True)
class StudySpec:
    """The question: a workload section (its request_rate is searched), SLOs, a GPU budget, the
    candidates' axes (token budgets, TP degrees), and the search's precision."""

    gpus: int
    ttft_slo_ms: float
    itl_slo_ms: float
    workload: dict = field(default_factory=lambda: dict(DEFAULT_WORKLOAD))
    model: str = "llama-3.1-8b"
    hardware: str = "h100"
    budgets: tuple = (512, 1024, 2048, 4096, 8192)
    tps: tuple = (1,)
    attainment: float = 0.9
    itl_per_request: str = "mean"
    seed: int = 0
    engine: str = "vllm"  # vllm or sglang: every candidate's engine
    colocated_policy: str = ""  # the engine (chunked prefill at each budget) or nochunk (whole prompts)
    prefill_flags: dict = field(default_factory=dict)  # engine flags of the prefill pool (default: engine defaults)
    decode_flags: dict = field(default_factory=dict)
    link: dict = field(default_factory=dict)  # simcore.kv_transfer.LinkConfig fields
    max_split: int = 0  # most replicas in one pool (0: as many as the GPU budget allows)
    start_rate: float = 0.0  # req/s per GPU the search starts at (0: start_rate())
    min_duration_s: float = 10.0  # a probe at rate r runs max(num_prompts, r * this) requests
    rel_tol: float = 0.05  # bisect until the failing rate is within this of the goodput rate
    disaggregated: bool = True
    colocated: bool = True

    def __post_init__(self):
        require(isinstance(self.gpus, int) and self.gpus >= 1, "--gpus", self.gpus, "must be an integer >= 1")
        require(self.ttft_slo_ms > 0, "--ttft-slo-ms", self.ttft_slo_ms, "must be positive")
        require(self.itl_slo_ms > 0, "--itl-slo-ms", self.itl_slo_ms, "must be positive")
        require(0 < self.attainment <= 1, "--attainment", self.attainment, "must be in (0, 100] percent")
        require(
            self.itl_per_request in ITL_PER_REQUEST,
            "--itl-per-request",
            self.itl_per_request,
            f"must be one of {', '.join(ITL_PER_REQUEST)}",
        )
        require(self.engine in ENGINES, "--engine", self.engine, "must be vllm or sglang")
        if not self.colocated_policy:
            object.__setattr__(self, "colocated_policy", self.engine)
        require(
            self.colocated_policy in (self.engine, "nochunk"),
            "--colocated-policy",
            self.colocated_policy,
            f"must be {self.engine} (the engine) or nochunk",
        )
        for b in self.budgets:
            require(isinstance(b, int) and b >= 1, "--budgets", b, "must be integers >= 1")
        for t in self.tps:
            require(isinstance(t, int) and t >= 1, "--tp", t, "must be integers >= 1")
        require(len(set(self.tps)) == len(self.tps), "--tp", list(self.tps), "names a value twice")
        require(len(set(self.budgets)) == len(self.budgets), "--budgets", list(self.budgets), "names a value twice")
        require(0 < self.rel_tol < 1, "--rel-tol", self.rel_tol, "must be in (0, 1)")
        require(self.start_rate >= 0, "--start-rate", self.start_rate, "must be >= 0")
        require(self.min_duration_s >= 0, "--min-duration", self.min_duration_s, "must be >= 0 (s)")
        require(self.colocated or self.disaggregated, "candidates", None, "neither colocated nor disaggregated")


def candidates(spec: StudySpec) -> list[Candidate]:
    """Every colocated (tp, budget) and every xPyD split with TP degrees from ``tps`` whose GPUs fit the budget."""
    out = []
    tps = sorted(t for t in spec.tps if t <= spec.gpus)
    require(bool(tps), "--tp", list(spec.tps), f"no TP degree fits --gpus {spec.gpus}")
    if spec.colocated:
        budgets = sorted(spec.budgets) if spec.colocated_policy != "nochunk" else [None]
        out += [Candidate("colocated", tp=t, budget=b) for t in tps for b in budgets]
    if spec.disaggregated:
        cap = spec.max_split or spec.gpus
        for tp_p in tps:
            for tp_d in tps:
                for x in range(1, cap + 1):
                    for y in range(1, cap + 1):
                        if x * tp_p + y * tp_d <= spec.gpus:
                            out.append(Candidate("disaggregated", prefill=x, prefill_tp=tp_p, decode=y, decode_tp=tp_d))
    require(bool(out), "--gpus", spec.gpus, "no candidate fits (a split needs at least 2 GPUs)")
    return out


def _run(spec: StudySpec, c: Candidate, rate: float):
    """One simulation of the unit at ``rate`` req/s: its requests frame and summary."""
    from costmodel import load_hardware, load_model
    from simcore.kv_transfer import LinkConfig
    from simcore.simulation import Simulation

    from .engines import PD_CONNECTOR, build_engine, pd_simulation
    from .sweep import build_workload

    model, hw = load_model(spec.model), load_hardware(spec.hardware)
    wl = build_workload(_sized(spec, rate), rate, spec.seed)
    if c.kind == "colocated":
        flags = {BUDGET_FLAG[spec.engine]: c.budget} if c.budget else {}
        sched, pool, cm, max_len = build_engine(spec.colocated_policy, model, hw, c.tp, flags)
        res = Simulation([(sched, pool, cm)], wl, max_model_len=max_len).run()
        return res.requests, res.summary

    def pool(n: int, tp: int, flags: dict, mode: str):
        out, max_len = [], 0
        pd = {"kv_transfer_config": PD_CONNECTOR} if spec.engine == "vllm" else {"disaggregation_mode": mode}
        for _ in range(n):
            sched, blocks, cm, max_len = build_engine(spec.engine, model, hw, tp, {**pd, **flags})
            out.append((sched, blocks, cm))
        return out, max_len

    prefill, max_len = pool(c.prefill, c.prefill_tp, spec.prefill_flags, "prefill")
    decode, _ = pool(c.decode, c.decode_tp, spec.decode_flags, "decode")
    res = pd_simulation(spec.engine)(prefill, decode, wl, LinkConfig(**spec.link), max_model_len=max_len).run()
    return res.requests, res.summary


def _sized(spec: StudySpec, rate: float) -> dict:
    """The workload at ``rate`` with enough requests to span ``min_duration_s`` of arrivals: a short
    burst at a high rate ends before the queues it builds would grow, and would pass any SLO. The
    count depends on the rate alone (never the SLOs), so every SLO sees the same runs."""
    w = dict(spec.workload)
    if w.get("kind") == "trace" or not spec.min_duration_s:
        return w
    w["num_prompts"] = max(int(w.get("num_prompts", 1000)), math.ceil(rate * spec.min_duration_s))
    return w


def attainment(df: pd.DataFrame, ttft_slo_ms: float, itl_slo_ms: float, itl_per_request: str = "mean") -> dict:
    """Shares of requests meeting the TTFT SLO, the ITL SLO, and both (a request that did not finish
    meets neither; one with a single output token has no gap and meets the ITL SLO)."""
    n = len(df)
    done = df.finish_s.notna().to_numpy()
    ttft_ok = done & (df.ttft_s.to_numpy() * 1e3 <= ttft_slo_ms)
    gap = (df.tpot_s if itl_per_request == "mean" else df.max_itl_s).to_numpy() * 1e3
    itl_ok = done & (np.isnan(gap) | (gap <= itl_slo_ms))
    share = (lambda m: float(m.sum()) / n) if n else (lambda m: 0.0)
    return {"ttft": share(ttft_ok), "itl": share(itl_ok), "both": share(ttft_ok & itl_ok)}


def _probe(spec: StudySpec, c: Candidate, rate: float) -> dict:
    df, s = _run(spec, c, rate)
    a = attainment(df, spec.ttft_slo_ms, spec.itl_slo_ms, spec.itl_per_request)
    keep = ("p90_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p90_tpot_ms", "p99_itl_ms", "output_throughput")
    return {"rate": rate, "meets": a["both"] >= spec.attainment, **{f"attain_{k}": v for k, v in a.items()}} | {
        k: s.get(k) for k in keep
    }


def goodput(spec: StudySpec, c: Candidate, max_steps: int = 12) -> dict:
    """The highest rate meeting the attainment (doubling or halving from the start rate, then
    geometric bisection to ``rel_tol``), with the figures at that rate and which SLO binds above it."""
    t0 = time.perf_counter()
    rate = (spec.start_rate or 1.0) * c.gpus
    probes = [_probe(spec, c, rate)]
    good = probes[0] if probes[0]["meets"] else None
    bad = None if good else probes[0]
    for _ in range(max_steps):  # bracket
        if good is not None and bad is not None:
            break
        p = _probe(spec, c, rate * 2 if good is not None else rate / 2)
        rate = p["rate"]
        probes.append(p)
        if p["meets"]:
            good = p
        else:
            bad = p
    while good is not None and bad is not None and bad["rate"] / good["rate"] > 1 + spec.rel_tol:
        p = _probe(spec, c, math.sqrt(good["rate"] * bad["rate"]))
        probes.append(p)
        if p["meets"]:
            good = p
        else:
            bad = p
    rec = {"candidate": c.label, **asdict(c), "gpus": c.gpus, "probes": len(probes)}
    if good is None:
        rec.update(goodput=0.0, goodput_per_gpu=0.0, binds=_binds(bad, spec), note="no rate searched meets the SLOs")
    else:
        rec.update(
            goodput=good["rate"],
            goodput_per_gpu=good["rate"] / c.gpus,
            **{k: v for k, v in good.items() if k not in ("rate", "meets")},
        )
        rec["binds"] = _binds(bad, spec) if bad is not None else "neither (no failing rate found)"
        if bad is not None:
            rec["above_attain_ttft"], rec["above_attain_itl"] = bad["attain_ttft"], bad["attain_itl"]
            rec["failing_rate"] = bad["rate"]
    rec["copies"] = spec.gpus // c.gpus
    rec["cluster_goodput"] = rec["goodput"] * rec["copies"]
    rec["wall_s"] = time.perf_counter() - t0
    return rec


def _binds(bad: dict | None, spec: StudySpec) -> str:
    if bad is None:
        return "-"
    t, i = bad["attain_ttft"], bad["attain_itl"]
    if t < spec.attainment <= i:
        return "TTFT"
    if i < spec.attainment <= t:
        return "ITL"
    return "TTFT" if t < i else "ITL" if i < t else "both"


def start_rate(spec: StudySpec) -> float:
    """Where the search starts, req/s per GPU, from the model, GPU and workload alone (never the SLOs):
    the power of two below a rough capacity, prompt and output tokens at the effective FLOP rate
    plus a decode step's weight read shared by 64 decoders per output token."""
    from costmodel import load_hardware, load_model

    from .sweep import build_workload

    model, hw = load_model(spec.model), load_hardware(spec.hardware)
    wl = build_workload(spec.workload, 1.0, spec.seed)
    p, o = float(np.mean(wl.prompt_len)), float(np.mean(wl.output_len))
    per_request = 2 * model.P * (p + o) / hw.pi_eff + o * model.weight_bytes / (hw.beta_eff * 64)
    return float(2.0 ** math.floor(math.log2(1 / per_request)))


def _job(args: tuple) -> dict:
    spec_json, cand = args
    spec = StudySpec(**json.loads(spec_json))
    try:
        return goodput(spec, Candidate(**cand))
    except Exception as e:  # noqa: BLE001 -- a candidate that cannot run is a row with its error
        c = Candidate(**cand)
        return {"candidate": c.label, **cand, "gpus": c.gpus, "error": f"{type(e).__name__}: {e}"}


def run_study(spec: StudySpec, executor=None, progress: bool = False) -> pd.DataFrame:
    """One row per candidate, in candidate order: goodput, goodput per GPU, figures at the goodput rate."""
    from .executors import map_points

    cands = candidates(spec)
    order = {c.label: i for i, c in enumerate(cands)}
    rows: list[dict] = []
    if not spec.start_rate:  # one start for every candidate and SLO: goodput then never falls as an SLO loosens
        spec = replace(spec, start_rate=start_rate(spec))
    spec_json = json.dumps({**asdict(spec), "budgets": list(spec.budgets), "tps": list(spec.tps)})
    map_points(_job, [(spec_json, asdict(c)) for c in cands], rows.append, executor=executor, progress=progress)
    rows.sort(key=lambda r: order[r["candidate"]])
    df = pd.DataFrame(rows)
    if "error" not in df:
        df["error"] = None
    return df


def pareto(df: pd.DataFrame, y: str = "p99_itl_ms") -> np.ndarray:
    """Candidates no other beats on both goodput per GPU (higher) and ``y`` at its goodput rate (lower)."""
    from .sweep import pareto_mask

    ok = df.error.isna() & (df.goodput_per_gpu > 0)
    mask = np.zeros(len(df), dtype=bool)
    mask[np.flatnonzero(ok.to_numpy())] = pareto_mask(df[ok], "goodput_per_gpu", y)
    return mask


def recommend(df: pd.DataFrame, spec: StudySpec) -> dict:
    """The candidate with the most goodput per GPU, the best of the other kind, and why (which SLO binds)."""
    ok = df[df.error.isna() & (df.goodput_per_gpu > 0)]
    out: dict = {"attainment": spec.attainment, "ttft_slo_ms": spec.ttft_slo_ms, "itl_slo_ms": spec.itl_slo_ms}
    if ok.empty:
        out["choice"] = None
        out["text"] = (
            f"no candidate keeps {spec.attainment:.0%} of requests within TTFT {spec.ttft_slo_ms:g} ms and ITL "
            f"{spec.itl_slo_ms:g} ms at any rate searched: loosen an SLO, or a bigger TP degree"
        )
        return out
    best_of = {}
    for kind in ("colocated", "disaggregated"):
        g = ok[ok.kind == kind]
        if len(g):
            order = ["goodput_per_gpu", "gpus", "p99_itl_ms"]  # ties: fewer GPUs, then shorter gaps
            best_of[kind] = g.sort_values(order, ascending=[False, True, True], kind="stable").iloc[0]
    kinds = sorted(best_of, key=lambda k: -best_of[k].goodput_per_gpu)
    best = best_of[kinds[0]]
    out["choice"] = best.candidate
    out["kind"] = best.kind
    for kind, row in best_of.items():
        out[kind] = {
            "candidate": row.candidate,
            "goodput_per_gpu": float(row.goodput_per_gpu),
            "binds": row.binds,
            "p99_itl_ms": float(row.p99_itl_ms),
            "p90_ttft_ms": float(row.p90_ttft_ms),
        }
    lines = [
        f"recommend {best.candidate}: {best.goodput_per_gpu:.3g} req/s per GPU keeping {spec.attainment:.0%} "
        f"within TTFT {spec.ttft_slo_ms:g} ms and ITL {spec.itl_slo_ms:g} ms"
        + f" ({best.copies} cop{'y' if best.copies == 1 else 'ies'} of {best.gpus} GPU{'s' if best.gpus > 1 else ''} "
        f"in {spec.gpus})"
    ]
    if len(kinds) == 2:
        other = best_of[kinds[1]]
        out["ratio"] = float(best.goodput_per_gpu / other.goodput_per_gpu)
        verdict = (
            f"{out['ratio']:.2f}x in favour of {best.kind}"
            if out["ratio"] > 1 + spec.rel_tol
            else f"a tie within the search's {spec.rel_tol:.0%} precision"
        )
        lines.append(f"  vs {other.candidate}: {other.goodput_per_gpu:.3g} req/s per GPU ({verdict})")
    for kind in kinds:
        row = best_of[kind]
        lines.append(f"  {kind} ({row.candidate}) is bound by {_why(row, spec)}")
    if "colocated" in best_of and best_of["colocated"].budget:
        row = best_of["colocated"]
        same = ok[(ok.kind == "colocated") & (ok.tp == row.tp)]
        bigger = same[same.budget > row.budget]
        if len(bigger):  # why not a bigger budget: what binds there
            b = bigger.sort_values("budget").iloc[-1]
            out["colocated"]["larger_budget"] = {"budget": int(b.budget), "goodput_per_gpu": float(b.goodput_per_gpu)}
            out["colocated"]["larger_budget"]["binds"] = b.binds
            lines.append(
                f"  a larger colocated budget ({int(b.budget)}) reaches {b.goodput_per_gpu:.3g} req/s per GPU, bound by "
                f"the {b.binds} SLO"
            )
    out["text"] = "\n".join(lines)
    return out


def _why(row, spec: StudySpec) -> str:
    if row.binds not in ("TTFT", "ITL", "both"):
        return str(row.binds)
    above = (
        ""
        if pd.isna(row.get("above_attain_ttft"))
        else (
            f": just above its goodput rate {row.above_attain_ttft:.0%} meet TTFT and {row.above_attain_itl:.0%} meet ITL"
        )
    )
    return f"the {row.binds} SLO{above}"
