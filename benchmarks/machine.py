"""How fast this machine runs Python right now: shared cloud machines drift by a third or more
between minutes, so the benchmarks print this beside their wall times; compare wall times
across runs in units of it.

The reference must not run the code it measures: an earlier one timed the simulator itself
(300 requests stepped through one vLLM replica), so every speed-up of the stepping loop also
shrank the reference and the scaled figures fell while the raw ones rose. It now times
`reference_loop`, a frozen stand-in written here once and never to be edited: a continuous-
batching scheduler over a heap of events, with the same kind of Python work as the simulator
(attribute access on slotted objects, deques, heap pushes, integer block arithmetic, float cost
sums) and no project import. Its readings are given in the old reference's units, so the
issues' "reference 0.10-0.11 s" keeps its meaning: `TO_OLD_UNITS` is the median ratio of the old
reference (commit 8804b07, the code #16 was filed on) to this loop's time, measured in
alternating pairs of best-of-7 CPU times on one pinned core of the 2-core VM at a load of 1-2
(32 pairs: median 1.74, range 1.45-2.32; under a load of 4-8, 12 best-of-3 pairs gave 1.83). The ratio is a property of the two workloads on one kind of CPU; on a
very different CPU it may differ by some percent."""

from __future__ import annotations

import heapq
import math
import os
import random
import time
from collections import deque

TO_OLD_UNITS = 1.74


class _Request:
    __slots__ = ("rid", "arrive", "prompt", "done", "need", "first", "last", "itl")

    def __init__(self, rid: int, arrive: float, prompt: int, out: int):
        self.rid, self.arrive, self.prompt, self.need = rid, arrive, prompt, prompt + out
        self.done, self.first, self.last, self.itl = 0, -1.0, 0.0, 0.0


def reference_loop(n: int = 800, seed: int = 0) -> tuple[float, float, int]:
    """n Poisson requests (4/s, prompts 100-3999, outputs 10-399 tokens) through a token budget
    of 2048, 256 sequences and 20,000 blocks of 16, one event per step. Returns (mean E2E, the
    last event's time, steps): fixed numbers, so a changed loop shows in the test."""
    rnd = random.Random(seed)
    t, reqs = 0.0, []
    for i in range(n):
        t += rnd.expovariate(4.0)
        reqs.append(_Request(i, t, rnd.randint(100, 3999), rnd.randint(10, 399)))
    events = [(r.arrive, 0, r.rid) for r in reqs]
    heapq.heapify(events)
    waiting, running, held = deque(), [], {}
    budget, max_seqs, blocks_free, block = 2048, 256, 20000, 16
    now, busy, steps = 0.0, False, 0
    while events:
        now, kind, rid = heapq.heappop(events)
        if kind == 0:
            waiting.append(reqs[rid])
            if busy:
                continue
        left, batch, rows, kv = budget, [], 0, 0
        for r in running:
            if left <= 0:
                break
            take = min(left, r.prompt - r.done) if r.done < r.prompt else 1
            grow = -(-(r.done + take) // block) - held[r.rid]
            if grow > blocks_free:
                break
            blocks_free -= grow
            held[r.rid] += grow
            left -= take
            batch.append((r, take))
            rows += take
            kv += r.done + take
        while waiting and left > 0 and len(running) < max_seqs:
            r = waiting[0]
            take = min(left, r.prompt)
            need = -(-take // block)
            if need > blocks_free:
                break
            waiting.popleft()
            blocks_free -= need
            held[r.rid] = need
            running.append(r)
            left -= take
            batch.append((r, take))
            rows += take
            kv += take
        if not batch:
            busy = False
            continue
        end = now + 4e-3 + max(rows * 2.1e-6, 1.6e-2 * math.sqrt(1 + rows / 512)) + kv * 3e-9
        finished = []
        for r, take in batch:
            r.done += take
            if r.done >= r.prompt:
                if r.first < 0:
                    r.first = end
                else:
                    r.itl = max(r.itl, end - r.last)
                r.last = end
            if r.done >= r.need:
                finished.append(r)
        for r in finished:
            running.remove(r)
            blocks_free += held.pop(r.rid)
        busy = True
        steps += 1
        heapq.heappush(events, (end, 1, steps))
    return sum(r.last - r.arrive for r in reqs) / n, now, steps


def reference_s(repeats: int = 5, clock=time.perf_counter) -> float:
    """Best of `repeats` times of `reference_loop`, in the old reference's units (0.10 s on the
    fastest machine seen here, 0.18-0.29 s on slower ones). `clock`: time.process_time reads this
    process's CPU time instead (steadier when others share the core)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = clock()
        reference_loop()
        best = min(best, clock() - t0)
    return best * TO_OLD_UNITS


def one_core() -> str:
    """Pin this process to one CPU, so that a figure "on one core" is measured on one core: a second
    core would otherwise take numpy's helper threads. Returns what was done, for the report."""
    if not hasattr(os, "sched_setaffinity"):
        return "not pinned (this OS has no sched_setaffinity)"
    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    return f"pinned to CPU {cpu}"
