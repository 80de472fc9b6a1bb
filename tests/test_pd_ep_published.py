"""SGLang's published PD-disaggregated DeepSeek-V3 figures on 12 × 8 H100 (LMSYS blog, May 2025),
priced with the assumptions in benchmarks/pd_ep_published.py; the decode level's gap (+34 %) is
documented in docs/data-parallel.md, not asserted."""

import pytest

from benchmarks.pd_ep_published import PUBLISHED, decode_per_node, prefill_per_node


def test_prefill_at_2000_token_prompts_within_15_percent():
    got = prefill_per_node("h100", tbo=True)
    assert got == pytest.approx(PUBLISHED["prefill_headline"], rel=0.15)
    assert got == pytest.approx(PUBLISHED["prefill_2k"], rel=0.15)


def test_decode_two_batch_overlap_speedup_matches_the_blog():
    """The blog's TBO ablation: +25.5 % at 256 sequences a device (22,310 tok/s/node with TBO)."""
    speedup = decode_per_node("h100", tbo=True) / decode_per_node("h100", tbo=False)
    assert speedup - 1 == pytest.approx(0.255, rel=0.15)
