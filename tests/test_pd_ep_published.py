"""SGLang's published PD-disaggregated DeepSeek-V3 figures on 12 × 8 H100 (LMSYS blog, May 2025),
priced with the assumptions in benchmarks/pd_ep_published.py, and the three physical facts the
decode figure rests on: MLA decode's absorbed FLOPs (against AIConfigurator's measured H100 MLA
kernel), DeepEP low-latency mode over RDMA alone, and two-batch overlap's micro-batches each
reading the weights. The blog's TBO ablation (+25.5 %) is reported in docs/data-parallel.md, not
asserted: the model gives +16 % (the gap is discussed there)."""

from pathlib import Path

import pandas as pd
import pytest

from benchmarks.pd_ep_published import PUBLISHED, decode_per_node, prefill_per_node
from costmodel import CostModel, deepep, load_hardware, load_model
from costmodel.data_parallel import LockstepCost
from costmodel.errors import InputError
from costmodel.lockstep_ep import ExpertParallelism

MLA_TABLE = (
    Path(__file__).resolve().parents[2]
    / "shared/data/kernels/aiconfigurator/h200_sxm/sglang/0.5.1.post1/generation_mla_perf.txt"
)


def test_prefill_at_2000_token_prompts_within_15_percent():
    got = prefill_per_node("h100", tbo=True)
    assert got == pytest.approx(PUBLISHED["prefill_headline"], rel=0.15)
    assert got == pytest.approx(PUBLISHED["prefill_2k"], rel=0.15)


def test_decode_at_256_sequences_a_device_within_15_percent():
    assert decode_per_node("h100", tbo=True) == pytest.approx(PUBLISHED["decode"], rel=0.15)


def test_mla_decode_prices_the_absorbed_flops():
    """At tp 1 (DP attention) the absorbed kernel's 2·h·(2r + d_r) FLOPs a pair, 3.4 times the
    expanded form's, and the decode term uses them; prefill keeps the expanded form."""
    m = load_model("deepseek-v3")
    cm = CostModel(m, load_hardware("h100"), 1)
    per_layer = 2 * m.h * (2 * m.kv_lora_rank + m.qk_rope_dim)
    assert cm.dec_coef == m.kv_layers * per_layer
    assert cm.attn_coef == m.kv_layers * 2 * m.h * (m.d_h + m.v_head_dim)
    br = cm.breakdown(cm.shape([1] * 256, [2047] * 256))
    assert br.op("attention_decode").flops == pytest.approx(cm.dec_coef * 256 * 2048)


@pytest.mark.skipif(not MLA_TABLE.is_file(), reason="AIConfigurator tables ../shared/data/kernels absent")
def test_mla_decode_attention_near_the_measured_h100_kernel():
    """AIConfigurator's H100 SGLang MLA decode kernel, 128 heads (tp 1), bf16 cache, 256 sequences
    attending to isl + step = 2,048 tokens: the spec-sheet profile's decode attention within 15 %
    (the expanded form's FLOPs would leave it memory-bound, 29 % short)."""
    d = pd.read_csv(MLA_TABLE)
    row = d[
        (d.num_heads == 128)
        & (d.tp_size == 1)
        & (d.batch_size == 256)
        & (d.step == 2047)
        & (d.kv_cache_dtype == "float16")
    ]
    measured = float(row.latency.iloc[0]) * 1e-3 * 61  # ms a layer → s a step, DeepSeek-V3's 61 layers
    m = load_model("deepseek-v3")
    cm = CostModel(m, load_hardware("h100"), 1)
    got = cm.breakdown(cm.shape([1] * 256, [2047] * 256)).op("attention_decode").time_s
    assert got == pytest.approx(measured, rel=0.15)


def test_low_latency_over_rdma_alone_sends_every_off_gpu_copy():
    """DeepEP before NVLink for low-latency mode: k·(ep-1)/ep copies over the NIC, not k·(N-1)/N."""
    assert deepep.copies("low_latency", 8, 8, 8, 256) == 8 * 7 / 8
    assert deepep.copies("low_latency", 8, 8, 8, 256, ep=64) == 8 * 63 / 64
    assert deepep.copies("normal", 8, 8, 8, 256, ep=64) == deepep.copies("normal", 8, 8, 8, 256)
    m, h = load_model("deepseek-v3"), load_hardware("h100")
    rank = CostModel(m, h, 1)
    nv = LockstepCost(rank, 16, "sglang", ExpertParallelism(16, "deepep", "low_latency")).experts
    rdma = LockstepCost(rank, 16, "sglang", ExpertParallelism(16, "deepep", "low_latency", ll_nvlink=False)).experts
    assert rdma.tokens_s(16 * 128, 128, False) > nv.tokens_s(16 * 128, 128, False)
    with pytest.raises(InputError, match="ll_nvlink"):
        LockstepCost(rank, 8, "sglang", ExpertParallelism(8, "deepep", ll_nvlink=False))
