"""Random SGLang scenarios (one explicit RNG each), and the seed scenes as named cases.

A scenario is engine flags (sglang_engine.Knobs) and requests: arrival step, prompt tokens,
max_new_tokens, ignore_eos. Prompts share prefixes through a small pool of common heads, so that
with the radix cache on a later request can hit what an earlier one computed. KV pools run from
tiny (a few requests' worth: retraction) to ample.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from .sglang_engine import Knobs


@dataclass
class Req:
    rid: str
    arrival: int
    tokens: tuple
    max_new_tokens: int
    ignore_eos: bool = True


@dataclass
class Scenario:
    name: str
    knobs: Knobs
    requests: list = field(default_factory=list)


CONFIGS = {  # name: (enable_mixed_chunk, disable_radix_cache, tight KV, overlap scheduler)
    "mixed-off/radix-off/ample": (False, True, False, False),
    "mixed-on/radix-off/ample": (True, True, False, False),
    "mixed-off/radix-on/ample": (False, False, False, False),
    "mixed-on/radix-on/ample": (True, False, False, False),
    "mixed-off/radix-off/tight": (False, True, True, False),
    "mixed-on/radix-off/tight": (True, True, True, False),
    "mixed-off/radix-on/tight": (False, False, True, False),
    "mixed-on/radix-on/tight": (True, False, True, False),
}
CONFIGS.update(  # the same with SGLang's default event loop, event_loop_overlap
    {"overlap/" + name: (mixed, radix, tight, True) for name, (mixed, radix, tight, _) in CONFIGS.items()}
)
CONSERVATIVE = {  # a DP-attention rank's scheduler: schedule_conservativeness 0.3 (tight pools: retraction)
    "dp-attn/" + name: CONFIGS[name] for name in ("mixed-off/radix-on/tight", "overlap/mixed-on/radix-on/tight")
}
CONFIGS.update(CONSERVATIVE)


def random_scenario(config: str, seed: int) -> Scenario:
    mixed, no_radix, tight, overlap = CONFIGS[config]
    rng = random.Random(f"{config}/{seed}")
    page = rng.choice((1, 1, 4, 16))
    chunk = rng.choice((None, 16, 32, 64, 128, 256))
    if mixed and chunk is None:
        chunk = 64
    max_prefill = rng.choice((32, 64, 128, 512, 16384))
    if chunk is not None:
        chunk = max(chunk, page)
    n = rng.randint(1, 16 if tight else 12)
    # SGLang 0.5.23 chunks two requests in one batch when a page-floored chunk leaves budget for an
    # ignore_eos request cut at rem_chunk_tokens (radix cache off); the first then samples from a
    # truncated prompt. Such scenes keep one ignore_eos setting for all requests.
    uniform = page > 1 and no_radix
    eos_all = rng.random() < (0.2 if tight else 0.5)
    long_out = 400 if tight else 40
    heads = [tuple(rng.randrange(1, 50) for _ in range(rng.randint(1, 80))) for _ in range(3)]
    reqs, t = [], 0
    for i in range(n):
        t += rng.choice((0, 0, 0, 1, 2, 5, 20) if not tight else (0, 0, 0, 0, 0, 1))
        body = tuple(rng.randrange(50, 1000) for _ in range(rng.randint(1, 200)))
        head = rng.choice(heads) if rng.random() < 0.6 else ()
        tokens = (head + body)[: max(1, rng.randint(1, 40 if tight else 300))]
        eos = eos_all if uniform else rng.random() < (0.2 if tight else 0.5)
        reqs.append(
            Req(f"r{i}", t, tokens, rng.randint(long_out // 4, long_out) if tight else rng.randint(1, long_out), eos)
        )
    longest = max(len(r.tokens) + r.max_new_tokens for r in reqs)
    if tight:
        pool = max(
            longest + 4 * page + 16, int(sum(len(r.tokens) + r.max_new_tokens for r in reqs) * rng.uniform(0.25, 0.6))
        )
    else:
        pool = sum(len(r.tokens) + r.max_new_tokens for r in reqs) * 2 + 64 * page
    pool = -(-pool // page) * page + page
    knobs = Knobs(
        pool_tokens=pool,
        page_size=page,
        chunked_prefill_size=chunk,
        max_prefill_tokens=max_prefill,
        max_running_requests=rng.choice((8, 64) if tight else (2, 3, 8, 64)),
        enable_mixed_chunk=mixed,
        disable_radix_cache=no_radix,
        disable_overlap_schedule=not overlap,
        schedule_conservativeness=0.3 if config in CONSERVATIVE else 1.0,
    )
    return Scenario(f"{config}#{seed}", knobs, reqs)


def seed_scenes() -> list:
    """Seed 000's and 001's SGLang scene, scaled down: 32 decoders then one long prompt, chunked
    (seed 001: chunked_prefill_size with and without mixed chunk; disabled)."""
    out = []
    for name, chunk, mixed in (
        ("seed-001/chunked", 256, False),
        ("seed-001/mixed", 256, True),
        ("seed-000/nochunk", None, False),
    ):
        reqs = [Req(f"d{i}", 0, tuple(range(1, 65)), 48) for i in range(32)]
        reqs.append(Req("long", 4, tuple(range(100, 100 + 2048)), 4))
        knobs = Knobs(
            pool_tokens=1 << 16,
            chunked_prefill_size=chunk,
            max_prefill_tokens=16384,
            enable_mixed_chunk=mixed,
            disable_radix_cache=True,
        )
        out.append(Scenario(name, knobs, reqs))
    return out
