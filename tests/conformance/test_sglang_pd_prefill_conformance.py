"""SGLang's PD prefill server, step for step against chunksim's model of it (marker `conformance`):
random scenarios per configuration (CI size; `python -m benchmarks.conformance_sglang_pd_prefill`
runs 500 each), then rules broken in chunksim one at a time must be caught.

Skips unless SGLang is importable (`pip install 'chunksim[conformance]'`)."""

import importlib.util

import pytest

pytestmark = pytest.mark.conformance

if importlib.util.find_spec("sglang") is None:
    pytest.skip("SGLang is not installed: pip install 'chunksim[conformance]'", allow_module_level=True)

from .sglang_pd_prefill import CONFIGS, ablations, compare_prefill, random_scenario  # noqa: E402

COUNT = 8


@pytest.mark.parametrize("config", list(CONFIGS))
def test_prefill_server_matches_sglang(config):
    for seed in range(COUNT):
        why, ref = compare_prefill(random_scenario(config, seed))
        assert why is None, f"{config}/{seed}: {why}"
        assert any(batch for batch, *_ in ref.values()), "SGLang ran nothing"


@pytest.mark.parametrize("name", list(ablations()))
def test_a_broken_rule_is_caught(name):
    """Over four tight configurations, each broken rule makes some scenario diverge."""
    cls = ablations()[name]
    configs = ("p1-tight", "p16-radix-small-batch", "overlap-p1-tight", "overlap-p16-radix-small-batch")
    caught = sum(_diverges(random_scenario(c, seed), cls) for c in configs for seed in range(COUNT))
    assert caught > 0, f"{name}: no scenario diverged"


def _diverges(sc, ablation) -> bool:
    """A different record, or a broken model that fails its own checks (an over-full pool)."""
    try:
        return compare_prefill(sc, ablation)[0] is not None
    except AssertionError:
        return True
