"""SGLang's published DeepSeek-V3 prefill throughput under wide expert parallel, as chunksim prices it.

Source: LMSYS, "Deploying DeepSeek with PD Disaggregation and Large-scale Expert Parallelism on 96
H100 GPUs" (2025-05-05, lmsys.org/blog/2025-05-05-large-scale-ep; the markdown in
github.com/lm-sys/lm-sys.github.io blog/2025-05-05-large-scale-ep.md). Prefill pool of 4 nodes of
8 H100 (EP 32, DP attention), 16,384 tokens per device per batch, 4,096-token prompts, DeepEP normal
mode, two-batch overlap: 50,302 tokens/s per node with the default expert distribution, 59,337 with
a simulated perfect EPLB (the blog's "Overall Throughput" table).

Assumptions: ``--tp 32 --dp 32 --enable-dp-attention --moe-a2a-backend deepep --deepep-mode normal
--enable-two-batch-overlap --chunked-prefill-size 524288`` (16,384 tokens a rank, 4 prompts), no
prefix cache, every rank busy, uniform expert routing (chunksim's default: the perfect-EPLB case;
the default distribution's imbalance is not in the model), fp8 block-scaled weights from the
checkpoint. A simulated prefill pool: 32 ranks × 4 prompts × ``steps`` arrive at once, output 1.
    python -m benchmarks.ep_prefill_published [--steps N]
"""

from __future__ import annotations

import argparse

import numpy as np

from costmodel import load_hardware, load_model
from experiments.engines import build_cluster
from simcore.simulation import Simulation
from workloads.workload import Workload

PUBLISHED = {"default": 50_302, "perfect_eplb": 59_337}  # tokens/s per node, the blog's table
PROMPT, PER_RANK, RANKS, GPUS_PER_NODE = 4096, 16_384, 32, 8
FLAGS = {
    "enable_dp_attention": True,
    "moe_a2a_backend": "deepep",
    "deepep_mode": "normal",
    "chunked_prefill_size": PER_RANK * RANKS,
    "disable_radix_cache": True,
    "max_running_requests": 8192,
    "mem_fraction_static": 0.85,
}


def per_node_throughput(hardware: str = "h100", tbo: bool = True, steps: int = 3) -> tuple[float, float]:
    """(prompt tokens/s per node from a simulated prefill pool, the same from one priced group step)."""
    m, hw = load_model("deepseek-v3"), load_hardware(hardware)
    flags = {**FLAGS, "enable_two_batch_overlap": tbo}
    engines, router, max_len = build_cluster("sglang", m, hw, 1, flags, RANKS, "round_robin")
    n = RANKS * PER_RANK // PROMPT * steps
    wl = Workload(np.zeros(n), np.full(n, PROMPT), np.ones(n, dtype=np.int64))
    res = Simulation(engines, wl, max_model_len=max_len, router=router).run()
    assert res.summary["completed"] == n
    simulated = n * PROMPT / res.summary["duration"] / (RANKS / GPUS_PER_NODE)
    per_rank = ([PROMPT] * (PER_RANK // PROMPT), [0] * (PER_RANK // PROMPT))
    step = router.lockstep.step_time([per_rank] * RANKS)  # type: ignore[union-attr]
    return simulated, GPUS_PER_NODE * PER_RANK / step


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3, help="prefill batches per rank (default 3)")
    a = ap.parse_args(argv)
    print(f"{'profile':10} {'TBO':4} {'sim tok/s/node':>15} {'one step':>10} {'vs 50,302':>10} {'vs 59,337':>10}")
    for hw in ("h100", "h100-sxm"):
        for tbo in (True, False):
            sim, step = per_node_throughput(hw, tbo, a.steps)
            d, p = sim / PUBLISHED["default"] - 1, sim / PUBLISHED["perfect_eplb"] - 1
            print(f"{hw:10} {'on' if tbo else 'off':4} {sim:15,.0f} {step:10,.0f} {d:+10.1%} {p:+10.1%}")


if __name__ == "__main__":
    main()
