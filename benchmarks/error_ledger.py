"""The expected error of each kind of profile (costmodel/expected_error.yaml), from real runs, and
how often ``--uncertainty`` bands hold the measured figure.

Validation figures: the two shared vLLM runs (../shared/data/validation/llmservingsim), each
priced with a profile calibrated from its GPU's own kernel folder (kernel-calibrated, as
benchmarks/bench_validate.py makes it) and with the GPU's spec-sheet profile (spec-sheet): the 15
figures ``chunksim validate`` prints per run. Step-calibrated: the step-level cross-model error of
benchmarks/bench_steps_transfer.py where it exists (each model's steps priced by a fit on the other
model's), every step one figure. sigma_log per kind is the RMS of ln(simulated / measured).

Coverage: each run and kind, N draws of the kind's error (a factor on every step's time; the fit's
covariance too where it has one), the p5-p95 band of every figure, and the share of figures inside
it. Printed twice: sigma from every run of the kind (in sample) and, for the validation kinds,
sigma from the other run only (leave one run out: the honest figure for a run the ledger never saw),
with each band's width: p95 / p5 - 1 of a figure, the median over the figures (a band wide enough
to hold everything says nothing, so the width is printed beside the coverage).

    python benchmarks/error_ledger.py [--draws 40] [--write]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from datetime import date
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_validate import ROOT, RUNS, profile_for  # noqa: E402
from costmodel import load_hardware, load_model  # noqa: E402
from costmodel.expected_error import LEDGER_FILE, profile_kind  # noqa: E402
from experiments.validate import figure_bands, load_run, validate  # noqa: E402

BAND = (5, 95)


def validation_figures(tmp: Path) -> list[dict]:
    """One row per (run, kind): the figures table and what priced it."""
    out = []
    for name, folder, model, base in RUNS:
        run = load_run(ROOT / "runs" / name)
        m = load_model(model)
        hw_arg, how = profile_for(ROOT / "profiles" / folder, model, base, run.tp, tmp / name.replace("/", "_"))
        for hw in (load_hardware(hw_arg), load_hardware(base)):
            table, overall, _, _ = validate(ROOT / "runs" / name, m, hw, None, run)
            out.append({"run": name, "kind": profile_kind(hw), "hw": hw, "model": m, "measured": run, "table": table})
            print(f"{name}: {profile_kind(hw)} ({hw.name}): mean |error| {100 * overall:.1f} % over {len(table)}")
    return out


def step_figures() -> list[float]:
    """ln(predicted / measured) of every step priced across models, or [] without the benchmark."""
    try:
        from benchmarks.bench_steps_transfer import transfer_log_errors  # type: ignore[import-not-found]
    except ImportError:
        return []
    return list(transfer_log_errors())


def sigma(errs) -> float:
    e = np.asarray(errs, float)
    return float(np.sqrt(np.mean(e * e)))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=40)
    ap.add_argument("--write", action="store_true", help="write costmodel/expected_error.yaml")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        rows = validation_figures(Path(tmp))
        kinds: dict = {}
        for r in rows:
            t = r["table"]
            kinds.setdefault(r["kind"], {}).setdefault(r["run"], np.log(t.simulated / t.measured).to_numpy())
        steps = step_figures()
        ledger = {}
        for kind, runs in kinds.items():
            errs = np.concatenate(list(runs.values()))
            ledger[kind] = {
                "sigma_log": round(sigma(errs), 4),
                "mean_abs_pct": round(100 * float(np.mean(np.abs(np.expm1(errs)))), 2),
                "figures": int(len(errs)),
                "evidence": "chunksim validate, "
                + "; ".join(f"{run} {100 * float(np.mean(np.abs(np.expm1(e)))):.1f} %" for run, e in runs.items())
                + " (../shared/data/validation, benchmarks/error_ledger.py)",
            }
        if steps:
            ledger["step-calibrated"] = {
                "sigma_log": round(sigma(steps), 4),
                "mean_abs_pct": round(100 * float(np.mean(np.abs(np.expm1(steps)))), 2),
                "figures": len(steps),
                "evidence": "step times priced by a fit on another model's steps, both directions "
                "(benchmarks/bench_steps_transfer.py)",
            }
        else:
            spec = ledger["spec-sheet"]
            ledger["step-calibrated"] = {
                **spec,
                "evidence": "no cross-model step measurement here: the spec-sheet kind's figures stand in",
            }
        print("\nkind                sigma_log  mean |error| %  figures")
        for k, v in ledger.items():
            print(f"{k:<18}  {v['sigma_log']:9.3f}  {v['mean_abs_pct']:14.1f}  {v['figures']:7d}")
        print(f"\ncoverage of p{BAND[0]}-p{BAND[1]} bands, {args.draws} draws each (figures inside / figures)")
        total = {"in sample": [0, 0], "leave one run out": [0, 0]}
        widths: dict = {"in sample": [], "leave one run out": []}
        for r in rows:
            kind, others = r["kind"], [e for run, e in kinds[r["kind"]].items() if run != r["run"]]
            for label, s in (
                ("in sample", ledger[kind]["sigma_log"]),
                ("leave one run out", sigma(np.concatenate(others)) if others else None),
            ):
                if s is None:
                    continue
                bands = figure_bands(r["measured"], r["model"], r["hw"], sigma_log=s, draws=args.draws, band=BAND)
                inside = int(bands.inside.sum())
                width = (bands[f"p{BAND[1]}"] / bands[f"p{BAND[0]}"] - 1.0).to_numpy()
                widths[label].extend(width)
                total[label][0] += inside
                total[label][1] += len(bands)
                print(
                    f"  {r['run']:<22} {kind:<18} {label:<18} sigma {s:.3f}: {inside}/{len(bands)}, "
                    f"median width {100 * float(np.median(width)):.0f} %"
                )
        for label, (i, n) in total.items():
            print(
                f"  all, {label}: {i}/{n} = {100 * i / max(n, 1):.0f} %, "
                f"median width (p{BAND[1]} / p{BAND[0]} - 1) {100 * float(np.median(widths[label])):.0f} %"
            )
    if args.write:
        LEDGER_FILE.write_text(
            "# Written by benchmarks/error_ledger.py on "
            f"{date.today().isoformat()}; read by costmodel/expected_error.py.\n"
            + yaml.safe_dump({"kinds": ledger}, sort_keys=False, width=100)
        )
        print(f"wrote {LEDGER_FILE}")


if __name__ == "__main__":
    main()
