"""The simulator reduced to textbook queues, and its conservation and exactness properties."""

import json

import numpy as np
import pytest
import simpy  # noqa: F401

from costmodel import CostModel
from experiments.engines import build_engine
from experiments.scenarios import poisson_fixed
from simcore.simulation import Simulation, fixed_workload
from workloads.workload import Workload


def service_time(cm: CostModel, I: int, O: int) -> float:
    """One request alone: its prefill, then O-1 decode steps with a growing context."""
    t = cm.time(cm.shape([I], [0]))
    for j in range(O - 1):
        t += cm.time(cm.shape([1], [I + j]))
    return t


@pytest.mark.parametrize("rho,policy", [(0.5, "vllm"), (0.8, "vllm"), (0.7, "nochunk"), (0.6, "sglang")])
def test_single_server_is_md1(llama8b, h100, rho, policy):
    """max_num_seqs = 1 (SGLang: max_running_requests = 1), fixed lengths, Poisson arrivals: an M/D/1 queue.
    Pollaczek–Khinchine: mean wait = ρ·S / (2(1 − ρ))."""
    I, O, n = 64, 4, 25000
    flags = {"max_running_requests": 1} if policy == "sglang" else {"max_num_seqs": 1}
    sched, pool, cm, L = build_engine(policy, llama8b, h100, 1, flags)
    S = service_time(cm, I, O)
    wl = poisson_fixed(rho / S, n, I, O, seed=7)
    res = Simulation([(sched, pool, cm)], wl, max_model_len=L).run()
    df = res.requests
    assert (df.e2el_s - df.queue_s).to_numpy() == pytest.approx(S, rel=1e-9)
    assert df.queue_s.mean() == pytest.approx(rho * S / (2 * (1 - rho)), rel=0.03)


def test_littles_law_on_a_busy_run(llama8b, h100):
    """Time-average number in the system, sampled by an independent monitor, equals λ·W."""
    sched, pool, cm, L = build_engine("vllm", llama8b, h100, 1, {"max_num_batched_tokens": 2048, "max_num_seqs": 64})
    wl = poisson_fixed(12.0, 3000, 700, 150, seed=3)
    sim = Simulation([(sched, pool, cm)], wl, max_model_len=L)
    samples, dt = [], 0.01

    def monitor(env):
        while True:
            samples.append(sim.replicas[0].outstanding)
            yield env.timeout(dt)

    sim.env.process(monitor(sim.env))
    end = float(wl.arrival_s[-1])
    res = sim.run(until=end)
    df = res.requests
    done = df[df.finish_s.notna()]
    in_system = np.minimum(df.finish_s.fillna(end), end) - df.arrival_s
    lam, W = len(df) / end, in_system.mean()
    assert np.mean(samples) == pytest.approx(lam * W, rel=0.03)
    assert len(done) > 2000


def sim_run(llama8b, h100, policy, flags, wl, ff):
    sched, pool, cm, L = build_engine(policy, llama8b, h100, 1, flags)
    return Simulation([(sched, pool, cm)], wl, fast_forward=ff, max_model_len=L).run()


CASES = [
    ("vllm", {"max_num_batched_tokens": 1024, "num_gpu_blocks_override": 1500}),
    ("vllm", {"long_prefill_token_threshold": 300}),
    ("sglang", {"chunked_prefill_size": 512, "max_total_tokens": 30000}),
    ("sglang", {"chunked_prefill_size": 1024, "enable_mixed_chunk": True, "page_size": 16}),
    ("nochunk", {"num_gpu_blocks_override": 2000}),
]


@pytest.mark.parametrize("policy,flags", CASES)
def test_fast_forward_is_exact(llama8b, h100, policy, flags):
    rng = np.random.default_rng(11)
    n = 400
    wl = fixed_workload(np.cumsum(rng.exponential(0.08, n)), rng.integers(10, 2000, n), rng.integers(1, 400, n))
    a = sim_run(llama8b, h100, policy, flags, wl, True).requests
    b = sim_run(llama8b, h100, policy, flags, wl, False).requests
    for col in ("first_token_s", "finish_s", "max_itl_s", "ttft_s", "tpot_s", "e2el_s"):
        x, y = a[col].to_numpy(float), b[col].to_numpy(float)
        assert np.array_equal(x, y, equal_nan=True), col
    assert (a.num_preemptions == b.num_preemptions).all()


@pytest.mark.parametrize(
    "policy,flags",
    [
        ("vllm", {"num_gpu_blocks_override": 400}),
        ("sglang", {"max_total_tokens": 6000, "chunked_prefill_size": 1024}),
        ("nochunk", {"num_gpu_blocks_override": 400}),
    ],
)
def test_kv_overflow_preempts_and_loses_nothing(llama8b, h100, policy, flags):
    """SGLang over-commits only on its new-token-ratio estimate, which it applies to requests that
    may stop early (not ignore_eos: PrefillAdder._get_running_request_total_token_offset)."""
    wl = fixed_workload(np.zeros(60), np.full(60, 500), np.full(60, 300))
    if policy == "sglang":
        wl = Workload(wl.arrival_s, wl.prompt_len, wl.output_len, ignore_eos=np.zeros(60, bool))
    sched, pool, cm, L = build_engine(policy, llama8b, h100, 1, flags)
    sim = Simulation([(sched, pool, cm)], wl, check=True, max_model_len=L)
    res = sim.run()
    assert res.summary["completed"] == 60 and res.summary["num_rejected"] == 0
    assert res.summary["num_preemptions"] > 0
    assert (res.requests.num_output_tokens == 300).all()
    assert sim.accounted() and pool.used == 0


def test_sglang_reserves_ignore_eos_outputs_whole(llama8b, h100):
    """The same overload as ignore_eos traffic: SGLang reserves every running request's outputs left
    at ratio 1.0, so it never retracts, and still finishes everything."""
    wl = fixed_workload(np.zeros(60), np.full(60, 500), np.full(60, 300))
    sched, pool, cm, L = build_engine(
        "sglang", llama8b, h100, 1, {"max_total_tokens": 6000, "chunked_prefill_size": 1024}
    )
    sim = Simulation([(sched, pool, cm)], wl, check=True, max_model_len=L)
    res = sim.run()
    assert res.summary["completed"] == 60 and res.summary["num_preemptions"] == 0
    assert sim.accounted() and pool.used == 0


def test_same_seed_same_bytes(tmp_path, capsys):
    from experiments.cli import main

    outs = []
    for i in range(2):
        d = tmp_path / str(i)
        assert (
            main(["simulate", "--request-rate", "30", "--num-prompts", "300", "--seed", "5", "--out", str(d), "--json"])
            == 0
        )
        outs.append(((d / "requests.csv").read_bytes(), (d / "summary.json").read_bytes(), capsys.readouterr().out))
    assert outs[0] == outs[1]
    assert main(["simulate", "--request-rate", "30", "--num-prompts", "300", "--seed", "6", "--json"]) == 0
    assert capsys.readouterr().out != outs[0][2]


def test_rejections_are_recorded_not_dropped(llama8b, h100):
    wl = fixed_workload([0, 0, 0], [100, 9000, 100], [10, 10, 10])
    sched, pool, cm, L = build_engine("vllm", llama8b, h100, 1, {"max_model_len": 8192})
    res = Simulation([(sched, pool, cm)], wl, max_model_len=L).run()
    assert res.summary["completed"] == 2 and res.summary["num_rejected"] == 1
    assert "max_model_len" in res.requests.rejected[1]
    sched, pool, cm, L = build_engine("vllm", llama8b, h100, 1, {"num_gpu_blocks_override": 100})
    res = Simulation([(sched, pool, cm)], fixed_workload([0, 0], [100, 5000], [10, 10]), max_model_len=L).run()
    assert "KV blocks" in res.requests.rejected[1] and res.summary["completed"] == 1


def test_summary_uses_vllm_bench_keys(capsys):
    from experiments.cli import main

    assert (
        main(["simulate", "--request-rate", "10", "--num-prompts", "50", "--json", "--goodput", "ttft:500", "tpot:50"])
        == 0
    )
    s = json.loads(capsys.readouterr().out)
    for k in (
        "completed",
        "request_throughput",
        "output_throughput",
        "total_token_throughput",
        "request_goodput",
        "max_itl_ms",
        "num_iterations",
        "num_preemptions",
        "num_rejected",
    ):
        assert k in s
    for m in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("mean", "median", "p99"):
            assert f"{stat}_{m}_ms" in s


@pytest.mark.parametrize(
    "argv,field",
    [
        (["simulate", "--max-num-batched-tokens", "16", "--max-num-seqs", "32"], "max_num_batched_tokens"),
        (["simulate", "--policy", "sglang", "--max-num-seqs", "4"], "flags"),
        (["simulate", "--goodput", "foo:3"], "goodput"),
        (["simulate", "--input-len", "0"], "input-len"),
        (["simulate", "--no-enable-chunked-prefill", "--max-num-batched-tokens", "2048"], "max_num_batched_tokens"),
    ],
)
def test_simulate_bad_input_exits_2(capsys, argv, field):
    from experiments.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert field in err and "Traceback" not in err
