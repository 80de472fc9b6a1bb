"""SGLang's published wide-EP prefill throughput (LMSYS blog, May 2025: DeepSeek-V3 on 4 nodes of 8
H100, EP 32, DP attention, 16,384 tokens a device, 4K prompts, DeepEP normal, two-batch overlap:
50,302 tokens/s per node), reproduced by a simulated prefill pool; assumptions and the other
profile's figure in benchmarks/ep_prefill_published.py and docs/data-parallel.md."""

import pytest

from benchmarks.ep_prefill_published import GPUS_PER_NODE, PER_RANK, PROMPT, PUBLISHED, per_node_throughput
from costmodel import load_hardware, load_model
from costmodel.lockstep_ep import HOPPER_SMS
from costmodel.roofline import CostModel


def test_prefill_pool_within_15_percent_of_the_blog():
    simulated, _ = per_node_throughput("h100", tbo=True, steps=2)
    assert simulated == pytest.approx(PUBLISHED["default"], rel=0.15)
    assert simulated == pytest.approx(PUBLISHED["perfect_eplb"], rel=0.15)


def test_the_figure_is_one_ep32_step_with_two_batch_overlap():
    """Recomputed from the single-replica EP pricing (CostModel(ep=32) on a rank of tp 1, every rank
    equal): W the step without DeepEP, C its dispatch + combine, each summed over the two
    micro-batches of 2 prompts, TBO max(s·W, C) + min(W, C)/2 with DeepEP normal mode's 20 of 132
    SMs taken from the compute."""
    cm = CostModel(load_model("deepseek-v3"), load_hardware("h100"), 1, ep=32)
    half = cm.breakdown(cm.shape([PROMPT] * 2, [0] * 2))
    comm = 2 * (half.op("a2a_dispatch").time_s + half.op("a2a_combine").time_s)
    work = 2 * half.time_s - comm
    br = cm.breakdown(cm.shape([PROMPT] * 4, [0] * 4))
    s = HOPPER_SMS / (HOPPER_SMS - 20)
    step = max(s * work, comm) + min(work, comm) / 2
    simulated, priced = per_node_throughput("h100", tbo=True, steps=1)
    assert simulated == pytest.approx(GPUS_PER_NODE * PER_RANK / step, rel=1e-9) and priced == pytest.approx(simulated)
    plain, _ = per_node_throughput("h100", tbo=False, steps=1)
    assert plain == pytest.approx(GPUS_PER_NODE * PER_RANK / br.time_s, rel=1e-9)
