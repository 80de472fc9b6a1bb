"""vLLM data parallel over a MoE model: ranks stepped in lockstep (simcore/data_parallel.py),
priced as one group step (costmodel/data_parallel.py), behind vLLM's own rank choice."""

import numpy as np
import pytest

from costmodel.data_parallel import LockstepCost, moe_layers_s
from costmodel.errors import InputError
from costmodel.hardware import load_hardware
from costmodel.model import load_model
from costmodel.roofline import CostModel
from experiments.engines import build_cluster, build_dp_group
from simcore.simulation import Simulation
from workloads.workload import Workload

MOE = "qwen3-30b-a3b"


def _workload(n, rate, seed, lo=100, hi=3000):
    rng = np.random.default_rng(seed)
    return Workload(np.cumsum(rng.exponential(1 / rate, n)), rng.integers(lo, hi, n), rng.integers(5, 300, n))


@pytest.mark.parametrize("dp,tp,hw", [(2, 1, "h100"), (4, 2, "h100"), (3, 1, "a100-sxm")])
def test_ranks_step_together_and_every_request_completes(dp, tp, hw):
    m, h = load_model(MOE), load_hardware(hw)
    engines, router, max_len = build_cluster("vllm", m, h, tp, None, dp, "vllm_dp")
    wl = _workload(300, 6.0 * dp, dp)
    sim = Simulation(engines, wl, max_model_len=max_len, router=router, check=True, record_iterations=True)
    res = sim.run()
    assert res.summary["completed"] == 300 and sim.group is not None
    steps: dict[int, set] = {}
    for rank, start, end, _, _ in res.iterations:
        steps.setdefault(rank, set()).add((start, end))
    every = set().union(*steps.values())
    times = sorted(every)
    for a, b in zip(times, times[1:]):  # one clock for the group: steps never overlap
        assert b[0] >= a[1]
    assert sim.group.dummy_steps > 0  # ranks sat idle inside waves
    for r in sim.replicas:
        assert r.state.pool.available == r.state.pool.total  # every block back (no prefix cache here)
    again = Simulation(
        build_cluster("vllm", m, h, tp, None, dp, "vllm_dp")[0],
        wl,
        max_model_len=max_len,
        router=build_cluster("vllm", m, h, tp, None, dp, "vllm_dp")[1],
    ).run()
    assert again.requests.equals(res.requests)  # same inputs, same bits


@pytest.mark.parametrize("output_len,interval", [(20, 16), (3, 16), (40, 16), (1, 16), (16, 16), (15, 16)])
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_a_wave_runs_on_to_the_next_sync_step(output_len, interval, async_scheduling):
    """One request on 2 ranks: the group steps (rank 1 on dummy batches) until the first step
    counted 1 or a multiple of dp_sync_interval at which nothing is unfinished; under async
    scheduling the request finished by step k is unfinished at k's check (its output is
    processed after the next schedule()), so the wave runs to the sync step after k."""
    m, h = load_model(MOE), load_hardware("h100")
    flags = {"async_scheduling": async_scheduling}
    engines, router, max_len = build_cluster("vllm", m, h, 1, flags, 2, "vllm_dp")
    wl = Workload(np.array([0.0]), np.array([500]), np.array([output_len]))
    sim = Simulation(engines, wl, max_model_len=max_len, router=router, record_iterations=True)
    sim.run()
    work = output_len  # one prefill step samples the first token, then output_len - 1 decodes
    last = work + async_scheduling  # the first check that sees the request finished
    expect = last if last == 1 else -(-last // interval) * interval
    assert sim.group.dummy_steps == expect
    assert sim.group.step_counter == 0 and not sim.group.engines_running


def test_group_step_price_is_ranks_without_moe_plus_shared_moe():
    m = load_model(MOE)
    for hw, tp, dp in (("h100", 1, 2), ("h100", 2, 4), ("h100-sxm", 2, 2), ("a100-sxm", 1, 4)):
        h = load_hardware(hw)
        calls = 2 * m.L + (h.counting != "seed")  # all-reduces per pass: 2 a layer (+ the embedding's)
        rank = CostModel(m, h, tp)
        cost = LockstepCost(rank, dp)
        a, b = ([1] * 30, list(range(100, 130))), ([2000], [0])
        wide = CostModel(m, h, tp * dp)
        br_a, br_b = rank.breakdown(rank.shape(*a)), rank.breakdown(rank.shape(*b))
        br_all = wide.breakdown(wide.shape([1] * 30 + [2000], list(range(100, 130)) + [0]))
        rest = max(br_a.time_s - br_a.op("moe_experts").time_s, br_b.time_s - br_b.op("moe_experts").time_s)
        dispatch = wide.allreduce_s(2030) * m.moe_layers / calls
        want = rest + br_all.op("moe_experts").time_s + dispatch
        assert cost.step_time([a, b]) == pytest.approx(want, rel=1e-9)
        assert moe_layers_s(rank, 2000, 1) == pytest.approx(br_b.op("moe_experts").time_s, rel=1e-12)
        dummy = rank.breakdown(rank.shape([1], [0]))
        assert cost.step_time([None, None]) == pytest.approx(
            dummy.time_s
            - dummy.op("moe_experts").time_s
            + wide.breakdown(wide.shape([1, 1], [0, 0])).op("moe_experts").time_s
            + wide.allreduce_s(2) * m.moe_layers / calls,
            rel=1e-9,
        )


def test_ranks_hold_the_experts_shared_and_pools_grow():
    m, h = load_model(MOE), load_hardware("h100")
    experts = m.moe_layers * m.num_experts * 3 * m.H * m.expert_ffn * m.b
    for tp, dp in ((1, 2), (1, 4), (2, 2)):
        engines, _, _, cost = build_dp_group(m, h, tp, dp)
        assert cost.weight_bytes_per_gpu == pytest.approx((m.P * m.b - experts) / tp + experts / (tp * dp))
        alone = build_cluster("vllm", m, h, tp, None, 1)[0][0][1]
        assert engines[0][1].total > alone.total


def test_dense_models_and_bad_sizes_are_refused_or_independent():
    d, h = load_model("llama-3.1-8b"), load_hardware("h100")
    engines, router, _ = build_cluster("vllm", d, h, 1, None, 2, "vllm_dp")
    assert router.lockstep is None  # dense: vLLM's DP engines run independently
    with pytest.raises(InputError, match="MoE"):
        build_dp_group(d, h, 1, 2)
    with pytest.raises(InputError, match="data_parallel_size"):
        LockstepCost(CostModel(load_model(MOE), h, 1), 1)


def _sglang_group(tp, dp, flags=None, hw="h100"):
    m, h = load_model(MOE), load_hardware(hw)
    return build_cluster("sglang", m, h, tp, {"enable_dp_attention": True, **(flags or {})}, dp, "round_robin")


@pytest.mark.parametrize("tp,dp,chunk", [(1, 2, None), (2, 4, 4096), (1, 8, 0)])
def test_sglang_dp_attention_ranks_take_the_servers_divided_settings(tp, dp, chunk):
    from policies.sglang_config import sglang_default_chunked_prefill_size, sglang_mem_fraction_static

    h = load_hardware("h100")
    engines, router, _ = _sglang_group(tp, dp, {} if chunk is None else {"chunked_prefill_size": chunk})
    cfg = engines[0][0].cfg
    server = sglang_default_chunked_prefill_size(h.memory_bytes) if chunk is None else chunk
    assert cfg.chunked_prefill_size == (server // dp if server > 0 else server)
    assert cfg.schedule_conservativeness == pytest.approx(0.3)
    assert engines[0][0].init_ratio == 0.7 * 0.3  # NewTokenRatioTracker.from_config, same float operations
    frac = sglang_mem_fraction_static(h.memory_bytes, server if server > 0 else None, 16384, tp * dp)
    assert cfg.mem_fraction_static == frac
    cost = router.lockstep
    pool = engines[0][1]
    assert pool.total == int((h.memory_bytes * frac - cost.weight_bytes_per_gpu) // engines[0][2].kv_coef)  # page 1
    assert cost.engine == "sglang" and cost.moe.tp == tp * dp


@pytest.mark.parametrize("overlap", [False, True])
def test_sglang_dp_attention_steps_only_while_a_rank_has_tokens(overlap):
    """One request on 2 ranks: the group runs exactly the steps that request's scheduler runs
    alone (no waves), rank 1 idle in every one of them."""
    flags = {"disable_overlap_schedule": not overlap}
    engines, router, max_len = _sglang_group(1, 2, flags)
    wl = Workload(np.array([0.0, 5.0]), np.array([3000, 700]), np.array([30, 12]))
    sim = Simulation(engines, wl, max_model_len=max_len, router=router, record_iterations=True, check=True)
    res = sim.run()
    assert res.summary["completed"] == 2
    alone_engines, _, _ = _sglang_group(1, 2, flags)
    cfg_flags = {**flags, "chunked_prefill_size": engines[0][0].cfg.chunked_prefill_size}
    from experiments.engines import build_engine

    single = [
        build_engine(
            "sglang", load_model(MOE), load_hardware("h100"), 1, {**cfg_flags, "schedule_conservativeness": 0.3}
        )[:3]
    ]
    alone = Simulation(single, wl, max_model_len=max_len, record_iterations=True, fast_forward=False).run()
    per_rank = [sum(1 for it in res.iterations if it[0] == r) for r in (0, 1)]
    assert sum(per_rank) == len(alone.iterations)  # round robin: one request each, never together
    assert sim.group.dummy_steps == sum(per_rank)  # the other rank idles through each step
    assert not sim.group.engines_running


def test_sglang_dp_attention_is_refused_where_not_modelled():
    with pytest.raises(InputError, match="dense"):
        build_cluster("sglang", load_model("llama-3.1-8b"), load_hardware("h100"), 1, {"enable_dp_attention": True}, 2)
    with pytest.raises(InputError, match="dp-size"):
        _sglang_group(1, 1)
