"""vLLM 0.33's data-parallel engine end to end (DPEngineCoreProc ranks in lockstep, its front end's
rank choice, dummy batches and waves) against chunksim's LockstepGroup with expert parallelism on
(tests/conformance/vllm_dp_group.py). CONFORMANCE_COUNT_DP_GROUP scenarios per configuration
(default 5 here; ``python -m benchmarks.conformance_vllm_dp`` runs 500)."""

import os

import pytest
from vllm_dp_group import CONFIGS
from vllm_driver import vllm_available

pytestmark = pytest.mark.conformance

WHY = vllm_available()
needs_vllm = pytest.mark.skipif(WHY is not None, reason=WHY or "")
COUNT = int(os.environ.get("CONFORMANCE_COUNT_DP_GROUP", "5"))


@needs_vllm
@pytest.mark.parametrize("config", list(CONFIGS))
def test_dp_ranks_match_vllm_every_group_step(config):
    from vllm_dp_group import compare_dp, random_dp_scenario

    bad = [why for i in range(COUNT) if (why := compare_dp(random_dp_scenario(config, i)))]
    assert not bad, f"{len(bad)} of {COUNT} scenarios diverge; first: {bad[:2]}"


@needs_vllm
@pytest.mark.parametrize("rule", ["sync-every-step", "no-rotation"])
def test_harness_catches_a_broken_rule(rule):
    """With one DP rule broken in chunksim (the wave's all-reduce every step instead of every 16th;
    the front end's scan always from rank 0), some of the same scenarios diverge."""
    from vllm_dp_group import compare_dp, random_dp_scenario

    caught = sum(compare_dp(random_dp_scenario("dp4-tight", i), rule) is not None for i in range(6))
    assert caught >= 1
