"""chunksim's vLLM policy against vLLM 0.33.0's own Scheduler / AsyncScheduler, step for step.

Every random scenario and seed scene must schedule the same tokens per request, preempt the
same requests and finish the same requests at every step, through stepping, fast-forward and
the decode cohort. CONFORMANCE_COUNT sets the scenarios per configuration (default 200; the
docs/conformance.md's figures are for 1,000: python benchmarks/conformance_vllm.py)."""

import os

import pytest
from vllm_driver import compare, vllm_available
from vllm_scenarios import CONFIGS, SPEC_CONFIGS, random_scenarios, seed_scenes

pytestmark = pytest.mark.conformance

WHY = vllm_available()
needs_vllm = pytest.mark.skipif(WHY is not None, reason=WHY or "")
COUNT = int(os.environ.get("CONFORMANCE_COUNT", "200"))


def _failures(scenarios):
    """One entry per scenario that diverges in any mode: its label and each mode's first divergence."""
    bad = []
    for sc in scenarios:
        res = compare(sc)
        why = [f"  {m}: {res[m]}" for m in ("step", "fast", "cohort") if res[m] is not None]
        if why:
            bad.append("\n".join([sc.label] + why))
    return bad


@needs_vllm
@pytest.mark.parametrize("config", list(CONFIGS))
def test_random_scenarios_match_every_step(config):
    scenarios = random_scenarios(config, COUNT, seed=int(os.environ.get("CONFORMANCE_SEED", "0")))
    bad = _failures(scenarios)
    assert not bad, f"{len(bad)} of {len(scenarios)} scenarios diverge; first:\n" + "\n".join(bad[:3])


@needs_vllm
@pytest.mark.parametrize("config", list(SPEC_CONFIGS))
def test_speculative_scenarios_match_every_step(config):
    """Drafts under the Scheduler and the AsyncScheduler, K = 1..5 (SPEC_CONFORMANCE_COUNT a
    configuration, default 20; docs/conformance.md's figures are for 1,000)."""
    count = int(os.environ.get("SPEC_CONFORMANCE_COUNT", "20"))
    scenarios = random_scenarios(config, count, seed=int(os.environ.get("CONFORMANCE_SEED", "0")))
    bad = _failures(scenarios)
    assert not bad, f"{len(bad)} of {len(scenarios)} scenarios diverge; first:\n" + "\n".join(bad[:3])


@needs_vllm
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_seed_scenes_match_every_step(async_scheduling):
    bad = _failures(seed_scenes(async_scheduling))
    assert not bad, "\n".join(bad)


@needs_vllm
def test_tight_pools_preempt():
    """The tight-KV configurations exercise preemption: most of their scenarios preempt in vLLM."""
    from vllm_driver import run_vllm

    scenarios = random_scenarios("sync-tight", 40)
    preempting = sum(any(r[1] for r in run_vllm(sc).values()) for sc in scenarios)
    assert preempting >= len(scenarios) // 3
