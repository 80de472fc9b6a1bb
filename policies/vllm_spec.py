"""Speculative decoding as vLLM 0.33.0's V1 scheduler schedules it (``Scheduler`` and ``AsyncScheduler``).

vLLM's side (vllm/v1/core/sched/scheduler.py, vllm/config/speculative.py, vllm/config/vllm.py):

* ``--speculative-config`` is a JSON ``SpeculativeConfig``; ``num_speculative_tokens`` (k) drafts
  per request per step. After a step, the drafter proposes k drafts for every scheduled request
  that is not a prefill chunk (``update_draft_token_ids``: drafts after a partial chunk are
  dropped); a preempted request loses its drafts (``_preempt_request``).
* schedule(): a running request asks for ``num_tokens_with_spec - num_computed_tokens`` = 1 + k
  tokens, cut by long_prefill_token_threshold, the token budget and ``max_model_len −
  num_computed_tokens − 1`` (0 → skipped, not a break); its scheduled drafts are the tokens past
  ``num_tokens``. ``allocate_slots(..., num_lookahead_tokens)`` reserves blocks for
  ``num_computed + new + lookahead`` positions (capped at max_model_len), lookahead = k for
  EAGLE/EAGLE-3/MTP and 0 for n-gram (``VllmConfig.num_lookahead_tokens``); admission
  (``full_sequence_must_fit``) checks the prompt alone.
* A waiting request with exactly one token to compute, admitted when the running loop scheduled
  no prefill chunk and (something is scheduled or it has computed tokens), is padded to 1 + k
  with k placeholder drafts (-1, never accepted) when 1 + k + 1 fits max_model_len; if 1 + k
  exceeds the budget left, the waiting loop stops ("Prefer to not schedule than schedule
  un-padded").
* update_from_output: a request that sampled ``1 + a`` tokens (a accepted drafts) rolls
  ``num_computed_tokens`` back by ``drafts − a``; at max_tokens the extra tokens are trimmed
  (``_update_request_with_output``: num_computed_tokens −= the trimmed count).

Async scheduling (``AsyncScheduler``, vLLM's default): schedule(n+1) runs before step n's output
is processed. ``_update_after_schedule`` gives a sampling request ``num_output_placeholders`` +=
1 + drafts and k placeholder drafts (-1), so schedule(n+1) asks for 1 + k again over a
num_computed_tokens that counts step n's drafts as accepted; update_from_output(n) then rolls back
both by the rejected drafts. schedule() skips a request that step n's output will finish even with
every draft rejected (computed + 2 − placeholders ≥ prompt + max_tokens); one that finishes only
through accepted drafts is scheduled once more, and that step's output is dropped. A request
preempted by schedule(n+1) still receives step n's tokens (stale: its counters stay reset).

The acceptance model is chunksim's own (vLLM has no such flag): each draft position is accepted
with probability α independently until the first rejection, so a = min(k, ⌊ln u / ln α⌋) for one
uniform u per (seed, request, verify step): P(a ≥ j) = α^j. The uniform comes from a
counter-based hash (splitmix64) of (seed, request id, that request's verify count), so a draw
does not depend on what other requests did: same seed → same draws, in the reference loop and
in the conformance driver's fake model output alike.

Default α = 0.65: yuhuili/EAGLE3-LLaMA3.1-Instruct-8B on MT-bench has mean acceptance length
τ = 2.77 at K = 7, temperature 1 (table "Comparison with Public Checkpoints", model card of
nebius/EAGLE3-Llama-3.3-70B-Instruct on Hugging Face; a third party's measurement, not vLLM's);
τ = (1 − α^(K+1)) / (1 − α) gives α ≈ 0.65. It is a chain-drafting, per-position figure; pass
--spec-acceptance for your drafter and data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from costmodel.errors import InputError, json_object, require

DEFAULT_ACCEPTANCE = 0.65  # see the module docstring for its source
MODELLED = ("ngram", "eagle", "eagle3", "mtp")
LOOKAHEAD = ("eagle", "eagle3", "mtp")  # VllmConfig.num_lookahead_tokens = k (use_eagle()); ngram: 0
# SpeculativeConfig fields that do not change what the scheduler does (or its step's shape here)
PASSIVE_KEYS = frozenset(
    {
        "model",
        "prompt_lookup_max",
        "prompt_lookup_min",
        "draft_tensor_parallel_size",
        "quantization",
        "revision",
        "code_revision",
        "max_model_len",
        "disable_padded_drafter_batch",
        "rejection_sample_method",
        "draft_sample_method",
    }
)
REFUSED_KEYS = {
    "parallel_drafting": "parallel drafting (P-EAGLE/PARD) adds draft slots to the budget",
    "num_speculative_tokens_per_batch_size": "dynamic speculative decoding varies k by batch size",
}
_M = (1 << 64) - 1


@dataclass(frozen=True)
class SpecDecode:
    """The modelled part of a SpeculativeConfig, and chunksim's acceptance model."""

    method: str
    k: int  # num_speculative_tokens
    acceptance: float = DEFAULT_ACCEPTANCE  # α, per draft position
    seed: int = 0

    def __post_init__(self):
        require(self.method in MODELLED, "--speculative-config method", self.method, _not_modelled())
        require(self.k >= 1, "--speculative-config num_speculative_tokens", self.k, "must be a positive integer")
        require(0 <= self.acceptance <= 1, "--spec-acceptance", self.acceptance, "must be in [0, 1]")

    @property
    def lookahead(self) -> int:
        """Extra KV slots allocate_slots reserves past the scheduled tokens (the drafter's own KV)."""
        return self.k if self.method in LOOKAHEAD else 0

    def accepted(self, rid: int, draw: int, drafts: int) -> int:
        """Accepted drafts of `drafts` verified for request `rid` at its `draw`-th verify step."""
        a = self.acceptance
        if a <= 0:
            return 0
        if a >= 1:
            return drafts
        u = ((_mix(_mix(_mix(self.seed & _M) ^ rid) ^ draw) >> 11) + 1) / 9007199254740992.0  # (0, 1]
        return min(drafts, int(math.log(u) / math.log(a)))


def _mix(x: int) -> int:
    """splitmix64's finaliser (Steele, Lea & Flood 2014)."""
    x = (x + 0x9E3779B97F4A7C15) & _M
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M
    return x ^ (x >> 31)


def _not_modelled() -> str:
    return (
        f"not modelled (modelled methods: {', '.join(MODELLED)}; draft_model, suffix, ngram_gpu, dflash, "
        "dspark, extract_hidden_states and custom_class are not)"
    )


def parse_speculative_config(text: str, acceptance: float | None = None, seed: int = 0) -> SpecDecode | None:
    """vLLM's ``--speculative-config`` JSON as a SpecDecode (None for an empty value); InputError
    for what it does not model, never a silent drop."""
    where = "--speculative-config"
    d = json_object(where, text)
    if d is None:
        return None
    for key, why in REFUSED_KEYS.items():
        if d.get(key):
            raise InputError(f"{where} {key}", d[key], f"not modelled: {why}")
    unknown = sorted(set(d) - PASSIVE_KEYS - {"method", "num_speculative_tokens"} - set(REFUSED_KEYS))
    require(not unknown, where, unknown, "fields chunksim does not model (it refuses rather than drop them)")
    method = d.get("method")
    if method is None:  # SpeculativeConfig.__post_init__: inferred from `model`
        method = "ngram" if d.get("model") in ("ngram", "[ngram]") else "draft_model"
    method = "ngram" if method == "[ngram]" else str(method)
    require(method in MODELLED, f"{where} method", method, _not_modelled())
    k = d.get("num_speculative_tokens")
    require(
        isinstance(k, int) and not isinstance(k, bool) and k >= 1,
        f"{where} num_speculative_tokens",
        k,
        "must be given, a positive integer (chunksim does not read the draft model's config)",
    )
    return SpecDecode(method, k, DEFAULT_ACCEPTANCE if acceptance is None else float(acceptance), seed)


def resolve_async(spec: SpecDecode | None, async_scheduling: bool | None) -> bool:
    """VllmConfig's async_scheduling as vLLM 0.33 resolves it on a GPU (config/vllm.py): None → on.
    With drafts it stays on: Model Runner V2 (the default where Triton is installed,
    ``VllmConfig.use_v2_model_runner``) runs every modelled method asynchronously; only the V1 runner
    turns it off for ngram (``v1_async_sched_incompat``)."""
    del spec  # every modelled method resolves alike
    return True if async_scheduling is None else bool(async_scheduling)


class SpecHooks:
    """What VLLMScheduler (policies/vllm.py) answers for speculative decoding: the replica steps
    (``needs_stepping``), prices the drafter (``step_cost``), asks for accepted drafts (``accept``)
    and gives every request that sampled ``num_spec_tokens`` drafts for its next step. Under async
    scheduling the replica processes step n's output after schedule(n+1) (``defers_output``)."""

    spec: SpecDecode | None = None
    num_spec_tokens = 0
    defers_output = False

    def init_spec(self, spec: SpecDecode | None, async_scheduling: bool = False) -> None:
        self.spec = spec
        self.num_spec_tokens = spec.k if spec else 0
        self.defers_output = spec is not None and async_scheduling
        self._chunking: dict = {}  # requests whose last step was a partial prefill (is_prefill_chunk); a dict: ordered

    @property
    def needs_stepping(self) -> bool:
        return self.spec is not None  # the fast paths do not know drafts: the reference loop steps

    def step_cost(self, cm):
        from costmodel.speculative import with_drafter

        return with_drafter(cm, self.spec.method, self.spec.k) if self.spec else cm

    def accept(self, req, drafts: int) -> int:
        """update_from_output's accepted drafts: 0 for placeholders (drafts < 0), else one draw."""
        if drafts <= 0 or self.spec is None:
            return 0
        req.spec_draws += 1
        return self.spec.accepted(req.rid, req.spec_draws - 1, drafts)

    @staticmethod
    def certain_to_finish(req) -> bool:
        """Async: the step in flight reaches max_tokens even if all its drafts are rejected
        (Scheduler.schedule: computed + 2 − placeholders ≥ prompt + max_tokens), so it is skipped."""
        return req.num_computed_tokens + 2 - req.spec_placeholders >= req.prompt_len + req.output_len

    def after_schedule(self, plan) -> None:
        """Request.is_prefill_chunk as _update_after_schedule sets it; async (AsyncScheduler's
        override): a sampling request gets 1 + drafts output placeholders and k placeholder drafts."""
        lag = self.defers_output
        if lag:
            plan.sampling = []
        for r, n in plan.items:
            if r.num_computed_tokens + n < r.num_tokens + r.spec_placeholders:
                self._chunking[r] = True
                continue
            self._chunking.pop(r, None)
            if lag:
                r.spec_placeholders += 1 + abs(plan.spec.get(r, 0))
                r.spec_tokens = self.num_spec_tokens
                plan.sampling.append(r)
