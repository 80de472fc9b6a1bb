"""Continuous batching without chunking: every prompt runs whole in one iteration.

Running requests decode first; then waiting prompts are admitted whole, in order, while
max_num_seqs and the KV pool allow (the first one whatever its length). This is the seed's
pathological baseline: one long prompt owns an iteration and every decoder waits for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.errors import require

from .base import Plan, PolicyHooks, SchedulerState


@dataclass(frozen=True)
class NoChunkConfig:
    max_num_seqs: int = 1024
    max_num_batched_tokens: int = 0  # 0 = no cap beyond the first prompt
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    max_model_len: int = 0
    enable_prefix_caching: bool = False

    def __post_init__(self):
        require(self.max_num_seqs > 0, "max_num_seqs", self.max_num_seqs, "must be positive")
        require(self.max_num_batched_tokens >= 0, "max_num_batched_tokens", self.max_num_batched_tokens, "must be >= 0")
        require(self.block_size > 0, "block_size", self.block_size, "must be positive")


class NoChunkScheduler(PolicyHooks):
    lazy_decodes = True  # the replica may keep plain decodes in a DecodeCohort

    def __init__(self, cfg: NoChunkConfig):
        self.cfg = cfg

    def schedule(self, s: SchedulerState) -> Plan:
        plan = Plan()
        plan.cohort = s.cohort_rides(_remaining, 1 << 62)
        i = 0
        while i < len(s.running):
            req = s.running[i]
            n = req.remaining_tokens
            before = len(plan.preempted)
            fits = s.grow_or_preempt(req, req.num_computed_tokens + n, plan.preempted)
            if len(plan.preempted) > before:
                victims = plan.preempted[before:]
                plan.items = [(r, k) for r, k in plan.items if not any(r is v for v in victims)]
            if not fits:
                break
            plan.items.append((req, n))
            i += 1
        cap = self.cfg.max_num_batched_tokens or (1 << 62)
        used = plan.num_tokens
        num_running = s.num_running
        while not plan.preempted and s.waiting and num_running < self.cfg.max_num_seqs:
            req = s.waiting[0]
            s.lookup(req)
            n = req.remaining_tokens
            if plan and used + n > cap:
                break
            if not s.pool.grow(req, req.num_computed_tokens + n):
                break
            s.waiting.popleft()
            s.admit(req)
            plan.items.append((req, n))
            used += n
            num_running += 1
        return plan

    def can_fast_forward(self, s: SchedulerState) -> bool:
        if not s.waiting or s.num_running >= self.cfg.max_num_seqs:
            return True
        return s.head_blocked(lambda head: head.num_tokens - head.num_computed_tokens)

    def check(self, plan, s) -> None:
        assert all(n == r.remaining_tokens for r, n in plan.items), "a prompt was split"
        assert plan.cohort == s.num_in_cohort, "the decode cohort sat out a step"
        assert s.num_running <= self.cfg.max_num_seqs

    @property
    def prefix_caching(self) -> bool:
        return self.cfg.enable_prefix_caching


def _remaining(req) -> int:
    return req.remaining_tokens
