"""SGLang's decode memory check and retraction (schedule_batch.py: ScheduleBatch.check_decode_mem,
retract_decode; scheduler.py: update_running_batch), mixed into SGLangScheduler (policies/sglang.py).

A decode step needs a new KV page for each request whose next token starts one; the tree is
evicted for them first. When they do not fit, requests are retracted, fewest outputs then longest
prompt first, to the back of the waiting queue, until the rest fit, and the new-token ratio is
reset from what the survivors have decoded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .base import Plan, SchedulerState
from .sglang_config import RETRACT_DECODE_STEPS
from .sglang_radix import evict_for


class DecodeMemory:
    """check_decode_mem and retract_decode over the replica's pool, cohort included."""

    new_token_ratio: float
    batch_is_full: bool
    spec: Any  # SpecDriving's (policies/sglang_spec.py)
    spec_decode_need: Any

    def _decode_fits(self, s, decoding) -> bool:
        """ScheduleBatch.check_decode_mem: evict for the decodes' new pages, then whether they are free."""
        need = self._decode_need(s, decoding)
        evict_for(s.pool, need)
        return s.pool.free * s.pool.block_size >= need

    def _decode_need(self, s, decoding) -> int:
        """Tokens of the new KV pages the decodes need this step (a whole page each)."""
        pool, c = s.pool, s.cohort
        if self.spec is not None:  # _new_tokens_required_next_decode_spec_v2 (policies/sglang_spec.py)
            return self.spec_decode_need(pool, decoding)
        bs = pool.block_size
        n = sum(1 for r in decoding if r.num_computed_tokens + 1 > (r.num_blocks + pool.shared(r)) * bs)
        if s.num_in_cohort:
            n += c.new_blocks(c.tick, 1)
        return n * bs

    def _retract(self, s: SchedulerState, decoding: list, plan: Plan, riders: Sequence = ()) -> None:
        """ScheduleBatch.retract_decode: fewest outputs, then longest prompt, first, until the rest's
        next decode fits (check_decode_mem), keeping at least one; to the back of the queue. The
        rest stay in that order (their queue stamps permuted), so their finishes reach the radix
        tree in SGLang's batch order. The new-token ratio becomes (outputs + SGLANG_RETRACT_DECODE_STEPS a request) / (Σ max_new + 1).
        `riders` (overlap + spec: finished in flight by accepted drafts) count in every check but are
        never victims here (SGLang could retract one; not modelled)."""
        riders = list(riders)
        order, retracted = retraction_order(decoding), False
        for victim in victims(order, lambda rest: self._decode_fits(s, rest + riders)):
            retracted = True
            s.running.remove(victim)
            decoding.remove(victim)
            s.preempt(victim, front=False)
            plan.preempted.append(victim)
            evict_for(s.pool, len(order) * RETRACT_DECODE_STEPS)
        if retracted:  # filter_batch(keep_indices=sorted_indices): the rest run in retraction order
            for r, seq in zip(order, sorted(r.seq for r in order)):
                r.seq = seq
            s.running.sort(key=_seq)
            decoding.sort(key=_seq)
        self._decode_fits(s, order + riders)
        batch = decoding + riders
        total_new = sum(r.output_len for r in batch) + 1
        self.new_token_ratio = min(
            1.0, (sum(r.num_output_tokens for r in batch) + RETRACT_DECODE_STEPS * len(batch)) / total_new
        )
        self.batch_is_full = False


def retraction_order(batch: list) -> list:
    """retract_decode's order: most outputs, then shortest prompt, kept first; victims leave from the end."""
    return sorted(batch, key=lambda r: (r.num_output_tokens, -r.prompt_len), reverse=True)


def victims(order: list, fits):
    """retract_decode's loop, for a batch whose next decode does not fit: pop victims from the end
    of `order` (``retraction_order``) until ``fits(order)``, keeping at least one. Each is yielded
    before the next check, so what the caller does with it (freeing its KV) counts."""
    while len(order) > 1:
        yield order.pop()
        if fits(order):
            return


def _seq(req) -> int:
    return req.seq
