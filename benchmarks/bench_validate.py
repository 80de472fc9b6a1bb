"""chunksim validate on the two shared LLMServingSim runs (../shared/data/validation): each with a
profile calibrated only from its own GPU's LLMServingSim profile folder when the `llmservingsim`
calibration importer exists on this branch, otherwise with the GPU's spec-sheet profile (said so).
Prints every figure, the mean |relative error|, the median-TPOT error and validate's wall time.

A profile folder is measured on one GPU (tp<N>/ shrinks the layer N ways; its o_proj and down_proj
times halve from tp1 to tp2, so no all-reduce is inside them): it says nothing about the
all-reduce. For tp > 1 runs the script also prints the figures with the all-reduce vLLM 0.19 runs
on two RTX PRO 6000s, derived from the engine's source and public measurements on that card
(``engine_allreduce``), the run's own pure-decode steps against the model's price of the same
batch (``decode_plateau``: where the error sits), then other sources, each named: the shipped l40s
profile's all-reduce regimes (AIConfigurator's NCCL table measured on two PCIe L40S, not this
card), and, for diagnosis only, LLMServingSim's own cluster-config link (16 GB/s, 20 µs per hop:
configs/cluster/*.json's setting for PCIe machines, a setting of that simulator, not a
measurement: it arrived in v1.1.0 with this very run, and its serving/__main__.py calls it the
link_bw "that already calibrates AllReduce", so it is tuned to these runs and cannot count as a
source fixed before them), and the errors at a few link bandwidths (the spec sheet's per-hop
latency): the link the run implies, printed as such.
Each run's wind-down (no prefill after its last first token) is also timed step by step from its
requests' last tokens (decode_steps.py) against the folder's own timings and the model, by batch
size; ``--upstream CHECKOUT`` (LLMServingSim at llmservingsim/COMMIT) adds the same card's tp-1
Llama-3.1-8B run against its own folder, which ../shared/data does not hold.
Run: python benchmarks/bench_validate.py [--upstream CHECKOUT]"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.decode_steps import by_batch, exact_decode_steps, folder_step, gap_line  # noqa: E402
from benchmarks.machine import one_core, reference_s  # noqa: E402
from costmodel import load_hardware, load_model  # noqa: E402
from experiments.cli import (
    calibrate as calibrate_cmd,  # noqa: E402
    main as cli,  # noqa: E402
)
from experiments.validate import load_run, validate  # noqa: E402

ROOT = Path(__file__).resolve().parents[2] / "shared" / "data" / "validation" / "llmservingsim"
RUNS = [
    ("RTX4090/Llama-3.1-8B", "RTX4090/meta-llama/Llama-3.1-8B/bf16", "llama-3.1-8b", "rtx4090"),
    ("RTXPRO6000/Qwen3-32B", "RTXPRO6000/Qwen/Qwen3-32B/bf16", "qwen3-32b", "rtx-pro-6000-server"),
]


def profile_for(profile_dir: Path, model: str, base: str, tp: int, out: Path) -> tuple[str, str]:
    """(hardware argument, how it was made)."""
    if "llmservingsim" not in calibrate_cmd.FORMATS:
        return base, (
            f"spec-sheet profile {base}: this branch has no `calibrate --from llmservingsim` importer "
            "(rerun after merging it to validate a profile calibrated from the profile folder)"
        )
    args = [
        "calibrate",
        "--from",
        "llmservingsim",
        str(profile_dir),
        "--base",
        base,
        "--model",
        model,
        "--tp",
        str(tp),
        "--out",
        str(out),
    ]
    rc = cli(args)
    if rc != 0:
        return base, f"spec-sheet profile {base}: `chunksim {' '.join(args)}` failed (exit {rc})"
    return str(out / "fitted.yaml"), f"calibrated from {profile_dir} only (base {base})"


RTX6KPRO = "voipmonitor/rtx6kpro hardware/pcie-bandwidth.md"
P2P_READ_BW = (
    53e9  # RTX PRO 6000 Server P2P writes, dual Turin direct-attach (RTX6KPRO, p2pBandwidthLatencyTest, 53-56 GB/s);
)
# peer reads ~52 GB/s on RTX PRO 6000s (local-inference-lab/b12x#139)
CUSTOM_AR_LAT = 7.5e-6  # a one-shot custom all-reduce's small-message time on RTX PRO 6000s over PCIe P2P (RTX6KPRO)
NCCL_LAT = 24e-6  # NCCL all-reduce's small-message time on the same machines (RTX6KPRO, 256 B to 64 KB: 24.1-24.6 µs)
NCCL_BUSBW = (
    (22.2e9, "NCCL default config, 8 Server cards direct-attached to dual Turin, 32 MB (RTX6KPRO)"),
    (40.1e9, "NCCL default config, 8 cards behind PCIe switches, 32 MB (RTX6KPRO)"),
    (P2P_READ_BW, "NCCL at the P2P link rate itself (an upper bound)"),
)


def engine_allreduce(hw, model, tp: int) -> list[tuple[str, object]]:
    """(label, profile) with the tp-2 all-reduce vLLM 0.19 runs on two RTX PRO 6000s, from engine facts
    and public measurements on that card, none on this run. The run's meta.json sets neither
    disable_custom_all_reduce nor enforce_eager, so the custom all-reduce is on and CUDA graphs are
    captured. vllm/distributed/device_communicators/custom_all_reduce.py (``CustomAllreduce.__init__``)
    refuses PCIe-only groups only above two GPUs, and otherwise only when ``_can_p2p`` fails; its
    max_size stays 8 MiB on SM 12.0 (all_reduce_utils.CUSTOM_ALL_REDUCE_MAX_SIZES lists 9.0 and 10.0
    only, and no symmetric-memory all-reduce exists for 12.0: vllm-project/vllm#52555); and
    ``should_custom_ar`` takes every message under max_size for world size 2. RTX PRO 6000 Blackwell
    exposes PCIe P2P (vllm-project/vllm#52555; RTX6KPRO's p2pBandwidthLatencyTest matrices), so a
    step of under 8 MiB / (hidden x 2 B) rows, every decode step here, runs the custom all-reduce
    (the two-GPU kernel is one stage: each GPU reads the other's buffer over P2P), and larger steps
    (prefill chunks) run PyNCCL's ring. Whether this machine had P2P enabled is not recorded."""
    if tp != 2:
        return []
    rows = (8 * 1024 * 1024 - 1) // (model.H * model.b)
    custom = [CUSTOM_AR_LAT, P2P_READ_BW] * 2
    return [
        (
            f"custom all-reduce over P2P up to {rows} rows ({CUSTOM_AR_LAT * 1e6:.1f} µs + {P2P_READ_BW / 1e9:.0f} GB/s), "
            f"then NCCL ({NCCL_LAT * 1e6:.0f} µs + {bw / 1e9:.1f} GB/s: {how})",
            hw.replace(allreduce_regimes={2: custom + [NCCL_LAT, bw]}, allreduce_oneshot_tokens=rows),
        )
        for bw, how in NCCL_BUSBW
    ]


def profile_sum(folder: Path, tp: int, layers: int, ctx: np.ndarray) -> tuple[float, float] | None:
    """The profile folder's own timings summed for one decode step of len(ctx) sequences (every
    per-layer operator times ``layers``, the two RMSNorms twice, attention interpolated in log kv at
    the mean context), and the skew term its skew fit adds for uneven contexts
    (alpha_default x (t(max kv) - t(mean kv)), LLMServingSim's skew_fit in meta.yaml): seconds, or
    None where the batch is off the profile's grid."""
    import pandas as pd
    import yaml

    d = folder / f"tp{tp}"
    dense, att = pd.read_csv(d / "dense.csv"), pd.read_csv(d / "attention.csv")
    per_seq = pd.read_csv(d / "per_sequence.csv")
    n = len(ctx)
    t = dense[dense.tokens == n].set_index("layer").time_us
    a = att[(att.prefill_chunk == 0) & (att.n_decode == n)].sort_values("kv_decode")
    if t.empty or a.empty:
        return None
    layer = t.drop(["final_layernorm", "embedding"], errors="ignore").sum() + t.get("layernorm", 0.0)
    step = layers * layer + t.get("final_layernorm", 0.0) + t.get("embedding", 0.0)
    step += per_seq[per_seq.sequences == n].time_us.sum()
    at = lambda kv: float(np.interp(np.log(kv), np.log(a.kv_decode), a.time_us))  # noqa: E731
    step += layers * at(ctx.mean())
    meta = yaml.safe_load((folder / "meta.yaml").read_text()) or {}
    alpha = float((((meta.get("skew_fit") or {}).get("per_tp") or {}).get(tp) or {}).get("alpha_default", 0.0))
    return step * 1e-6, layers * alpha * (at(ctx.max()) - at(ctx.mean())) * 1e-6


def decode_plateau(run_dir: Path, model, hw, tp: int, profile_dir: Path | None = None) -> str:
    """The run's pure-decode steps (seconds of the timeseries with no prompt tokens: step = running /
    generated tokens per second) at max_num_seqs running and at the run's end (1-2 running, both ends
    of the second), against the model's price of the same batches (each running request's context
    from its own first/last token times) and the profile folder's own timings summed for them
    (``profile_sum``, with its skew fit: uneven contexts in one batch cost more than their mean,
    the profile's ``attn_decode_skew``), and the model's GPU work without the collectives against
    that sum: where the gap sits."""
    import json

    import pandas as pd

    from costmodel import CostModel

    ts = pd.read_csv(run_dir / "timeseries.csv")
    running = ts.running.to_numpy(float)
    before = np.concatenate([[np.nan], running[:-1]])
    decode = (ts.prompt_throughput == 0).to_numpy() & (ts.gen_throughput > 0).to_numpy()
    full = decode & (running >= running.max() - 1)
    tail = decode & (running >= 1) & (running <= 2) & (before >= 1) & (before <= 2)
    reqs = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines() if line.strip()]
    t0 = min(r["queued_ts"] for r in reqs)
    cm = CostModel(model, hw, tp)

    def priced(mask):
        rows = []
        for t in ts.t.to_numpy(float)[mask]:
            at = t0 + t - 0.5
            ctx = np.asarray(
                [
                    r["input_toks"]
                    + 1
                    + int(
                        (at - r["first_token_ts"])
                        * (r["output_toks"] - 1)
                        / max(r["last_token_ts"] - r["first_token_ts"], 1e-9)
                    )
                    for r in reqs
                    if r["first_token_ts"] <= at < r["last_token_ts"]
                ],
                dtype=float,
            )
            bd = cm.breakdown(cm.shape(np.ones(len(ctx), dtype=int), ctx.astype(int)))
            raw = profile_sum(profile_dir, tp, model.L, ctx) if profile_dir else None
            gather = bd.op("logits_gather").time_s if tp > 1 and cm.gather_bytes_per_seq else 0.0
            rows.append(
                [bd.time_s]
                + [bd.op(n).time_s for n in ("linear", "attention_decode", "allreduce")]
                + [gather]
                + list(raw or (np.nan, np.nan))
            )
        return np.mean(rows, axis=0)

    if not full.any():
        return "no pure-decode seconds at full batch"
    p = priced(full)
    meas = float((ts.running / ts.gen_throughput)[full].mean())
    out = (
        f"{int(full.sum())} s at {int(running.max())} running: measured {meas * 1e3:.1f} ms a step, model "
        f"{p[0] * 1e3:.1f} ms ({p[0] / meas - 1:+.1%}; linear {p[1] * 1e3:.1f}, decode attention {p[2] * 1e3:.1f}, "
        f"all-reduce {p[3] * 1e3:.1f}, logits all-gather {p[4] * 1e3:.1f})"
    )
    if np.isfinite(p[5]):
        comm = p[3] + p[4]
        rest = meas - p[5] - p[6] - comm
        out += (
            f"; the profile folder's own timings summed for the same batches {p[5] * 1e3:.1f} ms, its skew fit "
            f"+{p[6] * 1e3:.1f} ms, with these collectives {(comm + p[5] + p[6]) * 1e3:.1f} ms: {rest * 1e3:.1f} ms a step "
            f"({rest / meas:.0%}) that neither the folder nor these collectives account for; the model's own GPU work "
            f"(all but the collectives) {(p[0] - comm) * 1e3:.1f} ms, {(p[0] - comm - p[5] - p[6]) * 1e3:+.1f} ms against the "
            f"folder's sum with its skew ("
            + (
                f"the profile's decode skew α {hw.attn_decode_skew:g} in it)"
                if hw.attn_decode_skew
                else "no skew term in the model)"
            )
        )
    if tail.any():
        q = priced(tail)
        m2 = float(((running + before) / 2 / ts.gen_throughput.to_numpy(float))[tail].mean())
        out += (
            f"; at the run's end ({int(tail.sum())} s, 1-2 running) measured {m2 * 1e3:.1f} ms, model {q[0] * 1e3:.1f} ms "
            f"({q[0] / m2 - 1:+.1%}; all-reduce {q[3] * 1e3:.1f})"
        )
    return out


def wind_down(run_dir: Path, profile_dir: Path, model, hw, tp: int) -> list[str]:
    """The run's decode steps after its last first token, each timed exactly from the gaps between
    its requests' last tokens (decode_steps.py), by batch size: measured, the profile folder's own
    timings summed for the same batches, and the model (``hw``); then the gap to each as a + b·n,
    and for tp > 1 what the model charges for the logits all-gather, the one per-sequence transfer the tp-2 engine
    adds beyond the all-reduces (vLLM ``LogitsProcessor._gather_logits``:
    ``tensor_model_parallel_all_gather`` of each rank's n x vocab/tp logits, through PyNCCL)."""
    from costmodel import CostModel

    steps = exact_decode_steps(run_dir)
    if steps.empty:
        return ["no usable decode-step gaps after the last first token"]
    priced = {"folder": np.array([folder_step(profile_dir, tp, model.L, c) for c in steps.ctx])}
    if hw is not None:
        cm = CostModel(model, hw, tp)
        priced["model"] = np.array(
            [cm.breakdown(cm.shape(np.ones(len(c), dtype=int), c.astype(int))).time_s for c in steps.ctx]
        )
    tab = by_batch(steps, priced)
    out = [
        f"{len(steps)} decode steps timed from the gaps between last tokens (after the last first token), by batch size:"
    ]
    for band, r in tab.iterrows():
        out.append(
            f"  n {band}: {int(r['count'])} steps, measured {r.step_s * 1e3:.1f} ms, "
            + ", ".join(f"{k} {r[k] * 1e3:.1f}" for k in priced)
            + " (measured - "
            + ", - ".join(f"{k} {r['gap_' + k] * 1e3:+.1f}" for k in priced)
            + ")"
        )
    for name in priced:
        a, b = gap_line(steps, priced[name])
        out.append(
            f"  measured - {name} = {a * 1e3:.2f} ms + {b * 1e6:.0f} µs a sequence (least squares over the steps)"
        )
    if tp > 1 and hw is not None:
        cm = CostModel(model, hw, tp)
        out.append(
            f"  in the model: the logits all-gather ({model.vocab // tp * model.b / 1e3:.0f} KB a sequence a rank, "
            f"roofline.py logits_gather) {cm.gather_s(1) * 1e6:.1f} µs at 1 sequence, {cm.gather_s(128) * 1e3:.2f} ms "
            f"at 128; the embedding's all-reduce, one of {cm.ar_calls} a step"
        )
    return out


def interconnect_variants(hw, tp: int) -> list[tuple[str, object]]:
    """(label, profile) with the all-reduce priced from sources other than the spec sheet."""
    ref = load_hardware("l40s")
    l40s = ref.allreduce_regimes.get(tp)
    out = []
    if l40s:
        out.append(
            (
                f"all-reduce from l40s's measured PCIe regimes (AIConfigurator NCCL, {tp} L40S)",
                hw.replace(
                    allreduce_regimes={tp: list(l40s)},
                    allreduce_oneshot_tokens=ref.allreduce_oneshot_tokens,
                    allreduce_switches={tp: list(ref.allreduce_switches[tp])} if tp in ref.allreduce_switches else {},
                ),
            )
        )
    out.append(
        (
            "all-reduce at LLMServingSim's PCIe link setting (16 GB/s, 20 µs per hop; diagnosis only)",
            hw.replace(allreduce_regimes={}, interconnect_bandwidth=16e9, interconnect_latency_s=20e-6, pcie_gts=0),
        )
    )
    return out


def link_sensitivity(run_dir: Path, model, hw, run) -> str:
    """Mean |relative error| and median-TPOT error with the all-reduce priced at a few link
    bandwidths (the profile's per-hop latency): what link the run implies, not a source."""
    cells = []
    for bw in (64e9, 32e9, 16e9, 8e9):
        alt = hw.replace(
            allreduce_regimes={}, interconnect_bandwidth=bw, pcie_gts=0
        )  # the link alone, not NCCL's model
        table, overall, _, _ = validate(run_dir, model, alt, run=run)
        tpot = table.set_index("metric").loc["median_tpot_ms", "rel_error"]
        cells.append(f"{bw / 1e9:.0f} GB/s {100 * overall:.1f} % (TPOT {100 * tpot:+.1f} %)")
    return ", ".join(cells)


UPSTREAM_TP1 = ("bench/examples/RTXPRO6000/Llama-3.1-8B/vllm", "profiler/perf/RTXPRO6000/meta-llama/Llama-3.1-8B/bf16")


def same_card_tp1(upstream: Path) -> None:
    """The tp-1 Llama-3.1-8B run LLMServingSim measured on the same RTX PRO 6000 machine as the
    Qwen3-32B pair (vLLM 0.19, started two minutes before it), from a checkout of that repository
    at ``llmservingsim/COMMIT`` (not in ../shared/data): its wind-down against its own folder. Every
    host cost a tp-1 engine pays per sequence (scheduling, input preparation, sampling,
    output processing) is in these steps too; only what tensor parallelism adds is not."""
    run_dir, folder = (upstream / p for p in UPSTREAM_TP1)
    if not (run_dir / "requests.jsonl").is_file():
        print(f"\n--upstream {upstream}: no {UPSTREAM_TP1[0]}/requests.jsonl")
        return
    print(
        f"\nsame card, tp 1 ({run_dir}, folder {folder}): "
        + "\n  ".join(wind_down(run_dir, folder, load_model("llama-3.1-8b"), None, 1))
    )


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--upstream",
        type=Path,
        help="a checkout of casys-kaist/LLMServingSim at llmservingsim/COMMIT: "
        "also time the same card's tp-1 run against its own folder",
    )
    args = ap.parse_args()
    if not ROOT.is_dir():
        print(f"skipped: {ROOT} not found")
        return
    print(f"machine: {one_core()}, reference loop {reference_s():.3f} s")
    if args.upstream:
        same_card_tp1(args.upstream)
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
                print(
                    f"  {r.metric:20s} measured {r.measured:12.2f}  simulated {r.simulated:12.2f}  {100 * r.rel_error:+7.1f} %"
                )
            print(
                f"  mean |relative error| {100 * overall:.1f} %, median TPOT {100 * tpot:+.1f} %, "
                f"validate {seconds:.2f} s"
            )
            if run.tp == 1:
                print(
                    "  the run's wind-down: "
                    + "\n  ".join(wind_down(ROOT / "runs" / run_rel, ROOT / "profiles" / prof_rel, model, hw, run.tp))
                )
            if run.tp > 1:
                from costmodel import CostModel

                pcie = CostModel(model, hw, run.tp).pcie
                print(
                    "  the profile folder holds no all-reduce; above: "
                    + (
                        pcie.describe()
                        if pcie is not None
                        else f"the base's spec-sheet link ({hw.interconnect_bandwidth / 1e9:.0f} GB/s, "
                        f"{hw.interconnect_latency_s * 1e6:.1f} µs per hop)"
                    )
                )
                for i, (label, alt) in enumerate(engine_allreduce(hw, model, run.tp)):
                    t2, o2, _, _ = validate(ROOT / "runs" / run_rel, model, alt, run=run)
                    print(
                        f"  engine facts: {label}: mean |relative error| {100 * o2:.1f} %, median TPOT "
                        f"{100 * t2.set_index('metric').loc['median_tpot_ms', 'rel_error']:+.1f} %"
                    )
                    if i == 0:
                        print(
                            f"    its pure-decode steps: {decode_plateau(ROOT / 'runs' / run_rel, model, alt, run.tp, ROOT / 'profiles' / prof_rel)}"
                        )
                        print(
                            "    the run's wind-down with this all-reduce: "
                            + "\n    ".join(
                                wind_down(ROOT / "runs" / run_rel, ROOT / "profiles" / prof_rel, model, alt, run.tp)
                            )
                        )
                print(
                    f"  the same with the profile's spec link: {decode_plateau(ROOT / 'runs' / run_rel, model, hw, run.tp)}"
                )
                for label, alt in interconnect_variants(hw, run.tp):
                    t2, o2, _, _ = validate(ROOT / "runs" / run_rel, model, alt, run=run)
                    print(
                        f"  {label}: mean |relative error| {100 * o2:.1f} %, median TPOT "
                        f"{100 * t2.set_index('metric').loc['median_tpot_ms', 'rel_error']:+.1f} %"
                    )
                print(
                    f"  sensitivity to the link (at {hw.interconnect_latency_s * 1e6:.1f} µs per hop; what the run "
                    f"implies, not a source): {link_sensitivity(ROOT / 'runs' / run_rel, model, hw, run)}"
                )


if __name__ == "__main__":
    main()
