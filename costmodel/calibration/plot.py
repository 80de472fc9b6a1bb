"""Residual plot of a fit: relative error against measured time, one panel per report group
(operator class; attention by kernel; all-reduce by GPU count). A model that fits leaves a flat
band around 0; a bend at the knee or the floor shows in its own panel. Titles give the MAPE on the
fitted and the held-out rows; at most 6 log-spaced ticks per axis, so short ranges stay readable."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .fit import Fit
from .holdout import group_of


def residual_plot(fit: Fit, df: pd.DataFrame, path, held_out: pd.DataFrame | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import LogLocator, NullFormatter

    sets = [
        (d, label, marker)
        for d, label, marker in ((df, "fitted", "."), (held_out, "held out", "x"))
        if d is not None and len(d)
    ]
    groups = sorted({g for d, _, _ in sets for g, c in zip(group_of(d), d["op_class"]) if c in fit.classes})
    cols = min(4, max(1, len(groups)))
    rows = math.ceil(len(groups) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 3.0 * rows), squeeze=False, sharey=True)
    for ax, g in zip(axes.flat, groups):
        title = [g]
        for d, label, marker in sets:
            sub = d[(group_of(d) == g).to_numpy()]
            if not len(sub):
                continue
            err = 100 * (fit.predict(sub) / sub["time_s"].to_numpy(float) - 1)
            ax.scatter(sub["time_s"] * 1e6, np.clip(err, -100, 100), s=5, marker=marker, label=label, alpha=0.5)
            title.append(f"{label} {np.nanmean(np.abs(err)):.1f} %")
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(numticks=6))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_title("\n".join([title[0], ", ".join(title[1:])]), fontsize=8)
        ax.set_xlabel("measured time (µs)", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(groups) :]:
        ax.set_visible(False)
    for r in range(rows):
        axes[r][0].set_ylabel("model / measured − 1 (%)", fontsize=8)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
