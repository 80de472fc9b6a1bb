"""SGLang's decode-side PD queues run on CPU (marker `conformance`): the driver a step-for-step PD
harness will stand on. Not a conformance figure — chunksim does not model SGLang PD yet
(docs/conformance.md) — but the behaviour the harness relies on, on SGLang's own objects.

Skips unless SGLang is importable (`pip install 'chunksim[conformance]'`)."""

import importlib.util

import pytest

pytestmark = pytest.mark.conformance

if importlib.util.find_spec("sglang") is None:
    pytest.skip("SGLang is not installed: pip install 'chunksim[conformance]'", allow_module_level=True)

from .sglang_pd_queues import DecodeQueues  # noqa: E402


@pytest.fixture(scope="module")
def queues():
    return DecodeQueues(1024)


def test_kv_is_reserved_before_the_transfer_and_handed_over_after_it(queues):
    """Prealloc reserves each prompt's KV (page 1: exactly its tokens) in FIFO order; a request
    leaves the transfer queue only once its KV has arrived, and keeps its reservation."""
    q = queues
    base = q.used_tokens()
    for rid, n in (("a", 100), ("b", 150), ("c", 200)):
        q.add(rid, n, 8)
    pre, done = q.step()
    assert pre == ["a", "b", "c"] and done == []
    assert q.used_tokens() - base == 450
    q.release("b")
    assert q.step() == ([], ["b"])
    q.release("a")
    q.release("c")
    assert q.step() == ([], ["a", "c"])
    assert [r.rid for r in q.scheduler.waiting_queue] == ["b", "a", "c"]
    assert q.used_tokens() - base == 450


def test_prealloc_waits_for_room_in_order():
    """A request the pool cannot hold stays queued and so does every one behind it (FIFO), though
    a later, smaller one would fit."""
    q = DecodeQueues(1024)
    q.add("big", 600, 8)
    q.add("bigger", 600, 8)
    q.add("small", 10, 8)
    pre, _ = q.step()
    assert pre == ["big"]
    assert [d.req.rid for d in q.prealloc.queue] == ["bigger", "small"]
    assert q.used_tokens() == 600
