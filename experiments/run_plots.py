"""One run in pictures: the stall made visible (per-token gaps of chosen requests over time), what
each forward pass held (prefill vs decode tokens), and latency CDFs. Each takes a ``Result``
(with ``record_iterations=True`` where the iteration log is needed) and returns the Figure.
"""
from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from .iterlog import iteration_frame, token_times


def _cms(result):
    return [r.cm for r in result.replicas] or None


def stalled_requests(result, k: int = 4) -> list[int]:
    """The k requests with the largest single inter-token gap: whoever the stall hit hardest."""
    df = result.requests[result.requests.num_output_tokens > 1]
    return df.nlargest(k, "max_itl_s", keep="first").rid.tolist()


def itl_timeline(result, rids=None, itl_slo_ms: float | None = None):
    rids = list(rids) if rids is not None else stalled_requests(result)
    times = token_times(result.iterations, rids, _cms(result))
    fig = Figure(figsize=(9, 4))
    ax = fig.subplots()
    for rid in rids:
        t = times[rid]
        if len(t) > 1:
            ax.plot(t[1:], np.diff(t) * 1e3, lw=1, alpha=0.8, drawstyle="steps-pre", label=f"request {rid}")
    if itl_slo_ms is not None:
        ax.axhline(itl_slo_ms, ls="--", color="crimson", lw=1, label=f"SLO {itl_slo_ms:g} ms")
    df = result.requests
    long = df[df.prompt_len >= 4 * df.prompt_len.median()] if len(df) else df
    for i, r in enumerate(long.head(20).itertuples()):
        ax.axvline(r.arrival_s, color="grey", ls=":", lw=1, label="long prompt arrives" if i == 0 else None)
    ax.set_yscale("log")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("gap before this token (ms)")
    ax.set_title("inter-token latency of selected requests over time")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    return fig


def iteration_composition(result, replica: int = 0):
    """Three rows sharing time: prefill tokens, decode tokens, and what the pass cost."""
    it = iteration_frame(result.iterations, _cms(result))
    it = it[it.replica == replica]
    fig = Figure(figsize=(9, 6))
    axes = fig.subplots(3, 1, sharex=True, gridspec_kw={"height_ratios": [2, 1, 1.4]})
    width = (it.end_s - it.start_s).to_numpy()
    axes[0].bar(it.start_s, it.prefill_tokens, width=width, align="edge", color="tab:orange", lw=0)
    axes[0].set_ylabel("prefill tokens")
    axes[1].bar(it.start_s, it.decode_tokens, width=width, align="edge", color="tab:blue", lw=0)
    axes[1].set_ylabel("decode tokens")
    axes[2].step(it.start_s, width * 1e3, where="post", color="k", lw=1)
    axes[2].set_ylabel("pass time (ms)")
    axes[2].set_yscale("log")
    axes[2].set_xlabel("time (s)")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].set_title(f"what each forward pass held, replica {replica} ({len(it):,} passes)")
    fig.tight_layout()
    return fig


def latency_cdfs(result, labels=None):
    """TTFT, TPOT, E2EL and each request's worst gap; ``result`` may be a list of runs (one curve each)."""
    runs = result if isinstance(result, (list, tuple)) else [result]
    labels = labels or [None] * len(runs)
    fig = Figure(figsize=(14, 3.6))
    axes = fig.subplots(1, 4)
    cols = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2el_s", "E2E latency"), ("max_itl_s", "worst ITL of the request"))
    for run, label in zip(runs, labels):
        df = run.requests[run.requests.finish_s.notna()]
        for ax, (col, _title) in zip(axes, cols):
            v = np.sort(df[col].dropna().to_numpy() * 1e3)
            ax.step(v, np.arange(1, len(v) + 1) / max(len(v), 1), where="post", label=label)
    for ax, (_, title) in zip(axes, cols):
        lo, hi = ax.get_xlim()
        if lo > 0 and hi / lo > 20:
            ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(f"{title} (ms)")
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel("fraction of requests")
    if any(labels):
        axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def save_run_plots(result, folder, itl_slo_ms: float | None = None) -> dict:
    from pathlib import Path
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    files = {"itl_timeline": out / "itl_timeline.png", "iteration_composition": out / "iteration_composition.png",
             "latency_cdfs": out / "latency_cdfs.png"}
    for key, fig in (("itl_timeline", itl_timeline(result, itl_slo_ms=itl_slo_ms)),
                     ("iteration_composition", iteration_composition(result)), ("latency_cdfs", latency_cdfs(result))):
        fig.savefig(files[key], dpi=110)
    return {k: str(v) for k, v in files.items()}
