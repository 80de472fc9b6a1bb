"""chunksim's SGLang policy against SGLang's own scheduler, step for step (marker `conformance`).

Skips unless SGLang is importable (`pip install 'chunksim[conformance]'`, see the README). The
seed scenes and a sample of random scenarios per configuration must match at every step; the
full count is `python -m benchmarks.conformance_sglang`.
"""
import importlib.util

import pytest

pytestmark = pytest.mark.conformance

if importlib.util.find_spec("sglang") is None:
    pytest.skip("SGLang is not installed: pip install 'chunksim[conformance]'", allow_module_level=True)

from .sglang_driver import compare  # noqa: E402
from .sglang_engine import run_engine  # noqa: E402
from .sglang_scenarios import CONFIGS, random_scenario, seed_scenes  # noqa: E402

SAMPLE = 4


@pytest.mark.parametrize("scene", seed_scenes(), ids=lambda s: s.name)
def test_seed_scene_matches(scene):
    v = compare(scene, run_engine(scene))
    assert v.match, v.divergence


# Known: under KV pressure SGLang's radix tree evicts whole nodes (a node is one insert's span, split
# where a later match or insert diverges), and every match, also of requests left waiting
# (SchedulePolicy.calc_priority), refreshes LRU times; chunksim's cache evicts page by page and
# touches on admission only, so a later request can hit a prefix SGLang has evicted.
KNOWN = {"mixed-off/radix-on/tight", "mixed-on/radix-on/tight"}


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("seed", range(SAMPLE))
def test_random_scenario_matches(config, seed):
    sc = random_scenario(config, seed)
    v = compare(sc, run_engine(sc))
    if config in KNOWN and not v.match:
        pytest.xfail(f"radix eviction granularity: {v.divergence}")
    assert v.match, v.divergence
