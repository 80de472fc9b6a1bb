"""vLLM's automatic prefix caching, block for block (vllm/v1/core/block_pool.py, vLLM 0.33.0).

vLLM keys a cached block by the hash of its tokens chained over the whole prefix and keeps,
under one key, every physical block that was cached with it (BlockHashToBlockMap): it never
dedupes, so two requests that compute the same block before either is cached both keep and
cache their own copy (NOTE #1 of BlockHashToBlockMap). A lookup walks the chain of a request's
block hashes and takes the first copy of each key (``get_cached_block``,
FullAttentionManager.find_longest_cache_hit), whoever holds it, until a key has none.

A copy nobody references stays cached and counts as free; it sits in the free-block queue,
which hands out the blocks that hold no hash first (``free_blocks`` prepends them) and then
the cached ones in the order they were freed (appended), a request's blocks in reverse, tail
first. Handing out a cached copy evicts it (``_maybe_evict_cached_block``); a hit takes its
copy out of the queue (``touch``) until the request frees it again. A parent block may go
before its children: a key stays findable while any copy of it is cached.

Here a cache unit covers ``block_tokens`` tokens, ``engine_blocks`` pool blocks (one when the
workload's hashes are the engine's blocks). A request holds its first ``len(cache_path)``
blocks as cached copies and the rest (``num_blocks``) privately. Blocks are cached as vLLM
caches them: when scheduled (``publish_scheduled``, KVCacheManager.allocate_slots ->
cache_blocks) and, for generated tokens, when their output is processed, which for anyone but
the request itself is unobservable and is done here when it leaves (``release``).
"""

from __future__ import annotations

import heapq

from .cache_hits import HitCount


class _Copy:
    """One physical cached block (or cache unit). ``refs``: requests holding it (vLLM's ref_cnt);
    ``pins``: lookups of this schedule() not yet admitted (vLLM has not touched it for them, so
    they leave its place in the queue alone, but it must not be handed out under them)."""

    __slots__ = ("key", "refs", "pins", "stamp", "queued", "cached", "serial")

    def __init__(self, key: int, serial: int):
        self.key, self.serial = key, serial
        self.refs, self.pins, self.stamp, self.queued, self.cached = 1, 0, 0, False, True


class _Held(list):
    """A request's cached copies, blocks [0, len) in order, and when its blocks were last cached:
    ``pub`` the schedule() that did it, ``pub_T`` the positions it held then, ``ph`` whether its
    last token was still in flight (async), ``samp`` whether that step samples (it reaches
    num_tokens), ``skip`` the last schedule() that did not reach it."""

    __slots__ = ("pub", "pub_T", "ph", "samp", "skip")

    def __init__(self):
        super().__init__()
        self.pub = self.skip = -2
        self.pub_T, self.ph, self.samp = 0, False, False


class BlockHashCache(HitCount):
    """The prefix-cache side of vLLM's BlockPool: the hash map and the cached part of the free queue.

    ``outputs_lag`` (async scheduling): schedule(n+1) runs before the output of step n is
    processed, so a request that sampled in step n has one token fewer than chunksim's count
    (Request.num_tokens excludes the placeholder) when allocate_slots caches its blocks; the
    block that token completes is cached by update_from_output (cache_blocks up to
    num_computed_tokens − num_in_flight_tokens), after schedule(n+1). A request preempted in
    schedule(n+1) that sampled in steps n − 1 and n has its blocks cached only up to the
    positions of step n − 1 (vllm/v1/core/sched/scheduler.py, update_from_output)."""

    def __init__(self, block_tokens: int, engine_block_size: int, outputs_lag: bool = False):
        self.block_tokens, self.engine_block_size, self.outputs_lag = block_tokens, engine_block_size, outputs_lag
        self.sched, self.in_schedule = 0, False
        self.engine_blocks = -(-block_tokens // engine_block_size)
        self._map: dict = {}  # chained key -> [copies], oldest first (get_one_block's pick)
        self._queue: list = []  # (stamp, serial, copy): copies nobody references, in free-queue order
        self._stamp = self._serial = 0
        self.copies = self.free_copies = 0

    @property
    def cached_blocks(self) -> int:
        return self.copies * self.engine_blocks

    @property
    def evictable_blocks(self) -> int:
        """Cached blocks nobody references: vLLM counts them as free."""
        return self.free_copies * self.engine_blocks

    def _full_blocks(self, req) -> int:
        """Full blocks of `req` that have a hash: its prompt's, and (when every full prompt block
        is named) those that hold generated tokens, named after the request alone since nobody
        else generated them (vLLM hashes every full block of request.all_token_ids,
        vllm/v1/core/kv_cache_utils.py, get_request_block_hasher)."""
        bt = self.block_tokens
        prompt = req.prompt_len // bt
        if len(req.block_hashes) >= prompt:
            return req.num_tokens // bt
        return len(req.block_hashes)

    def _key(self, req, i: int, parent: int) -> int:
        """Block i's key, chained over its prefix as vLLM's hash_block_tokens chains."""
        if i < req.prompt_len // self.block_tokens:
            return hash((parent, req.block_hashes[i]))
        return hash((parent, req.rid, i))

    def match(self, req) -> int:
        """find_longest_cache_hit, capped at num_tokens − 1 (the last token is recomputed to sample
        from it: KVCacheManager.get_computed_blocks); the hit copies are pinned. Returns tokens."""
        bt, get = self.block_tokens, self._map.get
        limit = min(self._full_blocks(req), (req.num_tokens - 1) // bt)
        path, key = _Held(), 0
        for i in range(limit):
            key = self._key(req, i, key)
            copies = get(key)
            if not copies:
                break
            path.append(copies[0])
        for c in path:
            if not c.refs and not c.pins:
                self.free_copies -= 1
            c.pins += 1
        req.cache_path = path
        hit = len(path) * bt
        path.pub_T = hit
        self._count_lookup(req, hit)
        req.num_cached_tokens = hit
        return hit

    def touch(self, req) -> None:
        """Admitted: the request holds its hit copies, out of the queue until freed (BlockPool.touch)."""
        path = req.cache_path or ()
        for i in range(min(len(path), req.num_cached_tokens // self.block_tokens)):
            c = path[i]
            c.pins -= 1
            c.refs += 1

    def unmatch(self, req) -> None:
        """Undo ``match`` for a request that was not admitted: vLLM touched nothing, so every copy
        goes back to its place in the queue."""
        path, req.cache_path = req.cache_path or [], None
        for c in path:
            c.pins -= 1
            if not c.refs and not c.pins:
                self.free_copies += 1
                if not c.queued:
                    c.queued = True
                    heapq.heappush(self._queue, (c.stamp, c.serial, c))
        self._count_lookup(req, len(path) * self.block_tokens, -1)
        req.num_cached_tokens = 0

    def begin_schedule(self) -> None:
        self.sched += 1
        self.in_schedule = True

    def end_schedule(self, skipped) -> None:
        """The running requests that schedule() did not reach (`skipped`) sampled nothing."""
        for req in skipped:
            if req.cache_path is not None:
                req.cache_path.skip = self.sched
        self.in_schedule = False

    def _sampled_last(self, req, path) -> bool:
        """Whether `req` sampled in the step just applied: the last schedule() reached it and it
        sampled there, or it has decoded since its last publish (in a cohort or a run)."""
        return path.skip != self.sched - 1 and (
            (path.pub == self.sched - 1 and path.samp) or req.num_computed_tokens > path.pub_T
        )

    def publish_scheduled(self, req, tokens: int) -> int:
        """allocate_slots -> cache_full_blocks up to `tokens` positions (less a token still in
        flight, see ``outputs_lag``): each full block of `req` past those already cached becomes a
        cached copy under its key, beside any copy cached before it (no dedup). Returns how many
        of the request's private pool blocks became cached copies."""
        path = req.cache_path
        if path is None:
            path = req.cache_path = _Held()
        if self.outputs_lag:
            ph = self._sampled_last(req, path)
            path.pub, path.pub_T, path.ph, path.samp = self.sched, tokens, ph, tokens >= req.num_tokens
            if ph:
                tokens = min(tokens, req.num_tokens - 1)
        return self._cache(req, path, tokens)

    def _cache(self, req, path, tokens: int) -> int:
        k = min(self._full_blocks(req), tokens // self.block_tokens)
        n = len(path)
        if k <= n:
            return 0
        key, m = (path[-1].key if path else 0), self._map
        for i in range(n, k):
            key = self._key(req, i, key)
            self._serial += 1
            c = _Copy(key, self._serial)
            copies = m.get(key)
            if copies is None:
                m[key] = [c]
            else:
                copies.append(c)
            path.append(c)
        self.copies += k - n
        return (k - n) * self.engine_blocks

    def shared_blocks(self, req) -> int:
        return len(req.cache_path or ()) * self.engine_blocks

    def release(self, req) -> int:
        """The request leaves (finished, or preempted in schedule()): its full computed blocks not
        yet cached are cached (a preempted one's as ``outputs_lag`` says), then every block is freed in reverse order (KVCacheManager.free): the private ones
        to the front of the free queue, the cached copies nobody else holds to its back, tail
        first. Returns how many of its private pool blocks became cached copies."""
        path, tokens = req.cache_path, req.num_computed_tokens
        if path is None:
            path = _Held()
        elif (
            self.in_schedule
            and self.outputs_lag
            and self._sampled_last(req, path)
            and (tokens > path.pub_T or (path.pub == self.sched - 1 and path.ph))
        ):
            tokens -= 1  # preempted with steps n − 1 and n both sampling: cached to step n − 1's positions
        adopted = self._cache(req, path, tokens)
        req.cache_path = None
        queue = self._queue
        for c in reversed(path):
            c.refs -= 1
            if not c.refs:
                self._stamp += 1
                c.stamp, c.queued = self._stamp, True
                self.free_copies += not c.pins
                heapq.heappush(queue, (c.stamp, c.serial, c))
        if len(queue) > 4 * self.free_copies + 64:
            self._compact()
        return adopted

    def _compact(self) -> None:
        live = [e for e in self._queue if e[2].queued and e[0] == e[2].stamp]
        for e in self._queue:
            e[2].queued = False
        for e in live:
            e[2].queued = True
        heapq.heapify(live)
        self._queue = live

    def evict(self, blocks_wanted: int) -> int:
        """Hand out cached copies nobody references, front of the queue first; returns pool blocks freed."""
        freed, queue, m = 0, self._queue, self._map
        while freed < blocks_wanted and queue:
            stamp, _, c = heapq.heappop(queue)
            if stamp != c.stamp:
                continue
            c.queued = False
            if c.refs or c.pins or not c.cached:
                continue
            copies = m[c.key]
            copies.remove(c)
            if not copies:
                del m[c.key]
            c.cached = False
            self.copies -= 1
            self.free_copies -= 1
            freed += self.engine_blocks
        return freed
