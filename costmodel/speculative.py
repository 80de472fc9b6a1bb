"""What a speculative-decoding step costs: the target's verify pass plus the drafter.

The verify pass needs nothing new: the scheduler already gives each decode 1 + k query tokens over
its context (policies/vllm_spec.py), and ``step_time(q_lens, kv_lens)`` prices that shape.

The drafter, per step, by method (no measurement of it backs these; they are stated shapes):

* ngram: the proposer matches n-grams on the host (vLLM's NgramProposer, numba on CPU), no GPU
  pass: priced 0. Its CPU time overlaps nothing in the sync scheduler and is not priced either.
* EAGLE / EAGLE-3 / MTP (one draft layer, the target's width): k draft passes per step, the first
  over the step's own tokens (the drafter reads every scheduled position's hidden state), the
  other k − 1 over one token per request. Each is priced as the target's pass of the same shape
  scaled by ``draft_layers / L`` (L: the target's decoder layers; draft_layers = 1):

      drafter = (1 / L) · [step_time(q_lens, kv_lens) + (k − 1) · step_time([1] · n, kv_lens + q_lens)]

  with n the step's requests. The scaling also scales the non-layer parts (LM head, embedding,
  host time) by 1/L, which underprices the drafter's own LM head (EAGLE runs one per draft token;
  EAGLE-3's is a reduced vocabulary); no measurement here says by how much.

A cost model without a model's shape (the conformance drivers' unit clock) is left as it is.
"""

from __future__ import annotations

ON_GPU = ("eagle", "eagle3", "mtp")
DRAFT_LAYERS = 1


class WithDrafter:
    """A cost model whose ``step_time`` adds the drafter's passes; everything else is the base's."""

    def __init__(self, base, method: str, k: int):
        self.base, self.method, self.k = base, method, k
        self.frac = DRAFT_LAYERS / base.model.L

    def __getattr__(self, name):
        return getattr(self.base, name)

    def draft_time(self, q_lens, kv_lens) -> float:
        if self.method not in ON_GPU or not q_lens:
            return 0.0
        base = self.base
        t = base.step_time(q_lens, kv_lens)
        if self.k > 1:
            ctx = [k + q for q, k in zip(q_lens, kv_lens)]
            t += (self.k - 1) * base.step_time([1] * len(q_lens), ctx)
        return self.frac * t

    def step_time(self, q_lens, kv_lens, *args, **kwargs) -> float:
        return self.base.step_time(q_lens, kv_lens, *args, **kwargs) + self.draft_time(q_lens, kv_lens)


def with_drafter(cm, method: str, k: int):
    """`cm` pricing the drafter of `method` with `k` drafts too (itself for ngram or a shapeless cost model)."""
    if method not in ON_GPU or getattr(cm, "model", None) is None:
        return cm
    return WithDrafter(cm, method, k)
