"""From engine flags (spelled as vLLM and SGLang spell them) to (policy, KV pool, cost model).

Defaults follow each engine: vLLM by GPU memory and usage context (vllm/engine/arg_utils.py),
SGLang's chunked_prefill_size and mem_fraction_static by GPU memory (server_args.py). With
``--execution engine`` the cost model carries the engine's CUDA-graph execution (execution_flags.py).
"""

from __future__ import annotations

from dataclasses import replace

from costmodel import CostModel, Hardware, ModelSpec
from costmodel.errors import require
from costmodel.precision import KV_FORMATS, resolve
from policies.nochunk import NoChunkConfig, NoChunkScheduler
from policies.sglang import SGLangScheduler
from policies.sglang_config import (
    SGLangConfig,
    SGLangDisagg,
    default_extra_slots,
    sglang_default_chunked_prefill_size,
    sglang_kv_tokens,
    sglang_mem_fraction_static,
)
from policies.sglang_hicache import hicache_settings
from policies.sglang_mamba import mamba_pool, resolve_strategy, slots_per_request, state_bytes
from policies.sglang_pd import SGLangPDDecode
from policies.sglang_pd_prefill import SGLangPDPrefill
from policies.sglang_spec import sglang_spec_defaults
from policies.vllm import VLLMConfig, VLLMScheduler, vllm_defaults
from simcore.kv import BlockPool, vllm_block_pool, vllm_kv_blocks
from simcore.mamba_radix_cache import checkpoint_grid

from . import execution_flags, expert_flags
from .engine_flags import POLICY_FLAGS

POLICIES = ("vllm", "sglang", "nochunk")
VLLM_FLAGS, SGLANG_FLAGS, NOCHUNK_FLAGS = (POLICY_FLAGS[p] for p in POLICIES)  # declared in engine_flags


def build_engine(policy: str, model: ModelSpec, hw: Hardware, tp: int = 1, flags: dict | None = None, weights=None):
    """Returns (scheduler, BlockPool, CostModel, max_model_len). Unset flags (None) take the engine's
    defaults. weights: CostModel -> weight bytes per GPU, when not the model's over tp (DP ranks)."""
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    allowed = {"vllm": VLLM_FLAGS, "sglang": SGLANG_FLAGS, "nochunk": NOCHUNK_FLAGS}.get(policy)
    require(allowed is not None, "policy", policy, f"must be one of {', '.join(POLICIES)}")
    unknown = sorted(set(flags) - allowed)
    require(not unknown, "flags", unknown, f"not {policy} flags; {policy} takes {', '.join(sorted(allowed))}")
    require(
        not flags.pop("enable_dp_attention", False),
        "enable_dp_attention",
        True,
        "needs the data-parallel ranks: build_cluster with replicas = --dp",
    )
    expert_flags.refuse_alone(policy, expert_flags.pop(flags))  # the lockstep group takes them out first
    model = with_precision(
        model, flags.pop("quantization", None), flags.pop("kv_cache_dtype", None), flags.pop("dtype", None)
    )
    execution, graph = execution_flags.pop(policy, flags)  # --execution and the CUDA-graph flags
    engine_exec = execution == "engine"
    cm = CostModel(model, hw, tp)
    per_gpu = weights(cm) if weights is not None else None
    max_len = int(flags.pop("max_model_len", 0) or model.max_model_len)
    require(max_len > 0, "max_model_len", max_len, "must be positive")
    if policy == "sglang":
        chunk = flags.get("chunked_prefill_size", sglang_default_chunked_prefill_size(hw.memory_bytes))
        max_total = flags.pop("max_total_tokens", None)
        pd = sglang_disagg(flags)  # --disaggregation-*: the decode server (policies/sglang_pd.py)
        if flags.get("speculative_algorithm"):  # _handle_eagle_family's defaults (policies/sglang_spec.py)
            flags = sglang_spec_defaults(flags, model.name)
            require(pd is None, "speculative_algorithm", flags["speculative_algorithm"], "with PD: not modelled")
            require(
                not flags.get("enable_hierarchical_cache"),
                "speculative_algorithm",
                flags["speculative_algorithm"],
                "with HiCache: not modelled",
            )
            require(
                model.linear_layers == 0,
                "speculative_algorithm",
                flags["speculative_algorithm"],
                "on a hybrid (Mamba) model: not modelled",
            )
        cfg = SGLangConfig(**{**flags, "chunked_prefill_size": chunk, "max_model_len": max_len})
        frac = cfg.mem_fraction_static or sglang_mem_fraction_static(
            hw.memory_bytes, cfg.chunk, cfg.max_prefill_tokens, tp
        )
        tokens = sglang_kv_tokens(cm, frac, cfg.page_size, per_gpu)
        mamba = None
        if model.linear_layers > 0:  # a hybrid model: states take their share first (policies/sglang_mamba.py)
            strategy = resolve_strategy(cfg)
            rest = tokens * cm.kv_coef
            pool = mamba_pool(rest, state_bytes(model, tp), slots_per_request(cfg, strategy))
            tokens = int(pool.kv_bytes // cm.kv_coef) // cfg.page_size * cfg.page_size
            cfg = replace(cfg, max_running_requests=min(cfg.max_running_requests, pool.max_running_requests))
            mamba = None if cfg.disable_radix_cache else (strategy, checkpoint_grid(cfg.page_size))
        if max_total:
            tokens = min(tokens, int(max_total) // cfg.page_size * cfg.page_size)
        if engine_exec:
            cm = execution_flags.with_execution(
                cm, execution_flags.execution_for(policy, cfg, graph, hw, tp, max_total)
            )
        if pd is not None:
            require(
                mamba is None and model.linear_layers == 0, "model", model.name, "hybrid models: not modelled in PD"
            )
            server = SGLangPDPrefill(cfg, pd) if pd.disaggregation_mode == "prefill" else SGLangPDDecode(cfg, pd)
            return server, BlockPool(tokens // cfg.page_size, cfg.page_size), cm, max_len
        sched = SGLangScheduler(cfg)
        sched.hicache = hicache_settings(cfg, tokens, cm.kv_coef)  # HiCache's host tier (policies/sglang_hicache.py)
        sched.mamba = mamba  # a hybrid model's state rule (simcore/mamba_radix_cache.py)
        return sched, BlockPool(tokens // cfg.page_size, cfg.page_size), cm, max_len
    override = flags.pop("num_gpu_blocks_override", None)
    if policy == "vllm":
        usage = flags.pop("usage_context", "api_server")
        require(usage in ("api_server", "llm_class"), "usage_context", usage, "must be api_server or llm_class")
        defaults = vllm_defaults(hw.memory_bytes, hw.name, usage, flags.get("enable_chunked_prefill", True), max_len)
        if "max_num_batched_tokens" in flags and "max_num_seqs" not in flags:
            defaults["max_num_seqs"] = min(defaults["max_num_seqs"], flags["max_num_batched_tokens"])
        cfg = VLLMConfig(**{**defaults, **flags, "max_model_len": max_len})
        sched = VLLMScheduler(cfg)
    else:
        cfg = NoChunkConfig(**{**flags, "max_model_len": max_len})
        sched = NoChunkScheduler(cfg)
    budget = getattr(cfg, "max_num_batched_tokens", 0) or max_len
    blocks = override or vllm_kv_blocks(cm, cfg.gpu_memory_utilization, cfg.block_size, budget, per_gpu)
    pool = vllm_block_pool(blocks, cfg.block_size) if policy == "vllm" else BlockPool(blocks, cfg.block_size)
    if engine_exec:
        cm = execution_flags.with_execution(cm, execution_flags.execution_for(policy, cfg, graph, hw, tp))
    return sched, pool, cm, max_len


def sglang_disagg(flags: dict) -> SGLangDisagg | None:
    """Pops SGLang's PD flags; the decode server's args, or None outside PD (mode null)."""
    mode = flags.pop("disaggregation_mode", "null")
    keys = ("disaggregation_transfer_backend", "num_reserved_decode_tokens", "disaggregation_decode_extra_slots")
    given = {k: flags.pop(k) for k in keys if k in flags}
    if mode == "null":
        require(not given, "disaggregation_mode", mode, f"{', '.join(given)} need --disaggregation-mode")
        return None
    given.setdefault("disaggregation_decode_extra_slots", default_extra_slots(flags.get("max_running_requests")))
    return SGLangDisagg(mode, **given)


def with_precision(model: ModelSpec, quantization=None, kv_cache_dtype=None, dtype=None) -> ModelSpec:
    """The model as the engine runs it: its checkpoint's quantization_config and the precision flags
    (costmodel/precision.py); unchanged when nothing is quantized."""
    p = resolve(None if model.weights == "bf16" else model.weights, quantization, kv_cache_dtype, dtype)
    if p.weights == model.weights and p.kv == "bf16" and not model.kv_b:
        return model
    return replace(model, weights=p.weights, kv_b=0.0 if p.kv == "bf16" else KV_FORMATS[p.kv])


PD_CONNECTOR = '{"kv_connector": "NixlConnector", "kv_role": "kv_both"}'
"""vLLM's KV connector when a PD split gives none (the proxy's pairs run NixlConnector, both roles)."""


def pd_simulation(policy: str):
    """The PD simulation of an engine's pools: vLLM's proxy (simcore/disagg.py) or SGLang's PD
    router over its prefill and decode servers (simcore/disagg_sglang.py)."""
    from simcore.disagg import DisaggSimulation
    from simcore.disagg_sglang import SGLangDisaggSimulation

    return SGLangDisaggSimulation if policy == "sglang" else DisaggSimulation


MAX_REPLICAS = 4096
"""The most replicas one simulation builds: each is its own scheduler, block pool and memos, built
before the first arrival, so a mistyped count (10**6) would take tens of GB before any error."""


def build_cluster(
    policy: str,
    model: ModelSpec,
    hw: Hardware,
    tp: int = 1,
    flags: dict | None = None,
    replicas: int = 1,
    router: str = "round_robin",
):
    """N identical replicas of tp GPUs each behind a router: (engines, router, max_model_len). The
    replicas share one CostModel (it holds nothing but memos of prices), so one memo serves all.
    vLLM behind its own DP front end (router vllm_dp) serving a MoE model: the replicas are the
    data-parallel ranks of one engine, stepped in lockstep (``build_dp_group``)."""
    from simcore.router import make_router

    require(isinstance(replicas, int) and replicas >= 1, "replicas", replicas, "must be a positive integer")
    require(
        replicas <= MAX_REPLICAS,
        "replicas",
        replicas,
        f"at most {MAX_REPLICAS} (each replica is its own scheduler and KV pool, built up front)",
    )
    require(tp <= hw.gpus_per_node, "tp", tp, f"exceeds the {hw.gpus_per_node} GPUs per node of {hw.name}")
    if policy == "sglang" and (flags or {}).get("enable_dp_attention"):
        require(replicas > 1, "enable_dp_attention", True, "needs --dp-size 2 or more")
        spec = flags.get("speculative_algorithm")
        require(not spec, "speculative_algorithm", spec, "with --enable-dp-attention: not modelled")
        engines, cost, max_len = build_sglang_dp_attention(model, hw, tp, replicas, flags)
        route = make_router(router)
        route.lockstep = cost  # type: ignore[union-attr]  # read by Simulation
        return engines, route, max_len
    if router == "vllm_dp" and policy == "vllm" and model.is_moe and replicas > 1:
        engines, route, max_len, cost = build_dp_group(model, hw, tp, replicas, flags)
        route.lockstep = cost  # the Simulation steps the ranks together (simcore/data_parallel.py)
        return engines, route, max_len
    route = make_router(router)
    engines, max_len = [], 0
    for _ in range(replicas):
        sched, pool, cm, max_len = build_engine(policy, model, hw, tp, flags)
        engines.append((sched, pool, engines[0][2] if engines else cm))
    return engines, route, max_len


def build_dp_group(model: ModelSpec, hw: Hardware, tp: int, dp: int, flags: dict | None = None):
    """vLLM ``--data-parallel-size dp`` of a MoE model: dp ranks of tp GPUs stepped in lockstep
    (simcore/data_parallel.py) behind vLLM's own rank choice (the vllm_dp router), each rank's KV
    pool sized after its share of the weights (the experts split dp·tp ways):
    (engines, router, max_model_len, lockstep cost)."""
    from simcore.router import make_router

    require(isinstance(dp, int) and 2 <= dp <= MAX_REPLICAS, "data_parallel_size", dp, "must be 2 or more")
    require(model.is_moe, "model", model.name, "vLLM steps data-parallel ranks in lockstep only for MoE models")
    require(tp * dp <= MAX_REPLICAS, "data_parallel_size", dp, "too many GPUs")
    engines, max_len, cost = _lockstep_ranks("vllm", model, hw, tp, dp, flags or {})
    return engines, make_router("vllm_dp"), max_len, cost


def _lockstep_ranks(policy: str, model: ModelSpec, hw: Hardware, tp: int, dp: int, flags: dict):
    """dp ranks of ``policy``, each pool sized after its share of the weights; one LockstepCost,
    built from the first rank's cost model (which every rank shares), with the expert-parallel
    flags' layout (experiments/expert_flags.py): (engines, max_len, cost)."""
    from costmodel.data_parallel import LockstepCost

    costs: list = []
    flags = {k: v for k, v in flags.items() if v is not None}
    ep = expert_flags.expert_parallelism(policy, expert_flags.pop(flags), tp * dp)

    def per_gpu(cm: CostModel) -> float:
        if not costs:
            costs.append(LockstepCost(cm, dp, policy, ep))
        return costs[0].weight_bytes_per_gpu

    engines: list = []
    max_len = 0
    for _ in range(dp):
        sched, pool, cm, max_len = build_engine(policy, model, hw, tp, flags, per_gpu)
        engines.append((sched, pool, engines[0][2] if engines else cm))
    return engines, max_len, costs[0]


def build_sglang_dp_attention(model: ModelSpec, hw: Hardware, attn_tp: int, dp: int, flags: dict):
    """SGLang ``--tp attn_tp·dp --dp dp --enable-dp-attention`` of a MoE model: dp schedulers with
    attention attn_tp ways, stepped together (simcore/data_parallel.py); as
    ``_handle_data_parallelism`` (arg_groups/parallel_hook.py) sets them, each rank's
    chunked_prefill_size is the server's // dp and its schedule_conservativeness × 0.3, while the
    memory reserve (mem_fraction_static) is taken first from the undivided chunk and the full tp
    (_handle_gpu_memory_settings runs before it): (engines, lockstep cost, max_model_len)."""

    require(model.is_moe, "enable_dp_attention", True, f"is modelled for MoE models only ({model.name} is dense)")
    mode = flags.get("disaggregation_mode")
    require(mode in (None, "null"), "disaggregation_mode", mode, "a PD decode server under DP attention: not modelled")
    flags = {k: v for k, v in flags.items() if v is not None and k != "enable_dp_attention"}
    require(
        not flags.get("enable_hierarchical_cache"),
        "enable_hierarchical_cache",
        True,
        "HiCache under DP attention is not modelled (the lockstep group does not price load-backs)",
    )
    chunk = flags.get("chunked_prefill_size", sglang_default_chunked_prefill_size(hw.memory_bytes))
    on = chunk is not None and chunk > 0
    frac = flags.get("mem_fraction_static") or sglang_mem_fraction_static(
        hw.memory_bytes, chunk if on else None, flags.get("max_prefill_tokens", 16384), attn_tp * dp
    )
    rank_flags = {
        **flags,
        "chunked_prefill_size": chunk // dp if on else chunk,
        "schedule_conservativeness": flags.get("schedule_conservativeness", 1.0) * 0.3,
        "mem_fraction_static": frac,
    }
    engines, max_len, cost = _lockstep_ranks("sglang", model, hw, attn_tp, dp, rank_flags)
    return engines, cost, max_len
