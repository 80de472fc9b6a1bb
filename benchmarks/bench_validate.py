"""chunksim validate on the two shared LLMServingSim runs (../shared/data/validation): each with a
profile calibrated only from its own GPU's LLMServingSim profile folder when the `llmservingsim`
calibration importer exists on this branch, otherwise with the GPU's spec-sheet profile (said so).
Prints every figure, the mean |relative error|, the median-TPOT error and validate's wall time.

A profile folder is measured on one GPU (tp<N>/ shrinks the layer N ways; its o_proj and down_proj
times halve from tp1 to tp2, so no all-reduce is inside them): it says nothing about the
all-reduce. For tp > 1 runs the script also prints the figures with the all-reduce priced from
other sources, each named: the shipped l40s profile's all-reduce regimes (AIConfigurator's NCCL
table measured on two PCIe L40S, not this card), and, for diagnosis only, LLMServingSim's own
cluster-config link (16 GB/s, 20 µs per hop: configs/cluster/*.json's setting for PCIe machines,
a setting of that simulator, not a measurement: it arrived in v1.1.0 with this very run, and its
serving/__main__.py calls it the link_bw "that already calibrates AllReduce", so it is tuned to
these runs and cannot count as a source fixed before them), and the errors at a few link
bandwidths (the spec sheet's per-hop latency): the link the run implies, printed as such.
Run: python benchmarks/bench_validate.py"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import one_core, reference_s  # noqa: E402
from costmodel import load_hardware, load_model  # noqa: E402
from experiments.cli import calibrate as calibrate_cmd  # noqa: E402
from experiments.cli import main as cli  # noqa: E402
from experiments.validate import load_run, validate  # noqa: E402

ROOT = Path(__file__).resolve().parents[2] / "shared" / "data" / "validation" / "llmservingsim"
RUNS = [("RTX4090/Llama-3.1-8B", "RTX4090/meta-llama/Llama-3.1-8B/bf16", "llama-3.1-8b", "rtx4090"),
        ("RTXPRO6000/Qwen3-32B", "RTXPRO6000/Qwen/Qwen3-32B/bf16", "qwen3-32b", "rtx-pro-6000-server")]


def profile_for(profile_dir: Path, model: str, base: str, tp: int, out: Path) -> tuple[str, str]:
    """(hardware argument, how it was made)."""
    if "llmservingsim" not in calibrate_cmd.FORMATS:
        return base, (f"spec-sheet profile {base}: this branch has no `calibrate --from llmservingsim` importer "
                      "(rerun after merging it to validate a profile calibrated from the profile folder)")
    args = ["calibrate", "--from", "llmservingsim", str(profile_dir), "--base", base, "--model", model,
            "--tp", str(tp), "--out", str(out)]
    rc = cli(args)
    if rc != 0:
        return base, f"spec-sheet profile {base}: `chunksim {' '.join(args)}` failed (exit {rc})"
    return str(out / "fitted.yaml"), f"calibrated from {profile_dir} only (base {base})"


PCIE_GEN4_X16 = 16e9 * 16 * 128 / 130 / 8   # bytes/s per direction: 16 GT/s, 16 lanes, 128b/130b (PCI-SIG)
PCIE_GEN5_X16 = 2 * PCIE_GEN4_X16             # 32 GT/s: 63.0 GB/s
HOST_STAGED_GEN4 = 10e9   # per direction: P2P-disabled copies between two PCIe Gen4 x16 GPUs, ~20 GB/s both ways
                          # together (p2pBandwidthLatencyTest, A40 on EPYC 7302, NVIDIA/nccl-tests#74)
SHM_ALLREDUCE_GEN3 = 3.9e9   # NCCL all-reduce through host memory (NCCL_P2P_DISABLE=1, SHM), 2 GPUs, PCIe Gen3
                             # x16 (NVIDIA/nccl#384): a quarter of the 15.75 GB/s link


def physical_pcie(hw, tp: int) -> list[tuple[str, object]]:
    """(label, profile) with the all-reduce of tp PCIe Gen5 x16 GPUs without NVLink derived from the
    link and from measurements on other machines, none on this run (the per-hop latency is the
    profile's: NCCL's tuning model for PCI)."""
    l40s = max(load_hardware("l40s").allreduce_regimes.get(2, [0, 0])[1::2])
    eff = l40s / PCIE_GEN4_X16
    ring = PCIE_GEN5_X16 * eff
    staged = [2 * HOST_STAGED_GEN4, 4 * SHM_ALLREDUCE_GEN3]
    out = [(f"NCCL ring over PCIe P2P: the Gen5 x16 link ({PCIE_GEN5_X16 / 1e9:.1f} GB/s) at the efficiency "
            f"AIConfigurator measured between two PCIe Gen4 L40S ({l40s / 1e9:.1f} of {PCIE_GEN4_X16 / 1e9:.1f} GB/s, "
            f"{eff:.2f}): {ring / 1e9:.1f} GB/s", hw.replace(allreduce_regimes={}, interconnect_bandwidth=ring))]
    for bw, how in zip(staged, ("host-staged copies on Gen4 (nccl-tests#74) x2 for Gen5",
                                "NCCL's SHM all-reduce on Gen3 (nccl#384) x4 for Gen5")):
        out.append((f"through host memory, no P2P (NCCL SHM): {how}: {bw / 1e9:.1f} GB/s",
                    hw.replace(allreduce_regimes={}, interconnect_bandwidth=bw)))
    return out


def interconnect_variants(hw, tp: int) -> list[tuple[str, object]]:
    """(label, profile) with the all-reduce priced from sources other than the spec sheet."""
    ref = load_hardware("l40s")
    l40s = ref.allreduce_regimes.get(tp)
    out = physical_pcie(hw, tp) if tp == 2 else []
    if l40s:
        out.append((f"all-reduce from l40s's measured PCIe regimes (AIConfigurator NCCL, {tp} L40S)",
                    hw.replace(allreduce_regimes={tp: list(l40s)}, allreduce_oneshot_tokens=ref.allreduce_oneshot_tokens)))
    out.append(("all-reduce at LLMServingSim's PCIe link setting (16 GB/s, 20 µs per hop; diagnosis only)",
                hw.replace(allreduce_regimes={}, interconnect_bandwidth=16e9, interconnect_latency_s=20e-6)))
    return out


def link_sensitivity(run_dir: Path, model, hw, run) -> str:
    """Mean |relative error| and median-TPOT error with the all-reduce priced at a few link
    bandwidths (the profile's per-hop latency): what link the run implies, not a source."""
    cells = []
    for bw in (64e9, 32e9, 16e9, 8e9):
        alt = hw.replace(allreduce_regimes={}, interconnect_bandwidth=bw)
        table, overall, _, _ = validate(run_dir, model, alt, run=run)
        tpot = table.set_index("metric").loc["median_tpot_ms", "rel_error"]
        cells.append(f"{bw / 1e9:.0f} GB/s {100 * overall:.1f} % (TPOT {100 * tpot:+.1f} %)")
    return ", ".join(cells)


def main() -> None:
    if not ROOT.is_dir():
        print(f"skipped: {ROOT} not found")
        return
    print(f"machine: {one_core()}, reference loop {reference_s():.3f} s")
    with tempfile.TemporaryDirectory() as tmp:
        for run_rel, prof_rel, model_name, base in RUNS:
            run = load_run(ROOT / "runs" / run_rel)
            hw_arg, how = profile_for(ROOT / "profiles" / prof_rel, model_name, base, run.tp, Path(tmp) / base)
            model, hw = load_model(model_name), load_hardware(hw_arg)
            t0 = time.perf_counter()
            table, overall, _, _ = validate(ROOT / "runs" / run_rel, model, hw, run=load_run(ROOT / "runs" / run_rel))
            seconds = time.perf_counter() - t0
            tpot = table.set_index("metric").loc["median_tpot_ms", "rel_error"]
            print(f"\n{run_rel} (tp={run.tp}, {len(run.requests)} requests): {how}")
            for r in table.itertuples():
                print(f"  {r.metric:20s} measured {r.measured:12.2f}  simulated {r.simulated:12.2f}  {100 * r.rel_error:+7.1f} %")
            print(f"  mean |relative error| {100 * overall:.1f} %, median TPOT {100 * tpot:+.1f} %, "
                  f"validate {seconds:.2f} s")
            if run.tp > 1:
                print(f"  the profile folder holds no all-reduce; above: the base's spec-sheet link "
                      f"({hw.interconnect_bandwidth / 1e9:.0f} GB/s, {hw.interconnect_latency_s * 1e6:.1f} µs per hop)")
                for label, alt in interconnect_variants(hw, run.tp):
                    t2, o2, _, _ = validate(ROOT / "runs" / run_rel, model, alt, run=run)
                    print(f"  {label}: mean |relative error| {100 * o2:.1f} %, median TPOT "
                          f"{100 * t2.set_index('metric').loc['median_tpot_ms', 'rel_error']:+.1f} %")
                print(f"  sensitivity to the link (at {hw.interconnect_latency_s * 1e6:.1f} µs per hop; what the run "
                      f"implies, not a source): {link_sensitivity(ROOT / 'runs' / run_rel, model, hw, run)}")


if __name__ == "__main__":
    main()
