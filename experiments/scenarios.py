"""Named workloads for `simulate --scenario` and the simple Poisson/fixed-length workload."""

from __future__ import annotations

import numpy as np

from costmodel.errors import require
from simcore.simulation import fixed_workload
from workloads.arrivals import poisson


def stall_scene(
    prompt_len: int = 32768,
    num_decodes: int = 32,
    decode_context: int = 2048,
    long_arrival_s: float = 4.0,
    decode_output_len: int = 1024,
    stagger_s: float = 0.1,
):
    """Seed 000's scene: decoders already running when one long prompt arrives. Decoders arrive
    `stagger_s` apart, so each one's own prefill is short, and their prompts are sized so their
    context is about `decode_context` when the long prompt arrives."""
    arrival = np.r_[np.arange(num_decodes) * stagger_s, long_arrival_s]
    prompts = np.r_[np.full(num_decodes, decode_context - 128), prompt_len]
    outputs = np.r_[np.full(num_decodes, decode_output_len), 16]
    return fixed_workload(arrival, prompts, outputs)


def poisson_fixed(request_rate: float, num_prompts: int, input_len: int, output_len: int, seed: int):
    """Poisson arrivals (not rescaled), every request `input_len` in and `output_len` out."""
    require(input_len > 0, "input-len", input_len, "must be positive")
    require(output_len > 0, "output-len", output_len, "must be positive")
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
    arrivals = poisson(request_rate, num_prompts, rng, normalize=False)
    return fixed_workload(arrivals, np.full(num_prompts, input_len), np.full(num_prompts, output_len))
