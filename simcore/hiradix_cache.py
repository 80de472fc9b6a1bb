"""SGLang's hierarchical cache (HiCache): the radix cache over GPU memory backed by a host tier.

As SGLang 0.5.23 runs it (``--enable-hierarchical-cache``; mem_cache/unified_radix_cache.py,
UnifiedRadixCache, and managers/cache_controller.py, HiCacheController):
- host capacity: ``--hicache-size`` GB per rank, else ``--hicache-ratio`` (default 2.0) times the
  device pool (arg_groups/fields/memory.py); held here in blocks.
- writes (device → host, ``write_backup``): an insert gives each node past what the request
  itself inserted or matched before (``inserted_len``) a hit (``_inc_hit_count_and_check``);
  ``write_through`` backs a node up at its first hit: every prompt the tree takes over, a
  chunked request's chunk at each ``stash_chunked_request`` (seed 001 §八) and a finished
  request's sequence; ``write_through_selective`` at its second (the same blocks computed by two
  requests); ``write_back`` only when the device evicts it. A write finds no host room when
  every host block backs a node still on the device (host eviction only takes nodes already
  evicted from the device, ``evict_host``); the node then stays unbacked.
- device eviction keeps a backed-up node's names on the host; an unbacked one is lost.
- a lookup that ends on the device continues through names held on the host
  (``match_prefix``: ``host_hit_length``); on admission those are loaded back into device memory
  (``PrefillAdder.add_one_req`` → ``init_load_back``), the device evicting for them first, and the
  step that extends the request waits for the copy layer by layer (``LayerDoneCounter``).
Simplifications, stated: the host tier is a set of block names (names are prefix-unique: the
workload's block hashes, or a request's own output blocks), evicted least recently *demoted*
first; a name loaded back keeps its host copy (SGLang keeps ``host_value``). Copy time is priced
by policies/sglang_hicache.py.
"""

from __future__ import annotations

from collections import OrderedDict

from .radix_cache import RadixCache

WRITE_POLICIES = ("write_through", "write_through_selective", "write_back")
LOAD_BACK_THRESHOLD = 10  # UnifiedRadixCache.load_back_threshold: fewer host-hit tokens are not loaded


class HiRadixCache(RadixCache):
    """RadixCache plus a host tier of ``host_blocks`` names under ``write_policy``."""

    def __init__(self, block_tokens: int, engine_block_size: int, host_blocks: int, write_policy: str):
        super().__init__(block_tokens, engine_block_size)
        self.host_blocks, self.write_policy = host_blocks, write_policy
        self.threshold = 1 if write_policy == "write_through" else 2
        self.host_only: OrderedDict = OrderedDict()  # on the host, evicted from the device: LRU first
        self.backed: set = set()  # on the device with a host copy
        self._hits: dict = {}  # name -> inserts that met it past their own prefix (hit_count)
        self._from = 0  # the inserting request's inserted_len
        self._host_hit: dict = {}  # rid -> names this lookup found on the host
        self.written_blocks = self.loaded_blocks = self.host_hit_tokens = 0
        self.pending_loads: list[int] = []  # blocks loaded for the step being formed, per request
        self.host_pins: set = set()  # host names a load-back is making room for (_lock_node, lock_host)

    # --- the host tier --------------------------------------------------------------------------
    def _host_room(self) -> bool:
        """One more name fits, evicting the least recently demoted host-only name if needed."""
        if len(self.host_only) + len(self.backed) < self.host_blocks:
            return True
        for name in self.host_only:  # oldest first, but not a load-back in progress
            if name not in self.host_pins:
                del self.host_only[name]
                return True
        return False

    def _write(self, names) -> None:
        for name in names:
            if name in self.backed or not self._host_room():
                continue
            self.backed.add(name)
            self.written_blocks += 1

    def _insert(self, key: tuple, n: int):
        """_insert_helper, then the backups: the names past what this request inserted or matched
        before (``inserted_len``) get a hit, and those reaching the threshold are written."""
        cached, node = super()._insert(key, n)
        for name in key[cached:n]:  # recomputed although on the host: its host copy backs it again
            if name in self.host_only:
                del self.host_only[name]
                self.backed.add(name)
        if self.write_policy != "write_back":
            hits, start = self._hits, self._from
            fresh = key[start:n]
            for name in fresh:
                hits[name] = hits.get(name, 0) + 1
            self._write([x for x in fresh if hits[x] >= self.threshold])
        self._from = max(self._from, n)
        return cached, node

    def checkpoint(self, req, up_to: int | None = None) -> tuple[int, int]:
        self._from = (req.cache_path or self.root).end
        return super().checkpoint(req, up_to)

    def release(self, req) -> int:
        self._from = (req.cache_path or self.root).end
        return super().release(req)

    # --- lookups and load-back ------------------------------------------------------------------
    def match(self, req) -> int:
        """The device prefix (RadixCache.match, pinned), then the names after it found on the host."""
        hit = super().match(req)
        node, n = req.cache_path, self._match_end  # where the lookup may end
        key = self._key(req, n) if n > node.end else ()
        h = 0
        while node.end + h < n and key[node.end + h] in self.host_only:
            h += 1
        if h * self.block_tokens < LOAD_BACK_THRESHOLD:
            return hit
        self._host_hit[req.rid] = h
        self._count_lookup(req, hit, -1)
        hit += h * self.block_tokens
        self._count_lookup(req, hit)
        self.host_hit_tokens += h * self.block_tokens
        req.num_cached_tokens = hit
        return hit

    def unmatch(self, req) -> None:
        h = self._host_hit.pop(req.rid, 0)
        if h and req.cache_path is not None:
            self._count_lookup(req, req.cache_path.end * self.block_tokens, 1)
            self._count_lookup(req, (req.cache_path.end + h) * self.block_tokens, -1)
            self.host_hit_tokens -= h * self.block_tokens
        super().unmatch(req)

    def host_hit_blocks(self, req) -> int:
        """Pool blocks the request's lookup found on the host (loaded back on admission)."""
        return self._host_hit.get(req.rid, 0) * self.engine_blocks

    def pin_host_hit(self, req) -> None:
        """Keep the request's host hit on the host while the device evicts for it (write_back
        demotions may need host room meanwhile)."""
        h = self._host_hit.get(req.rid, 0)
        if h:
            end = req.cache_path.end
            self.host_pins = set(self._key(req, end + h)[end : end + h])

    def load_back(self, req) -> int:
        """init_load_back: the host names after the request's device prefix become device nodes,
        pinned by it (the caller made room). Returns the pool blocks they take."""
        h = self._host_hit.pop(req.rid, 0)
        self.host_pins = set()
        if not h:
            return 0
        old = req.cache_path
        n = old.end + h
        key = self._key(req, n)
        for name in key[old.end : n]:
            del self.host_only[name]
            self.backed.add(name)
        cached, node = RadixCache._insert(self, key, n)
        assert cached == old.end, "a host-hit name was already on the device"
        self._stamp(node)
        self._lock(node)
        self._unlock(old)
        req.cache_path = node
        self.loaded_blocks += h
        self.pending_loads.append(h * self.engine_blocks)
        return h * self.engine_blocks

    # --- device eviction ------------------------------------------------------------------------
    def _evicted(self, names) -> None:
        """RadixCache.evict took a leaf: its names stay on the host (write_back: written now)."""
        self._demote(names)

    def _demote(self, names) -> None:
        if self.write_policy == "write_back":
            self._write(names)
        for name in names:
            if name in self.backed:
                self.backed.discard(name)
                self.host_only[name] = None
            self._hits.pop(name, None)

    @property
    def host_used_blocks(self) -> int:
        return len(self.host_only) + len(self.backed)
