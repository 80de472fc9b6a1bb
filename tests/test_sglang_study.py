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
