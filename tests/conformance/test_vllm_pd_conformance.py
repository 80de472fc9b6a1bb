"""chunksim's vLLM policy with a KV connector (policies/vllm_pd.py) against vLLM 0.33.0's sync
Scheduler with a stand-in NIXL connector, step for step: local, remote-prefill (decode side)
and remote-decode (prefill side) requests, transfers completing at random steps, pools tight
enough to preempt. CONFORMANCE_COUNT sets the scenarios per configuration (default 100; the
docs' figures: python benchmarks/conformance_vllm_pd.py, 500 per configuration)."""

import os

import pytest
from vllm_driver import vllm_available
from vllm_pd_scenarios import CONFIGS, random_pd_scenarios

pytestmark = pytest.mark.conformance

WHY = vllm_available()
needs_vllm = pytest.mark.skipif(WHY is not None, reason=WHY or "")
COUNT = int(os.environ.get("CONFORMANCE_COUNT", "100"))


@needs_vllm
@pytest.mark.parametrize("config", list(CONFIGS))
def test_pd_scenarios_match_every_step(config):
    from vllm_pd_driver import compare_pd

    scenarios = random_pd_scenarios(config, COUNT, seed=int(os.environ.get("CONFORMANCE_SEED", "0")))
    bad = []
    for sc in scenarios:
        why, _ = compare_pd(sc)
        if why is not None:
            bad.append(f"{sc.label}\n  {why}")
    assert not bad, f"{len(bad)} of {len(scenarios)} scenarios diverge; first:\n" + "\n".join(bad[:3])


@needs_vllm
def test_tight_pd_pools_preempt_and_load():
    """The tight configurations exercise preemption beside remote loads: without that, a match
    would say little about how loads, held sends and preemption interact."""
    from vllm_pd_driver import run_vllm_pd

    scenarios = random_pd_scenarios("pd-mixed-tight", 40)
    preempting = sum(any(r[1] for r in run_vllm_pd(sc).values()) for sc in scenarios)
    assert preempting >= len(scenarios) // 5
    assert sum(role == "D" for sc in scenarios for role in sc.roles) >= 40
