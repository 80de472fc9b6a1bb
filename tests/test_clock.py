"""The exact clock: events land on planned times to the bit, and LATE events follow every NORMAL
event due at the same time, whatever order they were queued in."""
import pytest

from simcore.clock import LATE, ExactEnvironment


def test_at_lands_where_a_delay_cannot():
    now, t = 12.961967431891733, 46.4805413155295
    assert now + (t - now) != t            # why simcore/clock.py exists
    env, seen = ExactEnvironment(), []
    env.at(now).callbacks.append(lambda e: env.at(t).callbacks.append(lambda e: seen.append(env.now)))
    env.run()
    assert seen == [t]


def test_late_runs_after_normal_at_the_same_time():
    env, order = ExactEnvironment(), []
    env.at(1.0, LATE).callbacks.append(lambda e: order.append("late, queued first"))
    env.at(1.0).callbacks.append(lambda e: order.append("normal"))
    env.at(0.5).callbacks.append(lambda e: env.at(1.0).callbacks.append(lambda e: order.append("normal, queued at 0.5")))
    env.run()
    assert order == ["normal", "normal, queued at 0.5", "late, queued first"]


def test_at_refuses_the_past():
    env = ExactEnvironment()
    env.at(2.0).callbacks.append(lambda e: env.at(1.0))
    with pytest.raises(ValueError, match="before now"):
        env.run()
