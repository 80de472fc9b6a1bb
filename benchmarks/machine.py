"""How fast this machine runs plain Python right now: shared cloud machines drift by a third or
more between minutes, so the benchmarks print this beside their wall times (a slow figure here
means a slow machine, not a slower simulator)."""
from __future__ import annotations

import time


def reference_loop_ms(repeats: int = 5) -> float:
    """Best of `repeats` timings of a fixed mix of the work a simulator does: calls, attribute and
    dict access, float arithmetic, list appends (about 30 ms on a 2024 laptop core)."""
    class Box:
        __slots__ = ("x",)

        def __init__(self):
            self.x = 0.0

    def step(box, table, i):
        box.x += table.get(i & 255, 1.0) * 1.0000001
        return box.x

    best = float("inf")
    for _ in range(repeats):
        box, table, out = Box(), {i: float(i) for i in range(256)}, []
        t0 = time.perf_counter()
        for i in range(200_000):
            out.append(step(box, table, i))
        best = min(best, time.perf_counter() - t0)
    return best * 1e3
