"""vLLM 0.33.0's scheduler settings (vllm/config/scheduler.py, vllm/engine/arg_utils.py): the
flags chunksim models, their validation, and EngineArgs' defaults by device memory."""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.errors import require
from costmodel.hardware import GiB

from .vllm_pd import parse_kv_transfer_config
from .vllm_spec import parse_speculative_config, resolve_async


@dataclass(frozen=True)
class VLLMConfig:
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 1024
    long_prefill_token_threshold: int = 0  # 0 = off
    enable_chunked_prefill: bool = True
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    max_model_len: int = 0  # 0 = the model's max_position_embeddings
    enable_prefix_caching: bool = True  # V1 default; acts only when requests carry block hashes
    async_scheduling: bool | None = None  # vllm/config/vllm.py: None resolves to True unless incompatible
    scheduler_reserve_full_isl: bool = True  # SchedulerConfig.scheduler_reserve_full_isl
    speculative_config: str = ""  # vLLM's --speculative-config JSON (policies/vllm_spec.py); "" = off
    spec_acceptance: float | None = None  # chunksim's own: per-draft acceptance α (None: vllm_spec's default)
    spec_seed: int = 0  # chunksim's own: the acceptance draws' seed
    kv_transfer_config: str = ""  # vLLM's --kv-transfer-config JSON (policies/vllm_pd.py); "" = no connector

    def __post_init__(self):
        spec = parse_speculative_config(self.speculative_config, self.spec_acceptance, self.spec_seed)
        object.__setattr__(self, "async_scheduling", resolve_async(spec, self.async_scheduling))
        kv = parse_kv_transfer_config(self.kv_transfer_config)
        if kv is not None:
            require(spec is None, "--speculative-config", self.speculative_config, "with a KV connector: not modelled")
            require(
                not (self.async_scheduling and kv.role == "kv_producer"),
                "--async-scheduling",
                True,
                "async scheduling with kv_role kv_producer is not modelled (in-flight outputs dropped at "
                "preemption); use kv_both or kv_consumer, or pass --no-async-scheduling",
            )
        require(self.max_num_seqs > 0, "max_num_seqs", self.max_num_seqs, "must be positive")
        require(
            self.max_num_batched_tokens >= self.max_num_seqs,
            "max_num_batched_tokens",
            self.max_num_batched_tokens,
            f"must be greater than or equal to max_num_seqs ({self.max_num_seqs})",
        )
        require(
            self.long_prefill_token_threshold >= 0,
            "long_prefill_token_threshold",
            self.long_prefill_token_threshold,
            "must be >= 0",
        )
        require(self.block_size > 0, "block_size", self.block_size, "must be positive")
        require(
            0 < self.gpu_memory_utilization <= 1,
            "gpu_memory_utilization",
            self.gpu_memory_utilization,
            "must be in (0, 1]",
        )
        require(
            self.enable_chunked_prefill or self.max_num_batched_tokens >= self.max_model_len,
            "max_num_batched_tokens",
            self.max_num_batched_tokens,
            f"is smaller than max_model_len ({self.max_model_len}) with chunked prefill disabled",
        )


def vllm_defaults(
    memory_bytes: float,
    device_name: str,
    usage_context: str = "api_server",
    enable_chunked_prefill: bool = True,
    max_model_len: int = 0,
) -> dict:
    """EngineArgs defaults by device memory and usage context (vllm/engine/arg_utils.py, seed 000)."""
    big = memory_bytes >= 160 * GiB
    mid = memory_bytes >= 70 * GiB and "a100" not in device_name.lower()
    llm_class = usage_context == "llm_class"
    if big:
        tokens, seqs = 16384, 1024
    elif mid:
        tokens, seqs = (16384 if llm_class else 8192), 1024
    else:
        tokens, seqs = (8192 if llm_class else 2048), 256
    if not enable_chunked_prefill:
        tokens = max(max_model_len, tokens)
    return {"max_num_batched_tokens": tokens, "max_num_seqs": min(seqs, tokens)}
