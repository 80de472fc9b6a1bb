"""SGLang's radix cache for hybrid models (Gated DeltaNet / mamba layers beside full attention).

A linear-attention layer keeps one recurrent state per sequence, not a KV entry per token, so a
cached prefix is reusable only up to a point where the tree holds that state. As SGLang 0.5.23
does it (mem_cache/unified_cache/components/mamba.py, MambaComponent; managers/schedule_batch.py,
ScheduleBatch._mamba_radix_cache_v2_req_prepare_for_extend):
- a lookup walks the full-attention KV as usual, but the prefix it returns ends at the deepest
  node holding a state (``best_match_node``); when the KV hit goes further, its end (on the
  checkpoint grid) is the request's ``mamba_branching_seqlen`` (finalize_match_result_in_tree_core).
- ``extra_buffer`` (the strategy ``auto`` picks whenever the overlap scheduler runs or pages are
  larger than one token, arg_groups/overrides.py, _mamba_radix_cache_resolution): each extend
  snapshots one state, at ``prefix + ⌊extend / grid⌋ · grid`` — or, when the branching point lies
  inside the extend, at the branching point instead; the checkpoint after the extend (each chunk's
  stash, a completed prefill's ``checkpoint_kv_cache``) inserts KV only up to that state
  (MambaComponent.prepare_for_caching_req: ``cache_len = mamba_last_track_seqlen``).
- ``no_buffer``: the live state is copied at every checkpoint, so a state sits at each extend's end.
- a node split leaves the state on the lower half (redistribute_on_node_split); device eviction
  drops a node's state with its KV; HiCache keeps it with the host copy (``host_value``).
The rule itself is ``tracked_end``; the grid is ``max(mamba chunk 64, page_size)`` tokens.
Simplifications, stated: positions are whole cache blocks (the workload's block hashes), so a
state lands on the block boundary at or below it; states are evicted with their
nodes only (the mamba pool's own LRU is not modelled; policies/sglang_mamba.py says why it does
not bind here). A finished request's sequence goes in up to its last state: one a decode step
took at a multiple of lcm(grid, ``--mamba-track-interval`` 256), else its prefill's
(_select_finished_checkpoint); the KV past it is freed.
"""

from __future__ import annotations

import math

from .hiradix_cache import HiRadixCache
from .radix_cache import RadixCache

MAMBA_CHUNK = 64  # FLA CHUNK_SIZE, the model's mamba_chunk_size when its config has none
TRACK_INTERVAL = 256  # --mamba-track-interval: decode snapshots a state every this many tokens
STRATEGIES = ("no_buffer", "extra_buffer")


def checkpoint_grid(page_size: int) -> int:
    """mamba_checkpoint_grid: lcm(max(64, page_size), page_size) tokens."""
    cache_chunk = max(MAMBA_CHUNK, page_size)
    return cache_chunk if cache_chunk % page_size == 0 else cache_chunk * page_size


def tracked_end(prefix: int, end: int, branching: int | None, grid: int, strategy: str) -> int | None:
    """Where an extend of positions [prefix, end) leaves the state the tree can take (None: none).

    extra_buffer: nothing when the extend is shorter than the grid (``track_mask``); the branching
    point when ``prefix < branching < end`` and grid-aligned from the prefix; else the last
    grid-aligned position from the prefix. no_buffer: the extend's end."""
    if strategy == "no_buffer":
        return end
    extend = end - prefix
    if extend < grid:
        return None
    if branching is not None and prefix < branching < end and (branching - prefix) % grid == 0:
        return branching
    return prefix + extend // grid * grid


class MambaStates:
    """Mixed into a radix cache: which block names end at a held state, and the lookup's cap."""

    def _init_states(self, strategy: str, grid: int) -> None:
        if strategy not in STRATEGIES:
            raise ValueError(f"mamba radix cache strategy {strategy!r}: must be one of {STRATEGIES}")
        self.strategy, self.grid = strategy, grid
        self.states: set = set()  # names whose prefix ends at a held state
        self._branch: dict[object, int | None] = {}  # rid -> branching point (tokens) of its last lookup
        self._prefix: dict[object, int] = {}  # rid -> where its next extend starts (tokens): SGLang's prefix_len
        self._tracked: dict[object, int] = {}  # rid -> where its last tracked state is (tokens)
        self._old_end: int | None = None  # the inserting request's prefix (names)
        self.recomputed_blocks = 0  # names a request's insert found cached already: KV computed again

    def _cap(self, req, key: tuple, n: int) -> int:
        """The lookup's end: the full KV path is walked (LRU, splits, as match_prefix does), then the
        prefix backs off to the deepest state on it; the KV end past it is the branching point."""
        full = self._walk(key, n, self._tick()).end if n > 0 else 0  # type: ignore[attr-defined]
        full += self._host_extent(key, full, n)
        j, states = full, self.states
        while j > 0 and key[j - 1] not in states:
            j -= 1
        bt = self.block_tokens  # type: ignore[attr-defined]
        self._branch[req.rid] = full * bt // self.grid * self.grid if full > j else None
        self._prefix[req.rid] = j * bt
        return j

    def _host_extent(self, key: tuple, start: int, n: int) -> int:
        return 0

    def unmatch(self, req) -> None:
        for d in (self._branch, self._prefix, self._tracked):
            d.pop(req.rid, None)
        super().unmatch(req)  # type: ignore[misc]

    def checkpoint(self, req, up_to: int | None = None) -> tuple[int, int]:
        """checkpoint_kv_cache after an extend ending at `up_to`: KV goes in up to the state the
        extend left (``tracked_end``), and that state with it."""
        end = req.num_computed_tokens if up_to is None else up_to
        at = self._track(req, end)
        old = req.cache_path or self.root  # type: ignore[attr-defined]
        self._old_end = old.end
        if at is None:
            return super().checkpoint(req, old.end * self.block_tokens)  # type: ignore[misc,attr-defined]
        out = super().checkpoint(req, at)  # type: ignore[misc]
        node = req.cache_path
        if node.end > 0 and node.end == self._named(req, at):  # type: ignore[attr-defined]
            self.states.add(node.names[-1])  # at the block boundary at or below the state
        return out

    def _track(self, req, end: int) -> int | None:
        """The extend from the request's prefix_len to `end`: where its state is, recorded."""
        rid, bt = req.rid, self.block_tokens  # type: ignore[attr-defined]
        start: int = (req.cache_path or self.root).end * bt  # type: ignore[attr-defined]
        prefix = self._prefix.get(rid, start)
        if end <= prefix:
            return self._tracked.get(rid)
        at = tracked_end(prefix, end, self._branch.get(rid), self.grid, self.strategy)
        self._prefix[rid] = end
        if at is not None:
            self._tracked[rid] = at
            if at < end:
                self._branch[rid] = None  # consumed: later extends start past it
        return self._tracked.get(rid)

    def _release_end(self, req) -> int:
        """_select_finished_checkpoint: the last state tracked — a decode step that reached a
        multiple of the track grid (lcm of the grid and mamba_track_interval, 256), else the
        prefill's — and the KV up to it; the rest is freed."""
        done = req.num_computed_tokens
        track = math.lcm(self.grid, TRACK_INTERVAL)
        last = done // track * track
        if self.strategy == "no_buffer":
            last = done
        elif last <= req.prompt_len:
            last = self._track(req, min(done, req.prompt_len)) or 0
        return last

    def release(self, req) -> int:
        """A finished request's sequence goes in to its last state, with it; a retracted one's
        lookup is dropped."""
        finished = req.num_output_tokens >= req.output_len
        old = req.cache_path or self.root  # type: ignore[attr-defined]
        self._old_end = old.end
        end = self._release_end(req) if finished else 0
        n = max(self._named(req, end), old.end)  # type: ignore[attr-defined]
        key = self._key(req, n) if n > 0 else ()  # type: ignore[attr-defined]
        out = super().release(req)  # type: ignore[misc]
        if finished and n > 0 and n == self._named(req, end):  # type: ignore[attr-defined]
            self.states.add(key[n - 1])
        for d in (self._branch, self._prefix, self._tracked):
            d.pop(req.rid, None)
        return out

    def _insert(self, key: tuple, n: int):
        cached, node = super()._insert(key, n)  # type: ignore[misc]
        if self._old_end is not None:  # a request's own insert: what it met past its prefix it computed again
            self.recomputed_blocks += max(0, cached - self._old_end)
            self._old_end = None
        if cached < n:
            self.states.difference_update(key[cached:n])  # recomputed KV: no state until tracked
        return cached, node

    def _evicted(self, names) -> None:
        super()._evicted(names)  # type: ignore[misc]
        self._drop_states(names)

    def _drop_states(self, names) -> None:
        self.states.difference_update(names)


class MambaRadixCache(MambaStates, RadixCache):
    """RadixCache for a hybrid model (MambaComponent in SGLang's unified tree)."""

    def __init__(self, block_tokens: int, engine_block_size: int, strategy: str, grid: int):
        RadixCache.__init__(self, block_tokens, engine_block_size)
        self._init_states(strategy, grid)


class MambaHiRadixCache(MambaStates, HiRadixCache):
    """HiRadixCache for a hybrid model: a state evicted from the device stays with its host copy."""

    def __init__(self, block_tokens: int, engine_block_size: int, host_blocks: int, write_policy: str, strategy, grid):
        HiRadixCache.__init__(self, block_tokens, engine_block_size, host_blocks, write_policy)
        self._init_states(strategy, grid)

    def _host_extent(self, key: tuple, start: int, n: int) -> int:
        h = 0
        while start + h < n and key[start + h] in self.host_only:
            h += 1
        return h

    def _drop_states(self, names) -> None:
        self.states.difference_update(x for x in names if x not in self.host_only)
