"""Seed 001 §七: SGLang ``chunked_prefill_size`` 8192 → 16384 on Qwen3.5-122B-A10B, 8×H100, 1600 requests.

The seed's table (HiCache write_through, one run per setting):

    prefill batches 2,214 → 1,785 (−19.4 %), total TPS 19,589 → 22,314 (+13.9 %),
    runtime 106 → 91 min (−14.2 %), TPOT P50 19.6 → 19.9 ms (+1.5 %).

Deployment assumed: one engine, TP 8, the MoE as plain TP, HiCache on
(``--enable-hierarchical-cache``, write_through, host pool 2× the device's; simcore/hiradix_cache.py).
Why TP and not DP attention: the seed counts 1.38 prefill batches a request, as a chunk of 8192
tokens a batch gives (this workload: 2,080); under ``--enable-dp-attention --dp 8`` SGLang gives
each rank chunked_prefill_size // dp (``_handle_data_parallelism``), 1,024 tokens, and the same
workload needs 10,368 rank prefill batches (5,555 at 16384), and its TPS moves by −0.04 %.

Workload (the seed does not publish it; built once from its numbers, the same for both rows).
19,589 tok/s × 6,360 s ≈ 125 M tokens over 1,600 requests ≈ 78 k tokens per request, which only
input-plus-output counting of long prompts explains (at TPOT 19.6 ms, 19.6 k *output* tok/s would
need ~380 concurrent 78 k-token decoders, far more KV than 8×H100 hold). Seed §八 describes the
prompts: multi-turn chains up to round 20 whose 100 k-token prefix is a HiCache hit, so that each
chunk only prefills the increment. 2,214 prefill batches for 1,600 requests says most increments
are shorter than one chunk, with a tail that needs several. Hence an agentic multi-turn workload:
80 sessions × 20 turns; a session's first prompt is a shared 8 k system prompt plus 8–24 k of task
context, each later turn appends the previous answer (thinking stripped, as Qwen's chat template
does) and a tool result (log-normal, median 3.5 k tokens), so prompts grow from ~24 k (prompt
median 74 k, mean 76 k, p90 122 k, max 223 k); outputs are a thinking model's (log-normal, median
1.5 k, mean 2.0 k tokens). Prefix sharing is given as block hashes (256-token blocks). The client
is closed-loop at ``concurrency`` (16), sessions in waves, turns round-robin.

Hybrid model (costmodel/models/qwen3.5-122b-a10b.json: 36 of 48 layers Gated DeltaNet). SGLang
serves it with its mamba radix cache and a state pool (simcore/mamba_radix_cache.py,
policies/sglang_mamba.py): states take 0.9/1.9 of the memory the weights leave (18.3 MiB a state a
GPU: 982 slots and a 1.71 M-token KV pool at 8192, 664 and 1.15 M at 16384, whose 1.5 × chunk MiB
reserve is 12 GiB larger), running requests are capped at slots // 5 (196, 132: concurrency 16
never meets it), and a prefix is reused only up to a held state.

Result: prefill batches −25.7 % (seed −19.4 %); TPS −4.1 %, runtime +4.3 %, TPOT P50 −6.3 % (seed
+13.9 %, −14.2 %, +1.5 %). No modelled mechanism gives the seed's direction, and prefill work
cannot (the bounds below). Tested against SGLang 0.5.23's source and the seed's text
(``hypotheses``; figures by variant in docs/benchmarks.md):
- hybrid prefix reuse (the mamba radix cache): under extra_buffer each extend snapshots a state at
  its last 64-token point, so every chunk and every completed prefill leaves one, and the next
  turn reuses the previous prompt whole at either chunk size. Only a lookup whose KV hit runs past
  the deepest state recomputes (its branching point then takes the extend's snapshot): 5,376
  tokens recomputed at 8192 and 59,648 at 16384 out of ~125 M, the larger chunk losing (its
  boundaries miss the 8 k system prompt's end). The state pool does not bind: 16 sessions add
  ~3 states a turn, ~50 between a session's turns, against 600+ free slots (LRU keeps them);
  a chunk's own state read, write and snapshot are ~55 MiB a request a GPU, ~17 µs. What the
  pool does change is memory: the KV pool halves, and at 16384 (12 GiB more reserve) the device
  no longer holds every session, so HiCache serves 41 M host-hit tokens (7 M at 8192) and the
  larger chunk loses.
- HiCache write-through per chunk (seed §八, ``stash_chunked_request``): each stash inserts the
  chunk and backs it up (``_inc_hit_count_and_check``), but ``HiCacheController.start_writing``
  copies on its own device-to-host stream, the forward never waits for it, and the bytes are the
  same at both chunk sizes. Load-backs are layer-wise (``LayerDoneCounter``) and only follow
  device evictions; at concurrency 64 the larger chunk's larger reserve shrinks the device and
  host pools and TPS falls.
- the pass itself (the seed's own reading: "fewer prefill interruptions"): a pass holds at most
  chunked_prefill_size new tokens, and one pass fewer saves only its fixed part (weights streamed
  once, a small pass's GEMM and fused-MoE efficiency): at most 15–17 ms at TP 8, 6–7 s over the
  429 avoided passes; even a free prefill (all 2,214 passes at 8,192 tokens at the end of the
  262 k context) saves at most 470–600 s of the 900 (experiments/sglang_chunk_bounds.py). The
  seed's rows read as runtime = a + b × batches need b = 2.1 s a batch; SGLang's per-batch host
  work (``get_next_batch_to_run``, ``prepare_for_extend``, HiCache's ``writing_check``) is ms.
- MoE under DP attention: above; rank prefill batches ×5 and TPS flat (main's lockstep group;
  expert-parallel pricing of that group is another branch's, which would move the absolute
  figures, not the chunk // dp batch count).
- one KV pool for both (``equal_pools``: ``--mem-fraction-static`` pinned at 8192's default, as
  launch commands often do): prefill batches −19.0 % (seed −19.4), TPS +0.1 %, runtime −0.1 %,
  TPOT −0.2 %; the runtime saved is the prefill time saved, 3 s.
What the table needs is not prefill work: with TPOT 1.5 % higher, a closed loop's runtime can
fall 14 % only if the 8192 run's clients spent ≥ 15.4 % of their time before their first token
and the larger chunk removed it (``wait_share``; here 0.5 % at 8192, and 11 % at 16384, whose
smaller pool makes clients wait), or if the two runs differed in more than the chunk size (their
token totals differ by 2.2 %). Absolute figures differ too: this TPS is ~1.9× the seed's. Figures by variant:
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from costmodel import load_hardware, load_model
from experiments.engines import build_cluster
from policies.sglang_config import sglang_mem_fraction_static
from simcore.simulation import Simulation
from workloads.workload import Workload

SEED_TABLE = {  # seed 001 §七
    8192: dict(prefill_batches=2214, total_token_throughput=19589.0, runtime_min=106.0, median_tpot_ms=19.6),
    16384: dict(prefill_batches=1785, total_token_throughput=22314.0, runtime_min=91.0, median_tpot_ms=19.9),
}
BLOCK_TOKENS = 256
HICACHE = {"enable_hierarchical_cache": True, "hicache_write_policy": "write_through"}  # the seed's
SYSTEM_PROMPT = 8192
NO_BUFFER = {"mamba_radix_cache_strategy": "no_buffer", "disable_overlap_schedule": True}  # states at every extend end


def agentic_workload(
    n_requests: int = 1600,
    turns: int = 20,
    concurrency: int = 16,
    seed: int = 0,
    system_prompt: int = SYSTEM_PROMPT,
    context=(8192, 24576),
    tool_median: float = 3500.0,
    answer_median: float = 300.0,
    output_median: float = 1500.0,
    block_tokens: int = BLOCK_TOKENS,
) -> Workload:
    """Multi-turn agent sessions (see the module docstring), closed loop at ``concurrency``."""
    rng = np.random.default_rng(seed)
    sessions = -(-n_requests // turns)
    wave = max(1, concurrency)
    sys_ids = list(range(system_prompt // block_tokens))
    next_id = len(sys_ids)
    prompts, outputs, hashes, order = [], [], [], []
    for s in range(sessions):
        stream_ids = list(sys_ids)  # ids of the session's full 256-token blocks so far
        length = system_prompt + int(rng.integers(context[0], context[1] + 1))
        for t in range(turns):
            full = length // block_tokens
            while len(stream_ids) < full:
                stream_ids.append(next_id)
                next_id += 1
            ids = stream_ids[:full]
            if length % block_tokens:  # a partial last block is this prompt's own
                ids = ids + [next_id]
                next_id += 1
            out = int(np.clip(rng.lognormal(np.log(output_median), 0.8), 64, 16384))
            prompts.append(length)
            outputs.append(out)
            hashes.append(tuple(ids))
            order.append((s // wave, t, s))  # waves of sessions, turns round-robin within a wave
            answer = int(np.clip(rng.lognormal(np.log(answer_median), 0.5), 16, 4096))
            tool = int(np.clip(rng.lognormal(np.log(tool_median), 0.9), 64, 65536))
            length += answer + tool
    idx = sorted(range(len(order)), key=order.__getitem__)[:n_requests]
    return Workload(
        np.zeros(len(idx)),
        np.array(prompts)[idx],
        np.array(outputs)[idx],
        [hashes[i] for i in idx],
        block_tokens,
        concurrency,
        (f"agentic: {sessions} sessions x {turns} turns, waves of {wave}",),
    )


def equal_pools(hardware: str = "h100", tp: int = 8) -> dict:
    """The 8192 run's default ``--mem-fraction-static``, pinned, so that both chunk sizes get one KV
    pool (launch commands often pin it; the default reserves 1.5 MiB a chunk token)."""
    mfs = sglang_mem_fraction_static(load_hardware(hardware).memory_bytes, 8192, 16384, tp)
    return {**HICACHE, "mem_fraction_static": mfs}


def _is_prefill(plan) -> bool:
    return any(n > 1 for _, n in plan.items)


def prefill_batches(iterations) -> int:
    """Forward passes that extend some prompt (SGLang without mixed chunk: prefill batches)."""
    return sum(1 for _, _, _, _, plan in iterations if _is_prefill(plan))


def run_one(
    chunk: int,
    workload: Workload,
    model: str = "qwen3.5-122b-a10b",
    hardware: str = "h100",
    tp: int = 8,
    flags: dict | None = None,
    replicas: int = 1,
) -> dict:
    m, hw = load_model(model), load_hardware(hardware)
    fl = {"chunked_prefill_size": chunk, **(HICACHE if flags is None else flags)}
    engines, router, max_len = build_cluster("sglang", m, hw, tp, fl, replicas)
    sim = Simulation(engines, workload, max_model_len=max_len, record_iterations=True, router=router)
    res = sim.run()
    s = res.summary
    cache, step_cm = engines[0][1].cache, sim.replicas[0].cm
    return dict(
        chunked_prefill_size=chunk,
        prefill_batches=prefill_batches(res.iterations),
        total_token_throughput=s["total_token_throughput"],
        runtime_min=s["duration"] / 60,
        median_tpot_ms=s["median_tpot_ms"],
        completed=s["completed"],
        rejected=s["num_rejected"],
        iterations=s["num_iterations"],
        prefix_cache_hit_rate=s.get("prefix_cache_hit_rate", float("nan")),
        kv_pool_tokens=engines[0][1].total * engines[0][1].block_size,
        prefill_time_s=sum(e - b for _, b, e, _, plan in res.iterations if _is_prefill(plan)),
        output_throughput=s["output_throughput"],
        median_ttft_s=s["median_ttft_ms"] / 1e3,
        wait_share=s["mean_ttft_ms"] / s["mean_e2el_ms"],  # of a client's time, before its first token
        host_hit_tokens=getattr(cache, "host_hit_tokens", 0),
        recomputed_tokens=getattr(cache, "recomputed_blocks", 0) * workload.block_tokens,
        max_running_requests=engines[0][0].cfg.max_running_requests,
        load_exposed_s=getattr(step_cm, "exposed_s_total", 0.0),
    )


def run_study(
    chunks=(8192, 16384),
    n_requests: int = 1600,
    concurrency: int = 16,
    seed: int = 0,
    model: str = "qwen3.5-122b-a10b",
    hardware: str = "h100",
    tp: int = 8,
    **workload_kw,
) -> pd.DataFrame:
    """One row per chunk size: simulated figures, with the seed's next to them where it has them."""
    w = agentic_workload(n_requests, concurrency=concurrency, seed=seed, **workload_kw)
    rows = []
    for c in chunks:
        row = run_one(c, w, model, hardware, tp)
        for k, v in SEED_TABLE.get(c, {}).items():
            row[f"seed_{k}"] = v
        rows.append(row)
    return pd.DataFrame(rows).set_index("chunked_prefill_size")


def seed_batch_cost_s() -> float:
    """The seed's rows read as runtime = a + b · prefill batches: b, seconds a batch."""
    a, b = SEED_TABLE[8192], SEED_TABLE[16384]
    return (a["runtime_min"] - b["runtime_min"]) * 60 / (a["prefill_batches"] - b["prefill_batches"])


def batch_overhead_needed_s(df: pd.DataFrame) -> float:
    """The fixed cost per prefill batch that, added to every simulated one, would give the seed's
    runtime ratio (91 / 106): solves (R₂ + B₂x) / (R₁ + B₁x) = r for x."""
    r = SEED_TABLE[16384]["runtime_min"] / SEED_TABLE[8192]["runtime_min"]
    r1, r2 = df.loc[8192, "runtime_min"] * 60, df.loc[16384, "runtime_min"] * 60
    b1, b2 = df.loc[8192, "prefill_batches"], df.loc[16384, "prefill_batches"]
    return (r2 - r * r1) / (r * b1 - b2)


def _change(a: dict, b: dict) -> dict:
    keys = ("prefill_batches", "total_token_throughput", "runtime_min", "median_tpot_ms")
    return {k: (b[k] / a[k] - 1) * 100 for k in keys}


def hypotheses(n_requests: int = 1600, seed: int = 0) -> pd.DataFrame:
    """The study's variants, each as % change 8192 → 16384 beside the seed's: the table's own
    deployment, with one KV pool for both chunk sizes, without HiCache, at concurrency 64 (a device
    pool that no longer holds every session) with and without HiCache, and DP attention over 8
    ranks (no HiCache: not modelled together)."""
    variants = [
        ("TP 8 + HiCache write_through (the table)", 16, None, 8, 1),
        ("TP 8 + HiCache, equal pools (mem_fraction_static pinned)", 16, equal_pools(), 8, 1),
        ("TP 8, no HiCache", 16, {}, 8, 1),
        ("TP 8 + HiCache, mamba no_buffer (no overlap)", 16, {**HICACHE, **NO_BUFFER}, 8, 1),
        ("TP 8 + HiCache, concurrency 64", 64, None, 8, 1),
        ("TP 8, no HiCache, concurrency 64", 64, {}, 8, 1),
        ("DP attention 8 (attention TP 1), no HiCache", 16, {"enable_dp_attention": True}, 1, 8),
    ]
    rows = [dict(variant="seed 001", **_change(SEED_TABLE[8192], SEED_TABLE[16384]))]
    for label, conc, flags, tp, dp in variants:
        w = agentic_workload(n_requests, concurrency=conc, seed=seed)
        a, b = (run_one(c, w, tp=tp, flags=flags, replicas=dp) for c in (8192, 16384))
        rows.append(
            dict(
                variant=label,
                **_change(a, b),
                batches_8192=a["prefill_batches"],
                recomputed_8192=a["recomputed_tokens"],
                recomputed_16384=b["recomputed_tokens"],
            )
        )
    return pd.DataFrame(rows).set_index("variant")


def format_table(df: pd.DataFrame) -> str:
    keys = [
        ("prefill_batches", "prefill batches", "{:,.0f}"),
        ("total_token_throughput", "total TPS (tok/s)", "{:,.0f}"),
        ("runtime_min", "runtime (min)", "{:.1f}"),
        ("median_tpot_ms", "TPOT P50 (ms)", "{:.2f}"),
    ]
    a, b = df.index[0], df.index[-1]
    lines = [
        f"{'metric':20s} {'sim ' + str(a):>12s} {'sim ' + str(b):>12s} {'sim Δ':>8s} "
        f"{'seed ' + str(a):>12s} {'seed ' + str(b):>12s} {'seed Δ':>8s}"
    ]
    for k, label, fmt in keys:
        x, y = df.loc[a, k], df.loc[b, k]
        sx, sy = df.loc[a].get(f"seed_{k}", np.nan), df.loc[b].get(f"seed_{k}", np.nan)
        sd = f"{(sy / sx - 1) * 100:+.1f}%" if sx == sx and sy == sy else ""
        lines.append(
            f"{label:20s} {fmt.format(x):>12s} {fmt.format(y):>12s} {(y / x - 1) * 100:+7.1f}% "
            f"{fmt.format(sx) if sx == sx else '':>12s} {fmt.format(sy) if sy == sy else '':>12s} {sd:>8s}"
        )
    extra = [
        "completed",
        "rejected",
        "prefix_cache_hit_rate",
        "kv_pool_tokens",
        "prefill_time_s",
        "median_ttft_s",
        "wait_share",
        "output_throughput",
        "host_hit_tokens",
        "load_exposed_s",
        "recomputed_tokens",
        "max_running_requests",
    ]
    lines.append("")
    lines.append(df[extra].to_string(float_format=lambda v: f"{v:,.3f}"))
    if 8192 in df.index and 16384 in df.index:
        lines.append("")
        lines.append(
            f"per-prefill-batch cost the seed's rows imply: {seed_batch_cost_s():.2f} s; the fixed cost per "
            f"simulated batch that would give the seed's runtime ratio: {batch_overhead_needed_s(df):.2f} s"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1600)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default="qwen3.5-122b-a10b")
    ap.add_argument("--hypotheses", action="store_true", help="also the variants the docstring tests (minutes)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    df = run_study(n_requests=args.requests, concurrency=args.concurrency, seed=args.seed, model=args.model)
    print(
        f"SGLang chunk-size study: {args.model}, 8xH100 (tp=8, 1 replica), {args.requests} agentic requests, "
        f"closed loop at {args.concurrency}, radix cache + HiCache write_through, mixed chunk off"
    )
    print(format_table(df))
    from experiments.sglang_chunk_bounds import bounds, format_bounds  # it imports this module

    print("\n" + format_bounds(bounds()))
    if args.hypotheses:
        print("\n% change 8192 -> 16384 by variant")
        hyp = hypotheses(args.requests, args.seed)
        counts = ("batches_8192", "recomputed_8192", "recomputed_16384")
        fmt = {c: (lambda v: f"{v:+.1f}") for c in hyp.columns if c not in counts}
        fmt |= {c: (lambda v: "" if v != v else f"{v:,.0f}") for c in counts}
        print(hyp.to_string(formatters=fmt))
    print(f"\n(wall time {time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
