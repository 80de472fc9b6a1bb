"""Step level, across models: fit the step model on one model's Splitwise step times and predict
another model's, measured by the same engine on the same GPUs (../shared/data/steps): BLOOM-176B
(tp 8) and Llama-2-70B (tp 2, 4, 8) on A100 80GB. Prints the prefill (prompt_time) and decode
(token_time) MAPE of the held-out model per tp, both directions, on two base profiles (a100-sxm:
calibrated kernels; a100-80gb: spec ratios), with the per-layer terms (fit_steps(per_layer=
"layer"): one model's fixed time put per layer, so that it carries to a model of other layers)
and, for comparison, as before (per_layer="step": per step); then the eager-launch term
(per_layer="launch": host time per kernel an eager pass launches, hidden under the GPU's,
costmodel/host.py; kernels per layer counted from each model's architecture, execution.layer_kernels)
on the kernel-calibrated a100-sxm with its β held (s_β = 1: a step fit of one tp cannot tell a
launch-bound decode from a slow one), with the held-out decodes per tp and batch, predicted against
measured; then the evidence for that term (decode time by tp and batch: launch-bound decodes cost
the same at tp 4 and 8) and the joint fits of both models (per-layer and launch terms), errors on
the fitted steps: one set of constants for both, which no single model's steps can identify.
The held-out model's rows are never seen by the fit.
Rows are screened by step_timings.splitwise_screen (skipped counts printed).
Run: python benchmarks/bench_steps_transfer.py [--quick]"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from costmodel import load_hardware  # noqa: E402
from costmodel.calibration.step_timings import load_steps  # noqa: E402
from costmodel.calibration.steps import fit_steps, predict_steps  # noqa: E402
from costmodel.execution import layer_kernels  # noqa: E402
from experiments.cli.calibrate_steps import step_models  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "steps"
TABLES = {"bloom-176b": "splitwise_bloom176b.csv", "llama2-70b": "splitwise_llama2_70b_a100.csv"}
GPU = "a100-80gb"
BASES = ("a100-sxm", "a100-80gb")
TARGET = 10.0  # % MAPE, each of prefill and decode


def tables() -> dict:
    out = {}
    for name, f in TABLES.items():
        skipped: dict = {}
        out[name] = load_steps(DATA / f, "splitwise", gpu=GPU, skipped=skipped)
        for what, n in skipped.items():
            print(f"  {name}: skipped {n} rows: {what}")
    return out


def mape_by_tp(pred: np.ndarray, steps: pd.DataFrame) -> list[dict]:
    ape = 100 * np.abs(pred / steps["time_s"].to_numpy() - 1)
    rows = []
    for tp in sorted(steps["tp"].unique()):
        at = (steps["tp"] == tp).to_numpy()
        r = {"tp": int(tp)}
        for kind in ("prefill", "decode"):
            k = at & (steps["kind"] == kind).to_numpy()
            r[kind] = float(ape[k].mean())
        rows.append(r)
    allk = {"tp": "all"}
    for kind in ("prefill", "decode"):
        allk[kind] = float(ape[(steps["kind"] == kind).to_numpy()].mean())
    return rows + [allk]


DIRECTIONS = (("bloom-176b", "llama2-70b"), ("llama2-70b", "bloom-176b"))  # (fit on, predict)


LAUNCH_FIXED = {"s_beta": 1.0}  # per_layer="launch": the kernel fit's β held (module docstring)


def fit_and_predict(fit_on: str, predict: str, data: dict, base: str, per_layer: str):
    """(the fit on ``fit_on``'s steps, its prices of ``predict``'s steps)."""
    models = step_models(pd.concat(data.values(), ignore_index=True), None)
    fixed = dict(LAUNCH_FIXED) if per_layer == "launch" else None
    f = fit_steps(data[fit_on], models, load_hardware(base), per_layer=per_layer, fixed=fixed)
    return f, predict_steps(data[predict], models, f.hardware())


def transfer(fit_on: str, predict: str, data: dict, base: str, per_layer: str):
    t0 = time.perf_counter()
    f, pred = fit_and_predict(fit_on, predict, data, base, per_layer)
    return f, mape_by_tp(pred, data[predict]), time.perf_counter() - t0


def transfer_log_errors(base: str = "a100-sxm") -> np.ndarray:
    """ln(predicted / measured) of every held-out step, both directions, per-layer fit on ``base``:
    the step-calibrated kind's figures in the expected-error ledger (benchmarks/error_ledger.py)."""
    data = tables()
    out = []
    for fit_on, predict in DIRECTIONS:
        _, pred = fit_and_predict(fit_on, predict, data, base, "layer")
        out.append(np.log(pred / data[predict]["time_s"].to_numpy()))
    return np.concatenate(out)


def show_fit(f) -> None:
    v = f.values
    print(
        f"    s_π {v['s_pi']:.3f}  s_β {v['s_beta']:.3f}  s_π,attn {v['s_pi_attn']:.3f}  s_rows {v['s_rows']:.3f}"
        f" (budget {f.rows_budget}, break {f.rows_break})  launch {v['kernel_launch_s'] * 1e6:.2f} µs/kernel"
        f"  hop {v['hop_latency_s'] * 1e6:.2f} µs  host {v['host_step_s'] * 1e3:.2f} ms/step"
        f" + {v['host_per_seq_s'] * 1e6:.0f} µs/seq + {v['host_prefill_step_s'] * 1e3:.2f} ms/prefill step"
        f" + {v['host_per_prefill_seq_s'] * 1e6:.0f} µs/prefill seq"
        f"  launch (host) {v['host_per_launch_s'] * 1e6:.1f} µs/kernel"
    )
    for w in f.warnings:
        if "not identified" in w or "beta_eff" in w:
            print(f"    warning: {w}")


def show_transfer(data: dict, base: str, per_layer: str) -> None:
    held = f", held {LAUNCH_FIXED}" if per_layer == "launch" else ""
    print(f"\nbase {base}, per_layer={per_layer!r}{held}: MAPE % of the held-out model (target <= {TARGET:g})")
    for fit_on, predict in DIRECTIONS:
        f, rows, s = transfer(fit_on, predict, data, base, per_layer)
        print(f"  fit {fit_on} -> predict {predict} ({s:.1f} s)")
        show_fit(f)
        for r in rows:
            flag = "" if max(r["prefill"], r["decode"]) <= TARGET else "  (over target)"
            print(f"    tp {r['tp']!s:>3}: prefill {r['prefill']:5.1f}  decode {r['decode']:5.1f}{flag}")


def launch_decodes(data: dict, base: str = "a100-sxm") -> None:
    """The launch term's held-out decodes, median ms per tp and batch, predicted against measured,
    with each model's eager kernels per layer (execution.layer_kernels) at the tp sizes it ran."""
    models = step_models(pd.concat(data.values(), ignore_index=True), None)
    for fit_on, predict in DIRECTIONS:
        st = data[predict]
        counts = {n: {int(t): layer_kernels(models[n], int(t)) for t in sorted(data[n]["tp"].unique())} for n in data}
        f, pred = fit_and_predict(fit_on, predict, data, base, "launch")
        d = st.assign(pred=pred)[(st["kind"] == "decode").to_numpy()]
        t = d.groupby(["tp", "seqs"])[["time_s", "pred"]].median() * 1e3
        t["err %"] = 100 * (t["pred"] / t["time_s"] - 1)
        print(
            f"\nlaunch term, fit {fit_on} -> predict {predict}: decode ms by tp and batch (kernels per layer {counts})"
        )
        print("    " + t.round(1).unstack("tp").to_string().replace("\n", "\n    "))


def launch_bound_evidence(data: dict) -> None:
    """Median decode step (ms) by tp and batch, each model: a pass bound by the host's launches
    costs the same at any tp, one bound by the GPU falls with tp (its weights split tp ways)."""
    print("\nmedian decode step, ms, by batch (launch-bound: the same at every tp):")
    for name, st in data.items():
        d = st[st["kind"] == "decode"]
        t = d.groupby(["tp", "seqs"])["time_s"].median().unstack("seqs") * 1e3
        print(f"  {name}")
        print("    " + t.round(1).to_string().replace("\n", "\n    "))


def main() -> None:
    quick = "--quick" in sys.argv
    if not all((DATA / f).exists() for f in TABLES.values()):
        print(f"no data under {DATA}; nothing to run")
        return
    data = tables()
    modes = ("layer",) if quick else ("layer", "step")
    for base in BASES[:1] if quick else BASES:
        for per_layer in modes:
            show_transfer(data, base, per_layer)
    show_transfer(data, BASES[0], "launch")
    launch_decodes(data)
    launch_bound_evidence(data)
    both = pd.concat(data.values(), ignore_index=True)
    for per_layer in ("layer", "launch"):
        fixed = dict(LAUNCH_FIXED) if per_layer == "launch" else None
        print(f"\njoint fit of both models (a100-sxm, per_layer={per_layer!r}), error on the fitted steps (%):")
        f = fit_steps(both, step_models(both, None), load_hardware("a100-sxm"), per_layer=per_layer, fixed=fixed)
        show_fit(f)
        print(f.group_errors.round(2).to_string(index=False))


if __name__ == "__main__":
    main()
