"""The engines' expert-parallel flags as the lockstep group's ``ExpertParallelism``
(costmodel/lockstep_ep.py), or one clear refusal.

vLLM 0.33 (``--enable-expert-parallel``, ``--all2all-backend``, ``--enable-eplb``): experts over every
GPU of the DP group, ep_size = dp·tp (``FusedMoEParallelConfig.make``); the all-to-all kernels run
only with EP (``use_all2all_kernels = dp_size > 1 and use_ep``), so without it the backend changes
nothing; ``naive`` and ``pplx`` fall back to allgather_reducescatter and EPLB needs EP
(``ParallelConfig.__post_init__``, vllm/config/parallel.py). deepep_high_throughput runs DeepEP's
normal kernels on every step, deepep_low_latency its low-latency ones.

SGLang 0.5.23 (``--ep-size``, ``--moe-a2a-backend``, ``--deepep-mode``,
``--enable-two-batch-overlap``, ``--enable-eplb``), modelled under ``--enable-dp-attention``:
``deepep`` sets ep_size to tp_size (``_a2a_ep_size``, srt/arg_groups/overrides.py); ``none`` with
ep_size > 1 splits the experts ep ways over the gathered tokens; ``--deepep-mode`` matters only
with deepep.
"""

from __future__ import annotations

from costmodel.errors import InputError
from costmodel.lockstep_ep import ExpertParallelism

EP_FLAGS = (
    "enable_expert_parallel",
    "all2all_backend",
    "ep_size",
    "moe_a2a_backend",
    "deepep_mode",
    "enable_two_batch_overlap",
    "enable_eplb",
    "moe_skew",
)
VLLM_BACKEND = {
    "allgather_reducescatter": ("allgather", "auto"),
    "naive": ("allgather", "auto"),
    "pplx": ("allgather", "auto"),
    "deepep_high_throughput": ("deepep", "normal"),
    "deepep_low_latency": ("deepep", "low_latency"),
}


def pop(flags: dict) -> dict:
    """The expert-parallel flags that are set, taken out of ``flags``."""
    return {k: v for k in EP_FLAGS if (v := flags.pop(k, None)) is not None}


def _on(ep: dict) -> str | None:
    """The first flag that turns expert parallelism (or its overlap) on."""
    for name, on in (
        ("enable_expert_parallel", ep.get("enable_expert_parallel")),
        ("ep_size", (ep.get("ep_size") or 1) > 1),
        ("moe_a2a_backend", ep.get("moe_a2a_backend") == "deepep"),
        ("enable_two_batch_overlap", ep.get("enable_two_batch_overlap")),
    ):
        if on:
            return name
    return None


def refuse_alone(policy: str, ep: dict) -> None:
    """Expert parallel outside a lockstep group is not modelled: one error naming the flag."""
    name = _on(ep)
    if name is None:
        return
    need = (
        "--data-parallel-size 2 or more (a MoE model's lockstep ranks behind vLLM's DP front end)"
        if policy == "vllm"
        else "--enable-dp-attention with --dp-size 2 or more"
    )
    raise InputError(name, ep[name], f"expert parallel is modelled for data-parallel ranks only: give {need}")


def expert_parallelism(policy: str, ep: dict, gpus: int) -> ExpertParallelism | None:
    """The group's ExpertParallelism over ``gpus`` = dp·tp, or None (no expert parallel: today's price)."""
    skew, eplb = float(ep.get("moe_skew") or 0.0), bool(ep.get("enable_eplb"))
    if policy == "vllm":
        if not ep.get("enable_expert_parallel"):
            if eplb:
                raise InputError("enable_eplb", True, "needs --enable-expert-parallel (vLLM: EPLB needs EP)")
            if skew:
                raise InputError("moe_skew", skew, "needs --enable-expert-parallel (experts are sharded, not placed)")
            return None
        name = ep.get("all2all_backend") or "allgather_reducescatter"
        if name not in VLLM_BACKEND:
            raise InputError("all2all_backend", name, f"not modelled (modelled: {', '.join(VLLM_BACKEND)})")
        backend, mode = VLLM_BACKEND[name]
        return ExpertParallelism(gpus, backend, mode, skew, eplb)
    a2a = ep.get("moe_a2a_backend") or "none"
    size = gpus if a2a == "deepep" else int(ep.get("ep_size") or 1)
    tbo = bool(ep.get("enable_two_batch_overlap"))
    if size == 1:
        for name, value in (("enable_two_batch_overlap", tbo), ("moe_skew", skew), ("enable_eplb", eplb)):
            if value:
                raise InputError(name, value, "needs expert parallel: --ep-size > 1 or --moe-a2a-backend deepep")
        return None
    backend = "deepep" if a2a == "deepep" else "allgather"
    return ExpertParallelism(size, backend, ep.get("deepep_mode") or "auto", skew, eplb, tbo)


def rows(lockstep) -> list[dict]:
    """The expert layout in force, for the resolved-flags table (none without a lockstep group)."""
    layers = getattr(lockstep, "experts", None)
    if layers is None:
        return []
    ep = layers.ep
    moves = f"DeepEP {ep.mode}" if ep.backend == "deepep" else "all-gather + reduce-scatter"
    value = f"ep {ep.size} of {layers.n} GPUs"
    why = f"tokens by {moves}" + (
        f"; routing Zipf {ep.skew:g}{', EPLB' if ep.eplb else ''}" if ep.skew else ", uniform routing"
    )
    return [{"flag": "expert_parallel", "value": value, "why": why + ("; two-batch overlap" if ep.tbo else "")}]
