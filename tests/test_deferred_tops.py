"""fastforward/tops.py: runs' largest gaps folded into max_itl_s in bulk equal folding each run's
own max at once, whatever the order, the lengths and the point where a batch is reduced."""

import numpy as np
from hypothesis import given, strategies as st

from simcore.fastforward import tops
from simcore.request import Request

gaps = st.lists(st.floats(1e-6, 10.0), min_size=1, max_size=40)


@given(
    runs=st.lists(st.tuples(st.integers(0, 4), gaps), max_size=30),
    start=st.lists(st.floats(0.0, 5.0), min_size=5, max_size=5),
    pending=st.integers(1, 80),
)
def test_settled_tops_equal_each_runs_max(runs, start, pending):
    saved, tops.PENDING = tops.PENDING, pending
    try:
        _check(runs, start)
    finally:
        tops.PENDING = saved


def _check(runs, start):
    reqs = [Request(i, 0.0, 10, 10, max_itl_s=s) for i, s in enumerate(start)]
    want = list(start)
    deferred = tops.DeferredTops()
    for k, g in runs:
        deferred.add(reqs[k], np.asarray(g))
        want[k] = max(want[k], *g)
    deferred.settle()
    assert [r.max_itl_s for r in reqs] == want
    assert not deferred.reqs and not deferred.gaps
