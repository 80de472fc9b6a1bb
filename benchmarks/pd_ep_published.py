"""SGLang's published PD-disaggregated DeepSeek-V3 figures on 12 × 8 H100, as chunksim prices them.

Source: LMSYS, "Deploying DeepSeek with PD Disaggregation and Large-scale Expert Parallelism on 96
H100 GPUs" (2025-05-05; github.com/lm-sys/lm-sys.github.io blog/2025-05-05-large-scale-ep.md):
52.3k input tokens/s per prefill node and 22.3k output tokens/s per decode node at 2,000-token inputs
(headline); "Evaluation": prefill on 4 nodes (EP 32) 54,543 tok/s/node at 2K prompts; decode on 9
nodes (EP 72) 22,282 tok/s/node, 256 sequences a device, KV length 2,000, no MTP ("SGLang (Default)").

Assumptions, fixed before pricing: DP attention on every rank, DeepEP normal mode (prefill) and
low-latency mode (decode), two-batch overlap on both, uniform expert routing (chunksim's default,
i.e. a perfectly balanced EPLB), fp8 weights, every rank busy. Prefill: 16,000 tokens a rank
(8 prompts of 2,000; the blog's 16,384-token batch rounded to whole prompts). Decode: 256 sequences
a rank, each one new token over a 2,000-token context. The blog's EP 72 places 288 physical experts
(32 redundant, EPLB) — 4 a rank; chunksim refuses an EP size that does not divide the 256 logical
experts, so decode is priced at EP 64, also 4 experts and (uniform routing) the same rows a rank;
only the all-to-all fan-out differs (63 vs 71 peers). DeepEP as of the blog: low-latency mode sends
every off-GPU copy over RDMA, same-node ones included (NVLink for it came with DeepEP PR #173,
2025-05-23; issues #22, #164), SGLang's decode command of the blog's reproduction (sglang issue
#6017: bf16 KV cache, --cuda-graph-bs 256, --ep-num-redundant-experts 32). One lockstep group step
priced per phase; docs/data-parallel.md has the figures and what is still off.
    python -m benchmarks.pd_ep_published
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from costmodel import load_hardware, load_model
from experiments.engines import build_cluster

PUBLISHED = {"prefill_headline": 52_300, "prefill_2k": 54_543, "decode": 22_282}  # tokens/s per node
PROMPT, PROMPTS_PER_RANK, PREFILL_RANKS = 2000, 8, 32
DECODE_BATCH, DECODE_CONTEXT, DECODE_RANKS = 256, 2000, 64  # EP 72 priced as EP 64: see docstring
GPUS_PER_NODE = 8
LL_NVLINK = False  # DeepEP of May 2025: low-latency copies all over RDMA (see docstring)
FLAGS = {
    "enable_dp_attention": True,
    "moe_a2a_backend": "deepep",
    "disable_radix_cache": True,
    "max_running_requests": 32_768,
    "mem_fraction_static": 0.85,
}


def _lockstep(hardware: str, ranks: int, mode: str, tbo: bool, chunk: int, ll_nvlink: bool = True):
    m, hw = load_model("deepseek-v3"), load_hardware(hardware)
    flags = {**FLAGS, "deepep_mode": mode, "enable_two_batch_overlap": tbo, "chunked_prefill_size": chunk}
    _, router, _ = build_cluster("sglang", m, hw, 1, flags, ranks, "round_robin")
    ls = router.lockstep  # type: ignore[union-attr]
    ls.experts.ep = replace(ls.experts.ep, ll_nvlink=ll_nvlink)
    return ls


def prefill_per_node(hardware: str = "h100", tbo: bool = True) -> float:
    """Prompt tokens/s per prefill node: one EP-32 step of 8 × 2,000-token prompts a rank."""
    per_rank = PROMPT * PROMPTS_PER_RANK
    ls = _lockstep(hardware, PREFILL_RANKS, "normal", tbo, per_rank * PREFILL_RANKS)
    step = ls.step_time([([PROMPT] * PROMPTS_PER_RANK, [0] * PROMPTS_PER_RANK)] * PREFILL_RANKS)
    return GPUS_PER_NODE * per_rank / step


def decode_per_node(hardware: str = "h100", tbo: bool = True) -> float:
    """Output tokens/s per decode node: one EP-64 step, 256 sequences a rank at a 2,000-token context."""
    ls = _lockstep(hardware, DECODE_RANKS, "low_latency", tbo, 16_384, ll_nvlink=LL_NVLINK)
    step = ls.step_time([([1] * DECODE_BATCH, [DECODE_CONTEXT] * DECODE_BATCH)] * DECODE_RANKS)
    return GPUS_PER_NODE * DECODE_BATCH / step


def main(argv=None) -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    print(
        f"{'profile':10} {'TBO':4} {'prefill/node':>13} {'vs 52.3k':>9} {'vs 54.5k':>9} {'decode/node':>12} {'vs 22.3k':>9}"
    )
    for hw in ("h100", "h100-sxm"):
        for tbo in (True, False):
            p, d = prefill_per_node(hw, tbo), decode_per_node(hw, tbo)
            rp, r2 = p / PUBLISHED["prefill_headline"] - 1, p / PUBLISHED["prefill_2k"] - 1
            rd = d / PUBLISHED["decode"] - 1
            print(f"{hw:10} {'on' if tbo else 'off':4} {p:13,.0f} {rp:+9.1%} {r2:+9.1%} {d:12,.0f} {rd:+9.1%}")


if __name__ == "__main__":
    main()
