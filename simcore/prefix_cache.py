"""The no-chunking policy's prefix cache: block hashes in a radix tree, one node per block.

A prompt is named by a chain of block hashes (Mooncake `hash_ids`: equal id at index i means
equal tokens up to the end of block i), each covering `block_tokens` tokens. The cache is a
tree of such blocks; a node holds `engine_blocks` KV blocks of the replica's pool. Requests
reference the nodes of their cached prefix; unreferenced nodes stay cached, counted as used,
and are evicted least-recently-used, leaves first, when the pool needs room. The engines keep
theirs otherwise: SGLang's RadixCache (whole nodes, splits, a refresh on every match) is
simcore/radix_cache.py, vLLM's BlockPool (duplicates, its free-block queue) simcore/apc.py.

A request pins its matched prefix only once admitted; a lookup that is not admitted is undone.
A hit moves num_computed_tokens forward, by whole cache blocks, to at most num_tokens − 1 (the
last token is always recomputed to sample from it).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from .cache_hits import HitCount


@dataclass(eq=False)
class _Node:
    key: tuple  # (parent's serial, 0 at the root; this block's hash): a trie edge, O(1) to hash
    parent: _Node | None
    depth: int  # blocks from the root, this one included
    refs: int = 0
    children: int = 0
    last_use: int = 0
    serial: int = 0  # creation order, never reused: with depth, breaks LRU ties the same way every run


@dataclass
class PrefixCache(HitCount):
    block_tokens: int
    engine_block_size: int
    nodes: dict = field(default_factory=dict)
    clock: int = 0
    hit_tokens: int = 0
    lookup_tokens: int = 0
    unreferenced: int = 0  # nodes with no request referencing them (evictable or inner)
    created: int = 0
    _lru: list = field(default_factory=list)

    def __post_init__(self):
        self.engine_blocks = -(-self.block_tokens // self.engine_block_size)  # pool blocks one cache node holds

    @property
    def cached_blocks(self) -> int:
        return len(self.nodes) * self.engine_blocks

    def _full_blocks(self, req) -> int:
        """Full prompt blocks of `req` that have a name."""
        return min(len(req.block_hashes), req.prompt_len // self.block_tokens)

    def match(self, req) -> int:
        """Reference (pin) the cached prefix of `req`; returns its length in tokens. Nothing is touched
        for LRU until ``touch``, on admission: a lookup that is undone leaves no trace."""
        path, nodes, parent = [], self.nodes, 0
        limit = min(self._full_blocks(req), (req.num_tokens - 1) // self.block_tokens)
        for i in range(limit):
            node = nodes.get((parent, req.block_hashes[i]))
            if node is None:
                break
            path.append(node)
            parent = node.serial
        for node in path:
            self.unreferenced -= node.refs == 0
            node.refs += 1
        req.cache_path = path
        hit = len(path) * self.block_tokens
        self._count_lookup(req, hit)
        req.num_cached_tokens = hit
        return hit

    def touch(self, req) -> None:
        """The request was admitted: its matched prefix counts as just used."""
        self.clock += 1
        for node in req.cache_path or ():
            node.last_use = self.clock

    def unmatch(self, req) -> None:
        """Undo ``match`` for a request that was not admitted (its lookup is not counted either)."""
        path, req.cache_path = req.cache_path or [], None
        self._unpin(path)
        self._count_lookup(req, len(path) * self.block_tokens, -1)
        req.num_cached_tokens = 0

    def shared_blocks(self, req) -> int:
        return len(req.cache_path or ()) * self.engine_blocks

    def release(self, req) -> int:
        """The request leaves (finished or preempted): its computed full prompt blocks join the cache.
        Returns how many of its private pool blocks the cache took over."""
        path, req.cache_path = req.cache_path or [], None
        self.clock += 1
        computed_blocks = min(self._full_blocks(req), req.num_computed_tokens // self.block_tokens)
        parent = path[-1] if path else None
        adopted, clock, nodes = 0, self.clock, self.nodes
        for i in range(len(path), computed_blocks):
            key = (parent.serial if parent is not None else 0, req.block_hashes[i])
            node = nodes.get(key)
            if node is None:
                self.created += 1
                node = _Node(key, parent, i + 1, serial=self.created)
                nodes[key] = node
                self.unreferenced += 1
                if parent is not None:
                    parent.children += 1
                adopted += 1
            node.last_use = clock
            parent = node
        for node in path:
            node.last_use = clock
        self._unpin(path)
        if parent is not None and len(path) < computed_blocks:  # only the chain's last node can be a leaf
            self._push_if_evictable(parent)
        return adopted * self.engine_blocks

    def _unpin(self, path) -> None:
        """Every node but a path's last has a child (the next), so only the last can become a leaf."""
        freed = 0
        for node in path:
            node.refs -= 1
            if not node.refs:
                freed += 1
        self.unreferenced += freed
        if path:
            self._push_if_evictable(path[-1])

    def _push_if_evictable(self, node: _Node) -> None:
        if node.refs == 0 and node.children == 0:
            heapq.heappush(self._lru, (node.last_use, -node.depth, node.serial, node))

    def evict(self, blocks_wanted: int) -> int:
        """Evict unreferenced leaves, least recently used first; returns pool blocks freed."""
        freed = 0
        while freed < blocks_wanted and self._lru:
            last_use, _, _, node = heapq.heappop(self._lru)
            if node.refs or node.children or last_use != node.last_use or self.nodes.get(node.key) is not node:
                continue
            del self.nodes[node.key]  # type: ignore[union-attr]
            self.unreferenced -= 1
            freed += self.engine_blocks
            if node.parent is not None:  # type: ignore[union-attr]
                node.parent.children -= 1  # type: ignore[union-attr]
                self._push_if_evictable(node.parent)  # type: ignore[union-attr]
        return freed

    @property
    def evictable_blocks(self) -> int:
        """Blocks no request references, inner nodes included (evicting their leaves first frees them too)."""
        return self.unreferenced * self.engine_blocks
