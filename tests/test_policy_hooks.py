"""A policy with no lookahead: it writes schedule() only, inherits PolicyHooks, and the replica
steps it (fast-forward declines), giving what stepping gives."""

import numpy as np
import pytest

from costmodel import load_hardware, load_model
from experiments.engines import build_engine
from policies.base import Plan, PolicyHooks, SchedulerState
from policies.sglang import SGLangScheduler
from policies.sglang_lookahead import SGLangLookahead
from policies.vllm import VLLMScheduler
from policies.vllm_lookahead import VLLMLookahead
from simcore.simulation import Simulation
from workloads.workload import Workload

MODEL, HW = load_model("llama-3.1-8b"), load_hardware("h100")


class Fcfs(PolicyHooks):
    """First come, first served, whole prompts, up to `seats` running: schedule() and nothing else."""

    def __init__(self, seats: int):
        self.seats, self.plans = seats, 0

    def schedule(self, s: SchedulerState) -> Plan:
        self.plans += 1
        plan = Plan()
        for req in s.running:
            n = req.num_tokens - req.num_computed_tokens
            if not s.grow_or_preempt(req, req.num_computed_tokens + n, plan.preempted):
                break
            plan.items.append((req, n))
        while not plan.preempted and s.waiting and len(s.running) < self.seats:
            req = s.waiting[0]
            if not s.pool.grow(req, req.num_tokens):
                break
            s.admit(s.waiting.popleft())
            plan.items.append((req, req.num_tokens))
        return plan


@pytest.mark.parametrize("blocks", [40, 4000])  # preemptions, none
def test_a_policy_without_lookahead_steps(blocks):
    rng = np.random.default_rng(3)
    n = 30
    wl = Workload(np.cumsum(rng.exponential(0.05, n)), rng.integers(1, 600, n), rng.integers(1, 60, n))
    out = []
    for ff in (True, False):
        _, pool, cm, max_len = build_engine(
            "vllm", MODEL, HW, 1, dict(num_gpu_blocks_override=blocks, block_size=16, max_model_len=8192)
        )
        policy = Fcfs(seats=4)
        sim = Simulation([(policy, pool, cm)], wl, fast_forward=ff, check=True, max_model_len=max_len)
        res = sim.run()
        assert sim.accounted() and res.summary["completed"] == n
        assert policy.plans == res.summary["num_iterations"]  # one schedule() a step: nothing fast-forwarded
        out.append(res.requests)
    for col in ("first_token_s", "finish_s"):
        assert np.array_equal(out[0][col].to_numpy(), out[1][col].to_numpy())


def test_the_engines_hooks_are_their_lookahead_modules():
    for sched, look in ((VLLMScheduler, VLLMLookahead), (SGLangScheduler, SGLangLookahead)):
        for hook in (
            "prefill_chunks",
            "arrival_chunks",
            "on_lead",
            "can_fast_forward",
            "run_headroom",
            "on_fast_forward",
            "lazy_decodes",
            "cohort_max_outputs_left",
        ):
            assert getattr(sched, hook) is getattr(look, hook), (sched.__name__, hook)
    assert PolicyHooks().can_fast_forward(None) is False
