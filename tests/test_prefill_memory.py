"""Context attention's L2-resident share and DRAM overlap (costmodel/prefill_memory.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from costmodel.prefill_memory import l2_resident_share, l2_resident_share_one, overlap_dram


def random_replacement_hits(capacity: int, working_set: int, passes: int, seed: int) -> float:
    """Hit rate of a cache of ``capacity`` lines that evicts a uniformly random line on each miss,
    under ``working_set`` lines read in a loop (the second half of the passes)."""
    rng = np.random.default_rng(seed)
    slots = np.full(capacity, -1)
    where = {}
    hits = total = 0
    for p in range(passes):
        for line in range(working_set):
            if line in where:
                hits += p >= passes // 2
            else:
                i = int(rng.integers(capacity))
                where.pop(int(slots[i]), None)
                slots[i], where[line] = line, i
            total += p >= passes // 2
    return hits / total


@pytest.mark.parametrize("ratio", [0.8, 1.25, 1.5, 2.0, 3.0])
def test_share_is_a_random_replacement_caches_hit_rate(ratio):
    """The closed form against a simulated cache: everything hits while the loop fits; beyond, the
    hit rate the simulation settles at (400 lines, 40 passes: within 0.02)."""
    sim = random_replacement_hits(400, int(400 * ratio), 40, seed=int(10 * ratio))
    assert float(l2_resident_share(ratio)) == pytest.approx(sim, abs=0.02)


@settings(max_examples=200, deadline=None)
@given(st.floats(1.0 + 1e-6, 700.0))
def test_share_is_the_fixed_point_and_the_scalar_path_agrees(x):
    h = float(l2_resident_share(np.array([x]))[0])
    assert 0.0 <= h <= 1.0 and h == pytest.approx(np.exp(-(1.0 - h) * x), rel=1e-9, abs=1e-300)
    assert l2_resident_share_one(x) == pytest.approx(h, rel=1e-9, abs=1e-300)


def test_share_falls_from_one_at_the_capacity():
    x = np.linspace(0.0, 6.0, 601)
    h = l2_resident_share(x)
    assert np.all(h[x <= 1.0] == 1.0) and np.all(np.diff(h) <= 0.0) and h[-1] < 0.01
    assert all(l2_resident_share_one(float(v)) == 1.0 for v in (0.0, 0.5, 1.0))


@given(st.floats(1e-7, 1e-1), st.floats(1e-7, 1e-1), st.floats(0.05, 1.0))
def test_overlap_lies_between_the_roofline_and_the_sum(comp, dram, exposed):
    """The exposed share always adds; the rest never costs more than adding it, nor less than the
    larger of it and the compute; with nothing hidden (exposed = 1) the two add."""
    t = overlap_dram(comp, dram, exposed)
    assert max(comp, dram) * (1 - 1e-12) <= t <= (comp + dram) * (1 + 1e-12)
    assert t >= exposed * dram + max(comp, (1 - exposed) * dram) * (1 - 1e-12)
    assert overlap_dram(comp, dram, 1.0) == pytest.approx(comp + dram, rel=1e-12)
