"""Seed 000's scene as steady traffic: a Poisson stream of short chat requests with long prompts
mixed in at a fixed share ("one long prompt injected into a stream of short ones", Lab 05).

The long prompts sit at evenly spaced positions of the stream (every ``long_every``-th request),
so every request rate carries the same mix and only the arrival process changes with the rate.
"""

from __future__ import annotations

import numpy as np

from costmodel.errors import require

from . import arrivals
from .workload import Workload

DEFAULTS = dict(
    num_prompts=600, input_len=512, output_len=512, long_prompt_len=32768, long_output_len=16, long_every=100
)


def chat_with_long_prompts(
    request_rate: float,
    seed: int = 0,
    num_prompts: int = 600,
    input_len: int = 512,
    output_len: int = 512,
    long_prompt_len: int = 32768,
    long_output_len: int = 16,
    long_every: int = 100,
) -> Workload:
    for name, v in (
        ("num_prompts", num_prompts),
        ("input_len", input_len),
        ("output_len", output_len),
        ("long_prompt_len", long_prompt_len),
        ("long_output_len", long_output_len),
        ("long_every", long_every),
    ):
        require(isinstance(v, (int, np.integer)) and v >= 1, f"workload:{name}", v, "must be an integer >= 1")
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
    t = arrivals.poisson(request_rate, num_prompts, rng)
    prompt, output = np.full(num_prompts, input_len), np.full(num_prompts, output_len)
    prompt[long_every // 2 :: long_every] = long_prompt_len
    output[long_every // 2 :: long_every] = long_output_len
    return Workload(t, prompt, output)
