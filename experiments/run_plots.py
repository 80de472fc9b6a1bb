"""One run in pictures: the stall made visible (per-token gaps of chosen requests over time), what
each forward pass held (prefill vs decode tokens), and latency CDFs. Each takes a ``Result``
(with ``record_iterations=True`` where the iteration log is needed) and returns the Figure.

Built to run at the simulation's speed: the iteration log is replayed once (``pass_table``), one
row per log entry (a fast-forwarded entry of k decode passes stays one row), and everything drawn
is an array operation on that table or on the requests frame. Per-token times are kept only for
the few requests drawn. Past ``MAX_PASSES`` passes a replica's passes are binned in time: each
bin shows the mean tokens per pass and the mean pass time of the passes in it (a fast-forwarded
entry's passes are spread evenly over the entry).
"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from .iterlog import replay

MAX_PASSES = 4000  # per replica: drawn pass by pass up to this many, binned beyond
BINS = 600  # time bins of a binned replica
MAX_CDF_POINTS = 2000  # a CDF of more values is drawn through this many quantiles
MAX_REPLICA_ROWS = 8  # iteration_composition draws at most this many replicas, and says so
PASS_COLUMNS = ["replica", "start_s", "end_s", "steps", "prefill_tokens", "decode_tokens", "sequences"]


def _cms(result):
    return [r.cm for r in result.replicas] or None


def run_title(policy: str, model: str, hardware: str, tp: int = 1, replicas: int = 1, router: str | None = None) -> str:
    """``vllm · llama-3.1-8b on h100 (tp=1) · 8 replicas, router round_robin``: what every figure is of."""
    where = f"{replicas} replicas, router {router}" if replicas > 1 else "1 replica"
    return f"{policy} · {model} on {hardware} (tp={tp}) · {where}"


def _progress(total: int, desc: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc=desc,
        unit="entry",
        file=sys.stderr,
        disable=not enabled,
        leave=False,
        delay=1.0,
        mininterval=0.5,
    )


def pass_table(result, rids=(), progress: bool = False) -> tuple[pd.DataFrame, dict]:
    """One replay of the iteration log: a frame with one row per log entry (``PASS_COLUMNS``; an
    entry of ``steps`` > 1 is that many decode passes with the row's tokens each, spread over
    start_s..end_s; ``ends``: each step's end) and, for ``rids``, rid -> times (s) of its sampled tokens."""
    want = set(int(r) for r in rids)
    times = {r: [] for r in want}
    cols = [[] for _ in PASS_COLUMNS]
    app = [c.append for c in cols]
    ends = []
    log = result.iterations or []
    with _progress(len(log), "plots: replay", progress) as bar:
        for i, e in enumerate(replay(log, _cms(result))):
            for a, v in zip(
                app, (e.replica, e.start_s, float(e.ends[-1]), e.steps, e.prefill_tokens, e.decode_tokens, len(e.rids))
            ):
                a(v)
            ends.append(e.ends)
            if want and not want.isdisjoint(e.rids):
                for rid, s in zip(e.rids, e.sampled):
                    if s and rid in want:
                        times[rid].append(e.ends)
            if not i & 4095:
                bar.update(i - bar.n)
    frame = pd.DataFrame(
        {c: np.asarray(v, dtype=float if c.endswith("_s") else np.int64) for c, v in zip(PASS_COLUMNS, cols)}
    )
    col = np.empty(len(ends), dtype=object)
    for i, v in enumerate(ends):
        col[i] = v
    frame["ends"] = col
    return frame, {r: np.concatenate(t) if t else np.empty(0) for r, t in times.items()}


def stalled_requests(result, k: int = 4) -> list[int]:
    """The k requests with the largest single inter-token gap: whoever the stall hit hardest."""
    df = result.requests[result.requests.num_output_tokens > 1]
    return df.nlargest(k, "max_itl_s", keep="first").rid.tolist()


def _margins(fig, right: float = 0.98, hspace: float | None = None) -> None:
    """Fixed margins in inches (tight_layout measures every tick label: seconds on a tall figure)."""
    w, h = fig.get_size_inches()
    fig.subplots_adjust(
        left=0.9 / w,
        right=right,
        bottom=0.55 / h,
        top=1 - 0.75 / h,
        hspace=hspace if hspace is not None else 0.35 / (h / 4),
    )


def _suptitle(fig, title: str | None, what: str) -> None:
    fig.suptitle(f"{what}\n{title}" if title else what, fontsize=10)


def itl_timeline(result, rids=None, itl_slo_ms: float | None = None, title: str | None = None, times=None):
    """One panel per request (requests decoding together share every gap, so one axis would draw
    them as one line): the gap before each of its tokens, over its own lifetime, with the long
    prompts that arrived at its replica meanwhile. ``times``: rid -> token times, from ``pass_table``."""
    rids = list(rids) if rids is not None else stalled_requests(result)
    if times is None:
        times = pass_table(result, rids)[1]
    df = result.requests
    by_rid = df.set_index("rid")
    fig = Figure(figsize=(9, 1.2 + 1.9 * max(len(rids), 1)))
    axes = fig.subplots(max(len(rids), 1), 1, squeeze=False, sharey=True)[:, 0]
    long = df[df.prompt_len >= 4 * df.prompt_len.median()] if len(df) else df
    arrive, rep = long.arrival_s.to_numpy(), long.replica.to_numpy()
    for ax, rid in zip(axes, rids):
        t = np.asarray(times.get(rid, ()))
        r = by_rid.loc[rid]
        if len(t) > 1:
            ax.plot(t[1:], np.diff(t) * 1e3, lw=1, drawstyle="steps-pre", color="tab:blue")
        if itl_slo_ms is not None:
            ax.axhline(itl_slo_ms, ls="--", color="crimson", lw=1, label=f"SLO {itl_slo_ms:g} ms")
        lo, hi = float(r.arrival_s), float(r.finish_s) if r.finish_s == r.finish_s else float(t[-1] if len(t) else 0)
        hits = arrive[(rep == r.replica) & (arrive >= lo) & (arrive <= hi)][:20]
        for i, a in enumerate(hits):
            ax.axvline(a, color="grey", ls=":", lw=1, label="long prompt arrives (same replica)" if i == 0 else None)
        ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
        ax.set_ylabel("gap (ms)")
        ax.text(
            0.005,
            0.95,
            f"request {rid} · replica {int(r.replica)} · prompt {int(r.prompt_len):,} · "
            f"{int(r.num_output_tokens):,} tokens · worst gap {r.max_itl_s * 1e3:,.1f} ms",
            transform=ax.transAxes,
            va="top",
            fontsize=7,
            bbox={"fc": "white", "ec": "none", "alpha": 0.8},
        )
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper right")
    axes[-1].set_xlabel("time (s)")
    _suptitle(fig, title, "gap before each token of the requests the stall hit hardest")
    _margins(fig, hspace=0.45)
    return fig


def _binned(p: pd.DataFrame, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Prefill and decode tokens per second, and mean pass time (s), in each bin of ``edges``, from
    cumulative counts that rise linearly over each entry (pass time NaN where a bin holds no pass)."""
    start, end, steps = p.start_s.to_numpy(), p.end_s.to_numpy(), p.steps.to_numpy()
    x = np.maximum.accumulate(np.column_stack([start, end]).ravel())  # entries of a replica never overlap
    out = []
    for per_entry in (steps, p.prefill_tokens.to_numpy() * steps, p.decode_tokens.to_numpy() * steps, end - start):
        cum = np.cumsum(per_entry, dtype=float)
        out.append(np.diff(np.interp(edges, x, np.column_stack([cum - per_entry, cum]).ravel())))
    n, pre, dec, busy = out
    width = np.diff(edges)
    with np.errstate(invalid="ignore", divide="ignore"):
        return pre / width, dec / width, np.where(n > 0, busy / n, np.nan)


def _replica_series(p: pd.DataFrame, edges: np.ndarray | None):
    """(edges, prefill, decode, pass seconds) of one replica: tokens per pass pass by pass, with the
    idle time between passes as a gap, or tokens per second in time bins."""
    if edges is not None:
        return (edges, *_binned(p, edges))
    steps = p.steps.to_numpy()
    ends = np.concatenate(p.ends.tolist()) if len(p) else np.empty(0)
    first = np.zeros(len(ends), bool)
    first[np.r_[0, np.cumsum(steps)[:-1]]] = len(ends) > 0
    starts = np.where(first, np.repeat(p.start_s.to_numpy(), steps), np.r_[ends[:1], ends[:-1]])
    gap = np.zeros(len(ends))

    def both(v, idle):
        return np.column_stack([v, idle]).ravel()[:-1]

    return (
        np.column_stack([starts, ends]).ravel(),
        both(np.repeat(p.prefill_tokens.to_numpy(), steps), gap),
        both(np.repeat(p.decode_tokens.to_numpy(), steps), gap),
        both(ends - starts, gap * np.nan),
    )


def iteration_composition(result, replica: int | None = None, title: str | None = None, passes=None):
    """One row per replica (all of them up to ``MAX_REPLICA_ROWS``, or the one asked for): prefill
    and decode tokens stacked (per pass, or per second once binned) and the pass time (black, right
    axis, log)."""
    p = passes if passes is not None else pass_table(result)[0]
    reps = sorted(set(p.replica.tolist())) if replica is None else [replica]
    total = len(reps)
    reps = reps[:MAX_REPLICA_ROWS] or [0]
    fig = Figure(figsize=(9, 1.0 + max(1.6 * len(reps), 3.2)))
    axes = fig.subplots(len(reps), 1, sharex=True, squeeze=False)[:, 0]
    t0, t1 = (float(p.start_s.min()), float(p.end_s.max())) if len(p) else (0.0, 1.0)
    binned = False
    for ax, rep in zip(axes, reps):
        q = p[p.replica == rep]
        n = int(q.steps.sum())
        edges = np.linspace(t0, t1, BINS + 1) if n > MAX_PASSES else None
        binned |= edges is not None
        e, pre, dec, dur = _replica_series(q, edges)
        tw = ax.twinx()
        if len(pre):
            last = lambda v: np.r_[v, v[-1:]]  # noqa: E731  (steps-post: the last value holds to the last edge)
            ax.fill_between(e, 0, last(pre), step="post", color="tab:orange", lw=0, label="prefill tokens")
            ax.fill_between(e, last(pre), last(pre + dec), step="post", color="tab:blue", lw=0, label="decode tokens")
            tw.plot(e, last(dur * 1e3), drawstyle="steps-post", color="k", lw=0.6, label="pass time (ms, right)")
            tw.set_yscale("log")
        ax.set_ylabel(f"replica {rep}\n{'tokens/s' if edges is not None else 'tokens/pass'}", fontsize=8)
        tw.set_ylabel("pass (ms)", fontsize=8)
        ax.grid(alpha=0.3)
        ax.text(
            0.005,
            0.92,
            f"{n:,} passes",
            transform=ax.transAxes,
            va="top",
            fontsize=7,
            bbox={"fc": "white", "ec": "none", "alpha": 0.7},
        )
        if ax is axes[0]:
            h1, l1 = ax.get_legend_handles_labels()
            h2, l2 = tw.get_legend_handles_labels()
            ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="upper right", ncol=3)
    axes[-1].set_xlabel("time (s)")
    which = (
        f"replica {reps[0]}"
        if replica is not None
        else "1 replica"
        if total == 1
        else f"all {total} replicas"
        if total == len(reps)
        else f"replicas {reps[0]}–{reps[-1]} of {total}"
    )
    how = f"; tokens/s and mean pass time in {BINS:,} time bins" if binned else ""
    _suptitle(fig, title, f"what each forward pass held, {which}{how}")
    _margins(fig, right=0.92)
    return fig


def cdf_points(values: np.ndarray, max_points: int = MAX_CDF_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """(x, fraction ≤ x) of the finite values, through at most ``max_points`` quantiles."""
    v = np.asarray(values, dtype=float)
    v = np.sort(v[np.isfinite(v)])
    n = len(v)
    if n <= max_points:
        return v, np.arange(1, n + 1) / max(n, 1)
    idx = np.unique(np.r_[np.linspace(0, n - 1, max_points).astype(np.int64), n - 1])
    return v[idx], (idx + 1) / n


CDF_COLUMNS = (
    ("ttft_s", "TTFT"),
    ("tpot_s", "TPOT"),
    ("e2el_s", "E2E latency"),
    ("max_itl_s", "worst ITL of the request"),
)


def latency_cdfs(result, labels=None, title: str | None = None):
    """TTFT, TPOT, E2EL and each request's worst gap; ``result`` may be a list of runs (one curve each)."""
    runs = result if isinstance(result, (list, tuple)) else [result]
    labels = labels or [None] * len(runs)
    fig = Figure(figsize=(14, 3.9))
    axes = fig.subplots(1, 4)
    for run, label in zip(runs, labels):
        df = run.requests[run.requests.finish_s.notna()]
        for ax, (col, _) in zip(axes, CDF_COLUMNS):
            x, y = cdf_points(df[col].to_numpy() * 1e3)
            ax.step(x, y, where="post", label=label)
    for ax, (_, name) in zip(axes, CDF_COLUMNS):
        lo, hi = ax.get_xlim()
        if lo > 0 and hi / lo > 20:
            ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(f"{name} (ms)")
        ax.set_title(f"{name} CDF", fontsize=9)
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel("fraction of requests")
    if any(labels):
        axes[0].legend(fontsize=7)
    n = sum(int(r.requests.finish_s.notna().sum()) for r in runs)
    _suptitle(fig, title, f"latency CDFs ({n:,} finished requests)")
    fig.tight_layout()
    return fig


def save_run_plots(
    result,
    folder,
    itl_slo_ms: float | None = None,
    title: str | None = None,
    progress: bool = False,
    passes=None,
    times=None,
) -> dict:
    """itl_timeline.png, iteration_composition.png, latency_cdfs.png in ``folder``; one replay of the log."""
    from pathlib import Path

    from tqdm import tqdm

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    rids = stalled_requests(result)
    if passes is None or times is None or not set(rids) <= set(times):
        passes, times = pass_table(result, rids, progress)
    makers = {
        "itl_timeline": lambda: itl_timeline(result, rids, itl_slo_ms, title, times),
        "iteration_composition": lambda: iteration_composition(result, title=title, passes=passes),
        "latency_cdfs": lambda: latency_cdfs(result, title=title),
    }
    files = {}
    with tqdm(
        total=len(makers), desc="plots", unit="plot", file=sys.stderr, disable=not progress, leave=False, delay=1.0
    ) as bar:
        for key, make in makers.items():
            files[key] = out / f"{key}.png"
            make().savefig(files[key], dpi=110)
            bar.update()
    return {k: str(v) for k, v in files.items()}
