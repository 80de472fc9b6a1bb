"""The readability bars the reference-loop issue set, kept: the reference loop fits on a screen
and each engine's scheduler stays short enough to diff against the engine's own schedule()."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "path, most",
    [("simcore/stepping.py", 200), ("policies/vllm.py", 250), ("policies/sglang.py", 250)],
)
def test_module_fits(path, most):
    lines = len((ROOT / path).read_text().splitlines())
    assert lines <= most, f"{path} has {lines} lines; move a part into a module of its own"


def test_replica_has_no_mixin_bases():
    from simcore.replica import Replica

    assert Replica.__bases__ == (object,)
