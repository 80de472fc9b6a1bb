"""The engine configuration actually in force, flag by flag, and why: given by the user, or the
engine's default for this GPU (vLLM: ``EngineArgs._set_default_args`` in vllm/engine/arg_utils.py
by device memory and usage context; SGLang: ``ServerArgs._handle_gpu_memory_settings`` in
sglang/srt/server_args.py by GPU memory), or a plain default of the engine's dataclass."""

from __future__ import annotations

import dataclasses

GiB = 1024**3


def _vllm_why(key: str, value, hw, usage: str, chunked: bool, user: dict) -> str:
    gib = hw.memory_bytes / GiB
    if key == "max_num_seqs" and user.get("max_num_batched_tokens") == value:
        return "vLLM default, capped at the given max_num_batched_tokens"
    if key == "max_num_batched_tokens" and not chunked:
        return "max(max_model_len, vLLM default) with chunked prefill off"
    if gib >= 160:
        tier = "≥ 160 GiB"
    elif gib >= 70 and "a100" not in hw.name.lower():
        tier = "≥ 70 GiB"
    else:
        tier = "< 70 GiB or A100"
    return f"vLLM default for {tier} ({hw.name}: {gib:.0f} GiB), {usage}"


DP_ATTENTION_SET = ("chunked_prefill_size", "schedule_conservativeness", "mem_fraction_static")
"""What SGLang's DP attention rewrites in each rank's server arguments (experiments/engines.py)."""


def resolved(policy: str, model, hw, sched, pool, user_flags: dict, max_len: int, tp: int = 1, cm=None) -> list[dict]:
    """Rows (flag, value, why), one per engine field, plus the KV pool it gives (and, given the
    run's cost model `cm`, its execution: experiments/execution_flags.py)."""
    user = {k: v for k, v in (user_flags or {}).items() if v is not None}
    cfg = sched.cfg
    rows = []
    for f in dataclasses.fields(cfg):
        key, value = f.name, getattr(cfg, f.name)
        if key in user and not (user.get("enable_dp_attention") and key in DP_ATTENTION_SET):
            why = "given"
        elif key == "max_model_len":
            why = f"the model's max_position_embeddings ({model.name})"
        elif policy == "vllm" and key in ("max_num_batched_tokens", "max_num_seqs"):
            why = _vllm_why(key, value, hw, user.get("usage_context", "api_server"), cfg.enable_chunked_prefill, user)
        elif policy == "sglang" and user.get("enable_dp_attention") and key == "chunked_prefill_size":
            why = "the server's (by GPU memory, or given) // dp under DP attention (_handle_data_parallelism)"
        elif policy == "sglang" and user.get("enable_dp_attention") and key == "schedule_conservativeness":
            why = f"{'given' if key in user else 'default 1.0'} × 0.3 under DP attention (_handle_data_parallelism)"
        elif policy == "sglang" and user.get("enable_dp_attention") and key == "mem_fraction_static":
            why = "given" if key in user else "SGLang default from the undivided chunk and the full tp (DP attention)"
        elif policy == "sglang" and key == "chunked_prefill_size":
            why = f"SGLang default for {hw.memory_bytes / 1e9:.0f} GB of GPU memory"
        elif policy == "sglang" and key == "mem_fraction_static":
            from policies.sglang_config import sglang_mem_fraction_static

            value = sglang_mem_fraction_static(hw.memory_bytes, cfg.chunk, cfg.max_prefill_tokens, tp)
            why = "SGLang default: (GPU memory − reserved) / GPU memory"
        else:
            why = f"{policy} default"
        rows.append({"flag": key, "value": value, "why": why})
    if max_len and not any(r["flag"] == "max_model_len" for r in rows):
        rows.append(
            {
                "flag": "max_model_len",
                "value": max_len,
                "why": "given" if "max_model_len" in user else f"the model's max_position_embeddings ({model.name})",
            }
        )
    rows += precision_rows(model, hw, user)
    rows.append(
        {
            "flag": "kv_pool_tokens",
            "value": pool.total * pool.block_size,
            "why": "given (num_gpu_blocks_override)"
            if "num_gpu_blocks_override" in user
            else "given (max_total_tokens)"
            if "max_total_tokens" in user
            else f"from {hw.name}'s memory, the weights and the memory fraction",
        }
    )
    if cm is not None:
        from .execution_flags import rows as execution_rows

        rows += execution_rows(cm)
    return rows


def precision_rows(model, hw, user: dict) -> list[dict]:
    """The weights' format and the KV cache's dtype in force, and where each came from."""
    from costmodel.precision import gemm_rate, resolve

    ckpt = None if model.weights == "bf16" else model.weights
    p = resolve(ckpt, user.get("quantization"), user.get("kv_cache_dtype"), user.get("dtype"))
    if "quantization" in user:
        why = f"given (--quantization {user['quantization']})"
    elif ckpt:
        why = f"the checkpoint's quantization_config ({model.name})"
    else:
        why = "16-bit, the model's dtype"
    rate = gemm_rate(p.weights, hw)
    if p.compute and rate == 1.0:
        why += f"; {hw.name} lists no {p.compute} rate: a weight-only kernel at the 16-bit rate"
    elif p.compute:
        why += f"; GEMMs at {p.compute} ({rate:g}x the 16-bit rate, {hw.name}'s dtype_peaks)"
    kv_why = (
        f"given (--kv-cache-dtype {user['kv_cache_dtype']})" if "kv_cache_dtype" in user else "auto: the model's dtype"
    )
    return [
        {"flag": "weights", "value": p.weights, "why": why},
        {"flag": "kv_cache_dtype", "value": p.kv, "why": kv_why + f", {p.kv_bytes:g} B per element"},
    ]


def as_mapping(rows: list[dict]) -> dict:
    return {r["flag"]: {"value": r["value"], "why": r["why"]} for r in rows}


def yaml_comment(rows: list[dict], hw_name: str) -> str:
    lines = [f"# engine configuration in force on {hw_name} (informational; `engine:` above is what was given)"]
    lines += [f"#   {r['flag']}: {r['value']}  ({r['why']})" for r in rows]
    return "\n".join(lines) + "\n"
