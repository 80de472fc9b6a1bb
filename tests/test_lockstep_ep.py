"""Expert parallelism in a lockstep data-parallel group (costmodel/lockstep_ep.py): each term
recomputed from the single-replica EP pricing (costmodel/expert_parallel.py, an independent
implementation that assumes every rank carries the same batch) or by hand."""

import numpy as np
import pytest

from costmodel import deepep
from costmodel.data_parallel import LockstepCost, moe_layers_s
from costmodel.errors import InputError
from costmodel.hardware import load_hardware
from costmodel.lockstep_ep import HOPPER_SMS, ExpertParallelism
from costmodel.model import load_model
from costmodel.roofline import CostModel
from experiments.engines import build_cluster
from simcore.simulation import Simulation
from workloads.workload import Workload

MOE = "qwen3-30b-a3b"
SGL = "python -m sglang.launch_server --model-path Qwen/Qwen3-30B-A3B --tp 4 --dp 4 --enable-dp-attention"


def _rest(rank, shapes):
    return max(rank.step_time(q, kv) - moe_layers_s(rank, sum(q), len(q)) for q, kv in shapes)


@pytest.mark.parametrize("hw,tp,dp", [("h100", 1, 4), ("h100-sxm", 1, 8), ("h200", 1, 2)])
def test_equal_ranks_price_as_the_single_replica_ep_model(hw, tp, dp):
    """Every rank the same shape: the group's experts and DeepEP terms are CostModel(ep = dp·tp)'s
    (which routes rows·ep/tp tokens), the rest is the rank's step without its MoE layers."""
    m, h = load_model(MOE), load_hardware(hw)
    n = tp * dp
    rank, single = CostModel(m, h, tp), CostModel(m, h, tp, ep=n)
    for q, kv in (([1] * 40, list(range(500, 540))), ([3000], [0]), ([1] * 8 + [700], [900] * 8 + [0])):
        shapes = [(q, kv)] * dp
        br = single.breakdown(single.shape(q, kv))
        experts = br.op("moe_experts").time_s
        a2a = br.op("a2a_dispatch").time_s + br.op("a2a_combine").time_s
        want = _rest(rank, shapes) + experts + a2a
        got = LockstepCost(rank, dp, "sglang", ExpertParallelism(n, "deepep")).step_time(shapes)
        assert got == pytest.approx(want, rel=1e-9)
        # by hand: the hot rank's FLOPs and bytes under uniform routing
        rows_all, k, E = sum(q) * dp, m.experts_per_tok, m.num_experts
        assert br.op("moe_experts").flops == pytest.approx(m.moe_layers * 6 * m.H * m.expert_ffn * rows_all * k / n)
        touched = E / n * (1 - (1 - k / E) ** rows_all)
        assert br.op("moe_experts").bytes == pytest.approx(m.moe_layers * m.w_b * 3 * m.H * m.expert_ffn * touched)


def test_allgather_backend_moves_every_token_over_the_group():
    """vLLM's allgather_reducescatter / SGLang's none: an all-gather + reduce-scatter of Σ rows
    per MoE layer over the n GPUs (one all-reduce's worth), experts on the hot rank."""
    m, h = load_model(MOE), load_hardware("h100")
    tp, dp = 2, 4
    rank = CostModel(m, h, tp)
    wide = CostModel(m, h, tp * dp)  # the group's collectives
    a, b = ([1] * 30, list(range(100, 130))), ([2000], [0])
    calls = 2 * m.L + (h.counting != "seed")
    cost = LockstepCost(rank, dp, "vllm", ExpertParallelism(tp * dp))
    gather = wide.allreduce_s(4060) * m.moe_layers / calls
    want = _rest(rank, [a, b]) + cost.experts.experts_s(4060) + gather
    assert cost.step_time([a, b, a, b]) == pytest.approx(want, rel=1e-12)
    assert gather > 0 and cost.experts.experts_s(4060) > cost.experts.experts_s(2030) > 0


def test_deepep_auto_mode_follows_the_gathered_forward_mode_and_the_busiest_rank():
    """SGLang --deepep-mode auto: normal when any rank holds a prefill chunk, else low-latency;
    the all-to-all moves the busiest rank's tokens."""
    m, h = load_model(MOE), load_hardware("h100")
    rank = CostModel(m, h, 1)
    dec, pre = ([1] * 64, [1000] * 64), ([1] * 63 + [500], [1000] * 63 + [0])

    def cost(mode):
        return LockstepCost(rank, 4, "sglang", ExpertParallelism(4, "deepep", mode))

    assert cost("auto").step_time([dec] * 4) == cost("low_latency").step_time([dec] * 4)
    mixed = [dec, dec, pre, None]
    assert cost("auto").step_time(mixed) == cost("normal").step_time(mixed)
    assert cost("normal").step_time([dec] * 4) != cost("low_latency").step_time([dec] * 4)
    layers = cost("auto").experts
    busy = layers.tokens_s(64 * 4, 64, False)
    p = deepep.copies("low_latency", 1, h.gpus_per_node, m.experts_per_tok, m.num_experts)
    assert p == pytest.approx(m.experts_per_tok * 7 / 8)  # one node: k·(R-1)/R copies leave the GPU
    assert layers.tokens_s(64 * 4, 128, False) > busy  # more tokens on the busiest rank, a longer all-to-all


def test_skew_loads_one_rank_and_eplb_spreads_it():
    m, h = load_model(MOE), load_hardware("h100")
    rank = CostModel(m, h, 1)
    shapes = [([2048], [0])] * 8

    def step(**kw):
        return LockstepCost(rank, 8, "sglang", ExpertParallelism(8, "deepep", **kw)).step_time(shapes)

    uniform, skewed, balanced = step(), step(skew=1.0), step(skew=1.0, eplb=True)
    assert skewed > balanced >= uniform * (1 - 1e-12)
    # the hot rank's rows: the heaviest contiguous block of E/ep experts of a Zipf(1) law
    w = np.arange(1, m.num_experts + 1, dtype=float) ** -1.0
    share = (w / w.sum()).reshape(8, -1).sum(axis=1).max()
    layers = LockstepCost(rank, 8, "sglang", ExpertParallelism(8, "deepep", skew=1.0)).experts
    fl_hot = m.moe_layers * 6 * m.H * m.expert_ffn * 8 * 2048 * m.experts_per_tok * share
    assert layers.experts_s(8 * 2048) >= fl_hot / (h.pi_eff * (rank.q_ratio or 1.0)) * (1 - 1e-9)


def test_two_batch_overlap_hides_the_smaller_of_compute_and_communication():
    """Each micro-batch priced as a plain step of its own shape (SGLang's cut, written out by hand:
    one 4,096-token prompt in two chunks of 2,048, the second after the first; 64 decodes as 32 + 32),
    then compute beside communication."""
    m, h = load_model(MOE), load_hardware("h100")
    rank = CostModel(m, h, 1)
    cases = (
        ([([4096], [0])] * 4, [([2048], [0]), ([2048], [2048])], True),
        ([([1] * 64, [1000] * 64)] * 4, [([1] * 32, [1000] * 32)] * 2, False),
    )
    plain = LockstepCost(rank, 4, "sglang", ExpertParallelism(4, "deepep"))
    tbo = LockstepCost(rank, 4, "sglang", ExpertParallelism(4, "deepep", tbo=True))
    for shapes, halves, normal in cases:
        work = comm = 0.0
        for half in halves:
            rows = sum(half[0])
            c = plain.experts.tokens_s(4 * rows, rows, normal)
            comm += c
            work += plain.step_time([half] * 4) - c
        s = HOPPER_SMS / (HOPPER_SMS - 20) if normal else 1.0
        assert tbo.step_time(shapes) == pytest.approx(max(s * work, comm) + min(work, comm) / 2, rel=1e-12)
    # a memory-bound decode reads the weights once a micro-batch: its compute grows under TBO
    dec = cases[1][0]
    assert tbo.step_time(dec) > plain.step_time(dec) - plain.experts.tokens_s(4 * 64, 64, False)
    one = [([1], [100])] + [None] * 3  # one token cannot be split in two micro-batches
    assert tbo.step_time(one) == plain.step_time(one)


@pytest.mark.parametrize(
    ("q", "want"),
    [
        ([1] * 5, ([1, 1], [1, 1, 1])),  # decode: n // 2 sequences
        ([100, 100, 100, 100], ([100, 100], [100, 100])),  # balanced at a sequence boundary
        ([1000, 10, 10], ([510], [490, 10, 10])),  # 1000 | 20 is outside 48-52 %: cut at half the tokens
        ([600, 400, 20], ([510], [90, 400, 20])),
    ],
)
def test_micro_batches_cut_as_sglang_does(q, want):
    from costmodel.lockstep_ep import tbo_halves

    kv = [7] * len(q)
    (qa, kva), (qb, kvb) = tbo_halves(q, kv)
    assert (qa, qb) == want
    assert sum(qa) + sum(qb) == sum(q)
    if len(qa) + len(qb) > len(q):  # the straddling sequence's second part sits after its first
        assert kvb[0] == kva[-1] + qa[-1]
    assert tbo_halves([1], [0]) is None


def test_bad_layouts_are_refused():
    m, h = load_model(MOE), load_hardware("h100")
    rank = CostModel(m, h, 1)
    with pytest.raises(InputError, match="ep_size"):
        LockstepCost(rank, 4, "sglang", ExpertParallelism(3))  # does not divide 4 GPUs
    with pytest.raises(InputError, match="ep_size"):
        LockstepCost(rank, 4, "sglang", ExpertParallelism(2, "deepep"))  # DeepEP spans the group
    with pytest.raises(InputError, match="moe_a2a_backend"):
        ExpertParallelism(4, "pplx")
    with pytest.raises(InputError, match="deepep_mode"):
        ExpertParallelism(4, "deepep", "fast")
    with pytest.raises(InputError, match="moe_a2a_backend"):  # 16 GPUs over 2 nodes without DeepEP constants
        LockstepCost(CostModel(m, load_hardware("a100-sxm"), 1), 16, "sglang", ExpertParallelism(16, "deepep"))


def test_a_dp_ep_simulation_completes_and_repeats():
    m, h = load_model(MOE), load_hardware("h100")
    rng = np.random.default_rng(3)
    n = 200
    wl = Workload(np.cumsum(rng.exponential(1 / 20, n)), rng.integers(100, 3000, n), rng.integers(5, 200, n))
    flags = {"enable_dp_attention": True, "ep_size": 4, "moe_a2a_backend": "deepep"}

    def run():
        engines, router, max_len = build_cluster("sglang", m, h, 1, flags, 4, "round_robin")
        return Simulation(engines, wl, max_model_len=max_len, router=router, check=True).run()

    a, b = run(), run()
    assert a.summary["completed"] == n and a.requests.equals(b.requests)
    engines, router, _ = build_cluster("sglang", m, h, 1, flags, 4, "round_robin")
    assert router.lockstep.experts is not None and router.lockstep.experts.ep.backend == "deepep"


@pytest.mark.parametrize(
    "line,want",
    [
        (
            "vllm serve Qwen/Qwen3-30B-A3B -dp 4 -ep --all2all-backend deepep_low_latency --enable-eplb",
            ExpertParallelism(4, "deepep", "low_latency", 0.0, True),
        ),
        ("vllm serve Qwen/Qwen3-30B-A3B -dp 2 -tp 2 --enable-expert-parallel", ExpertParallelism(4)),
        ("vllm serve Qwen/Qwen3-30B-A3B -dp 2 --all2all-backend pplx -ep", ExpertParallelism(2)),
        ("vllm serve Qwen/Qwen3-30B-A3B -dp 2 --all2all-backend deepep_high_throughput", None),  # no EP: no a2a kernels
        (f"{SGL} --ep 4", ExpertParallelism(4)),
        (f"{SGL} --ep-size 2 --moe-a2a-backend deepep", ExpertParallelism(4, "deepep")),  # ep_size := tp_size
        (
            f"{SGL} --moe-a2a-backend deepep --deepep-mode normal --enable-two-batch-overlap",
            ExpertParallelism(4, "deepep", "normal", tbo=True),
        ),
        (f"{SGL} --deepep-mode low_latency", None),  # the mode without DeepEP changes nothing
    ],
)
def test_engine_lines_set_the_groups_expert_parallelism(line, want):
    from experiments.engine_cmd import parse_engine_cmd

    cmd = parse_engine_cmd(line)
    m, h = load_model(MOE), load_hardware("h100")
    if cmd.policy == "vllm":
        engines, router, _ = build_cluster("vllm", m, h, cmd.tp or 1, cmd.flags, cmd.dp, "vllm_dp")
    else:
        engines, router, _ = build_cluster("sglang", m, h, cmd.tp // cmd.dp, cmd.flags, cmd.dp, "round_robin")
    layers = router.lockstep.experts
    assert (layers.ep if layers is not None else None) == want


def test_simulate_shows_the_expert_layout_in_force():
    from cli_helpers import run_cli

    line = f"{SGL} --moe-a2a-backend deepep --enable-two-batch-overlap"
    rc, out, err = run_cli(["simulate", "--engine-cmd", line, "--hardware", "h100", "--num-prompts", "20"])
    assert rc == 0, err
    row = next(r for r in out.splitlines() if r.startswith("expert_parallel"))
    assert "ep 4 of 4 GPUs" in row and "DeepEP auto" in row and "two-batch overlap" in row
    assert "tokens by DeepEP (auto mode)" in err  # the pasted line's note
