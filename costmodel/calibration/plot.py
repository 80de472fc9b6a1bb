"""Residual plot of a fit: relative error against measured time, one panel per operator class.
A roofline that fits leaves a flat band; a bend at the knee or the floor shows in its own panel."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .fit import Fit


def residual_plot(fit: Fit, df: pd.DataFrame, path, held_out: pd.DataFrame | None = None) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    classes = list(fit.classes)
    fig, axes = plt.subplots(1, len(classes), figsize=(3.2 * len(classes), 3.0), squeeze=False, sharey=True)
    for ax, cls in zip(axes[0], classes):
        for data, label, marker in ((df, "fitted", "."), (held_out, "held out", "x")):
            if data is None:
                continue
            sub = data[data["op_class"] == cls]
            if len(sub):
                err = 100 * (fit.classes[cls].predict(sub) / sub["time_s"].to_numpy(float) - 1)
                ax.scatter(sub["time_s"] * 1e6, np.clip(err, -100, 100), s=6, marker=marker, label=label, alpha=0.6)
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xscale("log")
        ax.set_title(f"{cls}  MAPE {fit.classes[cls].errors['mape']:.1f} %", fontsize=9)
        ax.set_xlabel("measured time (µs)")
    axes[0][0].set_ylabel("model / measured − 1 (%)")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
