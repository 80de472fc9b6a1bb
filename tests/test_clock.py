"""The exact clock: events land on planned times to the bit, and LATE events follow every NORMAL
event due at the same time, whatever order they were queued in."""

import pytest

from simcore.clock import LATE, ExactEnvironment


def test_at_lands_where_a_delay_cannot():
    now, t = 12.961967431891733, 46.4805413155295
    assert now + (t - now) != t  # why simcore/clock.py exists
    env, seen = ExactEnvironment(), []
    env.at(now).callbacks.append(lambda e: env.at(t).callbacks.append(lambda e: seen.append(env.now)))
    env.run()
    assert seen == [t]


def test_late_runs_after_normal_at_the_same_time():
    env, order = ExactEnvironment(), []
    env.at(1.0, LATE).callbacks.append(lambda e: order.append("late, queued first"))
    env.at(1.0).callbacks.append(lambda e: order.append("normal"))
    env.at(0.5).callbacks.append(
        lambda e: env.at(1.0).callbacks.append(lambda e: order.append("normal, queued at 0.5"))
    )
    env.run()
    assert order == ["normal", "normal, queued at 0.5", "late, queued first"]


def test_at_refuses_the_past():
    env = ExactEnvironment()
    env.at(2.0).callbacks.append(lambda e: env.at(1.0))
    with pytest.raises(ValueError, match="before now"):
        env.run()


def test_move_earlier_orders_as_a_fresh_at_and_leaves_no_event_behind():
    """A moved wait fires at its new time after what was queued there before the move, and before
    what is queued there after; the queue then holds one event fewer than remove-and-requeue."""
    env, order = ExactEnvironment(), []
    wait = env.at(5.0)
    wait.callbacks.append(lambda e: order.append(("moved", env.now)))
    env.at(2.0).callbacks.append(lambda e: order.append(("queued before", env.now)))
    env.at(3.0).callbacks.append(lambda e: order.append(("other", env.now)))

    def cut(_):
        env.move_earlier(wait, 2.0)
        env.at(2.0).callbacks.append(lambda e: order.append(("queued after", env.now)))

    env.at(1.0).callbacks.append(cut)
    env.run(until=1.5)
    assert sorted(entry[0] for entry in env._queue if entry[0] >= 2.0) == [2.0, 2.0, 2.0, 3.0]
    env.run()
    assert order == [("queued before", 2.0), ("moved", 2.0), ("queued after", 2.0), ("other", 3.0)]


def test_move_earlier_refuses_later_times_and_unqueued_events():
    env = ExactEnvironment()
    wait = env.at(5.0)
    with pytest.raises(ValueError, match="outside"):
        env.move_earlier(wait, 6.0)
    with pytest.raises(ValueError, match="not queued"):
        env.move_earlier(env.event(), 1.0)


def test_move_earlier_to_its_own_time_orders_as_a_fresh_at():
    """Moving a wait to the time it already has (allowed: not after its time) re-queues it after
    the events queued for that time since, as a fresh at() would; the heap stays a heap."""
    from heapq import heappop

    env, order = ExactEnvironment(), []
    wait = env.at(5.0)
    wait.callbacks.append(lambda e: order.append("moved"))
    for i in range(6):
        env.at(5.0).callbacks.append(lambda e, i=i: order.append(i))
    env.move_earlier(wait, 5.0)
    q = list(env._queue)
    assert [heappop(q)[2] for _ in range(len(q))] == sorted(entry[2] for entry in env._queue)
    env.run()
    assert order == [0, 1, 2, 3, 4, 5, "moved"]


def test_queue_at_fires_a_made_event_exactly_then_in_turn():
    """A pending event queued for t fires with now == t exactly (a time no delay from now
    reaches), after what was queued for t before it, keeping its callbacks; never in the past."""
    env, order = ExactEnvironment(), []
    t = 0.1 + 0.2
    wait = env.event()
    wait.callbacks.append(lambda e: order.append(("queued", env.now)))
    env.at(t).callbacks.append(lambda e: order.append(("before", env.now)))
    env.at(0.05).callbacks.append(lambda e: env.queue_at(wait, t))
    env.run()
    assert order == [("before", t), ("queued", t)] and wait.triggered
    with pytest.raises(ValueError, match="before now"):
        env.queue_at(env.event(), 0.0)
