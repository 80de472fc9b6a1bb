"""A SimPy environment whose clock lands exactly on planned times.

``env.timeout(t - now)`` fires at ``now + (t - now)``, which in floating point can miss t by an
ulp when now < t/2 (a long fast-forward run, an early arrival); and when now sits half an ulp off
t's grid no delay reaches t at all (ties round to even). Fast-forward and stepping take different
paths to the same planned times, so a clock that drifts from them would make the two modes order
events (finishes, arrivals, run cuts) differently. ``at(t)`` schedules an event at t itself.

ARRIVALS. Arrival events (and a replica's wait for them) run at priority LATE, after every step
that ends at the same instant: a router then sees each replica as of its steps ended by t, in
both modes (stepping queues a step's end when the step starts, fast-forward when the run starts,
so insertion order alone would differ).

This is the one module that touches SimPy's internals (``_now``, ``_queue``, ``_eid``, an event's
``_ok`` / ``_value``, a process's ``_target``); everything else goes through the methods below.
"""

from __future__ import annotations

from heapq import _siftdown, _siftup, heappush  # type: ignore[attr-defined]  # private helpers, absent from typeshed
from operator import attrgetter

import simpy
from simpy.events import NORMAL

LATE = NORMAL + 1  # after every NORMAL event due at the same time


class ExactEnvironment(simpy.Environment):
    now = property(attrgetter("_now"), doc="The current simulation time (SimPy's ``now``, read without a Python call).")

    def at(self, t: float, priority: int = NORMAL) -> simpy.Event:
        """An event that fires with ``now == t`` exactly (a Timeout scheduled by absolute time)."""
        if t < self._now:
            raise ValueError(f"at({t!r}) is before now ({self._now!r})")
        event = simpy.Event(self)
        event._ok, event._value = True, None
        heappush(self._queue, (t, priority, next(self._eid), event))  # type: ignore[misc]
        return event

    def queue_at(self, event: simpy.Event, t: float) -> None:
        """Queue a pending event to fire with ``now == t`` (``at(t)`` for an event already made,
        its callbacks kept)."""
        if t < self._now:
            raise ValueError(f"queue_at({t!r}) is before now ({self._now!r})")
        event._ok, event._value = True, None
        heappush(self._queue, (t, NORMAL, next(self._eid), event))

    def move_earlier(self, event: simpy.Event, t: float) -> None:
        """Move a queued ``at`` event to t (not after its time, not before now), re-queued as a
        new ``at(t)`` would be: the same priority, ordered after every event already queued for
        t. The event keeps its callbacks, and no emptied event is left in the queue to pop."""
        queue = self._queue
        for i, entry in enumerate(queue):  # noqa: B007 -- i is the position used after the loop
            if entry[3] is event:
                break
        else:
            raise ValueError("move_earlier: the event is not queued")
        if not self._now <= t <= entry[0]:
            raise ValueError(f"move_earlier({t!r}) is outside [now {self._now!r}, its time {entry[0]!r}]")
        queue[i] = (t, entry[1], next(self._eid), event)
        if t < entry[0]:
            _siftdown(queue, 0, i)
        else:  # its own time, a later sequence number: the key grew
            _siftup(queue, i)

    def due_by(self, t: float) -> bool:
        """Whether an event is queued at or before t (someone could look at the replica by t)."""
        queue = self._queue
        return bool(queue) and queue[0][0] <= t

    def skip_to(self, t: float) -> bool:
        """Move the clock to t without an event when nothing is queued by t (nobody could look in
        between, so this is what an event at t would have done); False, and no move, otherwise."""
        queue = self._queue
        if queue and queue[0][0] <= t:
            return False
        self._now = t
        return True

    def requeue(self, event: simpy.Event, t: float, priority: int = NORMAL) -> None:
        """Queue an event whose callbacks already ran to fire again at t, as a new ``at(t)`` would
        be queued (the next sequence number), with the callbacks it has now."""
        heappush(self._queue, (t, priority, next(self._eid), event))  # type: ignore[misc]

    def move_wait_earlier(self, process, t: float) -> None:
        """``move_earlier`` for the ``at`` event a process is waiting on."""
        self.move_earlier(process._target, t)


def trigger_unscheduled(event: simpy.Event) -> None:
    """Mark a pending event as succeeded without queueing it: the caller runs its callbacks itself
    at the instant SimPy would have popped it."""
    event._ok, event._value = True, None
