"""Request sequences and engine knobs for the vLLM conformance check (no vLLM needed to build them).

A scenario is what both schedulers get: the knobs (vLLM's flag names), a KV pool of ``num_blocks``
blocks as vLLM's ``KVCacheConfig`` counts them (its null block included), and requests
``(arrival_step, prompt token ids, max_tokens)``. An arrival step is a time in units of one
scheduled step: a request stamped t is added before the step that starts at t is scheduled.
Prompts that share a prefix share token ids, so vLLM's block hashes and chunksim's
``block_hashes`` name the same blocks.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True)
class VllmScenario:
    name: str
    requests: tuple  # ((arrival_step, prompt token ids, max_tokens), ...)
    num_blocks: int  # KVCacheConfig.num_blocks, the null block included
    max_num_batched_tokens: int = 64
    max_num_seqs: int = 8
    long_prefill_token_threshold: int = 0
    enable_chunked_prefill: bool = True
    block_size: int = 16
    enable_prefix_caching: bool = False
    async_scheduling: bool = False
    scheduler_reserve_full_isl: bool = True
    max_model_len: int = 8192
    spec_method: str = ""  # speculative decoding: "ngram" | "eagle" ("" = off)
    num_spec_tokens: int = 0
    spec_acceptance: float = 0.65
    spec_seed: int = 0

    @property
    def speculative_config(self) -> str:
        """The --speculative-config JSON chunksim takes ("" when off)."""
        if not self.spec_method:
            return ""
        return f'{{"method": "{self.spec_method}", "num_speculative_tokens": {self.num_spec_tokens}}}'

    @property
    def label(self) -> str:
        return (
            f"{self.name}: budget={self.max_num_batched_tokens} seqs={self.max_num_seqs} "
            f"thr={self.long_prefill_token_threshold} chunked={int(self.enable_chunked_prefill)} "
            f"bs={self.block_size} blocks={self.num_blocks} apc={int(self.enable_prefix_caching)} "
            f"async={int(self.async_scheduling)} full_isl={int(self.scheduler_reserve_full_isl)} "
            + (
                f"spec={self.spec_method}:k={self.num_spec_tokens}:a={self.spec_acceptance} "
                if self.spec_method
                else ""
            )
            + f"max_len={self.max_model_len} "
            f"reqs={[(a, len(p), m) for a, p, m in self.requests]}"
        )

    def engine_flags(self, **extra) -> dict:
        """chunksim's vLLM flags for the fields vLLM's side is built from, `extra` on top."""
        flags = dict(
            max_num_batched_tokens=self.max_num_batched_tokens,
            max_num_seqs=self.max_num_seqs,
            long_prefill_token_threshold=self.long_prefill_token_threshold,
            enable_chunked_prefill=self.enable_chunked_prefill,
            block_size=self.block_size,
            max_model_len=self.max_model_len,
            num_gpu_blocks_override=self.num_blocks,
            enable_prefix_caching=self.enable_prefix_caching,
        )
        flags.update(extra)
        return flags

    def block_hashes(self, prompt) -> tuple:
        """One id per full block of the prompt; equal ids at equal depth mean equal prefixes."""
        bs = self.block_size
        return tuple(hash(tuple(prompt[i : i + bs])) for i in range(0, len(prompt) - bs + 1, bs))


CONFIGS = {
    # name: (async_scheduling, pool, prefix caching)
    "sync-ample": (False, "ample", False),
    "sync-tight": (False, "tight", False),
    "async-ample": (True, "ample", False),
    "async-tight": (True, "tight", False),
    "sync-apc": (False, "mixed", True),
    "async-apc": (True, "mixed", True),
}
SPEC_CONFIGS = {
    # name: (method, k, pool, async_scheduling): no prefix caching, acceptance α drawn per scenario;
    # the k = 1, 3, 5 sync entries first (a configuration's seed is its index here)
    **{
        f"spec-{m}-k{k}-{pool}": (m, k, pool, False)
        for m in ("ngram", "eagle")
        for k in (1, 3, 5)
        for pool in ("ample", "tight")
    },
    **{
        f"spec-{m}-k{k}-{pool}": (m, k, pool, False)
        for m in ("ngram", "eagle")
        for k in (2, 4)
        for pool in ("ample", "tight")
    },
    **{f"spec-async-{m}-k{k}": (m, k, "mixed", True) for m in ("ngram", "eagle") for k in range(1, 6)},
}


def pool_blocks(rng: np.random.Generator, reqs, block_size: int, pool: str, ranks: int = 1) -> int:
    """A KV pool (blocks, the null block included) that fits the largest request: "tight" barely,
    so that preemption is common; "ample" the load's share of one of `ranks` pools, or more;
    "mixed" either way."""
    need = max(-(-(len(p) + m) // block_size) for _, p, m in reqs)  # the largest request's blocks
    total = sum(-(-(len(p) + m) // block_size) for _, p, m in reqs)
    kind = pool if pool != "mixed" else ("tight" if rng.random() < 0.5 else "ample")
    if kind == "tight":
        return need + 1 + int(rng.integers(0, max(1, need // 2) + 1))
    return max(need + 1, total // ranks + 1 + int(rng.integers(0, total + 1)))


def random_scenario(
    rng: np.random.Generator, index: int, async_scheduling: bool, pool: str, prefix_caching: bool
) -> VllmScenario:
    """Arrivals spread over steps, prompts from 1 token to a few budgets long, outputs from 1 to
    ~100 tokens, random knobs; ``pool`` "tight" sizes the KV pool near the largest request so that
    preemption is common, "ample" so that it is rare, "mixed" either way."""
    block_size = int(rng.choice([1, 2, 4, 8, 16, 32]))
    seqs = int(rng.choice([1, 2, 3, 4, 8, 16, 64]))
    budget = max(seqs, int(rng.choice([8, 16, 32, 64, 128, 256, 512, 2048])))
    chunked = bool(rng.random() < 0.8)
    thr = int(rng.choice([0, 0, 1, 4, 16, 64, 200])) if chunked else 0
    max_model_len = 8192 if chunked else budget
    n = int(rng.integers(1, 13))
    max_prompt = min(max_model_len - 1, int(rng.choice([4, 32, 128, 512, 2048])))
    shared = [int(t) for t in rng.integers(1, 30000, size=max_prompt)] if prefix_caching else None
    span = int(rng.choice([0, 2, 10, 40, 200]))
    reqs = []
    for _ in range(n):
        p = int(rng.integers(1, max_prompt + 1))
        out = int(rng.integers(1, min(120, max_model_len - p) + 1))
        if shared is not None and rng.random() < 0.7:
            k = int(rng.integers(0, p + 1))
            prompt = tuple(shared[:k]) + tuple(int(t) for t in rng.integers(1, 30000, size=p - k))
        else:
            prompt = tuple(int(t) for t in rng.integers(1, 30000, size=p))
        reqs.append((int(rng.integers(0, span + 1)), prompt, out))
    reqs.sort(key=lambda r: r[0])
    blocks = pool_blocks(rng, reqs, block_size, pool)
    return VllmScenario(
        f"random-{index}",
        tuple(reqs),
        int(blocks),
        budget,
        seqs,
        thr,
        chunked,
        block_size,
        prefix_caching,
        async_scheduling,
        True,
        max_model_len,
    )


def random_scenarios(config: str, count: int, seed: int = 0) -> list[VllmScenario]:
    if config in SPEC_CONFIGS:
        return spec_scenarios(config, count, seed)
    async_, pool, apc = CONFIGS[config]
    rng = np.random.default_rng([seed, list(CONFIGS).index(config)])
    return [random_scenario(rng, i, async_, pool, apc) for i in range(count)]


def spec_scenarios(config: str, count: int, seed: int = 0) -> list[VllmScenario]:
    """The random scenarios with drafts: k per step, α from {0, 0.3, 0.65, 0.9, 1}, a seed per
    scenario. long_prefill_token_threshold stays 0 or >= 16 (> 1 + k): vLLM 0.33 asserts
    (``assert num_new_tokens == 1 + self.num_spec_tokens``) when the threshold cuts a padded
    one-token admission, an engine crash, not a schedule to match."""
    method, k, pool, async_ = SPEC_CONFIGS[config]
    rng = np.random.default_rng([seed, 100 + list(SPEC_CONFIGS).index(config)])
    out = []
    for i in range(count):
        sc = random_scenario(rng, i, async_, pool, False)
        thr = sc.long_prefill_token_threshold
        # room for a request's last verify step and the drafter's lookahead: a request that can never
        # get them preempts itself forever in vLLM (a livelock, not a schedule to match)
        bs = sc.block_size
        room = max(-(-(len(p) + m + 2 * k) // bs) for _, p, m in sc.requests) + 1
        out.append(
            replace(
                sc,
                long_prefill_token_threshold=thr if thr == 0 or thr > k + 1 else 16,
                num_blocks=max(sc.num_blocks, room),
                spec_method=method,
                num_spec_tokens=k,
                spec_acceptance=float(rng.choice([0.0, 0.3, 0.65, 0.9, 1.0])),
                spec_seed=int(rng.integers(0, 1 << 31)),
            )
        )
    return out


def seed_scenes(async_scheduling: bool = False) -> list[VllmScenario]:
    """Seed 000's scenes, scaled to the harness: the stall (32 decoders, then one long prompt that
    the budget chunks), and the same prompt alone (long_prefill_token_threshold does not bind)."""
    rng = np.random.default_rng(0)

    def prompt(n):
        return tuple(int(t) for t in rng.integers(1, 30000, size=n))

    decoders = tuple((0, prompt(64), 200) for _ in range(32))
    stall = VllmScenario(
        "seed000-stall",
        decoders + ((20, prompt(32768), 4),),
        num_blocks=4096,
        max_num_batched_tokens=2048,
        max_num_seqs=64,
        max_model_len=40000,
    )
    alone = VllmScenario(
        "seed000-alone-threshold",
        ((0, prompt(5000), 3),),
        num_blocks=1024,
        max_num_batched_tokens=2048,
        max_num_seqs=4,
        long_prefill_token_threshold=512,
    )
    pressure = VllmScenario(
        "seed000-preempt",
        tuple((2 * i, prompt(300), 60) for i in range(6)),
        num_blocks=41,
        max_num_batched_tokens=512,
        max_num_seqs=8,
        block_size=16,
    )
    scenes = [stall, alone, pressure]
    return [
        replace(s, async_scheduling=async_scheduling, name=s.name + ("-async" if async_scheduling else ""))
        for s in scenes
    ]
