"""Speculative decoding in the reference replica: how many tokens a verify step emits.

A request verifying `drafts` draft tokens samples 1 + a, a = ``policy.accept`` (per request, from
the run's RNG); num_computed_tokens rolls back by the rejected drafts and, at output_len, by the
tokens past it (vLLM's update_from_output). Under async scheduling a step's output is processed
after the next schedule() (``settle``), as vLLM's batch queue does.
"""

from __future__ import annotations


def rides(policy, s) -> bool:
    """SGLang overlap + spec: a held finished request rides one more verify (its result dropped), so
    a replica with nothing outstanding still runs that step (policies/sglang_spec.py)."""
    return bool(s.finished) and getattr(policy, "rides_finished", None) is not None and policy.rides_finished(s)


def emitted(policy, req, drafts: int) -> int:
    """Sync: the tokens `req` samples at a verify step, its counters rolled back past them."""
    n = 1
    if drafts:
        accepted = policy.accept(req, drafts)
        req.num_computed_tokens -= abs(drafts) - accepted
        n += accepted
    left = req.output_len - req.num_output_tokens
    if n > left:  # stopped at max_tokens: the tokens past it are trimmed
        req.num_computed_tokens -= n - left
        n = left
    return n


def hold(replica, plan, start: float, end: float) -> None:
    """Async + drafts: the step's tokens are computed; its output waits for the next schedule()."""
    for req, n in plan.items:
        if req.finish_s is not None:  # finished by the previous step's output, after this one was planned
            continue
        if req.first_scheduled_s is None:
            req.first_scheduled_s = start
        req.num_computed_tokens += n
    replica.lagged = (plan, end)


def settle(replica, now_plan) -> None:
    """update_from_output of the lagged step, after schedule(n+1). Rejected drafts roll back
    num_computed_tokens and the placeholders; every returned token resolves a placeholder. A request
    preempted by schedule(n+1) takes its tokens stale (no counter moves); a finished one frees its
    blocks now; one already finished is skipped."""
    plan, end = replica.lagged
    replica.lagged = None
    stale, gaps, s = set(now_plan.preempted), [], replica.state
    for req in plan.sampling:
        if req.finish_s is not None:
            continue
        drafts = plan.spec.get(req, 0)
        accepted = replica.policy.accept(req, drafts) if drafts else 0
        n, fresh = 1 + accepted, req not in stale
        if fresh:
            req.num_computed_tokens -= abs(drafts) - accepted
            req.spec_placeholders -= abs(drafts) - accepted + n
        left = req.output_len - req.num_output_tokens
        if n > left:  # stopped at max_tokens: the tokens past it are trimmed
            req.num_computed_tokens -= (n - left) if fresh else 0
            n = left
        if req.first_token_s is None:
            req.first_token_s = end
        else:
            gaps.append(end - req.last_token_s)
            req.max_itl_s = max(req.max_itl_s, gaps[-1])
        req.num_output_tokens += n
        req.last_token_s = end
        if req.num_output_tokens < req.output_len:
            continue
        req.finish_s = end
        if fresh:
            s.running.remove(req)
            s.retire(req, last_step=False)
        else:
            s.waiting.remove(req)
        replica.finished(req)
    if gaps:
        replica.itl.add_many(gaps)
