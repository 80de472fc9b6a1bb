"""A profile YAML with a wrongly typed value gets one InputError naming the field, never a
TypeError from deep inside the cost model (every scalar field, and the GEMM residual field's lists)."""

import copy
import dataclasses

import pytest
import yaml

from costmodel.errors import InputError
from costmodel.hardware import HARDWARE_DIR, Hardware, hardware_from_dict

SCALARS = [
    f.name
    for f in dataclasses.fields(Hardware)
    if isinstance(f.default, (int, float)) and not isinstance(f.default, bool)
]


@pytest.fixture(scope="module")
def profile():
    return yaml.safe_load((HARDWARE_DIR / "a100-sxm.yaml").read_text())


@pytest.mark.parametrize("bad", ["x", None, [1.0], True, float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize(
    "field", SCALARS[::3] + ["attn_decode_hidden_keys", "attn_prefill_dram_exposed", "gemm_field_shrink"]
)
def test_a_wrongly_typed_scalar_is_named(profile, field, bad):
    d = copy.deepcopy(profile)
    d[field] = bad
    with pytest.raises(InputError, match=field):
        hardware_from_dict(d, "p")


@pytest.mark.parametrize(
    "field, bad",
    [
        ("gemm_field_m", 5),
        ("gemm_field_shapes", 5),
        ("gemm_field", 5),
        ("gemm_field_h", "x"),
        ("gemm_field_shapes", [[1, "a"]]),
    ],
)
def test_a_malformed_residual_field_is_named(profile, field, bad):
    d = copy.deepcopy(profile)
    d[field] = bad
    with pytest.raises(InputError, match="gemm_field"):
        hardware_from_dict(d, "p")


def test_no_scalar_field_takes_an_infinity(profile):
    """Every numeric scalar of a profile is finite: an infinite time, rate or size is named, not priced."""
    loaded = []
    for field in SCALARS:
        d = copy.deepcopy(profile)
        d[field] = float("inf")
        try:
            hardware_from_dict(d, "p")
            loaded.append(field)
        except InputError as e:
            assert field in str(e)
    assert not loaded


def test_the_shipped_profile_itself_loads(profile):
    assert hardware_from_dict(copy.deepcopy(profile), "p").gemm_field
