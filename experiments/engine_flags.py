"""Every engine flag chunksim models, declared once: a field of ``EngineFlags`` whose metadata says
which engines take it, how each engine spells it on its command line, its type, its range and its
help. The CLI parsers (``simulate``), the pasted command line reader (``--engine-cmd``), the
experiment file's ``engine:`` section and ``build_engine``'s per-policy check all read this table,
so a new flag is one field here (plus the engine config field it sets).

Spellings follow vLLM's ``EngineArgs.add_cli_args`` (vllm/engine/arg_utils.py) and SGLang's
``ServerArgs.add_cli_args`` (sglang/srt/server_args.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from costmodel import precision
from costmodel.errors import InputError

INT, FLOAT, BOOL, STR = "int", "float", "bool", "str"
VLLM_BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)
"""vLLM's ``BlockSize = Literal[1, 8, 16, 32, 64, 128, 256]`` (vllm/config/cache.py; 256 was added after
0.10 — older releases stop at 128); ``--block-size`` rejects anything else."""


def _positive(v):
    return None if v > 0 else "must be a positive integer"


def _nonneg(v):
    return None if v >= 0 else "must be >= 0"


def _fraction(v):
    return None if 0 < v <= 1 else "must be in (0, 1]"


def _block(v):
    return (
        None
        if v in VLLM_BLOCK_SIZES
        else f"must be one of {', '.join(map(str, VLLM_BLOCK_SIZES))} (vLLM's BlockSize, vllm/config/cache.py)"
    )


def _chunk(v):
    """SGLang: any size <= 0 turns chunking off (scheduler.py ``init_chunked_prefill``:
    ``if self.chunked_prefill_size <= 0:  # -1 means disable``); kept as given, the policy reads <= 0 as off."""
    return None


def _quantization(v):
    ok = str(v).lower() in precision.QUANTIZATION or str(v).lower() in precision.NEEDS_CONFIG
    return (
        None
        if ok
        else f"not modelled (modelled: {', '.join(sorted(precision.QUANTIZATION))}, or modelopt / compressed-tensors with a quantization_config)"
    )


def _kv_dtype(v):
    ok = str(v).lower() in precision.KV_DTYPES
    return None if ok else f"not modelled (modelled: {', '.join(precision.KV_DTYPES)})"


def _dtype(v):
    ok = str(v).lower() in precision.DTYPES
    return None if ok else f"not modelled (16-bit: {', '.join(sorted(precision.DTYPES))})"


def flag(
    kind: str,
    engines: tuple,
    help: str,
    vllm: tuple = (),
    sglang: tuple = (),
    check=None,
    cli: bool = True,
    own: tuple = (),
):
    """A field of EngineFlags. ``vllm`` / ``sglang``: the spellings each engine's command line accepts
    (booleans: the first switches on, a ``--no-`` one off); ``cli``: also a flag of ``chunksim simulate``;
    ``own``: chunksim's spelling for a knob no engine has (not read from a pasted command line)."""
    return field(
        default=None,
        metadata={
            "kind": kind,
            "engines": engines,
            "help": help,
            "vllm": vllm,
            "sglang": sglang,
            "check": check,
            "cli": cli,
            "own": own,
        },
    )


def _speculative(v):
    """vLLM's --speculative-config JSON, parsed as the policy parses it (policies/vllm_spec.py)."""
    from policies.vllm_spec import parse_speculative_config

    try:
        parse_speculative_config(v)
    except InputError as e:
        sub = e.field.removeprefix("--speculative-config").strip()
        return f"{sub}={e.value!r}: {e.reason}" if sub else e.reason
    return None


def _execution(v):
    return None if v in ("kernels", "engine") else "must be kernels or engine"


def _level(v):
    return None if v in (0, 1, 2, 3) else "must be 0, 1, 2 or 3 (vLLM's OptimizationLevel)"


def _compilation(v):
    """vLLM's --compilation-config JSON, its CUDA-graph keys only (experiments/execution_flags.py)."""
    from .execution_flags import compilation_config

    try:
        compilation_config(v)
    except InputError as e:
        return f"{e.field}={e.value!r}: {e.reason}"


def _kv_transfer(v):
    """vLLM's --kv-transfer-config JSON, parsed as the policy parses it (policies/vllm_pd.py)."""
    from policies.vllm_pd import parse_kv_transfer_config

    try:
        parse_kv_transfer_config(v)
    except InputError as e:
        sub = e.field.removeprefix("--kv-transfer-config").strip()
        return f"{sub}={e.value!r}: {e.reason}" if sub else e.reason
    return None


VLLM_ALL2ALL = ("allgather_reducescatter", "naive", "pplx", "deepep_high_throughput", "deepep_low_latency")
"""vLLM's ``--all2all-backend`` values chunksim models (vllm/config/parallel.py ``All2AllBackend``;
``naive`` and ``pplx`` fall back to allgather_reducescatter in ``ParallelConfig.__post_init__``)."""
SGLANG_A2A = ("none", "deepep")
"""SGLang's ``--moe-a2a-backend`` values chunksim models (srt/layers/moe/utils.py ``MoeA2ABackend``)."""
DEEPEP_MODES = ("auto", "normal", "low_latency")


def _all2all(v):
    return None if v in VLLM_ALL2ALL else f"not modelled (modelled: {', '.join(VLLM_ALL2ALL)})"


def _a2a(v):
    return None if v in SGLANG_A2A else f"not modelled (modelled: {', '.join(SGLANG_A2A)})"


def _deepep_mode(v):
    return None if v in DEEPEP_MODES else f"must be one of {', '.join(DEEPEP_MODES)}"


def _skew(v):
    return None if v >= 0 else "must be >= 0"


def _sglang_spec_algorithm(v):
    from policies.sglang_spec import ALGORITHMS, NOT_MODELLED

    if str(v).upper() in ALGORITHMS:
        return None
    return f"not modelled (modelled: {', '.join(ALGORITHMS)}; {', '.join(NOT_MODELLED)} are not)"


def _acceptance(v):
    return None if 0 <= v <= 1 else "must be in [0, 1]"


def _positive_number(v):
    return None if v > 0 else "must be positive"


def _non_negative(v):
    return None if v >= 0 else "must be >= 0"


def _mamba_strategy(v):
    from policies.sglang_mamba import STRATEGY_CHOICES

    return None if v in STRATEGY_CHOICES else f"must be one of {', '.join(STRATEGY_CHOICES)}"


def _write_policy(v):
    from simcore.hiradix_cache import WRITE_POLICIES

    return None if v in WRITE_POLICIES else f"must be one of {', '.join(WRITE_POLICIES)}"


def _pd_mode(v):
    return None if v in ("null", "prefill", "decode") else "must be null, prefill or decode"


def _pd_backend(v):
    return None if v in ("mooncake", "nixl", "fake") else "not modelled (modelled: mooncake, nixl, fake)"


def _io_backend(v):
    return None if v == "kernel" else "not modelled (modelled: kernel, SGLang's default)"


V, S, N = "vllm", "sglang", "nochunk"


@dataclass(frozen=True)
class EngineFlags:
    max_num_batched_tokens: int | None = flag(
        INT,
        (V, N),
        "vLLM token budget per step (default by GPU: 8192 on an H100)",
        vllm=("--max-num-batched-tokens",),
        check=_positive,
    )
    long_prefill_token_threshold: int | None = flag(
        INT,
        (V,),
        "vLLM: cap a prefill's tokens per step (0 = no cap, vLLM's default)",
        vllm=("--long-prefill-token-threshold",),
        check=_nonneg,
    )
    max_num_seqs: int | None = flag(
        INT, (V, N), "vLLM: most sequences per step (default by GPU)", vllm=("--max-num-seqs",), check=_positive
    )
    chunked_prefill_size: int | None = flag(
        INT,
        (S,),
        "SGLang chunk size (default by GPU memory; 0 or -1 = chunking off, as SGLang reads <= 0)",
        sglang=("--chunked-prefill-size",),
        check=_chunk,
    )
    max_prefill_tokens: int | None = flag(
        INT,
        (S,),
        "SGLang prefill token budget per step (default 16384)",
        sglang=("--max-prefill-tokens",),
        check=_positive,
    )
    page_size: int | None = flag(
        INT, (S,), "SGLang KV page size in tokens (default 1)", sglang=("--page-size",), check=_positive
    )
    max_model_len: int | None = flag(
        INT,
        (V, S, N),
        "longest prompt + output (default: the model's max_position_embeddings); SGLang spells it --context-length",
        vllm=("--max-model-len",),
        sglang=("--context-length",),
        check=_positive,
    )
    num_gpu_blocks_override: int | None = flag(
        INT,
        (V, N),
        "vLLM: KV pool size in blocks instead of the memory estimate",
        vllm=("--num-gpu-blocks-override",),
        check=_positive,
    )
    max_total_tokens: int | None = flag(
        INT, (S,), "SGLang: cap the KV pool at this many tokens", sglang=("--max-total-tokens",), check=_positive
    )
    max_running_requests: int | None = flag(
        INT, (S,), "SGLang: most running requests", sglang=("--max-running-requests",), check=_positive
    )
    block_size: int | None = flag(
        INT,
        (V, N),
        f"vLLM KV block size in tokens (default 16; one of {', '.join(map(str, VLLM_BLOCK_SIZES))})",
        vllm=("--block-size",),
        check=_block,
    )
    gpu_memory_utilization: float | None = flag(
        FLOAT,
        (V, N),
        "vLLM memory fraction for weights + KV (0.9)",
        vllm=("--gpu-memory-utilization",),
        check=_fraction,
    )
    mem_fraction_static: float | None = flag(
        FLOAT,
        (S,),
        "SGLang memory fraction (default by GPU memory)",
        sglang=("--mem-fraction-static",),
        check=_fraction,
    )
    enable_chunked_prefill: bool | None = flag(
        BOOL,
        (V,),
        "vLLM chunked prefill (on by default in V1)",
        vllm=("--enable-chunked-prefill", "--no-enable-chunked-prefill"),
    )
    enable_mixed_chunk: bool | None = flag(
        BOOL, (S,), "SGLang: run decodes in the same batch as a prefill chunk", sglang=("--enable-mixed-chunk",)
    )
    enable_prefix_caching: bool | None = flag(
        BOOL,
        (V, N),
        "vLLM prefix caching (on by default; acts when requests carry block hashes)",
        vllm=("--enable-prefix-caching", "--no-enable-prefix-caching"),
    )
    disable_radix_cache: bool | None = flag(
        BOOL, (S,), "SGLang: no prefix (radix) cache", sglang=("--disable-radix-cache",)
    )
    disable_overlap_schedule: bool | None = flag(
        BOOL,
        (S,),
        "SGLang: no overlap scheduler (on by default on CUDA): results processed in the step they finish",
        sglang=("--disable-overlap-schedule",),
    )
    enable_dp_attention: bool | None = flag(
        BOOL,
        (S,),
        "SGLang: data-parallel attention over the --dp ranks, the MoE layers over every GPU (MoE models)",
        sglang=("--enable-dp-attention",),
    )
    enable_expert_parallel: bool | None = flag(
        BOOL,
        (V,),
        "vLLM: expert parallel over the --data-parallel-size x --tensor-parallel-size GPUs (MoE models, DP >= 2)",
        vllm=("--enable-expert-parallel", "-ep", "--no-enable-expert-parallel"),
    )
    all2all_backend: str | None = flag(
        STR,
        (V,),
        "vLLM: how expert parallel moves tokens: allgather_reducescatter (default), deepep_high_throughput, "
        "deepep_low_latency",
        vllm=("--all2all-backend",),
        check=_all2all,
    )
    ep_size: int | None = flag(
        INT,
        (S,),
        "SGLang: GPUs the routed experts are split over (default 1; under --enable-dp-attention)",
        sglang=("--ep-size", "--expert-parallel-size", "--ep"),
        check=_positive,
    )
    moe_a2a_backend: str | None = flag(
        STR,
        (S,),
        "SGLang: how expert parallel moves tokens: none (all-gather, the default) or deepep (ep_size = tp_size)",
        sglang=("--moe-a2a-backend",),
        check=_a2a,
    )
    deepep_mode: str | None = flag(
        STR,
        (S,),
        "SGLang: DeepEP's mode: auto (normal when a rank prefills, else low_latency; default), normal, low_latency",
        sglang=("--deepep-mode",),
        check=_deepep_mode,
    )
    enable_two_batch_overlap: bool | None = flag(
        BOOL,
        (S,),
        "SGLang: two micro-batches, one's MoE communication beside the other's compute (with expert parallel)",
        sglang=("--enable-two-batch-overlap",),
    )
    enable_eplb: bool | None = flag(
        BOOL,
        (V, S),
        "EPLB: experts placed so every expert-parallel rank carries the same load (matters with --moe-skew)",
        vllm=("--enable-eplb", "--no-enable-eplb"),
        sglang=("--enable-eplb",),
    )
    moe_skew: float | None = flag(
        FLOAT,
        (V, S),
        "chunksim's own: Zipf exponent of the experts' routing load under expert parallel (default 0: uniform)",
        own=("--moe-skew",),
        check=_skew,
    )
    enable_hierarchical_cache: bool | None = flag(
        BOOL,
        (S,),
        "SGLang HiCache: a host-memory tier under the radix cache, prefixes loaded back over PCIe",
        sglang=("--enable-hierarchical-cache",),
    )
    hicache_ratio: float | None = flag(
        FLOAT,
        (S,),
        "SGLang HiCache: host pool size over the device pool's (default 2.0)",
        sglang=("--hicache-ratio",),
        check=_positive_number,
    )
    hicache_size: int | None = flag(
        INT,
        (S,),
        "SGLang HiCache: host pool GB per rank (overrides --hicache-ratio; 0: use the ratio)",
        sglang=("--hicache-size",),
        check=_non_negative,
    )
    hicache_write_policy: str | None = flag(
        STR,
        (S,),
        "SGLang HiCache: write_through (default), write_through_selective or write_back",
        sglang=("--hicache-write-policy",),
        check=_write_policy,
    )
    mamba_radix_cache_strategy: str | None = flag(
        STR,
        (S,),
        "SGLang, hybrid (linear-attention) models: where the radix cache keeps states: auto (default), "
        "no_buffer, extra_buffer or extra_buffer_lazy",
        sglang=("--mamba-radix-cache-strategy",),
        check=_mamba_strategy,
    )
    hicache_io_backend: str | None = flag(
        STR,
        (S,),
        "SGLang HiCache: host copy backend (kernel, the default; direct is not modelled)",
        sglang=("--hicache-io-backend",),
        check=_io_backend,
    )
    disaggregation_mode: str | None = flag(
        STR,
        (S,),
        "SGLang PD: prefill or decode (policies/sglang_pd_prefill.py, sglang_pd.py; a pair runs with --prefill-cmd / "
        "--decode-cmd)",
        sglang=("--disaggregation-mode",),
        check=_pd_mode,
    )
    disaggregation_transfer_backend: str | None = flag(
        STR,
        (S,),
        "SGLang PD: mooncake (default), nixl or fake (decode alone: KV arrives at once)",
        sglang=("--disaggregation-transfer-backend",),
        check=_pd_backend,
    )
    num_reserved_decode_tokens: int | None = flag(
        INT,
        (S,),
        "SGLang PD decode: KV tokens reserved per active request before preallocating another (default 512)",
        sglang=("--num-reserved-decode-tokens",),
        check=_non_negative,
    )
    disaggregation_decode_extra_slots: int | None = flag(
        INT,
        (S,),
        "SGLang PD decode: req_to_token rows beyond max_running_requests for requests in transfer "
        "(default 2x max_running_requests when that is given and <= 32, else 0)",
        sglang=("--disaggregation-decode-extra-slots",),
        check=_non_negative,
    )
    schedule_conservativeness: float | None = flag(
        FLOAT,
        (S,),
        "SGLang: scales the new-token ratio that reserves KV for running decodes (default 1.0; 0.3 under DP attention)",
        sglang=("--schedule-conservativeness",),
    )
    async_scheduling: bool | None = flag(
        BOOL,
        (V,),
        "vLLM (default on, as vLLM 0.33): a finished request holds its slot and KV through the next step",
        vllm=("--async-scheduling", "--no-async-scheduling"),
    )
    scheduler_reserve_full_isl: bool | None = flag(
        BOOL,
        (V,),
        "vLLM (default on): admit a request only when its whole current length fits in free KV",
        vllm=("--scheduler-reserve-full-isl", "--no-scheduler-reserve-full-isl"),
    )
    quantization: str | None = flag(
        STR,
        (V, S, N),
        "weight quantization: fp8, fp8_per_block, awq, gptq, modelopt_fp4, w8a8_int8, ... (costmodel/precision.py)",
        vllm=("--quantization", "-q"),
        sglang=("--quantization",),
        check=_quantization,
    )
    kv_cache_dtype: str | None = flag(
        STR,
        (V, S, N),
        "KV cache dtype: auto, bfloat16, fp8, fp8_e4m3, fp8_e5m2 (SGLang also mxfp8, nvfp4)",
        vllm=("--kv-cache-dtype",),
        sglang=("--kv-cache-dtype",),
        check=_kv_dtype,
    )
    dtype: str | None = flag(
        STR,
        (V, S, N),
        "activation / unquantized weight dtype: auto, bfloat16, float16 (float32 is not modelled)",
        vllm=("--dtype",),
        sglang=("--dtype",),
        check=_dtype,
    )
    speculative_config: str | None = flag(
        STR,
        (V,),
        'vLLM speculative decoding, JSON as vLLM takes it: \'{"method": "ngram"|"eagle"|"eagle3"|"mtp", '
        '"num_speculative_tokens": K}\' (sync or async scheduler; policies/vllm_spec.py)',
        vllm=("--speculative-config",),
        check=_speculative,
    )
    speculative_algorithm: str | None = flag(
        STR,
        (S,),
        "SGLang speculative decoding: EAGLE, EAGLE3 or NEXTN (= EAGLE); spec v2, sync or overlap "
        "(policies/sglang_spec.py; STANDALONE, NGRAM, DFLASH are not modelled)",
        sglang=("--speculative-algorithm",),
        check=_sglang_spec_algorithm,
    )
    speculative_num_steps: int | None = flag(
        INT,
        (S,),
        "SGLang: draft steps per verify (unset: SGLang's auto choice, (5, 4, 8) for Llama, else (3, 1, 4))",
        sglang=("--speculative-num-steps",),
        check=_positive,
    )
    speculative_eagle_topk: int | None = flag(
        INT, (S,), "SGLang: EAGLE tree branching per step", sglang=("--speculative-eagle-topk",), check=_positive
    )
    speculative_num_draft_tokens: int | None = flag(
        INT,
        (S,),
        "SGLang: tokens verified a request per step (topk 1: num_steps + 1, as SGLang forces)",
        sglang=("--speculative-num-draft-tokens",),
        check=_positive,
    )
    spec_acceptance: float | None = flag(
        FLOAT,
        (V, S),
        "chunksim's own (vLLM has no such flag): per-draft-token acceptance probability α "
        "(default 0.65, from EAGLE-3 on Llama-3.1-8B, MT-bench; policies/vllm_spec.py; SGLang too)",
        own=("--spec-acceptance",),
        check=_acceptance,
    )
    spec_seed: int | None = flag(
        INT, (V, S), "chunksim's own: seed of the acceptance draws (default 0)", own=("--spec-seed",), check=_nonneg
    )
    kv_transfer_config: str | None = flag(
        STR,
        (V,),
        'vLLM KV connector, JSON as vLLM takes it: \'{"kv_connector": "NixlConnector", "kv_role": "kv_both"}\' '
        "(PD disaggregation, sync scheduler only; policies/vllm_pd.py)",
        vllm=("--kv-transfer-config",),
        check=_kv_transfer,
    )
    usage_context: str | None = flag(
        STR, (V,), "vLLM usage context for its defaults: api_server (vllm serve) or llm_class (LLM(...))", cli=False
    )
    execution: str | None = flag(
        STR,
        (V, S),
        "chunksim's own: kernels (default: kernel time only) or engine (the engine's CUDA-graph regimes, "
        "padding and kernel launches: costmodel/execution.py, docs/engines.md)",
        own=("--execution",),
        check=_execution,
    )
    enforce_eager: bool | None = flag(
        BOOL, (V,), "vLLM: no CUDA graphs, no compilation (needs --execution engine)", vllm=("--enforce-eager",)
    )
    optimization_level: int | None = flag(
        INT,
        (V,),
        "vLLM -O level: 0 no graphs, 1 piecewise, 2 (default) and 3 full-and-piecewise (needs --execution engine)",
        vllm=("--optimization-level", "-O"),
        check=_level,
    )
    compilation_config: str | None = flag(
        STR,
        (V,),
        "vLLM: JSON with cudagraph_mode, cudagraph_capture_sizes, max_cudagraph_capture_size "
        "(other keys not modelled; needs --execution engine)",
        vllm=("--compilation-config", "-cc"),
        check=_compilation,
    )
    max_cudagraph_capture_size: int | None = flag(
        INT,
        (V,),
        "vLLM: largest CUDA-graph capture size (default min(2·max_num_seqs, 512); needs --execution engine)",
        vllm=("--max-cudagraph-capture-size",),
        check=_positive,
    )
    disable_cuda_graph: bool | None = flag(
        BOOL, (S,), "SGLang: no CUDA graphs (needs --execution engine)", sglang=("--disable-cuda-graph",)
    )
    disable_decode_cuda_graph: bool | None = flag(
        BOOL, (S,), "SGLang: no decode CUDA graph (needs --execution engine)", sglang=("--disable-decode-cuda-graph",)
    )
    disable_prefill_cuda_graph: bool | None = flag(
        BOOL,
        (S,),
        "SGLang: no prefill (breakable) CUDA graph (needs --execution engine)",
        sglang=("--disable-prefill-cuda-graph",),
    )
    cuda_graph_max_bs_decode: int | None = flag(
        INT,
        (S,),
        "SGLang: largest decode batch replayed as a graph (default by GPU memory and tp; needs --execution engine)",
        sglang=("--cuda-graph-max-bs-decode",),
        check=_positive,
    )
    cuda_graph_max_bs_prefill: int | None = flag(
        INT,
        (S,),
        "SGLang: largest prefill token count replayed as a graph (default chunked_prefill_size; needs --execution engine)",
        sglang=("--cuda-graph-max-bs-prefill",),
        check=_positive,
    )


@dataclass(frozen=True)
class Spec:
    name: str
    kind: str
    engines: tuple
    help: str
    vllm: tuple
    sglang: tuple
    check: object
    cli: bool
    own: tuple = ()

    @property
    def spellings(self) -> tuple:
        """Every command-line spelling, vLLM's first (the ``--no-`` forms left out)."""
        return tuple(dict.fromkeys(s for s in self.vllm + self.sglang + self.own if not s.startswith("--no-")))

    @property
    def negatable(self) -> bool:
        return any(s.startswith("--no-") for s in self.vllm + self.sglang)


FLAGS = {f.name: Spec(f.name, **f.metadata) for f in fields(EngineFlags)}
POLICY_FLAGS = {p: frozenset(n for n, s in FLAGS.items() if p in s.engines) for p in (V, S, N)}
ALL = frozenset(FLAGS)


def check(name: str, value, where: str):
    """``value`` of flag ``name`` (already of its kind) in range, else an InputError naming ``where``."""
    spec = FLAGS[name]
    reason = spec.check(value) if spec.check else None
    if reason:
        raise InputError(where, value, reason)
    return value


def convert(name: str, text: str, where: str):
    """A flag's value from its command-line text: typed and range-checked."""
    kind = FLAGS[name].kind
    if kind == STR:
        return check(name, text, where)
    try:
        v = int(text) if kind == INT else float(text)
    except ValueError:
        raise InputError(where, text, f"must be {'an integer' if kind == INT else 'a number'}") from None
    if kind == FLOAT and not math.isfinite(v):
        raise InputError(where, text, "must be a finite number")
    return check(name, v, where)


def typed(name: str, value, where: str):
    """A value from a YAML ``engine:`` section: of the flag's kind, in range."""
    kind = FLAGS[name].kind
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if kind == BOOL:
        ok, want = isinstance(value, bool), "must be true or false"
    elif kind == STR:
        ok, want = isinstance(value, str), "must be a string"
    elif kind == FLOAT:
        ok, want = is_int or (isinstance(value, float) and math.isfinite(value)), "must be a number"
    else:
        ok, want = is_int, "must be an integer"
    if not ok:
        raise InputError(where, value, want)
    return value if kind in (BOOL, STR) else check(name, value, where)
