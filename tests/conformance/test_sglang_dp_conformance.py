"""SGLang 0.5.23's DP attention across ranks (its MLP-sync gather and idle batches, its DP
controller's round robin), run as SGLang's own code, against chunksim's LockstepGroup
(tests/conformance/sglang_dp.py). CONFORMANCE_COUNT_SGLANG_DP scenarios per configuration
(default 50 here; `python -m benchmarks.conformance_sglang --dp --n 500` runs the full count)."""

import importlib.util
import os

import pytest

pytestmark = pytest.mark.conformance

MISSING = [m for m in ("sglang", "einops", "setproctitle") if importlib.util.find_spec(m) is None]
if MISSING:
    pytest.skip(
        f"not installed: {', '.join(MISSING)} (tests/conformance/sglang_requirements.txt)", allow_module_level=True
    )

from .sglang_dp import CONFIGS, compare_dp, random_dp_scenario  # noqa: E402

COUNT = int(os.environ.get("CONFORMANCE_COUNT_SGLANG_DP", "50"))


@pytest.mark.parametrize("config", CONFIGS)
def test_dp_attention_matches_sglang(config):
    bad = [why for seed in range(COUNT) if (why := compare_dp(random_dp_scenario(config, seed)))]
    assert not bad, f"{len(bad)} of {COUNT} scenarios diverge; first: {bad[:2]}"


@pytest.mark.parametrize(
    "config, seed",
    [
        ("dp-attn/mixed-off/radix-on/tight", 380),  # an empty rank running idle batches keeps its new-token ratio
        ("dp-attn/overlap/mixed-on/radix-on/tight", 723),  # a mixed step's extends go ahead of its decodes
        ("dp-attn/overlap/mixed-on/radix-on/tight", 869),
    ],
)
def test_once_divergent_scenarios_match(config, seed):
    assert compare_dp(random_dp_scenario(config, seed)) is None
