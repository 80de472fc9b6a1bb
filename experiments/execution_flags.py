"""The engine-execution flags of a run (``--execution`` and the engines' CUDA-graph flags) as the
cost model's Execution profile (costmodel/execution.py, policies/engine_execution.py).

``--execution kernels`` (the default) prices kernels only, as every profile and figure did before:
no graph regime, no padding, no launches. ``--execution engine`` gives the run its engine's
execution profile, selected by the policy (a vLLM run vLLM 0.33's, an SGLang run SGLang 0.5.23's).
A CUDA-graph flag changes only what ``engine`` prices, so with ``kernels`` it is refused, never
dropped.
"""

from __future__ import annotations

import json

from costmodel import CostModel
from costmodel.errors import InputError, require
from policies.engine_execution import VLLM_MODES, sglang_execution, vllm_execution

EXECUTIONS = ("kernels", "engine")
GRAPH_FLAGS = {
    "vllm": ("enforce_eager", "optimization_level", "compilation_config", "max_cudagraph_capture_size"),
    "sglang": (
        "disable_cuda_graph",
        "disable_decode_cuda_graph",
        "disable_prefill_cuda_graph",
        "cuda_graph_max_bs_decode",
        "cuda_graph_max_bs_prefill",
    ),
}
COMPILATION_KEYS = ("cudagraph_mode", "cudagraph_capture_sizes", "max_cudagraph_capture_size")


def compilation_config(text) -> dict:
    """vLLM's --compilation-config JSON, its CUDA-graph keys only: any other key changes what vLLM
    compiles (fusions, kernel counts), which the execution profile does not model."""
    try:
        d = json.loads(text) if isinstance(text, str) else text
    except ValueError as e:
        raise InputError("--compilation-config", text, f"not valid JSON ({e})") from None
    require(isinstance(d, dict), "--compilation-config", text, "must be a JSON object")
    other = sorted(set(d) - set(COMPILATION_KEYS))
    require(not other, "--compilation-config", other, f"not modelled; modelled keys: {', '.join(COMPILATION_KEYS)}")
    mode = d.get("cudagraph_mode")
    require(
        mode is None or (isinstance(mode, str) and mode.upper() in VLLM_MODES),
        "--compilation-config cudagraph_mode",
        mode,
        f"must be one of {', '.join(VLLM_MODES)}",
    )
    sizes = d.get("cudagraph_capture_sizes")
    require(
        sizes is None or (isinstance(sizes, list) and sizes and all(isinstance(s, int) and s > 0 for s in sizes)),
        "--compilation-config cudagraph_capture_sizes",
        sizes,
        "must be a non-empty list of positive integers",
    )
    top = d.get("max_cudagraph_capture_size")
    require(
        top is None or (isinstance(top, int) and top > 0),
        "--compilation-config max_cudagraph_capture_size",
        top,
        "must be a positive integer",
    )
    return d


def pop(policy: str, flags: dict) -> tuple[str, dict]:
    """Removes the execution flags from `flags`: (execution, the engine's graph flags given)."""
    execution = flags.pop("execution", None) or "kernels"
    require(execution in EXECUTIONS, "--execution", execution, f"must be one of {', '.join(EXECUTIONS)}")
    graph = {k: flags.pop(k) for k in GRAPH_FLAGS.get(policy, ()) if k in flags}
    if execution == "engine":
        require(
            policy in GRAPH_FLAGS, "--execution", execution, f"{policy} has no engine execution profile (vllm, sglang)"
        )
    elif graph:
        name = next(iter(graph))
        raise InputError(
            f"--{name.replace('_', '-')}",
            graph[name],
            "changes the engine's CUDA-graph execution, which --execution kernels does not price; "
            "add --execution engine",
        )
    return execution, graph


def execution_for(policy: str, cfg, graph: dict, hw, tp: int, max_total_tokens=None):
    """The Execution profile of `policy` with engine config `cfg` and its graph flags."""
    if policy == "vllm":
        require(
            not cfg.speculative_config,
            "--execution",
            "engine",
            "is not modelled with --speculative-config (vLLM's graphs for verify batches of 1 + k tokens a "
            "request, and the drafter's own)",
        )
        cc = compilation_config(graph.get("compilation_config") or "{}")
        top = graph.get("max_cudagraph_capture_size")
        require(
            top is None or cc.get("max_cudagraph_capture_size") is None,
            "--max-cudagraph-capture-size",
            top,
            "and compilation_config.max_cudagraph_capture_size are mutually exclusive (vLLM refuses both)",
        )
        cc_top = top if top is not None else cc.get("max_cudagraph_capture_size")
        sizes = cc.get("cudagraph_capture_sizes")
        require(
            cc_top is None or not sizes or cc_top == max(s for s in sizes if s <= cfg.max_num_batched_tokens),
            "--compilation-config max_cudagraph_capture_size",
            cc_top,
            "must equal the largest of cudagraph_capture_sizes (vLLM raises otherwise)",
        )
        blackwell = 10 <= hw.compute_capability < 11 or hw.name.lower().startswith(("b200", "b300", "gb200", "gb300"))
        return vllm_execution(
            cfg,
            enforce_eager=bool(graph.get("enforce_eager")),
            optimization_level=graph.get("optimization_level", 2),
            cudagraph_mode=cc.get("cudagraph_mode"),
            max_cudagraph_capture_size=cc_top,
            capture_sizes=sizes,
            blackwell=blackwell,
        )
    return sglang_execution(cfg, hw.memory_bytes, tp, max_total_tokens=max_total_tokens, **graph)


def with_execution(cm: CostModel, execution) -> CostModel:
    """`cm` pricing under `execution` (itself when None)."""
    if execution is None:
        return cm
    return CostModel(cm.model, cm.hw, cm.tp, cm.counting, cm.overlap_host, execution)


def rows(cm: CostModel) -> list[dict]:
    """The run's execution, for its resolved configuration (flag, value, why)."""
    ex = cm.execution
    if ex is None:
        return [{"flag": "execution", "value": "kernels", "why": "chunksim default: kernel time only, no graph regime"}]
    out = [{"flag": "execution", "value": "engine", "why": f"{ex.engine}'s execution profile (given)"}]
    out.append(
        {
            "flag": "decode_graph",
            "value": f"{ex.decode_regime} up to {ex.decode_sizes[-1] if ex.decode_sizes else 0}",
            "why": ex.sources[0],
        }
    )
    out.append(
        {
            "flag": "mixed_graph",
            "value": f"{ex.mixed_regime} up to {ex.mixed_sizes[-1] if ex.mixed_sizes else 0} tokens",
            "why": "; ".join(ex.sources[1:]),
        }
    )
    out.append(
        {
            "flag": "launch_s",
            "value": ex.launch_s,
            "why": "per kernel launched outside a graph: pie-project/pie#348 (costmodel/execution.py LAUNCH_S)",
        }
    )
    return out
