"""chunksim's SGLang speculative decoding (policies/sglang_spec.py) against SGLang's own spec-v2 KV
functions, step for step (marker `conformance`; tests/conformance/sglang_spec.py). Skips unless
SGLang is importable. The full count: `python -m benchmarks.conformance_sglang_spec`."""

import importlib.util

import pytest

pytestmark = pytest.mark.conformance

if importlib.util.find_spec("sglang") is None:
    pytest.skip("SGLang is not installed: pip install 'chunksim[conformance]'", allow_module_level=True)

from .sglang_spec import CONFIGS, ablations, compare_spec, random_spec_scenario, run_spec_engine  # noqa: E402

SAMPLE = 3


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("seed", range(SAMPLE))
def test_random_spec_scenario_matches(config, seed):
    sc = random_spec_scenario(config, seed)
    v = compare_spec(sc, run_spec_engine(sc))
    assert v.match, v.divergence


ABLATION_CONFIGS = {  # where each broken rule shows within a few scenarios
    "no-2L-reserve": "sync/page1/3-1-4/tight",
    "free-rejected": "sync/page16/5-4-8/tight",
    "no-bigram": "sync/page1/3-1-4/ample",
    "no-overlap-finishing-rule": "overlap/page1/3-1-4/ample",
}


@pytest.mark.parametrize("name", ablations.NAMES)
def test_ablation_is_caught(name):
    """Each rule broken in chunksim makes some scenario diverge (the harness can see it)."""
    config = ABLATION_CONFIGS[name]
    for seed in range(20):
        sc = random_spec_scenario(config, seed)
        try:
            if not compare_spec(sc, run_spec_engine(sc), ablate=name).match:
                return
        except AssertionError:  # the broken rule trips chunksim's own invariants: caught too
            return
    pytest.fail(f"{name} not caught in 20 scenarios of {config}")
