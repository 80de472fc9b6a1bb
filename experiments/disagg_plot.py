"""The chunk-or-disaggregate study in one picture: goodput per GPU against p99 ITL and p90 TTFT at
each candidate's goodput rate, colocated and disaggregated candidates apart, the Pareto front
(more goodput per GPU and less latency) joined, the recommendation starred. Built without pyplot."""

from __future__ import annotations

from matplotlib.figure import Figure

from .disagg_study import pareto

STYLE = {"colocated": ("o", "tab:blue"), "disaggregated": ("s", "tab:orange")}


def goodput_pareto(df, recommendation: dict | None = None) -> Figure:
    ok = df[df.error.isna() & (df.goodput_per_gpu > 0)]
    fig = Figure(figsize=(11, 4.4))
    axes = fig.subplots(1, 2)
    for ax, y, label in ((axes[0], "p99_itl_ms", "p99 ITL (ms)"), (axes[1], "p90_ttft_ms", "p90 TTFT (ms)")):
        for kind, (marker, color) in STYLE.items():
            g = ok[ok.kind == kind]
            ax.scatter(g.goodput_per_gpu, g[y], marker=marker, color=color, label=kind, alpha=0.8)
        front = ok[pareto(ok, y)].sort_values("goodput_per_gpu")
        ax.plot(front.goodput_per_gpu, front[y], color="0.3", lw=1, ls="--", label="Pareto front")
        if recommendation and recommendation.get("choice"):
            best = ok[ok.candidate == recommendation["choice"]]
            ax.scatter(best.goodput_per_gpu, best[y], marker="*", s=260, color="crimson", label="recommended", zorder=5)
            for _, r in best.iterrows():
                ax.annotate(r.candidate, (r.goodput_per_gpu, r[y]), textcoords="offset points", xytext=(6, 6))
        ax.set_xlabel("goodput per GPU (req/s)")
        ax.set_ylabel(f"{label} at the goodput rate")
        ax.grid(alpha=0.3)
    slo = recommendation or {}
    axes[0].legend(fontsize=8)
    fig.suptitle(
        f"chunk or disaggregate: {slo.get('attainment', 0.9):.0%} within TTFT {slo.get('ttft_slo_ms', 0):g} ms "
        f"and ITL {slo.get('itl_slo_ms', 0):g} ms"
    )
    fig.tight_layout()
    return fig
