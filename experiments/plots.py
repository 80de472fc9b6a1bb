"""A sweep in pictures: p99 ITL against throughput, and TTFT against request rate, one panel per engine.

Each knob value is one line through its request rates; the SLO is a dashed line, the Pareto
front (nothing else has both more throughput and less ITL) is ringed, the recommendation starred.
Figures are built without pyplot (no global state, no backend switch); functions take a
DataFrame from ``sweep.run_sweep`` and return the Figure.
"""

from __future__ import annotations

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

from .sweep import KNOBS, mark_slo, pareto_mask

SHORT = {
    "max_num_batched_tokens": "budget",
    "long_prefill_token_threshold": "threshold",
    "chunked_prefill_size": "chunk",
}


def knob_label(row) -> str:
    parts = [
        f"{SHORT.get(k, k)}={int(row[k]) if float(row[k]).is_integer() else row[k]}"
        for k in KNOBS[row["policy"]]
        if k in SHORT and row.get(k) is not None and not _isnan(row[k])
    ]
    return ", ".join(parts) or "defaults"


def _isnan(v) -> bool:
    return isinstance(v, float) and np.isnan(v)


def _panels(df, width: float = 5.0):
    engines = list(dict.fromkeys(df.engine))
    fig = Figure(figsize=(width * len(engines), 4.2))
    axes = fig.subplots(1, len(engines), squeeze=False, sharey=True)
    return fig, dict(zip(engines, axes[0]))


def _lines(g):
    g = g.assign(_label=[knob_label(r) for _, r in g.iterrows()])
    return g.groupby("_label", sort=False)


def itl_vs_throughput(
    df,
    itl_slo_ms: float | None = None,
    percentile: int = 99,
    recommendation=None,
    x: str = "output_throughput",
    ttft_slo_ms: float | None = None,
):
    """Hollow markers: points that miss an SLO (with ``ttft_slo_ms``, also those that miss only TTFT)."""
    y = f"p{percentile}_itl_ms"
    ok = df[df.error.isna()]
    meets = mark_slo(ok, itl_slo_ms, ttft_slo_ms, percentile) if itl_slo_ms else np.ones(len(ok), bool)
    fig, axes = _panels(ok)
    for engine, ax in axes.items():
        g = ok[ok.engine == engine]
        cmap = matplotlib.colormaps["viridis"].resampled(max(2, len(_lines(g))))
        for i, (label, line) in enumerate(_lines(g)):
            line = line.sort_values(x)
            ax.plot(line[x], line[y], "o-", color=cmap(i), label=label, ms=4)
            miss = line[~meets[line.index]]
            ax.plot(miss[x], miss[y], "o", color=cmap(i), mfc="white", ms=4)
        front = g[pareto_mask(g, x, y)].sort_values(x)
        ax.plot(front[x], front[y], "o", mfc="none", mec="crimson", ms=11, mew=1.5, label="Pareto front")
        if recommendation is not None and "point_id" in recommendation:
            rec = recommendation[(recommendation.engine == engine) & recommendation.point_id.notna()]
            if len(rec):
                best = g[g.point_id == rec.point_id.iloc[0]]  # a star behind its point, the point redrawn on top
                ax.plot(
                    best[x],
                    best[y],
                    "*",
                    color="gold",
                    mec="darkgoldenrod",
                    ms=24,
                    alpha=0.6,
                    label="recommended",
                    zorder=1,
                )
                i = list(_lines(g).groups).index(knob_label(best.iloc[0])) if len(best) else 0
                filled = bool(meets[best.index].all()) if len(best) else True
                ax.plot(best[x], best[y], "o", color=cmap(i), mfc=cmap(i) if filled else "white", ms=4, zorder=6)
        if itl_slo_ms is not None:
            ax.axhline(itl_slo_ms, ls="--", color="crimson", lw=1)
            ax.annotate(
                f"SLO {itl_slo_ms:g} ms",
                (0.01, itl_slo_ms),
                xycoords=("axes fraction", "data"),
                va="bottom",
                color="crimson",
                fontsize=8,
            )
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_title(engine)
        ax.set_xlabel(f"{x.replace('_', ' ')} (tok/s)" if "token" in x or "output" in x else x)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7, loc="upper left")
    next(iter(axes.values())).set_ylabel(f"p{percentile} ITL (ms)")
    fig.suptitle(
        f"p{percentile} inter-token latency vs throughput (each line: one knob value across request rates; "
        "hollow: misses an SLO)"
    )
    fig.tight_layout()
    return fig


def ttft_vs_rate(df, ttft_slo_ms: float | None = None, percentile: int = 99):
    y = f"p{percentile}_ttft_ms"
    ok = df[df.error.isna() & df.request_rate.notna()]
    fig, axes = _panels(ok)
    for engine, ax in axes.items():
        g = ok[ok.engine == engine]
        cmap = matplotlib.colormaps["viridis"].resampled(max(2, len(_lines(g))))
        for i, (label, line) in enumerate(_lines(g)):
            line = line.sort_values("request_rate")
            ax.plot(line.request_rate, line[y] / 1e3, "o-", color=cmap(i), label=label, ms=4)
        if ttft_slo_ms is not None:
            ax.axhline(ttft_slo_ms / 1e3, ls="--", color="crimson", lw=1, label=f"SLO {ttft_slo_ms / 1e3:g} s")
        ax.set_title(engine)
        ax.set_xlabel("request rate (req/s)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7, loc="upper left")
    next(iter(axes.values())).set_ylabel(f"p{percentile} TTFT (s)")
    fig.suptitle(f"p{percentile} time to first token vs offered load")
    fig.tight_layout()
    return fig


def save(fig, path) -> None:
    fig.savefig(path, dpi=110)
