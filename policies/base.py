"""What every policy receives and returns. A policy decides; the replica does (and keeps time)."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from simcore.kv import BlockPool
from simcore.request import Request


@dataclass
class SchedulerState:
    """The queues and the KV pool of one replica. Policies move requests between the queues and
    hold or release KV blocks, as the engines' schedulers do; they never advance tokens or time."""
    pool: BlockPool
    waiting: deque = field(default_factory=deque)    # arrived, holding no KV
    running: list = field(default_factory=list)      # holding KV: prefilling or decoding

    def lookup(self, req: Request) -> None:
        """Prefix-cache lookup for a request about to be admitted with nothing computed."""
        cache = self.pool.cache
        if cache is not None and req.num_computed_tokens == 0 and "cache_path" not in req.extra:
            req.num_computed_tokens = cache.match(req)

    def preempt(self, req: Request, *, front: bool) -> None:
        """Recompute-style preemption: free the KV, keep the tokens, requeue."""
        self.pool.release(req)
        req.reset_for_recompute()
        (self.waiting.appendleft if front else self.waiting.append)(req)


@dataclass
class Plan:
    """The next forward pass: (request, new tokens) in batch order, and who was preempted for it."""
    items: list = field(default_factory=list)
    preempted: list = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(n for _, n in self.items)

    def __bool__(self) -> bool:
        return bool(self.items)
