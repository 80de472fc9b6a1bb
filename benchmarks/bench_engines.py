"""vLLM 0.33 against SGLang 0.5.23 on one scene, kernel-only and with each engine's execution
(``--execution engine``: CUDA-graph regime, padding to the capture size, host kernel launches;
costmodel/execution.py, docs/engines.md). Llama-3.1-8B on the seed's H100 profile, tp 1, engine
defaults. For each scene: a representative step's terms per engine (kernel GPU time, padding,
launches, the regime), then the simulated TTFT / TPOT / ITL / throughput of both engines both ways:
"sglang - vllm, kernels" is the engines' scheduling difference alone, "execution adds" each engine's
execution terms, and the launch term at the ends of its measured band (LAUNCH_BAND). Last, the
shared RTX 4090 vLLM run validated both ways (needs ../shared/data).
Run: python benchmarks/bench_engines.py"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from costmodel import CostModel, load_hardware, load_model  # noqa: E402
from costmodel.execution import LAUNCH_BAND  # noqa: E402
from experiments.engines import build_cluster  # noqa: E402
from simcore.simulation import Simulation, fixed_workload  # noqa: E402

ENGINES = ("vllm", "sglang")
METRICS = ("mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_itl_ms", "p99_itl_ms", "output_throughput")
SCENES = [  # (name, requests, prompt, output, concurrency, the step whose terms are shown: q_lens, kv_lens)
    ("300 decoders prefilled together (one schedule for both engines)", 300, 16, 256, None, [1] * 300, [144] * 300),
    ("decode, 384 concurrent", 768, 512, 256, 384, [1] * 384, [640] * 384),
    ("decode, 4 concurrent", 32, 512, 256, 4, [1] * 4, [640] * 4),
    ("prefill-heavy: 2,048-token prompts, 16 out, 8 concurrent", 64, 2048, 16, 8, [2048], [0]),
    ("mixed: 600-token prompt beside 8 decoders", 0, 0, 0, 0, [600] + [1] * 8, [0] + [700] * 8),
]


def step_terms(model, hw, q, kv) -> list[str]:
    """Each engine's price of one step: kernel GPU time, then the execution's terms."""
    lines = []
    for policy in ENGINES:
        cm = build_cluster(policy, model, hw, 1, {"execution": "engine"})[0][0][2]
        s = cm.shape(q, kv)
        regime, padded, pad, launch = cm.execution_terms(s.rows, s.seqs, s.prefill_seqs)
        gpu = CostModel(model, hw).time(s)
        lines.append(
            f"    {policy:6s} kernels {gpu * 1e3:8.3f} ms + padding {pad * 1e3:6.3f} ms ({s.rows} -> {padded} rows) "
            f"+ launches {launch * 1e3:6.3f} ms ({regime}) = {cm.time(s) * 1e3:8.3f} ms"
        )
    return lines


def simulate(model, hw, policy, execution, n, prompt, output, conc, launch_s=None) -> dict:
    engines, router, max_len = build_cluster(policy, model, hw, 1, {"execution": execution})
    if launch_s is not None:  # the same engine's profile at another launch cost
        cm = engines[0][2]
        cm = CostModel(cm.model, cm.hw, cm.tp, cm.counting, cm.overlap_host, replace(cm.execution, launch_s=launch_s))
        engines = [(s, p, cm) for s, p, _ in engines]
    wl = fixed_workload(np.zeros(n), np.full(n, prompt), np.full(n, output), concurrency=conc)
    return Simulation(engines, wl, max_model_len=max_len, router=router).run().summary


def measured_run() -> list[str]:
    """LLMServingSim's vLLM run on an RTX 4090 (FULL_AND_PIECEWISE graphs, async scheduling, 2,048
    batched tokens: mixed steps past 512 tokens ran without graphs), validated kernel-only and with
    vLLM's execution, on the profile fitted from that card's own kernel folder (bench_validate.py)."""
    import contextlib
    import io
    import tempfile

    from benchmarks.bench_validate import ROOT, RUNS, profile_for
    from experiments.validate import load_run, validate

    if not ROOT.is_dir():
        return [f"skipped: {ROOT} not found"]
    run_rel, prof_rel, model_name, base = RUNS[0]
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        run = load_run(ROOT / "runs" / run_rel)
        with contextlib.redirect_stdout(io.StringIO()):
            hw_arg, _ = profile_for(ROOT / "profiles" / prof_rel, model_name, base, run.tp, Path(tmp) / base)
        model, hw = load_model(model_name), load_hardware(hw_arg)
        for e in ("kernels", "engine"):
            table, overall, _, _ = validate(ROOT / "runs" / run_rel, model, hw, flags={"execution": e}, run=run)
            t = table.set_index("metric")["rel_error"]
            out.append(
                f"  {run_rel}, --execution {e}: mean |relative error| {100 * overall:.2f} %, "
                + ", ".join(
                    f"{m} {100 * t[m]:+.1f} %"
                    for m in ("mean_ttft_ms", "median_ttft_ms", "mean_tpot_ms", "median_tpot_ms")
                )
            )
    return out


def main() -> None:
    model, hw = load_model("llama-3.1-8b"), load_hardware("h100")
    t0 = time.perf_counter()
    for name, n, prompt, output, conc, q, kv in SCENES:
        print(f"\n{name} (Llama-3.1-8B, {hw.name}, tp 1, engine defaults)")
        print("  one step, q_lens " + (f"[{q[0]}] + " if q[0] > 1 else "") + f"{q.count(1)} decodes:")
        print("\n".join(step_terms(model, hw, q, kv)))
        if not n:
            continue
        rows = {
            (p, e): simulate(model, hw, p, e, n, prompt, output, conc) for p in ENGINES for e in ("kernels", "engine")
        }
        print(f"  simulated, {n} requests of {prompt} in / {output} out, concurrency {conc or 'all at t = 0'}:")
        print(f"    {'':28s}" + "".join(f"{m:>18s}" for m in METRICS))

        def line(label, r, sign=""):
            print(f"    {label:28s}" + "".join(f"{r[m]:{sign}18.2f}" for m in METRICS))

        def diff(a, b):
            return {m: a[m] - b[m] for m in METRICS}

        for p in ENGINES:
            line(f"{p} kernels", rows[(p, "kernels")])
            line(f"{p} engine", rows[(p, "engine")])
            line(f"  {p}: execution adds", diff(rows[(p, "engine")], rows[(p, "kernels")]), "+")
        line("sglang - vllm, kernels", diff(rows[("sglang", "kernels")], rows[("vllm", "kernels")]), "+")
        line("sglang - vllm, engine", diff(rows[("sglang", "engine")], rows[("vllm", "engine")]), "+")
        for ls in LAUNCH_BAND:
            band = {p: simulate(model, hw, p, "engine", n, prompt, output, conc, ls)["mean_tpot_ms"] for p in ENGINES}
            print(
                f"    launch {ls * 1e6:.1f} µs: mean TPOT vllm {band['vllm']:.2f}, sglang {band['sglang']:.2f} ms "
                f"(sglang - vllm {band['sglang'] - band['vllm']:+.2f})"
            )
    print("\nmeasured vLLM run against kernel-only and vLLM's execution:")
    print("\n".join(measured_run()))
    print(f"\n{time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
