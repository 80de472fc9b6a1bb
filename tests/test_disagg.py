"""PD disaggregation: the connector's scheduling rules on hand-built queues, the shared KV link
against processor-sharing arithmetic, a disaggregated run's conservation (requests, blocks,
bytes) and its end-to-end timing chain, determinism, and bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_helpers import assert_one_line_error, run_cli

from costmodel import CostModel, load_hardware, load_model
from costmodel.errors import InputError
from experiments.engine_cmd import parse_engine_cmd
from experiments.engines import build_engine
from policies.base import SchedulerState
from policies.vllm import VLLMConfig
from policies.vllm_pd import parse_kv_transfer_config
from simcore.clock import ExactEnvironment
from simcore.disagg import DisaggSimulation
from simcore.kv_transfer import LinkConfig, SharedLink, node_of
from simcore.request import Request
from simcore.simulation import fixed_workload

MODEL, HW = load_model("llama-3.1-8b"), load_hardware("h100")
NIXL = '{"kv_connector": "NixlConnector", "kv_role": "kv_both"}'


def _engine(tp: int = 1, **flags):
    f = {"async_scheduling": False, "kv_transfer_config": NIXL, **flags}  # async: where a test says so
    return build_engine("vllm", MODEL, HW, tp, f)[:3]


# -- the connector's rules (policies/vllm_pd.py) on hand-built queues ------------------------------


@pytest.mark.parametrize("prompt,bs", [(40, 16), (48, 16), (7, 4), (1, 1)])
def test_remote_prefill_loads_then_recomputes_the_last_prompt_token(prompt, bs):
    """vLLM's _update_waiting_for_remote_kv: every prompt token external, then computed = prompt − 1."""
    pol, pool, _ = _engine(block_size=bs, num_gpu_blocks_override=64)
    s = SchedulerState(pool)
    s.connector = pol.new_connector()
    req = Request(0, 0.0, prompt, 5, remote_prefill=True)
    s.waiting.append(req)
    plan = pol.schedule(s)
    assert plan.items == [] and plan.loads == [req]
    assert req.kv_loading and not req.remote_prefill and req.num_computed_tokens == prompt
    assert req.num_blocks == -(-prompt // bs) and list(s.connector.holding) == [req]
    assert pol.schedule(s).items == []  # still loading: skipped
    s.connector.recv_done.add(req)
    plan = pol.schedule(s)
    assert plan.items == [(req, 1)] and req.num_computed_tokens == prompt - 1 and s.running == [req]


@pytest.mark.parametrize("usable", [10, 11, 12, 13])
def test_a_load_leaves_the_blocks_in_flight_prefills_still_need(usable):
    """_inflight_prefill_reserved_blocks: a local prefill, chunked by the threshold, keeps the
    blocks it still needs for its whole prompt out of a load's reach (block counts done here)."""
    bs, thr = 16, 16
    pol, pool, _ = _engine(
        block_size=bs,
        num_gpu_blocks_override=usable + 1,  # + vLLM's null block
        max_num_batched_tokens=64,
        max_num_seqs=4,
        long_prefill_token_threshold=thr,
    )
    s = SchedulerState(pool)
    s.connector = pol.new_connector()
    local, remote = Request(0, 0.0, 160, 1), Request(1, 0.0, 32, 4, remote_prefill=True)
    s.waiting.extend([local, remote])
    plan = pol.schedule(s)
    assert plan.items == [(local, thr)]
    free_after_local = usable - 1  # its first chunk took one block
    reserved = -(-160 // bs) - 1  # the blocks the local prompt still needs
    want = -(-32 // bs) <= free_after_local - reserved
    assert (plan.loads == [remote]) == want


def test_a_prefill_side_request_holds_its_blocks_until_sent():
    env = ExactEnvironment()
    from simcore.stepping import SteppingReplica

    pol, pool, cm = _engine(block_size=16, num_gpu_blocks_override=100)
    sent = []

    class Transfers:
        def prefill_finished(self, replica, req, end):
            sent.append((req, end))

    rep = SteppingReplica(env, 0, pol, SchedulerState(pool), cm, lambda r: None, True)
    rep.transfers = Transfers()
    req = Request(0, 0.0, 100, 1, remote_decode=True)
    rep.submit(req)
    env.run()
    assert sent == [(req, req.finish_s)] and pool.used == -(-100 // 16) == req.num_blocks
    rep.kv.sent(req)
    assert pool.used == 0 and not rep.state.connector.sending


# -- the KV link (simcore/kv_transfer.py) ----------------------------------------------------------


@pytest.mark.parametrize("bw,nbytes", [(50e9, 3.9e8), (4e11, 1e6), (1e9, 12345.0)])
def test_a_lone_transfer_takes_its_bytes_over_the_bandwidth(bw, nbytes):
    env = ExactEnvironment()
    link, done = SharedLink(env, bw), []
    link.start(nbytes, lambda: done.append(env.now))
    env.run()
    assert done == [pytest.approx(nbytes / bw, rel=1e-12)]


@pytest.mark.parametrize("b1,b2,t2", [(1e9, 1e9, 0.0), (3e9, 1e9, 0.01), (1e9, 5e9, 0.005)])
def test_processor_sharing_of_two_transfers(b1, b2, t2):
    """Alone at rate C until the second joins at t2; then C/2 each until the smaller remainder
    ends; then the other alone at C (arithmetic done here)."""
    C = 1e11
    env = ExactEnvironment()
    link, done = SharedLink(env, C), {}
    link.start(b1, lambda: done.setdefault(1, env.now))
    env.at(t2).callbacks.append(lambda _e: link.start(b2, lambda: done.setdefault(2, env.now)))
    env.run()
    r1 = b1 - C * t2
    assert r1 > 0
    first = min(r1, b2)
    t_first = t2 + 2 * first / C
    t_second = t_first + (max(r1, b2) - first) / C
    want = {1: t_first, 2: t_second} if r1 <= b2 else {1: t_second, 2: t_first}
    assert done == pytest.approx(want, rel=1e-12)


def test_placement_fills_nodes_without_straddling():
    assert node_of([4, 4, 4, 2, 2, 2], 8) == [0, 0, 1, 1, 1, 2]
    assert node_of([3, 3, 3], 8) == [0, 0, 1]
    with pytest.raises(InputError, match="tp"):
        node_of([16], 8)


# -- a disaggregated run (simcore/disagg.py) -------------------------------------------------------


def _workload(n: int, seed: int, rate: float = 20.0, longest: int = 3000):
    rng = np.random.default_rng(seed)
    return fixed_workload(np.cumsum(rng.exponential(1 / rate, n)), rng.integers(1, longest, n), rng.integers(1, 200, n))


@pytest.mark.parametrize(
    "np_,nd,tp_p,tp_d,bs,blocks,medium,async_",
    [
        (1, 1, 1, 1, 16, None, "auto", False),
        (2, 1, 1, 2, 32, None, "rdma", True),
        (1, 1, 2, 1, 16, 400, "auto", False),  # tight pools: preemption beside loads and held sends
        (1, 1, 1, 1, 16, 400, "rdma", True),
        (3, 2, 1, 1, 64, 120, "nvlink", True),
    ],
)
def test_conservation(np_, nd, tp_p, tp_d, bs, blocks, medium, async_):
    flags = {"block_size": bs, "num_gpu_blocks_override": blocks, "async_scheduling": async_}
    wl = _workload(150, seed=np_ * 10 + nd)
    sim = DisaggSimulation(
        [_engine(tp_p, **flags) for _ in range(np_)],
        [_engine(tp_d, **flags) for _ in range(nd)],
        wl,
        LinkConfig(medium=medium),
        max_model_len=131072,
        check=True,
    )
    res = sim.run()
    df = res.requests
    assert len(df) == len(wl) and df.rid.tolist() == list(range(len(wl)))
    done = df[df.rejected.isna()]
    assert done.finish_s.notna().all() and (done.num_output_tokens == done.output_len).all()
    assert sim.kv_returned()
    k = 2 * MODEL.kv_layers * MODEL.h_kv * MODEL.d_h * MODEL.kv_elem_bytes  # bytes per token, recomputed here
    assert res.summary["kv_transfer"]["total_bytes"] == pytest.approx(k * done.prompt_len.sum(), rel=1e-12)
    assert (done.prefill_token_s <= done.transfer_start_s).all()
    assert (done.transfer_end_s < done.first_token_s).all()  # the decode side's first token needs the KV
    assert res.summary["prefill"]["completed"] == len(done) and res.summary["decode"]["completed"] == len(done)
    if blocks == 400:
        assert res.summary["num_preemptions"] > 0


def test_one_request_times_add_up():
    """TTFT = prefill step + latency + bytes / bandwidth + the decode step of one token; then one
    decode step per output token (the cost model priced here, independently of the replicas)."""
    prompt, out, bw, lat = 2000, 4, 25e9, 3e-4
    wl = fixed_workload([0.5], [prompt], [out])
    sim = DisaggSimulation([_engine()], [_engine()], wl, LinkConfig(rdma_bandwidth=bw, latency_s=lat, medium="rdma"))
    df = sim.run().requests
    cm = CostModel(MODEL, HW, 1)
    t_pre = cm.step_time([prompt], [0])
    t_xfer = lat + prompt * MODEL.kv_bytes_per_token / bw
    t_first = cm.step_time([1], [prompt - 1])
    r = df.iloc[0]
    assert r.prefill_token_s == pytest.approx(0.5 + t_pre, rel=1e-12)
    assert r.transfer_end_s - r.transfer_start_s == pytest.approx(t_xfer, rel=1e-12)
    assert r.first_token_s == pytest.approx(0.5 + t_pre + t_xfer + t_first, rel=1e-12)
    rest = sum(cm.step_time([1], [prompt + j]) for j in range(out - 1))
    assert r.finish_s == pytest.approx(r.first_token_s + rest, rel=1e-12)


def test_same_seed_same_result():
    def run(seed):
        sim = DisaggSimulation([_engine(), _engine()], [_engine()], _workload(120, seed), max_model_len=131072)
        return sim.run()

    a, b, c = run(3), run(3), run(4)
    assert a.requests.equals(b.requests) and json.dumps(a.summary) == json.dumps(b.summary)
    assert not a.requests.equals(c.requests)


# -- bad input --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,field",
    [
        ('{"kv_connector": "P2pNcclConnector", "kv_role": "kv_both"}', "kv_connector"),
        ('{"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}', "kv_connector"),
        ('{"kv_connector": "NixlConnector"}', "kv_role"),
        ('{"kv_connector": "NixlConnector", "kv_role": "kv_both", "kv_buffer_size": 1}', "kv-transfer-config"),
        ("{nope", "kv-transfer-config"),
    ],
)
def test_kv_transfer_config_refusals(text, field):
    with pytest.raises(InputError) as e:
        parse_kv_transfer_config(text)
    assert field in e.value.field


def test_async_with_a_producer_and_spec_with_a_connector_are_refused():
    assert VLLMConfig(kv_transfer_config=NIXL).async_scheduling  # vLLM's default, modelled with kv_both
    producer = '{"kv_connector": "NixlConnector", "kv_role": "kv_producer"}'
    assert not VLLMConfig(kv_transfer_config=producer, async_scheduling=False).async_scheduling
    with pytest.raises(InputError, match="async-scheduling"):
        VLLMConfig(kv_transfer_config=producer)
    with pytest.raises(InputError, match="speculative-config"):
        VLLMConfig(
            kv_transfer_config=NIXL,
            async_scheduling=False,
            speculative_config='{"method": "ngram", "num_speculative_tokens": 2}',
        )


def test_closed_loop_and_plain_engines_are_refused():
    wl = fixed_workload([0.0, 0.0], [10, 10], [2, 2], concurrency=1)
    with pytest.raises(InputError, match="max-concurrency"):
        DisaggSimulation([_engine()], [_engine()], wl)
    plain = build_engine("vllm", MODEL, HW, 1, {"async_scheduling": False})[:3]
    with pytest.raises(InputError, match="kv-transfer-config"):
        DisaggSimulation([plain], [_engine()], fixed_workload([0.0], [10], [2]))


def test_engine_cmd_kv_transfer_and_sglang_disaggregation():
    cmd = parse_engine_cmd(f"vllm serve m --kv-transfer-config '{NIXL}' --no-async-scheduling")
    assert cmd.flags["kv_transfer_config"] == NIXL
    launch = "python -m sglang.launch_server --model-path m --disable-overlap-schedule"
    cmd = parse_engine_cmd(f"{launch} --disaggregation-mode decode --disaggregation-transfer-backend nixl")
    assert cmd.flags["disaggregation_mode"] == "decode"
    assert cmd.flags["disaggregation_transfer_backend"] == "nixl"
    assert parse_engine_cmd(f"{launch} --disaggregation-mode prefill").flags["disaggregation_mode"] == "prefill"
    with pytest.raises(InputError, match="prefill or decode"):
        parse_engine_cmd(f"{launch} --disaggregation-mode encode")
    with pytest.raises(InputError, match="not modelled"):
        parse_engine_cmd(f"{launch} --disaggregation-mode decode --disaggregation-transfer-backend mori")


PRODUCER = '{"kv_connector": "NixlConnector", "kv_role": "kv_producer"}'
BASE = ["simulate", "--model", "llama-3.1-8b", "--hardware", "h100", "--num-prompts", "20", "--input-len", "500"]


@pytest.mark.parametrize(
    "extra,field",
    [
        (["--prefill-replicas", "1", "--no-async-scheduling"], "--decode-replicas"),
        (
            ["--prefill-replicas", "1", "--decode-replicas", "1", "--kv-transfer-config", PRODUCER],
            "--async-scheduling",
        ),
        (
            ["--prefill-replicas", "1", "--decode-replicas", "1", "--no-async-scheduling", "--replicas", "2"],
            "--replicas",
        ),
        (
            [
                "--prefill-replicas",
                "1",
                "--decode-replicas",
                "1",
                "--policy",
                "sglang",
                "--disaggregation-mode",
                "decode",
            ],
            "--disaggregation-mode",
        ),
        (
            [
                "--prefill-replicas",
                "1",
                "--decode-replicas",
                "1",
                "--no-async-scheduling",
                "--kv-link-latency-us",
                "-1",
            ],
            "--kv-link-latency-us",
        ),
        (["--kv-transfer-config", '{"kv_connector": "P2pNcclConnector", "kv_role": "kv_both"}'], "kv_connector"),
    ],
)
def test_cli_errors(extra, field):
    assert_one_line_error(BASE + extra, field)


@pytest.mark.parametrize("extra", [[], ["--no-async-scheduling"]])
def test_cli_pd_runs(extra):
    rc, out, err = run_cli(BASE + ["--prefill-replicas", "1", "--decode-replicas", "2", "--json", *extra])
    assert rc == 0, err
    s = json.loads(out)
    assert s["completed"] == 20 and s["pd"]["gpus"] == 3 and s["kv_transfer"]["transfers"] == 20
