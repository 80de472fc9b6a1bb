"""Seed 001 §七's direction on a small version of the study: doubling SGLang's chunked_prefill_size
halves the chunks of long prompts (fewer prefill batches), does not lower throughput, and leaves
the median TPOT nearly flat."""

import pytest

from experiments.sglang_chunk_study import SEED_TABLE, agentic_workload, format_table, prefill_batches, run_study


@pytest.fixture(scope="module")
def study():
    return run_study(n_requests=160, concurrency=8, seed=1)


def test_bigger_chunk_fewer_prefill_batches_same_tpot(study):
    small, big = study.loc[8192], study.loc[16384]
    assert (small.completed, big.completed) == (160, 160) and small.rejected == big.rejected == 0
    assert big.prefill_batches < 0.9 * small.prefill_batches
    assert big.total_token_throughput >= small.total_token_throughput
    assert big.median_tpot_ms == pytest.approx(small.median_tpot_ms, rel=0.03)
    assert small.prefix_cache_hit_rate > 0.8  # the radix cache serves each turn's history
    assert "prefill batches" in format_table(study)
    assert study.loc[8192, "seed_prefill_batches"] == SEED_TABLE[8192]["prefill_batches"]


def test_agentic_workload_shape():
    w = agentic_workload(200, turns=20, concurrency=10, seed=0)
    assert len(w) == 200 and w.closed_loop_concurrency == 10
    assert all(len(h) == -(-p // w.block_tokens) for h, p in zip(w.block_hashes, w.prompt_len))
    # the second turn of a session repeats the first turn's full blocks (a radix-cache hit)
    first, second = w.block_hashes[0], w.block_hashes[10]
    full = w.prompt_len[0] // w.block_tokens
    assert second[:full] == first[:full] and w.prompt_len[10] > w.prompt_len[0]
    assert prefill_batches([]) == 0


def test_the_batch_cost_that_would_give_the_seeds_runtime_ratio(study):
    """Adding batch_overhead_needed_s to every simulated prefill batch gives the seed's runtime
    ratio (91 / 106); the seed's own rows imply 15 min over 429 batches a batch."""
    from experiments.sglang_chunk_study import batch_overhead_needed_s, seed_batch_cost_s

    x = batch_overhead_needed_s(study)
    r = [study.loc[c, "runtime_min"] * 60 + study.loc[c, "prefill_batches"] * x for c in (8192, 16384)]
    assert r[1] / r[0] == pytest.approx(91 / 106, rel=1e-9)
    assert seed_batch_cost_s() == pytest.approx(15 * 60 / 429)


def test_the_study_counts_host_hits_when_the_device_pool_is_short():
    """The study's HiCache flags reach the engine: on a device pool too small for the sessions, its
    rows count host hits, and more prefix hits than the same run without the host tier."""
    from experiments.sglang_chunk_study import HICACHE, run_one

    w = agentic_workload(120, turns=6, concurrency=8, context=(4096, 8192), output_median=200.0)
    cap = {"max_total_tokens": 150_000}
    on, off = run_one(8192, w, flags={**HICACHE, **cap}), run_one(8192, w, flags=cap)
    assert on["host_hit_tokens"] > 0 and off["host_hit_tokens"] == 0
    assert on["prefix_cache_hit_rate"] > off["prefix_cache_hit_rate"]
