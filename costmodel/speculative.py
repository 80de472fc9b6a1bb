"""What a speculative-decoding step costs: the target's verify pass plus the drafter.

The verify pass needs nothing new: the scheduler already gives each decode 1 + k query tokens over
its context (policies/vllm_spec.py), and ``step_time(q_lens, kv_lens)`` prices that shape.

The drafter, per step, by method (no measurement of it backs these; they are stated shapes):

* ngram: the proposer matches n-grams on the host (vLLM's NgramProposer, numba on CPU), no GPU
  pass: priced 0. Its CPU time overlaps nothing in the sync scheduler and is not priced either.
* EAGLE / EAGLE-3 / MTP (one draft layer, the target's width): k draft passes per step, the first
  over the step's own tokens (the drafter reads every scheduled position's hidden state), the
  other k − 1 over one token per request. The layer part of each pass is priced as the target's
  pass of the same shape scaled by ``draft_layers / L`` (L: the target's decoder layers;
  draft_layers = 1); each pass also runs the drafter's LM head over one row per request, which a
  1/L share cannot stand for (a 128k-vocab head is ~6 % of an 8B model's weights, 1/L ≈ 3 %):

      drafter = (1/L) · [T(q_lens, kv_lens) + (k − 1) · T([1] · n, kv_lens + q_lens)]
                + k · (V_d/V − 1/L) · LM(n)

  with T the target's step time, n the step's requests, LM(n) the target's LM-head operator for n
  rows (``breakdown``) and V_d/V the drafter's vocabulary over the target's: 1 for EAGLE and MTP
  (vLLM's EAGLE/MTP drafters share the target's lm_head), 32000/V for EAGLE-3 (its reduced
  ``draft_vocab_size``, e.g. yuhuili/EAGLE3-LLaMA3.1-Instruct-8B's config.json). The 1/L share
  also scales host time and the embedding by 1/L; EAGLE's fc fusion layer (2H or 3H → H) is not
  priced (< 1 % of an 8B step at batch 1).

A cost model without a model's shape (the conformance drivers' unit clock) is left as it is.
"""

from __future__ import annotations

ON_GPU = ("eagle", "eagle3", "mtp")
DRAFT_LAYERS = 1
EAGLE3_DRAFT_VOCAB = 32000  # draft_vocab_size of the EAGLE-3 drafts for Llama 3.x (see the docstring)


class WithDrafter:
    """A cost model whose ``step_time`` adds the drafter's passes; everything else is the base's."""

    def __init__(self, base, method: str, k: int):
        self.base, self.method, self.k = base, method, k
        self.frac = DRAFT_LAYERS / base.model.L
        vocab = base.model.vocab
        self.vocab_ratio = min(1.0, EAGLE3_DRAFT_VOCAB / vocab) if method == "eagle3" else 1.0
        self._lm_head: dict[int, float] = {}  # n rows -> the target's LM-head seconds

    def __getattr__(self, name):
        return getattr(self.base, name)

    def lm_head_s(self, n: int) -> float:
        """The target's LM-head operator for n rows (one per request), as its breakdown prices it."""
        t = self._lm_head.get(n)
        if t is None:
            base = self.base
            t = self._lm_head[n] = base.breakdown(base.shape([1] * n, [1] * n)).op("lm_head").time_s
        return t

    def draft_time(self, q_lens, kv_lens) -> float:
        if self.method not in ON_GPU or not q_lens:
            return 0.0
        base, n = self.base, len(q_lens)
        t = base.step_time(q_lens, kv_lens)
        if self.k > 1:
            ctx = [k + q for q, k in zip(q_lens, kv_lens)]
            t += (self.k - 1) * base.step_time([1] * n, ctx)
        return self.frac * t + self.k * (self.vocab_ratio - self.frac) * self.lm_head_s(n)

    def step_time(self, q_lens, kv_lens, *args, **kwargs) -> float:
        return self.base.step_time(q_lens, kv_lens, *args, **kwargs) + self.draft_time(q_lens, kv_lens)


def with_drafter(cm, method: str, k: int):
    """`cm` pricing the drafter of `method` with `k` drafts too (itself for ngram or a shapeless cost model)."""
    if method not in ON_GPU or getattr(cm, "model", None) is None:
        return cm
    return WithDrafter(cm, method, k)
