"""The roofline against the seed's formulas, computed independently from the config's symbols."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from costmodel import CostModel, InputError, ShapeStats, cost, load_hardware, load_model


def seed_prefill_flops(m, S):
    """Seed 000: 2PS weight GEMMs + causal attention 4·L·h·d_h summed over positions 1..S."""
    return 2 * m.P * S + 4 * m.L * m.h * m.d_h * S * (S + 1) / 2


@pytest.mark.parametrize(
    "name,S", [("llama-3.1-8b", 32768), ("llama-3.1-8b", 5000), ("qwen3-8b", 12000), ("llama-3.1-70b", 8192)]
)
def test_prefill_is_compute_bound_seed_flops(name, S, h100):
    m = load_model(name)
    b = cost(m, h100, [S], [0])
    assert b.flops == pytest.approx(seed_prefill_flops(m, S), rel=1e-9)
    assert b.time_s == pytest.approx(seed_prefill_flops(m, S) / h100.pi_eff, rel=1e-3)


@pytest.mark.parametrize("n,ctx", [(32, 2048), (8, 10000), (100, 500)])
def test_decode_step_streams_weights_and_kv(llama8b, h100, n, ctx):
    """Seed 000: a decode step streams 2P bytes of weights plus every resident KV element once."""
    expected = (llama8b.P * llama8b.b + n * (ctx + 1) * llama8b.kv_bytes_per_token) / h100.beta_eff
    assert cost(llama8b, h100, [1] * n, [ctx] * n).time_s == pytest.approx(expected, rel=1e-9)


def test_tp2_halves_weight_bytes_and_adds_allreduce(llama8b, h100):
    one = cost(llama8b, h100, [1] * 8, [1000] * 8)
    two = cost(llama8b, h100, [1] * 8, [1000] * 8, tp=2)
    assert two.op("linear").bytes == pytest.approx(one.op("linear").bytes / 2)
    assert two.op("attention_decode").bytes == pytest.approx(one.op("attention_decode").bytes / 2)
    ar = two.op("allreduce")
    rows, H, b, L = 8, llama8b.H, llama8b.b, llama8b.L
    assert ar.bytes == pytest.approx(2 * L * 2 * (2 - 1) / 2 * rows * H * b)
    assert ar.time_s > 0 and ar.bound == "interconnect"


def test_moe_streams_only_touched_experts(h100):
    m = load_model("mixtral-8x7b")
    one_row = cost(m, h100, [1], [0]).op("moe_experts")
    assert one_row.bytes == pytest.approx(m.moe_layers * m.experts_per_tok * m.expert_params * m.b, rel=1e-9)
    wide = cost(m, h100, [4096], [0]).op("moe_experts")
    assert wide.bytes == pytest.approx(m.moe_layers * m.num_experts * m.expert_params * m.b, rel=1e-6)
    assert wide.flops == pytest.approx(2 * 4096 * m.moe_layers * m.experts_per_tok * m.expert_params)


def test_moe_active_flops_per_row(h100):
    m = load_model("qwen3-30b-a3b")
    b = cost(m, h100, [1000], [0])
    weight_flops = sum(o.flops for o in b.operators if not o.name.startswith("attention"))
    assert weight_flops == pytest.approx(2 * m.P_active * 1000, rel=1e-9)


def test_faithful_counting_runs_lm_head_on_sampled_rows_only(llama8b, h100):
    b = cost(llama8b, h100, [2016, 1, 1], [0, 2048, 2048], counting="faithful")
    assert b.op("lm_head").flops == pytest.approx(2 * llama8b.vocab * llama8b.H * 3)
    assert b.op("embedding").flops == 0


def test_bound_labels(cm8b):
    b = cm8b.breakdown(cm8b.shape([4096], [0]))
    assert b.op("linear").bound == "compute"
    d = cm8b.breakdown(cm8b.shape([1] * 4, [4096] * 4))
    assert d.op("linear").bound == "memory" and d.op("attention_decode").bound == "memory"


@settings(max_examples=60, deadline=None)
@given(
    q=st.lists(st.integers(1, 5000), min_size=1, max_size=20),
    dq=st.integers(1, 500),
    dkv=st.integers(1, 5000),
    i=st.integers(0, 19),
    tp=st.sampled_from([1, 2, 4, 8]),
    name=st.sampled_from(["llama-3.1-8b", "qwen3-30b-a3b", "mixtral-8x7b", "qwen3.5-122b-a10b"]),
)
def test_cost_monotone_in_q_and_kv(q, dq, dkv, i, tp, name):
    m, hw = load_model(name), load_hardware("h100")
    cm = CostModel(m, hw, tp)
    kv = [100 * j for j in range(len(q))]
    i %= len(q)
    base = cm.time(cm.shape(q, kv))
    more_q, more_kv = list(q), list(kv)
    more_q[i] += dq
    more_kv[i] += dkv
    assert cm.time(cm.shape(more_q, kv)) >= base
    assert cm.time(cm.shape(q, more_kv)) >= base


def test_decode_run_equals_stepping(cm8b):
    n, kv0 = 7, 7 * 3001
    run = cm8b.decode_run(n, kv0, 50)
    step = [cm8b.time(ShapeStats(n, n, 0.0, 0.0, kv0 + n * j)) for j in range(50)]
    assert np.array_equal(run, np.array(step))


@pytest.mark.parametrize("tp", [3, 5, 64])
def test_tp_must_divide_heads(llama8b, h100, tp):
    with pytest.raises(InputError, match="tp"):
        CostModel(llama8b, h100, tp)


def test_bad_shapes(llama8b, h100):
    with pytest.raises(InputError, match="kv_lens"):
        cost(llama8b, h100, [1, 2], [0])
    with pytest.raises(InputError, match="q_lens"):
        cost(llama8b, h100, [0], [0])
    with pytest.raises(InputError, match="kv_lens"):
        cost(llama8b, h100, [1], [-1])


@pytest.mark.parametrize("name", ["h100", "h200", "a100-80gb", "l40s"])
def test_hardware_profiles_load(name):
    hw = load_hardware(name)
    assert 0 < hw.pi_eff <= hw.peak_flops and 0 < hw.beta_eff <= hw.peak_bandwidth


def test_unknown_hardware_and_keys(tmp_path):
    with pytest.raises(InputError, match="h100"):
        load_hardware("tpu-v9")
    p = tmp_path / "x.yaml"
    p.write_text("name: x\nmemory_bytes: 1\npeak_flops: 1\npeak_bandwidth: 1\npi_eff: 1\nbeta_eff: 1\nwarp_speed: 9\n")
    with pytest.raises(InputError, match="warp_speed"):
        load_hardware(str(p))


# --- hybrid attention: KV attention over the full-attention layers only, plus linear_attention ---


@pytest.fixture(scope="module")
def cm_hybrid(h100):
    return CostModel(load_model("qwen3.5-122b-a10b"), h100, 8)


def test_hybrid_attention_counts_only_full_attention_layers(cm_hybrid):
    m = cm_hybrid.model
    assert cm_hybrid.attn_coef == 4 * 12 * (m.h // 8) * m.d_h
    assert cm_hybrid.kv_coef == 2 * 12 * 1 * m.d_h * m.b  # 2 KV heads < tp=8: one replicated head per GPU
    one = cm_hybrid.breakdown(cm_hybrid.shape([1000], [0])).op("linear_attention")
    two = cm_hybrid.breakdown(cm_hybrid.shape([1000, 1000], [5000, 0])).op("linear_attention")
    assert two.flops == pytest.approx(2 * one.flops) and two.bytes == pytest.approx(2 * one.bytes)
    wide = cm_hybrid.breakdown(cm_hybrid.shape([4000], [0])).op("linear_attention")
    assert wide.flops == pytest.approx(4 * one.flops) and wide.bytes == one.bytes  # state: once per sequence
    # 36 layers x 8 value heads per GPU x 128 x 128 x 6 FLOPs per row, plus the short convolution
    assert one.flops == pytest.approx(1000 * 36 * (6 * 8 * 128 * 128 + 2 * (2 * 2048 + 8192) / 8 * 4))


def test_plain_models_have_no_linear_attention(cm8b):
    names = [o.name for o in cm8b.breakdown(cm8b.shape([100, 1], [0, 100])).operators]
    assert "linear_attention" not in names


def test_hybrid_decode_run_equals_stepping(cm_hybrid):
    n, kv0 = 33, 33 * 40001
    run = cm_hybrid.decode_run(n, kv0, 40)
    step = [cm_hybrid.time(ShapeStats(n, n, 0.0, 0.0, kv0 + n * j)) for j in range(40)]
    assert np.array_equal(run, np.array(step))


@settings(max_examples=50, deadline=None)
@given(
    q=st.lists(st.integers(1, 5000), min_size=49, max_size=200),
    kv0=st.integers(0, 40000),
    bound=st.sampled_from([0.5, 1.0, 48.0]),
)
def test_wide_and_narrow_shape_reductions_agree(q, kv0, bound):
    from costmodel.roofline import ShapeStats

    kv = [kv0 + 7 * i for i in range(len(q))]
    wide = ShapeStats.of(q, kv, bound)
    halves = [ShapeStats.of(q[i : i + 40], kv[i : i + 40], bound) for i in range(0, len(q), 40)]
    assert wide.rows == sum(h.rows for h in halves) and wide.seqs == len(q)
    for f in ("prefill_pairs", "prefill_kv", "decode_kv", "decode_pairs"):
        assert getattr(wide, f) == sum(getattr(h, f) for h in halves), f


@pytest.mark.parametrize("model", ["llama-3.1-8b", "mixtral-8x7b", "qwen3.5-122b-a10b"])
@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"kernel_floor_s": 4e-5, "kernel_overhead_s": 3e-6},
        {"roofline_combine": "quadrature", "gemm_tile_rows": 64},
        {"beta_attn": 1e16},
    ],
)  # compute-bound decodes: the full max path
def test_decode_runs_equal_stepping_bit_for_bit(h100, model, changes):
    cm = CostModel(load_model(model), h100.replace(**changes))
    for n, kv0, steps in [
        (1, 17, 70),
        (13, 13 * 40000 + 5, 30),
        (200, 200 * 900, 9),
        (300, 300 * 20000, 12),
    ]:  # the last past the table
        step = [cm.time(ShapeStats(n, n, 0.0, 0.0, kv0 + n * j)) for j in range(steps)]
        assert np.array_equal(cm.decode_run(n, float(kv0), steps), np.array(step))
        ends = [sum(step[: j + 1], 5.0) for j in range(steps)]  # stepping's clock, one addition per step
        assert cm.decode_ends_list(n, float(kv0), steps, 5.0) == ends
        assert cm.decode_run_ends(n, float(kv0), steps, 5.0).tolist() == ends
        lead = [sum(step[1 : j + 1], 5.0) for j in range(steps)]  # t in place of the first duration
        assert cm.decode_run_ends(n, float(kv0), steps, 5.0, lead=True).tolist() == lead


@pytest.mark.parametrize("hw", ["h100", "a100-sxm", "l40s", "b200"])
def test_decode_run_ends_from_its_tables_are_stepping_bits(hw):
    """decode_run_ends reads n ≤ 2 from a table with the fixed part added (built again when the
    base table grows); either way its ends are stepping's clock, for fitted profiles too."""
    from costmodel import load_hardware

    cm = CostModel(load_model("llama-3.1-8b"), load_hardware(hw))
    for n, kv0, steps in [(1, 10, 50), (2, 2 * 3000, 40), (1, 9000, 300), (2, 2 * 70000, 20), (3, 999, 10), (1, 5, 3)]:
        step = [cm.time(ShapeStats(n, n, 0.0, 0.0, kv0 + n * j)) for j in range(steps)]
        assert cm.decode_run_ends(n, float(kv0), steps, 0.25).tolist() == [
            sum(step[: j + 1], 0.25) for j in range(steps)
        ], (n, kv0)


@pytest.mark.parametrize("name", ["a100-sxm", "b200", "l40s"])
@pytest.mark.parametrize("host", [{}, {"host_step_s": 3e-3, "host_per_seq_s": 2e-6}])
def test_unit_model_decode_runs_equal_stepping_bit_for_bit(name, host):
    """The calibrated profiles' unit decode model, priced as arrays: every pass's duration and
    every end time the bits of pricing each pass with ``time`` (qwen3-32b at tp 2 on the L40S,
    n = 3, has a pass where numpy's square and Python's power differ by an ulp)."""
    hw = load_hardware(name).replace(**host)
    rng = np.random.default_rng(7)
    for model, tp in (("llama-3.1-8b", 1), ("qwen3-32b", 2), ("mixtral-8x7b", 2)):
        for overlap in (False, True):
            cm = CostModel(load_model(model), hw, tp).with_host_overlap(overlap)
            assert cm.units
            for n in (1, 3, 7, 64, 1024):
                kv0 = n * int(rng.integers(1, 30000)) if n != 3 else 46002
                step = [cm.time(ShapeStats(n, n, 0.0, 0.0, kv0 + n * j)) for j in range(80)]
                assert list(cm.decode_run(n, kv0, 80)) == step
                for steps in (5, 12, 40):
                    ends = [sum(step[: j + 1], 1.5) for j in range(steps)]
                    assert cm.decode_ends_list(n, float(kv0), steps, 1.5) == ends
                    assert (
                        cm.decode_ends_list(n, float(kv0), steps, 1.5, stop=ends[steps // 2]) == ends[: steps // 2 + 1]
                    )


@pytest.mark.parametrize(
    "changes",
    [{}, {"kernel_floor_s": 4e-5, "kernel_overhead_s": 3e-6}, {"roofline_combine": "quadrature"}, {"beta_attn": 1e16}],
)
def test_decode_ends_are_stepping_sums(h100, changes):
    cm = CostModel(load_model("llama-3.1-8b"), h100.replace(**changes))
    t, want = 12.345, []
    for j in range(25):
        t += cm.time(ShapeStats(9, 9, 0.0, 0.0, 9 * 777.0 + 9 * j))
        want.append(t)
    assert cm.decode_ends_list(9, 9 * 777.0, 25, 12.345) == want
    assert cm.decode_ends_list(9, 9 * 777.0, 25, 12.345, stop=want[10]) == want[:11]  # the steps starting before stop
    assert cm.decode_ends_list(9, 9 * 777.0, 25, 12.345, stop=want[10] + 1e-9) == want[:12]


@settings(max_examples=300, deadline=None)
@given(
    seqs=st.lists(st.tuples(st.integers(1, 5000), st.integers(0, 60000)), min_size=0, max_size=60),
    decodes=st.integers(0, 300),
    extra=st.integers(0, 10**6),
    variant=st.integers(0, 2),
)
def test_step_time_equals_time_of_shape(h100, seqs, decodes, extra, variant):
    hw = [
        h100,
        h100.replace(kernel_floor_s=4e-5, kernel_overhead_s=3e-6, gemm_tile_rows=64),
        h100.replace(roofline_combine="quadrature", pi_attn=h100.pi_eff / 50),
    ][variant]
    if not seqs and not decodes:
        return
    cm = CostModel(load_model("llama-3.1-8b"), hw, counting="faithful" if variant == 1 else None)
    q, kv = [s[0] for s in seqs], [s[1] for s in seqs]
    tokens = decodes + extra if decodes else 0
    assert cm.step_time(q, kv, decodes, tokens) == cm.time(cm.shape(q, kv, decodes, tokens))


@pytest.mark.parametrize("tp,seqs", [(2, 8), (4, 100), (8, 1)])
def test_faithful_tp_gathers_logits_and_reduces_the_embedding(llama8b, h100, tp, seqs):
    """vLLM at tp > 1: LogitsProcessor._gather_logits all-gathers each rank's seqs x vocab/tp logits
    (ring: (tp-1)/tp of the gathered bytes per link), and VocabParallelEmbedding.forward all-reduces
    the embedding: 2L + 1 all-reduces. The seed's counting keeps 2L and no gather."""
    q, kv = [1] * seqs, [500] * seqs
    seed = cost(llama8b, h100, q, kv, tp=tp)
    faith = cost(llama8b, h100, q, kv, tp=tp, counting="faithful")
    assert "logits_gather" not in {o.name for o in seed.operators}
    H, b, L, V = llama8b.H, llama8b.b, llama8b.L, llama8b.vocab
    ring = 2 * (tp - 1) / tp
    assert faith.op("allreduce").bytes == pytest.approx((2 * L + 1) * ring * seqs * H * b)
    assert seed.op("allreduce").bytes == pytest.approx(2 * L * ring * seqs * H * b)
    g = faith.op("logits_gather")
    size = (tp - 1) / tp * V * b * seqs
    assert g.bytes == pytest.approx(size)
    assert g.time_s == pytest.approx(size / h100.interconnect_bandwidth + (tp - 1) * h100.interconnect_latency_s)
    assert faith.time_s == pytest.approx(sum(o.time_s for o in faith.operators))
    one = cost(llama8b, h100, q, kv, counting="faithful")
    assert "logits_gather" not in {o.name for o in one.operators}


def test_logits_gather_takes_the_nccl_regimes_not_the_one_shot(llama8b, h100):
    """With all-reduce regimes whose first two are one-shot (custom all-reduce, allreduce_oneshot_tokens),
    the gather (PyNCCL) is priced at the cheapest of the others, at any size."""
    regimes = [1e-6, 1e12, 1e-6, 1e12, 30e-6, 20e9, 60e-6, 40e9]
    hw = h100.replace(allreduce_regimes={2: regimes}, allreduce_oneshot_tokens=512)
    for seqs in (1, 64, 4000):
        g = cost(llama8b, hw, [1] * seqs, [100] * seqs, tp=2, counting="faithful").op("logits_gather")
        size = llama8b.vocab * llama8b.b * seqs / 2
        assert g.time_s == pytest.approx(min(30e-6 + size / 20e9, 60e-6 + size / 40e9))


@pytest.mark.parametrize("hw", ["h100", "a100-sxm", "l40s"])
def test_a_prefill_steps_end_is_stepping_clock_memoized_or_not(hw):
    """prefill_step_end memoizes a prefill alone by shape and computes one beside decodes (or with
    a decode Σ(kv + 1) given, which a prefill alone never has); at any
    start, again and again, it is the start plus stepping's step_time (one addition)."""
    from costmodel import load_hardware

    cm = CostModel(load_model("llama-3.1-8b"), load_hardware(hw))
    rng = np.random.default_rng(3)
    for _ in range(300):
        m, q, kv = int(rng.choice([0, 0, 1, 5])), int(rng.integers(2, 3000)), int(rng.choice([0, 0, 512, 4000]))
        d0, t = int(rng.choice([m, 1])) * int(rng.integers(100, 5000)), float(rng.uniform(0, 1e4))
        assert cm.prefill_step_end(m, d0, q, kv, t) == t + cm.step_time((q,), (kv,), m, d0 + m), (m, d0, q, kv)
