"""SGLang's PrefillAdder (python/sglang/srt/managers/schedule_policy.py) and what it reads: the
budgets of one prefill batch, and the running batch in queue order (cohort members included).
The scheduler loop that drives it is policies/sglang.py."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import SchedulerState

if TYPE_CHECKING:
    from .sglang import SGLangConfig

CLIP_MAX_NEW_TOKENS = 4096
IGNORE_EOS_RESERVE_TOKENS = 1


def page_up(n: int, page: int) -> int:
    return -(-n // page) * page


class PrefillAdder:
    """schedule_policy.py, PrefillAdder, with mem_cache/prefill_budget.py, PrefillBudget: the
    budgets of one prefill batch. rem_input (max_prefill_tokens) and rem_chunk
    (chunked_prefill_size) less the mixed decode tokens; KV read as free plus evictable tokens less
    two offsets: total (every reservation, with the running requests' clipped outputs left × the
    new-token ratio, 1.0 for ignore_eos: _get_running_request_total_token_offset) and current
    (what this batch allocates now)."""

    def __init__(self, cfg: SGLangConfig, s: SchedulerState, decoding: list, ratio: float):
        mixed = len(decoding) + s.num_in_cohort if cfg.is_mixed_chunk else 0
        self.page, self.ratio, self.radix_off = cfg.page_size, ratio, cfg.disable_radix_cache
        self.rem_input = cfg.max_prefill_tokens - mixed
        self.rem_chunk = cfg.chunk - mixed if cfg.chunk is not None else None
        self.pool, self.s = s.pool, s
        total = float(mixed)
        for r in running_order(s, decoding):
            left = min(r.outputs_left, CLIP_MAX_NEW_TOKENS)
            total += left * (1.0 if r.ignore_eos else ratio)
        self.total_offset, self.current_offset = total, mixed
        self.decoding = decoding
        self.items, self.new_chunked, self.req_states = [], None, None  # type: ignore[var-annotated]

    def _kv(self) -> int:
        """Free plus evictable tokens now: read after each lookup, since a matched prefix is pinned
        and no longer evictable (SGLang checks a request under _lock_node)."""
        return self.pool.available * self.pool.block_size

    @property
    def rem_total(self) -> float:
        return self._kv() - self.total_offset

    @property
    def rem_current(self) -> float:
        return self._kv() - self.current_offset

    def _reserve(self, extend: int, max_new: int) -> None:
        """PrefillAdder._update_prefill_budget / PrefillBudget.reserve: a page of slack per request."""
        extend = page_up(extend, self.page)
        self.total_offset += extend + self.page + max_new
        self.current_offset += extend + self.page
        self.rem_input -= extend
        if self.rem_chunk is not None:
            self.rem_chunk -= extend

    def budget_state(self) -> str:
        if not (self.rem_total > 0 and self.rem_current > 0):
            return "no_token"
        if self.rem_input <= 0 or (self.rem_chunk is not None and self.rem_chunk <= 0):
            return "other"
        return "continue"

    def add_chunked(self, req) -> bool:
        """PrefillAdder.add_chunked_req (PrefillBudget.available_chunk_tokens): the chunk is what the
        chunk budget and the KV left allow, a whole chunk when no KV is left (it must progress).
        True when the request is still truncated."""
        rem = min(self.rem_chunk, int(self.rem_total))  # type: ignore[type-var]
        if rem <= 0:  # type: ignore[operator]
            rem = self.rem_chunk
        left = req.remaining_tokens
        n = min(left, rem)
        self.items.append((req, n))
        self._reserve(n, min(req.output_len, CLIP_MAX_NEW_TOKENS) if n == left else 0)
        return n < left

    def add_one(self, req) -> str:
        """PrefillAdder.add_one_req and _select_prefill_admission."""
        if req.ignore_eos and self.radix_off:  # getattr(tree_cache, 'disable', True)
            return self._add_ignore_eos(req)
        extend = req.remaining_tokens
        max_new = min(max(req.outputs_left, 0), CLIP_MAX_NEW_TOKENS)
        if not extend + max_new + self.page < self.rem_total:
            return "no_token"
        tokens = page_up(extend, self.page)
        if self.rem_chunk is None and self.items and tokens >= self.rem_input:
            return "other"  # without chunking, the first request may exceed the input cap
        if self.rem_chunk is not None and tokens > self.rem_chunk:
            trunc = self.rem_chunk // self.page * self.page
            prefix = req.num_computed_tokens
            trunc = (prefix + trunc) // self.page * self.page - prefix
            if trunc <= 0:
                return "other"
            self.items.append((req, trunc))
            self.new_chunked = req
            self._reserve(trunc, 0)
        else:
            self.items.append((req, extend))
            self._reserve(extend, min(req.output_len, CLIP_MAX_NEW_TOKENS))
        return self.budget_state()

    def _state_of(self, r):
        left = r.output_len * (1.0 if r.ignore_eos else self.ratio) - r.num_output_tokens
        return None if left <= 0 else (left, r.prompt_len + r.num_output_tokens)

    def _add_ignore_eos(self, req) -> str:
        """PrefillAdder.add_one_req_ignore_eos (radix cache disabled): the prompt fits now, and the
        requests sorted by tokens left can all run to the end in turn, each freeing what it holds
        (IGNORE_EOS_RESERVE_TOKENS a request to spare); no input cap; a chunk is cut exactly at
        rem_chunk_tokens."""
        extend = req.remaining_tokens
        paged = page_up(extend, self.page) + self.page
        if paged > min(self.rem_current, self.rem_total):
            return "no_token"
        if self.req_states is None:
            states = [
                self._state_of(r) for r in [req] + running_order(self.s, self.decoding) + [r for r, _ in self.items]
            ]
            self.req_states = sorted((x for x in states if x is not None), key=lambda x: x[0])  # type: ignore[assignment]
        else:
            x = self._state_of(req)
            if x is not None:
                st, i = self.req_states, 0
                for i in range(len(st)):
                    if x[0] <= st[i][0]:
                        break
                st.insert(i, x)
        cur, freed, n = self.rem_current - paged, 0, len(self.req_states)  # type: ignore[arg-type]
        for i, (left, occupied) in enumerate(self.req_states):  # type: ignore[arg-type, var-annotated]
            bs = n - i
            if cur + freed - left * bs <= IGNORE_EOS_RESERVE_TOKENS * bs:
                return "no_token"
            freed += occupied
        if self.rem_chunk is None or extend <= self.rem_chunk:
            self.items.append((req, extend))
            self._reserve(extend, min(req.output_len, CLIP_MAX_NEW_TOKENS))
        else:
            if self.rem_chunk <= 0 or self.new_chunked is not None:
                # SGLang 0.5.23 would chunk this request too, after a page-floored chunk of another
                # left budget over, and then track only this one: the other samples from a
                # truncated prompt. One chunked request per batch, as the scheduler assumes.
                return "other"
            self.items.append((req, self.rem_chunk))
            self.new_chunked = req
            self._reserve(self.rem_chunk, 0)
        return self.budget_state()


def running_order(s: SchedulerState, decoding: list) -> list:
    """The running batch in queue order (cohort members included, with their current state)."""
    if not s.num_in_cohort:
        return decoding
    c = s.cohort
    members = list(c.members)  # type: ignore[union-attr]
    view = [_MemberView(r, c) for r in members]
    return sorted(list(decoding) + view, key=lambda r: r.seq)


class _MemberView:
    """A cohort member as the adder reads it (outputs left now, without materializing it)."""

    __slots__ = ("seq", "ignore_eos", "output_len", "num_output_tokens", "prompt_len")

    def __init__(self, r, c):
        self.seq, self.ignore_eos, self.output_len, self.prompt_len = r.seq, r.ignore_eos, r.output_len, r.prompt_len
        self.num_output_tokens = r.num_output_tokens + c.tick - r.cohort_tick

    @property
    def outputs_left(self) -> int:
        return self.output_len - self.num_output_tokens


def reject_reason(cfg, req, pool) -> str | None:
    """SGLang serves at most max_req_len = max_total_num_tokens − 1 positions per request: it
    refuses inputs of max_req_len − 5 tokens or more and clips max_new_tokens to max_req_len −
    input_len − 1 (scheduler.py); the simulator keeps output lengths as given, so a request that
    SGLang would cut short is rejected too."""
    max_req_len = pool.total * pool.block_size - 1
    if req.prompt_len >= max_req_len - 5:
        return f"prompt_len={req.prompt_len} is at least SGLang's max_req_input_len={max_req_len - 5} (max_total_num_tokens-6)"
    limit = max_req_len - 1
    if req.prompt_len + req.output_len > limit:
        return (
            f"prompt_len+output_len={req.prompt_len + req.output_len} exceeds max_total_num_tokens-2={limit} "
            "(SGLang would clip max_new_tokens)"
        )
    return _never_admitted(cfg, req, pool.total * pool.block_size)


def _never_admitted(cfg, req, total: int) -> str | None:
    """A request PrefillAdder refuses even on an idle engine waits forever in SGLang; here it is
    rejected. add_one_req needs input + clipped max_new_tokens + a page < the pool;
    add_one_req_ignore_eos (radix cache off) the whole paged input plus a page, with its
    outputs and IGNORE_EOS_RESERVE_TOKENS to spare."""
    page = cfg.page_size
    if req.ignore_eos and cfg.disable_radix_cache:
        paged = page_up(req.prompt_len, page) + page
        if paged > total or total - paged - req.output_len <= IGNORE_EOS_RESERVE_TOKENS:
            return (
                f"prompt_len={req.prompt_len}, output_len={req.output_len}: SGLang never admits it "
                f"(add_one_req_ignore_eos needs {paged + req.output_len + IGNORE_EOS_RESERVE_TOKENS + 1} "
                f"of max_total_num_tokens={total})"
            )
    elif req.prompt_len + min(req.output_len, CLIP_MAX_NEW_TOKENS) + page >= total:
        return (
            f"prompt_len={req.prompt_len}, output_len={req.output_len}: SGLang never admits it "
            f"(add_one_req needs fewer than max_total_num_tokens={total} with a page)"
        )
    return None
