"""The decode cohort: running requests that decode one token every step, advanced together.

In a busy replica most running requests are plain decodes, and a step changes each of them the
same way: one more token computed, one more sampled, a new KV block when a block boundary is
crossed. The cohort keeps them as a group so that a step costs O(1) instead of O(batch):

  tick            steps the cohort has taken; a member that joined at tick t0 has advanced tick − t0
  kv              Σ num_computed_tokens over members, as of tick (the attention term of the cost)
  due[p]          members that need a new KV block at every step starting at a tick t ≡ p
                  (mod block_size): those whose next position starts a block
  finish heap     the tick at which each member samples its last token
  suffix maxima   (tick, largest gap of the events from that tick on) for each member's max ITL
  left            Σ (output_len − num_output_tokens + cohort_tick) over members, so that their
                  outputs left now sum to left − n·tick

A member's Request keeps the values it joined with; ``materialize`` writes the current ones back
(when it finishes, when the run ends, or when the scheduler needs every request explicitly).
Every member got its last token at ``last_end``: members join at the end of a step the cohort
took part in (or when it is empty), and a step includes all of the cohort or none of it (an
SGLang prefill batch, which the decodes sit out). A folded run
(see simcore/replica.py) takes the members that finish inside it off the heap in advance and
hands them to ``advance`` at the step they leave after.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left


class DecodeCohort:
    def __init__(self, block_size: int):
        self.bs = block_size
        self.tick = 0
        self.members: dict = {}
        self.kv = 0
        self.left = 0
        self._due = [0] * (2 * block_size)
        self.finish: list = []
        self.last_end = 0.0
        self.last_finish = 0
        self._ticks: list[int] = []
        self._gaps: list[float] = []
        self._top = 0  # the largest seq among members; -1: not known (it left)

    @property
    def n(self) -> int:
        return len(self.members)

    @property
    def top_seq(self) -> int:
        """The latest-admitted member's running-queue stamp (members are all before any later request)."""
        if self._top < 0:
            self._top = max((r.seq for r in self.members), default=0)
        return self._top

    def join(self, req) -> None:
        """`req` has just sampled a token at ``last_end`` and decodes next step (``put_back``
        inlined: the hot path). Computing position c at tick t, it needs a new block iff c ≡ 0
        (mod bs), i.e. at the ticks t ≡ cohort_tick − num_computed_tokens (its join values): due."""
        tick, bs = self.tick, self.bs
        req.cohort_tick = tick
        self.members[req] = None
        if 0 <= self._top < req.seq:
            self._top = req.seq
        self.kv += req.num_computed_tokens
        left = req.output_len - req.num_output_tokens
        self.left += left + tick
        r = (tick - req.num_computed_tokens) % bs
        due = self._due
        due[r] += 1
        due[r + bs] += 1
        f = tick + left
        heapq.heappush(self.finish, (f, req.seq, req))
        if f > self.last_finish:
            self.last_finish = f

    def put_back(self, req) -> None:
        """Onto the finish heap at the tick of its last token (from its join values)."""
        f = req.cohort_tick + req.output_len - req.num_output_tokens
        heapq.heappush(self.finish, (f, req.seq, req))
        if f > self.last_finish:
            self.last_finish = f

    def take_finishing(self, steps: int) -> list:
        """Off the finish heap: the members whose last token comes `steps` steps from now."""
        out = []
        while self.finish and self.finish[0][0] - self.tick == steps:
            out.append(heapq.heappop(self.finish)[2])
        return out

    def outputs_left(self) -> int:
        """Σ output tokens the members have still to sample."""
        return self.left - len(self.members) * self.tick

    def steps_to_finish(self) -> int:
        return self.finish[0][0] - self.tick

    def steps_to_empty(self) -> int:
        """At least the steps until the last member finishes (an upper bound kept as members join)."""
        return self.last_finish - self.tick

    def new_blocks(self, start_tick: int, steps: int) -> int:
        """Blocks the members need for `steps` steps starting at `start_tick`."""
        bs = self.bs
        if steps < bs:
            if steps <= 0:
                return 0
            if steps == 1:
                return self._due[start_tick % bs]
            i = start_tick % bs
            return sum(self._due[i : i + steps])
        full, rem = divmod(steps, bs)
        if not rem:
            return full * len(self.members)
        i = start_tick % bs
        return full * len(self.members) + sum(self._due[i : i + rem])

    def advance(self, steps: int, max_gap: float, last_end: float, leaving=()) -> list:
        """The cohort took `steps` steps whose largest gap for members was `max_gap`; returns the
        members that sampled their last token (`leaving`, already off the finish heap, then those
        still on it), materialized (``_leave``, inlined: the hot path)."""
        ticks, gaps = self._ticks, self._gaps
        while gaps and gaps[-1] <= max_gap:
            ticks.pop()
            gaps.pop()
        ticks.append(self.tick)
        gaps.append(max_gap)
        tick = self.tick = self.tick + steps
        members, finish = self.members, self.finish
        self.kv += steps * len(members)
        self.last_end = last_end
        if not leaving and not (finish and finish[0][0] <= tick):
            return []
        done = list(leaving)
        while finish and finish[0][0] <= tick:
            done.append(heapq.heappop(finish)[2])
        bs, due, kv, left, ng = self.bs, self._due, self.kv, self.left, len(gaps)
        for req in done:
            joined, computed = req.cohort_tick, req.num_computed_tokens
            d = tick - joined
            kv -= computed + d
            left -= req.output_len - req.num_output_tokens + joined
            r = (joined - computed) % bs
            due[r] -= 1
            due[r + bs] -= 1
            del members[req]
            if req.seq == self._top:
                self._top = -1
            req.num_computed_tokens = computed + d
            req.num_output_tokens += d
            req.cohort_tick = -1
            req.last_token_s = last_end
            i = bisect_left(ticks, joined)
            if i < ng and gaps[i] > req.max_itl_s:
                req.max_itl_s = gaps[i]
        self.kv, self.left = kv, left
        if not members:
            ticks.clear()
            gaps.clear()
        return done

    def materialize(self, req) -> None:
        """Write the member's tokens, last token time and max ITL back to its Request."""
        joined = req.cohort_tick
        d = self.tick - joined
        req.num_computed_tokens += d
        req.num_output_tokens += d
        req.cohort_tick = -1
        req.last_token_s = self.last_end
        i = bisect_left(self._ticks, joined)
        if i < len(self._gaps) and self._gaps[i] > req.max_itl_s:
            req.max_itl_s = self._gaps[i]

    def dissolve(self, blocks_held) -> list:
        """Every member back to an explicit request; `blocks_held(req)` sets what it holds now. Returns them."""
        out = list(self.members)
        for req in out:
            self.materialize(req)
            req.num_blocks = blocks_held(req)
        self.members.clear()
        self._top = 0
        self.finish.clear()
        self.last_finish = self.tick  # no members: no steps to empty (the bound would stay at theirs)
        self._due = [0] * (2 * self.bs)
        self.kv = 0
        self.left = 0
        self._ticks.clear()
        self._gaps.clear()
        return out

    def current(self, req) -> int:
        """A member's num_computed_tokens now."""
        return req.num_computed_tokens + self.tick - req.cohort_tick
