"""chunksim's SGLang policy against SGLang's own scheduler, step for step (marker `conformance`).

Skips unless SGLang is importable (`pip install 'chunksim[conformance]'`, see docs/conformance.md). The
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


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("seed", range(SAMPLE))
def test_random_scenario_matches(config, seed):
    sc = random_scenario(config, seed)
    v = compare(sc, run_engine(sc))
    assert v.match, v.divergence
