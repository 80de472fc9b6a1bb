"""Engine execution (costmodel/execution.py, policies/engine_execution.py): each engine's CUDA-graph
defaults against its source and a resolved vLLM config, and the price of a step against the regime's
arithmetic done here (launches counted from the Llama layer, padding from the seed's GEMM FLOPs)."""

import json
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import assert_one_line_error, run_cli

from costmodel import CostModel, load_hardware, load_model
from costmodel.errors import InputError
from costmodel.execution import LAUNCH_S, Execution
from experiments.engine_cmd import parse_engine_cmd
from experiments.engines import build_cluster, build_engine
from policies.engine_execution import (
    sglang_decode_max_bs,
    sglang_decode_sizes,
    sglang_execution,
    sglang_prefill_sizes,
    vllm_capture_sizes,
    vllm_execution,
)
from policies.sglang_config import SGLangConfig
from policies.vllm import VLLMConfig
from simcore.simulation import Simulation, fixed_workload

RUNS = Path(__file__).resolve().parents[2] / "shared" / "data" / "validation" / "llmservingsim" / "runs"
GiB = 1 << 30
L = 32  # Llama-3.1-8B's layers
EAGER = L * 10 + 2  # per layer: 2 RMSNorms, QKV, rotary, KV write, attention, O, gate/up, SiLU, down; embed, norm
PIECEWISE = L * 2 + (L + 1)  # attention and KV write outside the graph, one replay per piece
FULL = 1


def test_vllm_capture_sizes_are_those_a_vllm_run_resolved():
    """LLMServingSim's RTX 4090 meta.json records the compilation config vLLM (0.19) resolved for
    that run; the sizing code is the same in 0.33 (VllmConfig._set_cudagraph_sizes)."""
    meta = RUNS / "RTX4090/Llama-3.1-8B" / "meta.json"
    if not meta.is_file():
        pytest.skip(f"{meta} not found")
    d = json.loads(meta.read_text())
    kw, cc = d["engine_kwargs"], d["resolved_config"]["compilation_config"]
    assert (
        vllm_capture_sizes(kw["max_num_seqs"], kw["max_num_batched_tokens"], None, False)
        == (cc["cudagraph_capture_sizes"])
    )
    assert cc["cudagraph_mode"] == [2, 1]  # (FULL, PIECEWISE): FULL_AND_PIECEWISE
    ex = vllm_execution(VLLMConfig(max_num_seqs=kw["max_num_seqs"], max_num_batched_tokens=2048))
    assert (ex.decode_regime, ex.mixed_regime) == ("full", "piecewise")


@pytest.mark.parametrize(
    "kw, decode, mixed",
    [
        ({}, "full", "piecewise"),
        ({"enforce_eager": True}, "eager", "eager"),
        ({"optimization_level": 1}, "piecewise", "piecewise"),
        ({"optimization_level": 0}, "eager", "eager"),
        ({"optimization_level": 0, "cudagraph_mode": "FULL_AND_PIECEWISE"}, "full", "eager"),  # without_piecewise
        ({"cudagraph_mode": "FULL_DECODE_ONLY"}, "full", "eager"),
        ({"cudagraph_mode": "full"}, "full", "full"),
    ],
)
def test_vllm_regime_by_flags(kw, decode, mixed):
    ex = vllm_execution(VLLMConfig(), **kw)
    assert (ex.decode_regime, ex.mixed_regime) == (decode, mixed)


def test_vllm_dispatch_pads_to_the_next_size_and_runs_larger_batches_eager():
    ex = vllm_execution(VLLMConfig(max_num_seqs=1024, max_num_batched_tokens=8192))  # H100 api_server defaults
    assert ex.decode_sizes[-1] == 512  # min(2 * 1024, 512)
    assert ex.regime(3, 3, 0) == ("full", 4, 4)
    assert ex.regime(300, 300, 0) == ("full", 304, 304)
    assert ex.regime(513, 513, 0) == ("eager", 513, 513)
    assert ex.regime(300, 2, 1) == ("piecewise", 304, 2)
    assert ex.regime(2048, 1, 1) == ("eager", 2048, 1)


@pytest.mark.parametrize(
    "memory, tp, max_bs",
    [(16 * GiB, 1, 8), (24 * GiB, 1, 48), (24 * GiB, 4, 160), (48 * GiB, 1, 32), (80 * GiB, 1, 256)]
    + [(80 * GiB, 4, 512), (141e9, 1, 256), (180 * GiB, 1, 512), (180 * GiB, 8, 512)],
)
def test_sglang_decode_max_bs_by_memory_and_tp(memory, tp, max_bs):
    """arg_groups/memory_hook.py, _handle_gpu_memory_settings (MiB thresholds 20, 35, 60, 90, 160 GiB)."""
    assert sglang_decode_max_bs(memory, tp) == max_bs


def test_sglang_sizes_and_caps():
    assert sglang_decode_sizes(256)[:7] == [1, 2, 4, 8, 12, 16, 24] and sglang_decode_sizes(256)[-1] == 256
    assert sglang_decode_sizes(100)[-1] == 100  # max_bs appended when off the grid
    p = sglang_prefill_sizes(8192)
    assert p[0] == 4 and {2048, 4608, 5120} <= set(p) and p[-1] == 8192
    ex = sglang_execution(SGLangConfig(max_running_requests=64), 80 * GiB, 1)
    assert ex.decode_sizes[-1] == 64  # a default max bs is capped at max_running_requests
    ex = sglang_execution(SGLangConfig(), 80 * GiB, 1)
    assert ex.regime(257, 257, 0)[0] == "eager" and ex.regime(256, 256, 0) == ("full", 256, 256)
    assert ex.regime(4800, 1, 1) == ("piecewise", 5120, 1)
    off = sglang_execution(SGLangConfig(), 80 * GiB, 1, disable_cuda_graph=True)
    assert (off.decode_regime, off.mixed_regime) == ("eager", "eager")
    assert Execution("t", "full", (4,), "piecewise", (4, 64), mixed_pad_factor=2.0).regime(20, 1, 1)[0] == "eager"


def test_a_step_costs_its_launches_and_its_padding():
    """The step's price over the kernel-only price: launches × LAUNCH_S, plus (compute-bound rows)
    the padded rows' GEMM FLOPs over π_eff (seed counting: every row runs the linear, embedding and
    lm_head GEMMs, 2 FLOPs a parameter)."""
    m, hw = load_model("llama-3.1-8b"), load_hardware("h100")
    ex = vllm_execution(VLLMConfig(max_num_seqs=1024, max_num_batched_tokens=8192))
    cm0, cm = CostModel(m, hw), CostModel(m, hw, execution=ex)
    per_row = 2 * (m.always_on_layer_params + m.embed_params + m.head_params) / hw.pi_eff
    assert per_row * 300 > m.weight_bytes / hw.beta_eff  # 300 rows are compute-bound on the seed roofline

    def extra(q, kv):
        return cm.step_time(q, kv) - cm0.step_time(q, kv)

    assert extra([1] * 3, [100] * 3) == pytest.approx(FULL * LAUNCH_S, rel=1e-6)  # memory-bound: padding free
    assert extra([1] * 300, [100] * 300) == pytest.approx(FULL * LAUNCH_S + 4 * per_row, rel=1e-6)
    assert extra([300], [0]) == pytest.approx(PIECEWISE * LAUNCH_S + 4 * per_row, rel=1e-6)
    assert extra([1] * 600, [10] * 600) == pytest.approx(EAGER * LAUNCH_S, rel=1e-6)
    b = cm.breakdown(cm.shape([300], [0]))
    assert b.time_s == pytest.approx(cm.step_time([300], [0]), rel=1e-12)
    assert b.op("launch_piecewise").time_s == pytest.approx(PIECEWISE * LAUNCH_S)


def _scene(policy, execution, n=300, prompt=16, output=64):
    m, hw = load_model("llama-3.1-8b"), load_hardware("h100")
    engines, router, max_len = build_cluster(policy, m, hw, 1, {"execution": execution})
    wl = fixed_workload(np.zeros(n), np.full(n, prompt), np.full(n, output))
    df = Simulation(engines, wl, max_model_len=max_len, router=router).run().requests
    return float(df.first_token_s.max()), float((df.finish_s - df.first_token_s).max())


def test_engines_agree_without_execution_and_differ_by_its_terms():
    """300 decoders of Llama-3.1-8B on H100, all prefilled in one step by both engines: kernel-only,
    vLLM and SGLang give the same times; with each engine's execution the 63 decode steps each cost
    vLLM one graph launch and 300 → 304 rows of padding, SGLang (decode graph only to 256) 322 eager
    launches; the 4,800-token prefill runs eager in vLLM (past 512) and as SGLang's piecewise graph
    padded to 5,120 tokens."""
    m, hw = load_model("llama-3.1-8b"), load_hardware("h100")
    per_row = 2 * (m.always_on_layer_params + m.embed_params + m.head_params) / hw.pi_eff
    (vt0, vs0), (st0, ss0) = _scene("vllm", "kernels"), _scene("sglang", "kernels")
    assert (vt0, vs0) == (st0, ss0)
    (vt, vs), (st, ss) = _scene("vllm", "engine"), _scene("sglang", "engine")
    assert vs - vs0 == pytest.approx(63 * (FULL * LAUNCH_S + 4 * per_row), rel=1e-6)
    assert ss - ss0 == pytest.approx(63 * EAGER * LAUNCH_S, rel=1e-6)
    assert vt - vt0 == pytest.approx(EAGER * LAUNCH_S, rel=1e-6)
    assert st - st0 == pytest.approx(PIECEWISE * LAUNCH_S + 320 * per_row, rel=1e-6)


def test_graph_flags_reach_the_profile_and_need_execution_engine():
    m, hw = load_model("llama-3.1-8b"), load_hardware("h100")
    cm = build_engine("vllm", m, hw, 1, {"execution": "engine", "enforce_eager": True})[2]
    assert cm.execution.decode_regime == "eager"
    cm = build_engine("sglang", m, hw, 1, {"execution": "engine", "cuda_graph_max_bs_decode": 512})[2]
    assert cm.execution.decode_sizes[-1] == 512
    assert build_engine("vllm", m, hw, 1, {})[2].execution is None
    with pytest.raises(InputError, match="--execution engine"):
        build_engine("vllm", m, hw, 1, {"enforce_eager": True})
    with pytest.raises(InputError, match="execution"):
        build_engine("nochunk", m, hw, 1, {"execution": "engine"})
    with pytest.raises(InputError, match="speculative"):
        spec = '{"method": "ngram", "num_speculative_tokens": 3}'
        build_engine("vllm", m, hw, 1, {"execution": "engine", "speculative_config": spec, "async_scheduling": False})
    with pytest.raises(InputError, match="MoE"):
        build_engine("vllm", load_model("mixtral-8x7b"), hw, 2, {"execution": "engine"})


def test_engine_cmd_spellings():
    c = parse_engine_cmd("vllm serve meta-llama/Llama-3.1-8B -O0 -cc.cudagraph_mode=FULL_DECODE_ONLY --enforce-eager")
    assert c.flags["optimization_level"] == 0 and c.flags["enforce_eager"] is True
    assert json.loads(c.flags["compilation_config"]) == {"cudagraph_mode": "FULL_DECODE_ONLY"}
    c = parse_engine_cmd(
        "python -m sglang.launch_server --model-path x --disable-cuda-graph --cuda-graph-max-bs-decode 64"
    )
    assert c.flags["disable_cuda_graph"] is True and c.flags["cuda_graph_max_bs_decode"] == 64
    for line in (
        "python -m sglang.launch_server --model-path x --cuda-graph-max-bs 64",
        "vllm serve x --compilation-config '{\"mode\": 3}'",
        "vllm serve x --cudagraph-capture-sizes 1 2 4",
    ):
        with pytest.raises(InputError):
            parse_engine_cmd(line)


def test_cli_errors_and_provenance():
    base = ["simulate", "--model", "llama-3.1-8b", "--hardware", "h100", "--num-prompts", "4", "--quiet"]
    assert_one_line_error(base + ["--policy", "vllm", "--enforce-eager"], "--enforce-eager")
    assert_one_line_error(base + ["--policy", "vllm", "--execution", "engine", "-cc", '{"mode": 3}'], "compilation")
    rc, out, err = run_cli(base + ["--policy", "sglang", "--execution", "engine", "--json"])
    assert rc == 0, err
    rows = json.loads(out)["engine_config"]
    assert rows["execution"]["value"] == "engine" and rows["decode_graph"]["value"] == "full up to 256"


@pytest.mark.parametrize("policy", ["vllm", "sglang"])
@pytest.mark.parametrize("budget", [64, 512, 8192])
def test_fast_forward_matches_the_reference_loop_under_execution(policy, budget):
    """The fast paths (decode runs, chunked runs, arrival folds, cohorts) price the execution terms as
    the reference loop does, request by request and to the bit (simcore/stepping.py)."""
    from test_fast_forward_oracle import SWITCHES, assert_matches_oracle, flags_for

    from workloads.workload import Workload

    rng = np.random.default_rng(7)
    n = 80
    wl = Workload(np.cumsum(rng.exponential(0.03, n)), rng.integers(16, 3000, n), rng.integers(1, 150, n))
    flags = {**flags_for(policy, budget, 600, False, True), "execution": "engine"}
    fast = assert_matches_oracle(policy, flags, wl, SWITCHES["all"], 1, "round_robin")
    assert fast.summary["completed"] == n
