"""vLLM 0.33's data-parallel front end and lockstep wave rule, run as vLLM's own code, against
chunksim's (tests/conformance/vllm_dp.py). CONFORMANCE_COUNT scenarios of each (default 500)."""

import os

import pytest
from vllm_driver import vllm_available

pytestmark = pytest.mark.conformance

WHY = vllm_available()
COUNT = int(os.environ.get("CONFORMANCE_COUNT_DP", os.environ.get("CONFORMANCE_COUNT", "500")))


@pytest.mark.skipif(WHY is not None, reason=WHY or "")
@pytest.mark.parametrize("kind", ["choice", "wave"])
def test_data_parallel_rules_match_vllm(kind):
    import vllm_dp

    run = {"choice": vllm_dp.choice_scenario, "wave": vllm_dp.wave_scenario}[kind]
    bad = [why for seed in range(max(COUNT, 500)) if (why := run(seed))]
    assert not bad, f"{len(bad)} scenarios diverge; first: {bad[:3]}"
