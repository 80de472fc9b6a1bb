"""SGLang's knobs (seeds 000 and 001): the server args the scheduler reads (SGLangConfig) and a PD
decode server's (SGLangDisagg, policies/sglang_pd.py), the
defaults SGLang derives from the GPU (server_args.py, model_runner.py) and the environment
constants of its scheduler (the new-token ratio, retraction). The scheduler is policies/sglang.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel import CostModel
from costmodel.errors import require

from .sglang_hicache import check_hicache_fields

RETRACT_DECODE_STEPS = 20  # SGLANG_RETRACT_DECODE_STEPS
INIT_NEW_TOKEN_RATIO = 0.7  # SGLANG_INIT_NEW_TOKEN_RATIO
MIN_RATIO_FACTOR = 0.14  # SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR
DECAY_STEPS = 600  # SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS
MIN_NEW_TOKEN_RATIO = INIT_NEW_TOKEN_RATIO * MIN_RATIO_FACTOR
NEW_TOKEN_RATIO_DECAY = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / DECAY_STEPS


@dataclass(frozen=True)
class SGLangConfig:
    chunked_prefill_size: int | None = 8192  # None or <= 0: chunking off
    max_prefill_tokens: int = 16384
    enable_mixed_chunk: bool = False
    page_size: int = 1
    max_running_requests: int = 4096
    mem_fraction_static: float | None = None  # None: derived from GPU memory and chunk size
    max_model_len: int = 0
    disable_radix_cache: bool = False
    disable_overlap_schedule: bool = False  # SGLang's default on CUDA: the overlap scheduler runs
    schedule_conservativeness: float = 1.0  # × 0.3 under DP attention (_handle_data_parallelism)
    enable_hierarchical_cache: bool = False  # HiCache: a host tier under the radix cache (policies/sglang_hicache.py)
    hicache_ratio: float | None = None  # host pool / device pool (None: 2.0)
    hicache_size: int = 0  # host pool GB per rank; overrides the ratio
    hicache_write_policy: str = "write_through"
    hicache_io_backend: str = "kernel"
    mamba_radix_cache_strategy: str = "auto"  # hybrid models only (policies/sglang_mamba.py)
    speculative_algorithm: str | None = None  # EAGLE | EAGLE3 | NEXTN (policies/sglang_spec.py); None: off
    speculative_num_steps: int | None = None  # None: _auto_choose_speculative_params
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    spec_acceptance: float | None = None  # chunksim's own: per-draft acceptance α (None: vllm_spec's default)
    spec_seed: int = 0  # chunksim's own: the acceptance draws' seed

    def __post_init__(self):
        require(self.max_prefill_tokens > 0, "max_prefill_tokens", self.max_prefill_tokens, "must be positive")
        require(self.page_size > 0, "page_size", self.page_size, "must be positive")
        require(self.max_running_requests > 0, "max_running_requests", self.max_running_requests, "must be positive")
        require(
            self.chunk is None or self.chunk >= self.page_size,
            "chunked_prefill_size",
            self.chunked_prefill_size,
            f"must be at least page_size ({self.page_size})",
        )
        require(
            self.schedule_conservativeness > 0,
            "schedule_conservativeness",
            self.schedule_conservativeness,
            "must be positive",
        )
        require(
            self.mem_fraction_static is None or 0 < self.mem_fraction_static < 1,
            "mem_fraction_static",
            self.mem_fraction_static,
            "must be in (0, 1)",
        )
        check_hicache_fields(self)
        from .sglang_spec import resolve_spec

        resolve_spec(
            self.speculative_algorithm,
            self.speculative_num_steps,
            self.speculative_eagle_topk,
            self.speculative_num_draft_tokens,
            self.spec_acceptance,
            self.spec_seed,
        )

    @property
    def ratios(self) -> tuple[float, float, float]:
        """new_token_ratio's (init, min, decay per step): NewTokenRatioTracker.from_config
        (managers/scheduler_components/new_token_ratio_tracker.py), init scaled by the
        conservativeness; at 1.0 the module's constants, bit for bit."""
        if self.schedule_conservativeness == 1.0:
            return INIT_NEW_TOKEN_RATIO, MIN_NEW_TOKEN_RATIO, NEW_TOKEN_RATIO_DECAY
        init = min(INIT_NEW_TOKEN_RATIO * self.schedule_conservativeness, 1.0)
        low = min(init * MIN_RATIO_FACTOR, 1.0)
        return init, low, (init - low) / DECAY_STEPS

    @property
    def chunk(self) -> int | None:
        return self.chunked_prefill_size if self.chunked_prefill_size and self.chunked_prefill_size > 0 else None

    @property
    def is_mixed_chunk(self) -> bool:
        return self.chunk is not None and self.enable_mixed_chunk


MiB = 1 << 20


def sglang_cuda_graph_max_bs(memory_bytes: float, tp: int) -> int:
    gb = memory_bytes / 1e9
    small = tp < 4
    if gb < 20:
        return 8
    if gb < 35:
        return 24 if small else 80
    if gb < 60:
        return 32 if small else 160
    if gb < 160:
        return 256 if small else 512
    return 512


def sglang_default_chunked_prefill_size(memory_bytes: float) -> int:
    """server_args.py, _handle_gpu_memory_settings (seed 001's table)."""
    gb = memory_bytes / 1e9
    return 2048 if gb < 35 else 4096 if gb < 60 else 8192 if gb < 160 else 16384


def sglang_mem_fraction_static(
    memory_bytes: float, chunked_prefill_size: int | None, max_prefill_tokens: int, tp: int
) -> float:
    mem_mib = memory_bytes / MiB
    chunk = chunked_prefill_size if chunked_prefill_size else max_prefill_tokens
    reserved = 512 + 1.5 * max(chunk, 2048) + 2 * sglang_cuda_graph_max_bs(memory_bytes, tp) + tp / 8 * 1024
    if memory_bytes / 1e9 > 60:
        reserved = max(reserved, 10 * 1024)
    return round((mem_mib - reserved) / mem_mib, 3)


def sglang_kv_tokens(
    cm: CostModel, mem_fraction_static: float, page_size: int, weight_bytes: float | None = None
) -> int:
    """Pool = total·mem_fraction_static − weights (model_runner.py, profile_max_num_token), where
    mem_fraction_static = (total − reserved)/total and, in MiB, reserved = 512 +
    1.5·max(chunked_prefill_size, 2048) + 2·cuda_graph_max_bs + tp/8·1024, at least 10 GiB above
    60 GB of memory (server_args.py, _handle_gpu_memory_settings; seed 001: "chunk larger →
    reserve larger → KV pool smaller")."""
    weights = cm.weight_bytes_per_gpu if weight_bytes is None else weight_bytes  # given: DP ranks' share
    tokens = int((cm.hw.memory_bytes * mem_fraction_static - weights) // cm.kv_coef)
    return tokens // page_size * page_size


CLIP_MAX_NEW_TOKEN = 4096  # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION
BACKENDS = ("mooncake", "nixl", "fake")


@dataclass(frozen=True)
class SGLangDisagg:
    """A PD server's args (SGLang's names): mode, backend, and the decode server's
    num_reserved_decode_tokens and disaggregation_decode_extra_slots (resolved:
    pd_disaggregation_hook.py, which also asserts a prefill server does not use fake)."""

    disaggregation_mode: str = "decode"
    disaggregation_transfer_backend: str = "mooncake"
    num_reserved_decode_tokens: int = 512
    disaggregation_decode_extra_slots: int = 0

    def __post_init__(self):
        m = self.disaggregation_mode
        require(m in ("prefill", "decode"), "disaggregation_mode", m, "must be prefill or decode")
        b = self.disaggregation_transfer_backend
        require(b in BACKENDS, "disaggregation_transfer_backend", b, f"must be one of {', '.join(BACKENDS)}")
        require(m == "decode" or b != "fake", "disaggregation_transfer_backend", b, "a prefill server cannot use fake")
        n = self.num_reserved_decode_tokens
        require(n >= 0, "num_reserved_decode_tokens", n, "must be >= 0")
        e = self.disaggregation_decode_extra_slots
        require(e >= 0, "disaggregation_decode_extra_slots", e, "must be >= 0")


def default_extra_slots(max_running_requests: int | None) -> int:
    """handle_pd_disaggregation: 2x the running batch when one is given and at most 32, else 0."""
    return 2 * max_running_requests if max_running_requests is not None and max_running_requests <= 32 else 0
