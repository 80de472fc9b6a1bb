"""MLA and expert parallelism in a step's price: the shipped MoE configs against their published
sizes, the roofline's ep terms against arithmetic done here, and bad input refused by name."""

from __future__ import annotations

import pytest

from costmodel import cost, deepep, load_hardware
from costmodel.errors import InputError
from costmodel.model import load_model
from costmodel.wideep import constants

DECODE = ([1] * 32, [2048] * 32)
PREFILL = ([3000, 1], [0, 500])


@pytest.mark.parametrize(
    "name, total, active, tol",
    [  # model cards: DeepSeek-V3 671B / 37B activated; Kimi-K2 1.04T / 32B; gpt-oss-120b 116.8B
        ("deepseek-v3", 671e9, 37e9, 0.03),
        ("deepseek-r1", 671e9, 37e9, 0.03),
        ("kimi-k2", 1.04e12, 32.6e9, 0.03),
    ],
)
def test_published_sizes(name, total, active, tol):
    m = load_model(name)
    assert m.P == pytest.approx(total, rel=tol)
    assert m.P_active == pytest.approx(active, rel=tol)


def test_gpt_oss_and_qwen_layouts():
    g = load_model("gpt-oss-120b")
    assert g.P == pytest.approx(116.8e9, rel=0.01)
    assert (g.num_experts, g.experts_per_tok, g.moe_layers, g.h, g.h_kv, g.d_h) == (128, 4, 36, 64, 8, 64)
    q = load_model("qwen3.5-122b-a10b")  # layer_types: 3 linear, 1 full attention, 12 times
    assert (q.kv_layers, q.linear_layers, q.shared_expert_ffn) == (12, 36, 1024)


def test_mla_kv_cache_is_one_latent_per_layer():
    m = load_model("deepseek-v3")
    assert m.is_mla and (m.kv_lora_rank, m.qk_rope_dim, m.d_h, m.v_head_dim) == (512, 64, 192, 128)
    assert m.kv_bytes_per_token == 61 * (512 + 64) * 2
    assert (m.dense_layers, m.moe_layers, m.shared_expert_ffn) == (3, 58, 2048)
    assert load_model("deepseek-ai/DeepSeek-V3").name == "deepseek-v3"


@pytest.mark.parametrize("tp", [2, 8])
def test_mla_attention_coefficients(tp):
    """Decode attention bytes: the whole latent on every rank, whatever tp; prefill FLOPs: 2·h/tp·(192+128) per pair."""
    m, hw = load_model("deepseek-v3"), load_hardware("h200")
    b = cost(m, hw, [1], [1000], tp=tp)
    assert b.op("attention_decode").bytes == pytest.approx(61 * 576 * 2 * 1001)
    p = cost(m, hw, [100], [0], tp=tp)
    pairs = 100 * 101 / 2
    assert p.op("attention_prefill").flops == pytest.approx(61 * 2 * 128 / tp * 320 * pairs)


@pytest.mark.parametrize("q, kv", [DECODE, PREFILL])
def test_ep_equal_tp_moves_experts_not_their_work(q, kv):
    """ep = tp = 8 under uniform routing: each GPU's expert FLOPs and bytes equal the tp-split's; the
    all-to-alls appear and the MoE layers' all-reduce goes."""
    m, hw = load_model("deepseek-v3"), load_hardware("h200")
    a, b = cost(m, hw, q, kv, tp=8), cost(m, hw, q, kv, tp=8, ep=8)
    assert b.op("moe_experts").flops == pytest.approx(a.op("moe_experts").flops)
    assert b.op("moe_experts").bytes == pytest.approx(a.op("moe_experts").bytes)
    assert b.op("allreduce").bytes == pytest.approx(a.op("allreduce").bytes * (2 * 61 - 58) / (2 * 61))
    mode = "low_latency" if len(q) == sum(q) else "normal"
    per_rank = sum(q) / 8
    c = deepep.copies(mode, 1, 8, 8, 256)
    for way, nb in (("dispatch", deepep.dispatch_bytes(7168)), ("combine", deepep.combine_bytes(7168))):
        want = 58 * float(deepep.a2a_time(per_rank, 1, 20, c, nb, constants()[f"deepep_{mode}_{way}"]))
        assert b.op(f"a2a_{way}").time_s == pytest.approx(want)
        assert b.op(f"a2a_{way}").bound == "interconnect"


def test_skew_loads_the_hot_rank_and_eplb_evens_it():
    m, hw = load_model("qwen3-235b-a22b"), load_hardware("h200")
    q, kv = [512] * 8, [0] * 8
    flat = cost(m, hw, q, kv, tp=8, ep=8).op("moe_experts")
    hot = cost(m, hw, q, kv, tp=8, ep=8, skew=1.0).op("moe_experts")
    even = cost(m, hw, q, kv, tp=8, ep=8, skew=1.0, eplb=True).op("moe_experts")
    assert hot.flops > 1.5 * flat.flops
    assert even.flops == pytest.approx(flat.flops)


def test_dp_attention_groups_route_more_tokens():
    """ep = 2·tp: two attention groups' tokens meet at the experts, E/ep experts each, full width."""
    m, hw = load_model("qwen3-235b-a22b"), load_hardware("h200")
    q, kv = [256] * 4, [0] * 4
    b = cost(m, hw, q, kv, tp=4, ep=8)
    rows = 2 * sum(q) * 8 / 8  # G = 2·rows tokens, k = 8 rows each, over 8 ranks
    assert b.op("moe_experts").flops == pytest.approx(94 * 2 * 3 * 4096 * 1536 * rows)


@pytest.mark.parametrize(
    "model, hw, tp, ep, field",
    [
        ("llama-3.1-8b", "h200", 1, 2, "ep"),  # dense
        ("qwen3-235b-a22b", "h200", 4, 3, "ep"),  # divides neither tp nor 128 experts
        ("qwen3-235b-a22b", "a100-80gb", 8, 16, "ep"),  # two nodes without a measured inter-node path
        ("qwen3-235b-a22b", "h200", 4, 0, "ep"),
    ],
)
def test_bad_ep_is_refused_by_name(model, hw, tp, ep, field):
    with pytest.raises(InputError) as e:
        cost(load_model(model), load_hardware(hw), [4], [0], tp=tp, ep=ep)
    assert e.value.field == field


def test_negative_skew_is_refused():
    with pytest.raises(InputError) as e:
        cost(load_model("qwen3-235b-a22b"), load_hardware("h200"), [4], [0], tp=4, ep=4, skew=-1.0)
    assert e.value.field == "skew"


def test_cost_cli_ep_and_hf_id():
    """``chunksim cost`` with --ep: the all-to-all rows and the explanation; a Hugging Face id: a note."""
    import json

    from cli_helpers import assert_one_line_error, run_cli

    argv = ["cost", "--model", "deepseek-ai/DeepSeek-V3", "--hardware", "h200", "--tp", "8", "--q-lens", "64"]
    rc, out, err = run_cli(argv + ["--ep", "8"])
    assert rc == 0, err
    assert "a2a_dispatch" in out and "EP 8: 32 experts a GPU" in out and "MLA:" in out
    assert "shipped config deepseek-v3" in err
    rc, out, _ = run_cli(argv + ["--json"])
    one = json.loads(out)["time_s"]
    rc, out, _ = run_cli(argv + ["--json", "--ep", "8"])
    assert json.loads(out)["time_s"] != one
    short = ["--model", "deepseek-v3"] + argv[3:]
    assert_one_line_error(["cost", *short, "--moe-skew", "1.0"], "--moe-skew")
    assert_one_line_error(["cost", *short, "--ep", "3"], "ep")


def test_mla_projections_stay_off_the_gqa_tile_shapes():
    """Tile-model profiles price MLA's low-rank projections on the roofline, not as a GQA QKV GEMM:
    only the 3 dense layers' gate/up and down projections are tile GEMMs."""
    from costmodel.gemm_tiles import layer_gemms

    m = load_model("deepseek-v3")
    k, n, count = layer_gemms(m, 8)
    assert list(count) == [3, 3]
    assert list(k) == [7168, 18432 / 8] and list(n) == [2 * 18432 / 8, 7168]
