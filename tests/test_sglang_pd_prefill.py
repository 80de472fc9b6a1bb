"""SGLang's prefill server under PD (policies/sglang_pd_prefill.py) and the pair of pools
(simcore/disagg_sglang.py): bootstrap gating, the metadata buffers, the KV pushes' ranges, and
conservation over runs. The step-for-step check against SGLang's own prefill queues is
tests/conformance/test_sglang_pd_prefill_conformance.py."""

import json

import numpy as np
import pytest
from cli_helpers import assert_one_line_error, run_cli

from costmodel import load_hardware, load_model
from costmodel.errors import InputError
from experiments.engines import build_engine
from policies.base import SchedulerState
from simcore.disagg_sglang import SGLangDisaggSimulation
from simcore.kv import BlockPool
from simcore.kv_transfer import LinkConfig
from simcore.request import Request
from simcore.simulation import Simulation, fixed_workload
from workloads.workload import Workload

MODEL, HW = load_model("llama-3.1-8b"), load_hardware("h100")


def _server(mode: str, **flags):
    return build_engine("sglang", MODEL, HW, flags={"disaggregation_mode": mode, **flags})


def test_bootstrap_gates_and_metadata_buffers_bound():
    """max_running_requests 2: 4 metadata buffers. Nothing leaves the bootstrap queue before its
    decode side has preallocated; then the ready ones leave in queue order while a buffer is free."""
    pol, *_ = _server("prefill", max_running_requests=2, disable_overlap_schedule=True)
    s = SchedulerState(BlockPool(100_000, 1))
    s.connector = q = pol.new_connector()
    reqs = [Request(i, 0.0, 100 + i, 1) for i in range(6)]
    s.waiting.extend(reqs)
    plan = pol.schedule(s)
    assert not plan.items and [r.rid for r in q.bootstrap] == list(range(6)) and not s.waiting
    q.ready.update(reqs[i] for i in (5, 4, 3, 1, 0))
    plan = pol.schedule(s)
    admitted = [r.rid for r, _ in plan.items] + [r.rid for r in s.waiting]
    assert sorted(admitted) == [0, 1, 3, 4]  # the fifth ready one (5) finds no buffer
    assert [r.rid for r in q.bootstrap] == [2, 5] and q.ready == {reqs[5]}
    assert len(q.popped) == 4
    assert all(n == r.prompt_len for r, n in plan.items)  # one request asks for one token: its whole prompt


def _workload(n: int, seed: int, rate: float = 30.0, longest: int = 6000, shared: bool = False):
    """Poisson arrivals; with ``shared``, prompts open with one of four shared prefixes (up to 16
    blocks of 64 tokens), so a radix cache has something to match."""
    rng = np.random.default_rng(seed)
    arrivals, prompts, outputs = (
        np.cumsum(rng.exponential(1 / rate, n)),
        rng.integers(1, longest, n),
        rng.integers(1, 150, n),
    )
    if not shared:
        return fixed_workload(arrivals, prompts, outputs)
    groups = rng.integers(0, 4, n)
    hashes = [
        tuple(1000 * int(g) + j for j in range(min(p // 64, 16)))
        + tuple(10**6 + 1000 * i + j for j in range(p // 64 - 16))
        for i, (g, p) in enumerate(zip(groups, prompts))
    ]
    return Workload(arrivals, prompts, outputs, block_hashes=hashes, block_tokens=64)


def _returned(sim) -> bool:
    """Every request's KV is back: nothing in transfer, and what a pool still holds is its radix
    tree's, unlocked (evictable)."""
    for r in sim.prefill + sim.decode:
        st, cache = r.state, r.state.pool.cache
        if st.connector.sending or getattr(st.connector, "bootstrap", None):
            return False
        held = cache.cached_blocks if cache is not None else 0
        if st.pool.used != held or (cache is not None and cache.evictable_blocks != held):
            return False
    return True


class Recording(SGLangDisaggSimulation):
    """Records every push: (rid, first token, end)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.log: list = []

    def _push(self, replica, p, start, stop):
        self.log.append((p.rid, start, stop))
        super()._push(replica, p, start, stop)


class Watched:
    """A prefill server's policy, checked after every schedule(): at most 2 x max_running_requests
    requests hold a metadata buffer, and the batch's new requests plus those still holding a
    req_to_token row (prefill done, KV in transfer) fit max_running_requests rows."""

    def __init__(self, pol):
        self.pol, self.binds = pol, 0

    def __getattr__(self, name):
        return getattr(self.pol, name)

    def schedule(self, s):
        plan = self.pol.schedule(s)
        q, n = s.connector, self.pol.cfg.max_running_requests
        assert len(q.popped) <= 2 * n
        assert len(plan.items) + len(q.sending) + len(s.finished) <= n
        self.binds += bool(q.ready & set(q.bootstrap)) and len(q.popped) == 2 * n
        return plan


@pytest.mark.parametrize(
    "np_,nd,page,chunk,overlap,radix,tokens,running",
    [
        (1, 1, 1, 1024, False, False, None, None),
        (2, 1, 16, 512, True, False, None, None),
        (1, 2, 16, 2048, True, True, 60_000, None),  # tight pools: retraction on the decode side, waits on the prefill
        (2, 2, 64, 1000, False, True, 40_000, None),
        (1, 1, 1, 8192, True, True, None, None),
        (1, 2, 16, 512, False, True, None, 2),  # 4 metadata buffers, 2 rows: both bind
        (1, 2, 1, 4096, True, False, None, 3),
    ],
)
def test_conservation(np_, nd, page, chunk, overlap, radix, tokens, running):
    flags = {"page_size": page, "disable_overlap_schedule": not overlap, "disable_radix_cache": not radix}
    flags |= {"max_total_tokens": tokens} if tokens else {}
    pre = [_server("prefill", chunked_prefill_size=chunk, **flags)[:3] for _ in range(np_)]
    if running:
        pre = [
            (Watched(_server("prefill", chunked_prefill_size=chunk, max_running_requests=running, **flags)[0]), *p[1:])
            for p in pre
        ]
    dec = [_server("decode", **flags)[:3] for _ in range(nd)]
    wl = _workload(120, seed=np_ * 10 + nd + page, shared=radix)
    sim = Recording(pre, dec, wl, LinkConfig(medium="rdma"), max_model_len=131072, check=True)
    res = sim.run()
    if radix:
        assert all(r.state.pool.cache is not None for r in sim.prefill)
        assert any(p.num_cached_tokens > 0 for p in sim.prefill_reqs)  # the prefill servers' trees matched
    df = res.requests
    assert len(df) == len(wl) and df.rid.tolist() == list(range(len(wl)))
    done = df[df.rejected.isna()]
    assert len(done) == len(wl)
    assert done.finish_s.notna().all() and (done.num_output_tokens == done.output_len).all()
    assert _returned(sim)
    k = 2 * MODEL.kv_layers * MODEL.h_kv * MODEL.d_h * MODEL.kv_elem_bytes  # bytes per token, recomputed here
    assert res.summary["kv_transfer"]["total_bytes"] == pytest.approx(k * done.prompt_len.sum(), rel=1e-12)
    # the decode side streams the prefill's token once the KV is in (process_batch_result_prebuilt)
    assert (done.transfer_end_s <= done.first_token_s).all()
    cached = np.array([{p.rid: p.num_cached_tokens for p in sim.prefill_reqs}[r] for r in done.rid.tolist()])
    long = done[done.prompt_len.to_numpy() - cached > chunk + page]  # computed in two chunks or more
    assert (long.transfer_start_s < long.prefill_token_s).all()  # a chunked prompt's first pages go before it ends
    pushes: dict = {}
    for rid, a, b in sim.log:
        pushes.setdefault(rid, []).append((a, b))
    prompt = dict(zip(done.rid.tolist(), done.prompt_len.tolist()))
    for rid, ranges in pushes.items():
        assert ranges[0][0] == 0 and ranges[-1][1] == prompt[rid]  # the whole prompt, once, in order
        assert all(b1 == a2 for (_, b1), (a2, _) in zip(ranges, ranges[1:]))
        assert all(a < b and b % page == 0 for a, b in ranges[:-1])  # a non-last push: whole pages
        # a chunk is not page-truncated (PrefillAdder.add_one_req): its push rounds down at both ends;
        # the first push also carries a cached prefix
        assert all(b - a < chunk + page for a, b in ranges[1:-1])
    assert (sim.pushes[long.rid.to_numpy()] >= 2).all()  # a chunked prompt streams before it ends
    assert (sim.pushes[done.rid.to_numpy()] == [len(pushes[r]) for r in done.rid.tolist()]).all()
    if running:
        assert sum(p[0].binds for p in pre) > 0  # a ready request waited for a metadata buffer


def test_same_seed_same_result():
    def run(seed):
        pre = [_server("prefill")[:3]]
        dec = [_server("decode")[:3], _server("decode")[:3]]
        return SGLangDisaggSimulation(pre, dec, _workload(80, seed), max_model_len=131072).run()

    a, b, c = run(3), run(3), run(4)
    assert a.requests.equals(b.requests) and json.dumps(a.summary) == json.dumps(b.summary)
    assert not a.requests.equals(c.requests)


def test_refusals_name_the_field():
    with pytest.raises(InputError, match="disaggregation_transfer_backend"):
        _server("prefill", disaggregation_transfer_backend="fake")
    pol, pool, cm, _ = _server("prefill")
    with pytest.raises(InputError, match="decode servers"):  # a prefill server alone never bootstraps
        Simulation([(pol, pool, cm)], fixed_workload([0.0], [10], [2]))


BASE = ["simulate", "--model", "llama-3.1-8b", "--hardware", "h100", "--num-prompts", "20", "--input-len", "3000"]
LAUNCH = "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct"


def test_cli_runs_an_sglang_pair():
    rc, out, err = run_cli(BASE + ["--policy", "sglang", "--prefill-replicas", "1", "--decode-replicas", "2", "--json"])
    assert rc == 0, err
    s = json.loads(out)
    assert s["completed"] == 20 and s["pd"]["gpus"] == 3 and s["pd"]["transfer_backend"] == "mooncake"
    assert s["kv_transfer"]["transfers"] == 20 and s["kv_transfer"]["pushes_per_request"] >= 1
    pre = f"{LAUNCH} --disaggregation-mode prefill --dp 2 --chunked-prefill-size 1024"
    rc, out, err = run_cli(BASE + ["--prefill-cmd", pre, "--decode-cmd", f"{LAUNCH} --disaggregation-mode decode"])
    assert rc == 0, err
    assert "sglang PD" in out and "pushes per request" in out
    rc, out, err = run_cli(BASE + ["--prefill-cmd", pre, "--decode-cmd", LAUNCH, "--json"])
    s = json.loads(out)
    assert s["pd"]["prefill_replicas"] == 2 and s["pd"]["decode_replicas"] == 1
    # 3,000-token prompts in 1,024-token chunks: two chunk pushes and the last (a chunk stays whole
    # when other prompts share its batch only if it is the batch's last)
    assert 3 <= s["kv_transfer"]["pushes_per_request"] < 4
    short = f"{LAUNCH} --context-length 2048"  # the decode server's length binds: every prompt is refused
    rc, out, err = run_cli(BASE + ["--prefill-cmd", LAUNCH, "--decode-cmd", short, "--json"])
    assert rc == 0 and json.loads(out)["num_rejected"] == 20


@pytest.mark.parametrize(
    "extra,field",
    [
        (["--policy", "sglang", "--prefill-replicas", "1", "--decode-replicas", "1", "--page-size", "0"], "page"),
        (["--prefill-cmd", f"{LAUNCH} --disaggregation-mode decode", "--decode-cmd", LAUNCH], "--prefill-cmd"),
        (["--prefill-cmd", LAUNCH, "--decode-cmd", "vllm serve meta-llama/Llama-3.1-8B-Instruct"], "--decode-cmd"),
        (
            ["--prefill-cmd", LAUNCH, "--decode-cmd", f"{LAUNCH} --disaggregation-transfer-backend nixl"],
            "--disaggregation-transfer-backend",
        ),
        (["--engine-cmd", f"{LAUNCH} --disaggregation-mode prefill"], "--disaggregation-mode"),
        (["--prefill-cmd", f"{LAUNCH} --page-size 64", "--decode-cmd", LAUNCH], "--page-size"),
        (["--prefill-cmd", f"{LAUNCH} --kv-cache-dtype fp8_e4m3", "--decode-cmd", LAUNCH], "--kv-cache-dtype"),
        (["--prefill-cmd", f"{LAUNCH} --enable-hierarchical-cache", "--decode-cmd", LAUNCH], "hierarchical"),
        (["--prefill-cmd", f"{LAUNCH} --optimistic-prefill-attempts 2", "--decode-cmd", LAUNCH], "--optimistic"),
        (
            ["--prefill-cmd", LAUNCH, "--decode-cmd", f"{LAUNCH} --disaggregation-decode-enable-radix-cache"],
            "--disaggregation-decode-enable-radix-cache",
        ),
        (
            ["--engine-cmd", f"{LAUNCH} --dp 4", "--prefill-replicas", "1", "--decode-replicas", "1"],
            "-dp",
        ),
    ],
)
def test_cli_errors(extra, field):
    assert_one_line_error(BASE + extra, field)
