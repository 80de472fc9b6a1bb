"""Prefix-cache hits, counted alike by every engine's cache model so that their hit rates compare
(Simulation sums them over replicas into prefix_cache_hit_rate)."""

from __future__ import annotations


class HitCount:
    """A lookup counts the request's prompt tokens and, as hits, those of them its cached prefix
    covers; a lookup that is undone (the request was not admitted) is not counted. A request
    looked up again after a preemption counts again."""

    hit_tokens = 0
    lookup_tokens = 0

    def _count_lookup(self, req, hit_tokens: int, sign: int = 1) -> None:
        self.lookup_tokens += sign * req.prompt_len
        self.hit_tokens += sign * min(hit_tokens, req.prompt_len)
