"""SGLang's radix cache (python/sglang/srt/mem_cache/radix_cache.py, RadixCache), over block names.

A request's KV is named block by block: its prompt's full blocks by the workload's block hashes,
the blocks holding generated tokens by the request alone (nobody else generated them). A node
holds a run of such names, as SGLang's TreeNode holds a run of tokens, and `engine_blocks` pool
blocks per name. What SGLang does, and this model with it:
- ``match_prefix`` walks the tree and refreshes every node on the matched path for LRU, and
  splits the node where the match ends inside it (``_match_prefix_helper``, ``_split_node``);
  every lookup does, admitted or not (the waiting loop's ``init_next_round_input``, and
  ``SchedulePolicy._touch_waiting_prefixes`` every WAITING_PREFIX_REFRESH_INTERVAL passes).
- ``insert`` walks the same way, splits where the new key diverges inside a node and hangs the
  rest under it as one new leaf (``_insert_helper``); ``checkpoint`` inserts what a running
  request computed, frees its copies of blocks the tree already held, matches the key again
  and moves the request's lock to the new end (``RadixCache.checkpoint``). A finished request's
  whole sequence goes in, split at the prompt's end (``_insert_cache`` with split_prompt); a
  retracted one's only loses its lock (``release_kv_cache`` with checkpoint=False).
- ``inc_lock_ref`` / ``dec_lock_ref`` pin a node and its ancestors; ``evictable_size`` counts
  the blocks of unpinned nodes; ``evict`` frees whole unpinned leaves, least recently used
  first, a parent joining the candidates when its last child goes, until enough are freed
  (so it may free more than asked).
Times are a counter: each walk stamps its path with one new value and each new node gets the
next (SGLang reads time.monotonic() once per walk and again in TreeNode()). Memory is a node per
distinct run, O(requests); matching compares runs by slices, not block by block.
"""

from __future__ import annotations

import heapq

from .cache_hits import HitCount

REFRESH_INTERVAL = 32  # schedule_policy.py, WAITING_PREFIX_REFRESH_INTERVAL
REFRESH_MAX = 128  # schedule_policy.py, WAITING_QUEUE_PREFIX_MATCH_MAX


class _Node:
    __slots__ = ("parent", "children", "names", "end", "refs", "time", "serial")

    def __init__(self, parent, names: tuple, end: int, time: int, serial: int, refs: int = 0):
        self.parent, self.children, self.names, self.end = parent, {}, names, end  # type: ignore[var-annotated]
        self.refs, self.time, self.serial = refs, time, serial


def _common(names: tuple, key: tuple, pos: int, end: int) -> int:
    """How many leading names of `names` equal key[pos:end] (the first is known to)."""
    n = min(len(names), end - pos)
    if names[:n] == key[pos : pos + n]:
        return n
    lo, hi = 1, n  # names[:lo] matches, names[:hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if names[:mid] == key[pos : pos + mid]:
            lo = mid
        else:
            hi = mid
    return lo


class RadixCache(HitCount):
    """The interface policies/sglang.py and simcore/kv.py use (as simcore/prefix_cache.py's)."""

    def __init__(self, block_tokens: int, engine_block_size: int):
        self.block_tokens = block_tokens
        self.engine_blocks = -(-block_tokens // engine_block_size)
        self.root = _Node(None, (), 0, 0, 0, refs=1)
        self.clock = self.created = self.nodes = 0
        self.blocks = self.unreferenced = 0  # names in the tree, and in unpinned nodes
        self._match_end = 0  # where the last lookup could end (names), after ``_cap``
        self._heap: list = []
        self._keys: dict = {}

    # --- names ----------------------------------------------------------------------------------
    def _named(self, req, tokens: int) -> int:
        """Full blocks of `tokens` positions of `req` that have a name (a prompt with unnamed full
        blocks names only its leading ones, and none of its outputs)."""
        prompt = req.prompt_len // self.block_tokens
        if len(req.block_hashes) < prompt:
            return min(len(req.block_hashes), tokens // self.block_tokens)
        return tokens // self.block_tokens

    def _key(self, req, n: int) -> tuple:
        key = self._keys.get(req.rid)
        if key is None or len(key) < n:
            prompt = req.prompt_len // self.block_tokens
            head = req.block_hashes if len(req.block_hashes) == prompt else req.block_hashes[:prompt]
            key = tuple(head) + tuple(("out", req.rid, i) for i in range(prompt, max(n, prompt)))
            self._keys[req.rid] = key
        return key

    # --- the tree -------------------------------------------------------------------------------
    def _tick(self) -> int:
        self.clock += 1
        return self.clock

    def _split(self, child: _Node, m: int) -> _Node:
        """_split_node: the first m names become a new parent of `child`, with its pins."""
        self.created += 1
        self.nodes += 1
        parent = child.parent
        new = _Node(parent, child.names[:m], child.end - len(child.names) + m, self._tick(), self.created, child.refs)
        child.names = child.names[m:]
        child.parent = new
        new.children[child.names[0]] = child
        parent.children[new.names[0]] = new
        return new

    def _walk(self, key: tuple, n: int, time: int):
        """(_match_prefix_helper) The node where the longest cached prefix of key[:n] ends, every
        node on the way stamped `time`, the last split there if the prefix ends inside it."""
        node, pos = self.root, 0
        while pos < n:
            child = node.children.get(key[pos])
            if child is None:
                break
            child.time = time
            m = _common(child.names, key, pos, n)
            if m < len(child.names):
                node = self._split(child, m)
                self._push(child)
                break
            node, pos = child, pos + m
        self._push(node)
        return node

    def _insert(self, key: tuple, n: int):
        """_insert_helper for key[:n]: (names already cached, the node where key[:n] ends)."""
        time = self._tick()
        node = self._walk(key, n, time)
        if node.end < n:
            self.created += 1
            self.nodes += 1
            leaf = _Node(node, key[node.end : n], n, self._tick(), self.created)
            node.children[key[node.end]] = leaf
            self.blocks += n - node.end
            self.unreferenced += n - node.end
            self._push(leaf)
            return node.end, leaf
        return n, node

    def _stamp(self, node: _Node) -> None:
        """The path to `node` as a match_prefix of exactly it leaves it."""
        time, x = self._tick(), node
        while x is not self.root:
            x.time = time
            x = x.parent
        self._push(node)

    def _lock(self, node: _Node) -> None:
        while node is not self.root:
            if node.refs == 0:
                self.unreferenced -= len(node.names)
            node.refs += 1
            node = node.parent

    def _unlock(self, node: _Node) -> None:
        bottom = node
        while node is not self.root:
            node.refs -= 1
            if node.refs == 0:
                self.unreferenced += len(node.names)
            node = node.parent
        self._push(bottom)

    def _push(self, node: _Node) -> None:
        if node.refs == 0 and not node.children and node is not self.root:
            heapq.heappush(self._heap, (node.time, node.serial, node))
            if len(self._heap) > 4 * self.nodes + 64:
                self._heap = [e for e in self._heap if self._fresh(*e)]
                heapq.heapify(self._heap)

    def _fresh(self, time, _serial, node) -> bool:
        return (
            node.time == time
            and node.refs == 0
            and not node.children
            and node.parent is not None
            and node.parent.children.get(node.names[0]) is node
        )

    # --- what the policy and the pool call ------------------------------------------------------
    def match(self, req) -> int:
        """init_next_round_input → match_kv_cache: the longest cached prefix of the request's
        tokens less the last (_compute_max_prefix_len), refreshed for LRU, and pinned (the adder
        checks it under _lock_node and locks it on admission; ``unmatch`` undoes the pin only)."""
        n = min(self._named(req, req.num_tokens), self._match_limit(req))
        key = self._key(req, n) if n > 0 else ()
        n = self._match_end = self._cap(req, key, n)
        node = self._walk(key, n, self._tick()) if n > 0 else self.root
        self._lock(node)
        req.cache_path = node
        hit = node.end * self.block_tokens
        self._count_lookup(req, hit)
        req.num_cached_tokens = hit
        return hit

    def _match_limit(self, req) -> int:
        """The most blocks a lookup may match: the request's tokens less the last (_compute_max_prefix_len)."""
        return (req.num_tokens - 1) // self.block_tokens

    def _cap(self, req, key: tuple, n: int) -> int:
        """Where a lookup of key[:n] may end (a hybrid model's cache stops at a held state:
        simcore/mamba_radix_cache.py)."""
        return n

    def unmatch(self, req) -> None:
        node, req.cache_path = req.cache_path, None
        if node is not None:
            self._unlock(node)
            self._count_lookup(req, node.end * self.block_tokens, -1)
        req.num_cached_tokens = 0

    def touch(self, req) -> None:
        """Admission refreshes nothing more: the lookup did (match_prefix)."""

    def touch_prefix(self, req) -> None:
        """touch_waiting_prefix: a waiting request's whole token sequence walked for LRU (and
        splits), nothing pinned."""
        n = self._named(req, req.num_tokens)
        if n > 0:
            self._walk(self._key(req, n), n, self._tick())

    def shared_blocks(self, req) -> int:
        node = req.cache_path
        return node.end * self.engine_blocks if node is not None else 0

    def holds_next(self, req) -> bool:
        """Whether the tree holds the block after the request's pinned prefix (a ``checkpoint``
        would then free the request's own copy)."""
        node = req.cache_path or self.root
        i = node.end
        return i < self._named(req, req.num_tokens) and self._key(req, i + 1)[i] in node.children

    def checkpoint(self, req, up_to: int | None = None) -> tuple[int, int]:
        """RadixCache.checkpoint(up_to): the request's first `up_to` positions (default: all it
        computed) go into the tree and stay pinned by it. Returns (pool blocks the tree took
        over, pool blocks freed because the tree held them already)."""
        tokens = req.num_computed_tokens if up_to is None else up_to
        old = req.cache_path or self.root
        n = max(self._named(req, tokens), old.end)
        cached, node = self._insert(self._key(req, n), n)
        self._stamp(node)
        self._lock(node)
        self._unlock(old)
        req.cache_path = node
        return (n - cached) * self.engine_blocks, (cached - old.end) * self.engine_blocks

    def release(self, req) -> int:
        """release_kv_cache: a finished request's sequence (prompt and outputs, but the last token,
        whose KV is never computed) is checkpointed, split at the prompt's end, and unpinned; a
        retracted one's is only unpinned. Returns the pool blocks the tree took over."""
        old, req.cache_path = req.cache_path or self.root, None
        if req.num_output_tokens < req.output_len:
            self._unlock(old)
            return 0
        n = max(self._named(req, self._release_end(req)), old.end)
        key = self._key(req, n)
        cached, node = self._insert(key, n)
        prompt = req.prompt_len // self.block_tokens
        if 0 < prompt < n:
            self._insert(key, prompt)
        self._stamp(node)
        self._unlock(old)
        self._keys.pop(req.rid, None)
        return (n - cached) * self.engine_blocks

    def _release_end(self, req) -> int:
        """How much of a finished request's sequence goes into the tree (a hybrid model's: up to
        its last state, simcore/mamba_radix_cache.py)."""
        return req.num_computed_tokens

    def evict(self, blocks_wanted: int) -> int:
        """RadixCache.evict: whole unpinned leaves, least recently used first; pool blocks freed."""
        freed, heap = 0, self._heap
        while freed < blocks_wanted and heap:
            entry = heapq.heappop(heap)
            if not self._fresh(*entry):
                continue
            node = entry[2]
            parent = node.parent
            del parent.children[node.names[0]]
            node.parent = None
            self.nodes -= 1
            k = len(node.names)
            self.blocks -= k
            self.unreferenced -= k
            freed += k * self.engine_blocks
            self._evicted(node.names)
            if parent is not self.root:
                self._push(parent)
        return freed

    def _evicted(self, names) -> None:
        """A leaf's names left the device (HiCache keeps them on the host: simcore/hiradix_cache.py)."""

    @property
    def cached_blocks(self) -> int:
        return self.blocks * self.engine_blocks

    @property
    def evictable_blocks(self) -> int:
        return self.unreferenced * self.engine_blocks
