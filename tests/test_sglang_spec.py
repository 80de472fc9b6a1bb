"""SGLang's speculative decoding (policies/sglang_spec.py): server-arg resolution, KV widths,
emitted tokens per verify against the acceptance model, KV conservation every step (the
reference loop's check=True), the over-allocation A − C held to the finish, and refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest

from costmodel import load_hardware, load_model
from costmodel.errors import InputError
from experiments.engine_cmd import parse_engine_cmd
from experiments.engines import build_engine
from policies.sglang import SGLangScheduler
from policies.sglang_config import SGLangConfig
from policies.sglang_spec import SGLangSpec, resolve_spec
from simcore.simulation import Simulation
from workloads.workload import Workload

MODEL, HW = load_model("llama-3.1-8b"), load_hardware("h100")


def _flags(steps=3, topk=1, draft=4, ps=1, total=20000, overlap=False, radix=False, mixed=False, alpha=0.7, seed=0):
    return dict(
        speculative_algorithm="EAGLE",
        speculative_num_steps=steps,
        speculative_eagle_topk=topk,
        speculative_num_draft_tokens=draft,
        spec_acceptance=alpha,
        spec_seed=seed,
        page_size=ps,
        max_total_tokens=total,
        chunked_prefill_size=512,
        disable_overlap_schedule=not overlap,
        disable_radix_cache=not radix,
        enable_mixed_chunk=mixed,
        max_model_len=8192,
    )


def _workload(n=40, seed=1, shared=True) -> Workload:
    rng = np.random.default_rng(seed)
    p = rng.integers(50, 600, n)
    hashes = [
        tuple(1000 * (i % 5) + j for j in range(min(x // 32, 8)))
        + tuple(10**6 + 1000 * i + j for j in range(x // 32 - 8))
        for i, x in enumerate(p)
    ]
    return Workload(
        np.cumsum(rng.exponential(0.01, n)),
        p,
        rng.integers(20, 300, n),
        block_hashes=hashes if shared else None,
        block_tokens=32,
    )


def _run(flags, wl, record=False):
    sched, pool, cm, ml = build_engine("sglang", MODEL, HW, 1, flags)
    sim = Simulation([(sched, pool, cm)], wl, check=True, max_model_len=ml, record_iterations=record)
    return sim, sim.run(), sched


def test_resolution_and_widths():
    s = resolve_spec("NEXTN", None, None, None, model_name="llama-3.1-8b")
    assert (s.algorithm, s.num_steps, s.topk, s.num_draft_tokens) == ("EAGLE", 5, 4, 8)
    s = resolve_spec("EAGLE3", None, None, None, model_name="qwen3-8b")
    assert (s.num_steps, s.topk, s.num_draft_tokens) == (3, 1, 4)
    assert resolve_spec("EAGLE", 4, 1, 9).num_draft_tokens == 5  # topk 1: num_steps + 1
    s = SGLangSpec("EAGLE", 3, 1, 4)
    assert s.alloc_len(1) == 4 and s.alloc_len(16) == 4 and s.reserve(16) == 8
    s = SGLangSpec("EAGLE", 5, 4, 8)
    assert s.alloc_len(1) == 20  # max(5 * 4, 8)
    assert s.alloc_len(16) == 2 * 16 * 4  # ceil((15 + 5) / 16) pages a branch, 4 branches
    sched, *_ = build_engine("sglang", MODEL, HW, 1, {"speculative_algorithm": "EAGLE"})
    assert sched.cfg.max_running_requests == 48 and sched.spec.topk == 4 and sched.needs_stepping
    sched, *_ = build_engine("sglang", MODEL, HW, 1, {"speculative_algorithm": "EAGLE", "max_running_requests": 7})
    assert sched.cfg.max_running_requests == 7


@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(speculative_algorithm="NGRAM"), "--speculative-algorithm"),
        (dict(speculative_algorithm="STANDALONE"), "--speculative-algorithm"),
        (dict(speculative_num_steps=3), "speculative_algorithm"),
        (dict(speculative_algorithm="EAGLE", speculative_num_steps=3), "speculative_eagle_topk"),
        (dict(speculative_algorithm="EAGLE", speculative_eagle_topk=2), "speculative_num_steps"),
        (
            dict(speculative_algorithm="EAGLE", speculative_num_steps=0, speculative_eagle_topk=1),
            "speculative_num_steps",
        ),
        (dict(speculative_algorithm="EAGLE", spec_acceptance=1.5), "spec_acceptance"),
    ],
)
def test_bad_input_is_refused(kw, field):
    with pytest.raises(ValueError) as e:
        SGLangScheduler(SGLangConfig(**kw))
    assert isinstance(e.value, InputError) and field in str(e.value)


def test_engine_cmd_reads_the_flags_and_refuses_other_algorithms():
    cmd = parse_engine_cmd(
        "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --speculative-algorithm EAGLE3 "
        "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4"
    )
    assert cmd.flags["speculative_algorithm"] == "EAGLE3" and cmd.flags["speculative_num_steps"] == 3
    with pytest.raises(InputError, match="speculative-algorithm"):
        parse_engine_cmd("python -m sglang.launch_server --model-path m --speculative-algorithm NGRAM")


@pytest.mark.parametrize("steps, alpha", [(3, 0.7), (5, 0.5)])
def test_mean_emitted_per_verify(steps, alpha):
    """Unbounded outputs aside (a long output_len), the tokens a verify emits average
    (1 − α^(k+1)) / (1 − α), within sampling error."""
    n, out = 16, 400
    wl = Workload([0.0] * n, [64] * n, [out] * n)
    sim, _, sched = _run(_flags(steps=steps, draft=steps + 1, alpha=alpha), wl)
    verifies = sum(r.spec_draws for r in sim.requests)
    emitted = sum(r.num_output_tokens - 1 for r in sim.requests)  # the first token is the prefill's
    expect = (1 - alpha ** (steps + 1)) / (1 - alpha)
    # p.m.f. of 1 + a, a = min(k, geometric): its variance bounds the error of the mean
    probs = [alpha**j * (1 - alpha) for j in range(steps)] + [alpha**steps]
    mean = sum((j + 1) * p for j, p in enumerate(probs))
    var = sum((j + 1 - mean) ** 2 * p for j, p in enumerate(probs))
    assert math.isclose(mean, expect)
    # the last verify of each request is trimmed at max_new: at most `steps` tokens each
    assert abs(emitted / verifies - expect) < 4 * math.sqrt(var / verifies) + n * steps / verifies


def test_same_seed_same_run_and_seed_changes_it():
    wl = _workload(20)
    a = _run(_flags(seed=3, total=6000), wl)[1]
    b = _run(_flags(seed=3, total=6000), wl)[1]
    c = _run(_flags(seed=4, total=6000), wl)[1]
    assert a.summary == b.summary
    assert a.summary != c.summary


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("ps", [1, 16])
@pytest.mark.parametrize("radix, mixed", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("params", [(3, 1, 4), (5, 4, 8)])
def test_kv_conserved_every_step_under_pressure(overlap, ps, radix, mixed, params):
    """check=True asserts the pool's conservation after every plan; every request completes."""
    steps, topk, draft = params
    sim, _, sched = _run(
        _flags(steps, topk, draft, ps=ps, total=2500, overlap=overlap, radix=radix, mixed=mixed), _workload(30)
    )
    assert all(r.num_output_tokens == r.output_len for r in sim.requests)
    assert sched._committed == {}


def test_overallocation_held_until_finish():
    """After each verify a request holds pages for C + 2L, not C: rejected slots stay allocated."""
    wl = Workload([0.0], [100], [30])
    sched, pool, cm, ml = build_engine("sglang", MODEL, HW, 1, _flags(alpha=0.3))
    sim = Simulation([(sched, pool, cm)], wl, check=True, max_model_len=ml, record_iterations=True)
    seen = []
    orig = sched.schedule

    def spy(s):
        plan = orig(s)
        for r, _n in plan.items:
            if plan.spec:
                seen.append((r.num_blocks, r.num_computed_tokens))
        return plan

    sched.schedule = spy  # type: ignore[method-assign]
    sim.run()
    w = sched._reserve
    assert seen and all(blocks >= c + w for blocks, c in seen)
    # A only grows: the slots past C are not freed per step
    assert all(b2 >= b1 for (b1, _), (b2, _) in zip(seen, seen[1:]))
    assert pool.used == 0


def test_spec_with_dp_attention_or_pd_is_refused():
    from experiments.engines import build_cluster

    with pytest.raises(InputError, match="speculative_algorithm"):
        build_cluster(
            "sglang",
            load_model("qwen3-30b-a3b"),
            HW,
            flags={"enable_dp_attention": True, "speculative_algorithm": "EAGLE"},
            replicas=2,
        )
    with pytest.raises(InputError, match="speculative_algorithm"):
        build_engine("sglang", MODEL, HW, 1, {"speculative_algorithm": "EAGLE", "disaggregation_mode": "decode"})
