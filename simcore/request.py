"""A request in flight is (num_computed_tokens, num_tokens) plus what metrics need.

Token positions of a request, in order:
  [0, num_computed_tokens)           in the KV cache
  [num_computed_tokens, num_tokens)  known but not yet computed (prompt, or outputs to recompute)
num_tokens = prompt_len + num_output_tokens. A step that brings num_computed_tokens up to
num_tokens samples one new token (a non-final prefill chunk samples nothing: seed 000).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(eq=False, slots=True)
class Request:
    rid: int
    arrival_s: float
    prompt_len: int
    output_len: int  # tokens to generate (max_tokens with ignore_eos)
    block_hashes: tuple = ()
    num_computed_tokens: int = 0
    num_output_tokens: int = 0
    num_blocks: int = 0  # KV blocks (pages) held
    # metrics, seconds
    first_scheduled_s: float | None = None
    first_token_s: float | None = None
    last_token_s: float | None = None
    finish_s: float | None = None
    max_itl_s: float = 0.0
    num_preemptions: int = 0
    num_cached_tokens: int = 0  # prompt tokens served from the prefix cache
    rejected: str | None = None
    replica: int = 0
    seq: int = 0  # order in the running queue (stamped at each admission)
    cohort_tick: int = -1  # the decode cohort's tick when it joined; -1: not a member
    cache_path: list | None = None  # prefix-cache nodes matched (pinned while this request holds them)
    ignore_eos: bool = True  # runs to output_len regardless of EOS (what fixed output lengths are)
    spec_tokens: int = 0  # speculative decoding: drafts proposed for the next step (vLLM's spec_token_ids)
    spec_draws: int = 0  # speculative decoding: verify steps so far (the acceptance draws' counter)
    remote_prefill: bool = False  # PD decode side: do_remote_prefill, prompt KV to load (policies/vllm_pd.py)
    remote_decode: bool = False  # PD prefill side: do_remote_decode, blocks held after finishing until read
    kv_loading: bool = False  # PD decode side: WAITING_FOR_REMOTE_KVS
    peer: Request | None = None  # PD: the same user request on the other pool (prefill <-> decode)
    spec_placeholders: int = 0  # async scheduling + drafts: vLLM's num_output_placeholders (tokens in flight)

    @property
    def num_tokens(self) -> int:
        return self.prompt_len + self.num_output_tokens

    @property
    def remaining_tokens(self) -> int:
        """Positions known but not yet in the KV cache (1 for a decoding request)."""
        return self.num_tokens - self.num_computed_tokens

    @property
    def is_prefilling(self) -> bool:
        return self.num_computed_tokens < self.num_tokens - (1 if self.num_output_tokens else 0)

    @property
    def outputs_left(self) -> int:
        return self.output_len - self.num_output_tokens

    def reset_for_recompute(self) -> None:
        """Preemption by recompute (vLLM V1) or retraction (SGLang): the KV is gone, the tokens stay."""
        self.num_computed_tokens = 0
        self.num_blocks = 0
        self.num_preemptions += 1
        self.spec_tokens = 0  # vLLM's _preempt_request drops the drafts
        self.spec_placeholders = 0  # and the in-flight outputs' placeholders

    def check(self) -> None:
        assert 0 <= self.num_computed_tokens <= self.num_tokens + self.spec_placeholders, (
            self.rid,
            self.num_computed_tokens,
            self.num_tokens,
        )
        assert 0 <= self.num_output_tokens <= self.output_len
