"""SGLang's speculative decoding, EAGLE / EAGLE3 / NEXTN (spec v2), mixed into SGLangScheduler.

SGLang's side (sglang/srt, 0.5.23):

* Server args (arg_groups/speculative_hook.py, ``_handle_eagle_family``): NEXTN is EAGLE;
  max_running_requests becomes 48 when not given; the overlap scheduler stays on; mixed chunk
  stays on for EAGLE/EAGLE3 (``supports_mixed_chunk``); with no --speculative-num-steps the three
  parameters are chosen by ``_auto_choose_speculative_params``: (5, 4, 8) for LlamaForCausalLM
  and Grok, else (3, 1, 4) (here: a model whose name has "llama" or "grok"); topk 1 forces
  num_draft_tokens = num_steps + 1.
* KV (mem_cache/allocation_sizing.py, ``get_alloc_len_per_decode``): a step's width L =
  max(steps·topk, draft_tokens) at page 1 or topk 1, else max(⌈(ps − 1 + steps)/ps⌉·ps·topk,
  draft_tokens); the reserve is 2L (``get_alloc_reserve_per_decode``). Each request has committed
  C (kv_committed_len: num_computed_tokens here) and allocated A (kv_allocated_len: its pages
  here). Before a decode A ← max(A, ⌈C + 2L⌉_page) (eagle_utils.eagle_prepare_for_decode,
  allocation.alloc_for_spec_decode, evicting the tree first); check_decode_mem needs
  Σ ⌈max(A, C + 2L)⌉ − ⌈A⌉ (ScheduleBatch._new_tokens_required_next_decode_spec_v2). Rejected
  slots are not freed per step: A − C stays with the request until it finishes or is retracted
  (mem_cache/common.py, release_kv_cache → _release_overallocated_kv_indices).
* A verify step runs draft_tokens query tokens a request and commits a + 1 (a accepted drafts,
  at most num_steps): C += a + 1; the client gets min(a + 1, max_new − outputs)
  (Req.update_finish_state(n)); a finished request's tree insert keeps min(C, prompt +
  max_new) tokens (Req.owned_kv_len). In a mixed step the running requests decode one token
  (C += 1) but get the 2L allocation all the same. The first decode after a prefill is a verify.
* Radix cache (mem_cache/radix_cache.py, is_eagle): keys are bigrams, so N tokens cache and match
  N − 1 (page-aligned down): ``EagleRadixCache`` below.
* Overlap (Scheduler._reqs_finishing_inflight): a request in the unprocessed batch whose
  len(output_ids) + 1 ≥ max_new is left out of the next batch; one that finishes only through
  accepted drafts is not, so it rides one more verify whose result is dropped.

Acceptance is chunksim's own model, the one vLLM's runs take (policies/vllm_spec.py): per draft
position α (--spec-acceptance), a = min(num_steps, ⌊ln u / ln α⌋), one counter-based uniform per
(seed, request, verify step). A verify is priced as draft_tokens query tokens a request plus the
drafter of costmodel/speculative.py with k = num_steps.

Not modelled: SGLang retracting a rider (its result is dropped and it is re-queued; here it has
finished when its step was applied, and riders are never victims); the draft model's own KV pool.
The conformance table and its known divergences: docs/conformance.md, "Speculative decoding (SGLang)".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from costmodel.errors import require
from simcore.radix_cache import RadixCache

from .vllm_spec import DEFAULT_ACCEPTANCE, SpecDecode

ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN")
NOT_MODELLED = ("STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO", "FROZEN_KV_MTP")
AUTO_LARGE = (5, 4, 8)  # _auto_choose_speculative_params: LlamaForCausalLM, Grok1
AUTO_SMALL = (3, 1, 4)  # every other architecture
SPEC_MAX_RUNNING = 48  # _handle_eagle_family: max_running_requests when not given


def auto_params(model_name: str) -> tuple[int, int, int]:
    """_auto_choose_speculative_params by architecture, told here by the model's name."""
    n = model_name.lower()
    return AUTO_LARGE if "llama" in n or "grok" in n else AUTO_SMALL


def sglang_spec_defaults(flags: dict, model_name: str) -> dict:
    """The server args _handle_eagle_family resolves: max_running_requests 48 when not given, the
    auto parameters when none of the three is given (by the model's architecture; a partial set is
    refused by resolve_spec, which SGLangConfig runs)."""
    out = dict(flags)
    out.setdefault("max_running_requests", SPEC_MAX_RUNNING)
    keys = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
    if all(out.get(k) is None for k in keys):
        steps, topk, draft = auto_params(model_name)
        out.update(speculative_num_steps=steps, speculative_eagle_topk=topk, speculative_num_draft_tokens=draft)
    return out


@dataclass(frozen=True)
class SGLangSpec:
    """The resolved speculative args: algorithm (EAGLE or EAGLE3), steps, topk, draft tokens."""

    algorithm: str
    num_steps: int
    topk: int
    num_draft_tokens: int
    acceptance: float = DEFAULT_ACCEPTANCE
    seed: int = 0

    def __post_init__(self):
        require(self.algorithm in ("EAGLE", "EAGLE3"), "speculative_algorithm", self.algorithm, "EAGLE or EAGLE3")
        require(self.num_steps >= 1, "speculative_num_steps", self.num_steps, "must be a positive integer")
        require(self.topk >= 1, "speculative_eagle_topk", self.topk, "must be a positive integer")
        require(
            self.num_draft_tokens >= 2,
            "speculative_num_draft_tokens",
            self.num_draft_tokens,
            "must be at least 2",
        )
        require(
            self.topk > 1 or self.num_draft_tokens == self.num_steps + 1,
            "speculative_num_draft_tokens",
            self.num_draft_tokens,
            "must be num_steps + 1 with topk 1",
        )
        require(0 <= self.acceptance <= 1, "spec_acceptance", self.acceptance, "must be in [0, 1]")

    @property
    def method(self) -> str:
        return "eagle3" if self.algorithm == "EAGLE3" else "eagle"

    def alloc_len(self, page_size: int) -> int:
        """allocation_sizing.get_alloc_len_per_decode."""
        s, k, d = self.num_steps, self.topk, self.num_draft_tokens
        if page_size == 1 or k == 1:
            return max(s * k, d)
        pages = (page_size - 1 + s + page_size - 1) // page_size
        return max(pages * page_size * k, d)

    def reserve(self, page_size: int) -> int:
        """get_alloc_reserve_per_decode: 2L."""
        return 2 * self.alloc_len(page_size)

    def draws(self) -> SpecDecode:
        return SpecDecode(self.method, self.num_steps, self.acceptance, self.seed)


def resolve_spec(
    algorithm: str | None,
    num_steps: int | None,
    topk: int | None,
    num_draft_tokens: int | None,
    acceptance: float | None = None,
    seed: int = 0,
    model_name: str = "",
) -> SGLangSpec | None:
    """_handle_eagle_family's resolution; InputError (a ValueError) for what is not modelled."""
    if not algorithm:
        require(
            num_steps is None and topk is None and num_draft_tokens is None,
            "speculative_algorithm",
            algorithm,
            "--speculative-num-steps / -eagle-topk / -num-draft-tokens need --speculative-algorithm",
        )
        return None
    algo = str(algorithm).upper()
    require(
        algo in ALGORITHMS,
        "--speculative-algorithm",
        algorithm,
        f"not modelled (modelled: {', '.join(ALGORITHMS)}; {', '.join(NOT_MODELLED)} are not)",
    )
    algo = "EAGLE" if algo == "NEXTN" else algo
    if num_steps is None:
        require(
            topk is None and num_draft_tokens is None,
            "speculative_num_steps",
            num_steps,
            "SGLang asserts topk and num_draft_tokens are unset when num_steps is (auto parameters)",
        )
        num_steps, topk, num_draft_tokens = auto_params(model_name)
    require(topk is not None, "speculative_eagle_topk", topk, "must be given with --speculative-num-steps")
    assert topk is not None
    if topk == 1:
        num_draft_tokens = num_steps + 1  # _handle_eagle_family: adjusted, with a warning
    require(
        num_draft_tokens is not None,
        "speculative_num_draft_tokens",
        num_draft_tokens,
        "must be given with topk > 1",
    )
    assert num_draft_tokens is not None
    a = DEFAULT_ACCEPTANCE if acceptance is None else float(acceptance)
    return SGLangSpec(algo, int(num_steps), int(topk), int(num_draft_tokens), a, int(seed or 0))


class EagleRadixCache(RadixCache):
    """RadixCache with is_eagle: keys are bigrams, so a sequence of N tokens caches and matches its
    first N − 1 (``RadixKey.maybe_to_bigram_view``): every length the tree reads is one shorter."""

    owned: Any = None  # the scheduler's release_end: a finished request's owned_kv_len

    def _named(self, req, tokens: int) -> int:
        return super()._named(req, max(0, tokens - 1))

    def _release_end(self, req) -> int:
        return self.owned(req) if self.owned is not None else req.num_computed_tokens

    def _match_limit(self, req) -> int:
        """RadixCache.match_prefix of the request's tokens but the last, as bigrams: N − 2 positions
        at most (RadixCache.match: N − 1)."""
        return max(0, req.num_tokens - 2) // self.block_tokens


class SpecDriving:
    """Needs SGLangScheduler's cfg. Per-request state is kept here (Request has slots)."""

    if TYPE_CHECKING:
        cfg: Any
        _cache: Any
        _sampling: list
        _out_at: list
        _lagged: list

    spec: SGLangSpec | None = None
    _riders: list
    _verified: dict
    _c_lag: dict

    @property
    def needs_stepping(self) -> bool:
        return self.spec is not None or super().needs_stepping  # type: ignore[misc]

    def step_cost(self, cm):
        return self.spec_step_cost(super().step_cost(cm))

    def new_prefix_cache(self, block_tokens: int, engine_block_size: int):
        if self.spec is None:
            return super().new_prefix_cache(block_tokens, engine_block_size)  # type: ignore[misc]
        cache = EagleRadixCache(block_tokens, engine_block_size)  # RadixCache(is_eagle=True): bigram keys
        cache.owned = self.release_end
        self._cache = cache
        return cache

    def split_riders(self, finishing: list) -> list:
        """Scheduler._reqs_finishing_inflight under spec: of the requests finished in flight, those
        with len(output_ids) + 1 >= max_new are left out; the rest (finished by accepted drafts)
        ride one more verify (``_riders``, read by SGLangScheduler._decoding)."""
        if self.spec is None:
            return finishing  # (sync: _riders stays empty)
        prev, self._verified = self._verified, {}
        self._c_lag = {r: k for r, k in zip(self._sampling, self._lagged) if r in prev}
        self._riders = [r for r in finishing if r.num_output_tokens + 1 < r.output_len]
        return [r for r in finishing if r.num_output_tokens + 1 >= r.output_len]

    def rides_finished(self, s) -> bool:
        """Whether a held finished request would ride the next verify (split_riders), so that an
        otherwise idle replica still runs that step, as event_loop_overlap does."""
        if self.spec is None or self.cfg.disable_overlap_schedule:
            return False
        before = {id(r): o for r, o in zip(self._sampling, self._out_at)}
        return any(before.get(id(r), r.num_output_tokens) + 1 < r.output_len for r in s.finished)

    def spec_decodes(self, s, plan, decoding):
        """The decodes of a step: each prepared (C + 2L), then a verify of num_draft_tokens, or in a
        mixed step one token (ScheduleBatch.mix_with_running)."""
        self.spec_prepare(s, decoding)
        self._verified.update(dict.fromkeys(decoding, True))
        mixed = bool(plan.items)
        d = self.spec.num_draft_tokens
        if not mixed:
            plan.spec = {r: d - 1 for r in decoding}
        plan.items.extend((r, 1 if mixed else d) for r in decoding)
        return plan

    def _init_spec(self) -> None:
        self._riders = []  # overlap + spec: finished in flight by accepted drafts, riding one more verify
        self._verified = {}  # overlap: the requests the last plan decoded (their commit is in flight); ordered
        self._c_lag = {}  # overlap: request -> tokens its in-flight verify commits (kv_committed_len lags by them)
        cfg = self.cfg
        self.spec = resolve_spec(
            cfg.speculative_algorithm,
            cfg.speculative_num_steps,
            cfg.speculative_eagle_topk,
            cfg.speculative_num_draft_tokens,
            cfg.spec_acceptance,
            cfg.spec_seed,
        )
        self._draws = self.spec.draws() if self.spec else None
        self._reserve = self.spec.reserve(cfg.page_size) if self.spec else 0
        self._committed: dict = {}  # finished request -> its untrimmed C (owned_kv_len's first term)

    def spec_step_cost(self, cm):
        from costmodel.speculative import with_drafter

        return with_drafter(cm, self.spec.method, self.spec.num_steps) if self.spec else cm

    def accept(self, req, drafts: int) -> int:
        """Accepted drafts of a verify (at most num_steps); the untrimmed C is kept for the tree
        insert when this verify finishes the request (owned_kv_len = min(C, prompt + max_new))."""
        if drafts <= 0 or self._draws is None:
            return 0
        req.spec_draws += 1
        a = self._draws.accepted(req.rid, req.spec_draws - 1, self.spec.num_steps)  # type: ignore[union-attr]
        if req.num_output_tokens + 1 + a >= req.output_len and getattr(self, "_cache", None) is not None:
            c = req.num_computed_tokens - (drafts - a)  # C + a + 1
            self._committed[req] = min(c, req.prompt_len + req.output_len)
        return a

    def spec_decode_need(self, pool, decoding) -> int:
        """_new_tokens_required_next_decode_spec_v2: Σ ⌈max(A, C + 2L)⌉ − ⌈A⌉, in tokens."""
        bs, w, lag = pool.block_size, self._reserve, self._c_lag
        n = 0
        for r in decoding:
            n += max(0, -(-(r.num_computed_tokens - lag.get(r, 0) + w) // bs) - r.num_blocks - pool.shared(r))
        return n * bs

    def spec_prepare(self, s, decoding) -> None:
        """eagle_prepare_for_decode: evict (alloc_for_spec_decode), then A ← max(A, ⌈C + 2L⌉)."""
        from .sglang_radix import evict_for

        need = self.spec_decode_need(s.pool, decoding)
        if need > 0:
            ps = self.cfg.page_size
            evict_for(s.pool, need + (len(decoding) * ps if ps > 1 else 0))
        for r in decoding:
            ok = s.pool.grow(r, r.num_computed_tokens - self._c_lag.get(r, 0) + self._reserve)
            assert ok, "a verify's KV was counted free"

    def release_end(self, req) -> int:
        """owned_kv_len of a finished request."""
        c = self._committed.pop(req, None)
        return req.num_computed_tokens if c is None else c
