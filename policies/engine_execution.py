"""Each engine's CUDA-graph regimes by default, from its own source: the Execution profile
(costmodel/execution.py) a vLLM 0.33 or SGLang 0.5.23 run gets once its flags are resolved.

vLLM 0.33 (vllm/config/vllm.py): ``optimization_level`` O2 by default, whose
``OPTIMIZATION_LEVEL_02`` sets ``cudagraph_mode`` FULL_AND_PIECEWISE (O1 PIECEWISE, O0 NONE);
``--enforce-eager`` sets NONE (``VllmConfig.__post_init__``); a piecewise mode without compilation
(O0) falls back to ``without_piecewise()`` (``_normalize_piecewise_cudagraph_mode``). Capture sizes:
``_set_cudagraph_sizes``: 1, 2, 4, multiples of 8 below 256, multiples of 16 from 256, up to
min(2·max_num_seqs, 512; 1024 on data-centre Blackwell) and max_num_batched_tokens, plus those two
counts where they fit. A uniform decode batch up to the largest size replays the FULL graph, others
the PIECEWISE one, both padded to the next size; larger ones run without graphs
(v1/cudagraph_dispatcher.py, ``CudagraphDispatcher.dispatch``).

SGLang 0.5.23: decode backend "full", prefill backend "breakable" on CUDA
(model_executor/cuda_graph_config.py, ``CudaGraphConfig``, ``default_prefill_backend``). Decode max
bs by GPU memory and tp (arg_groups/memory_hook.py, ``_handle_gpu_memory_settings``), at most
max_running_requests; its sizes from ``generate_decode_cuda_graph_batch_sizes`` (1, 2, 4, 8, 12, then
steps of 8, 16 and 32). Prefill (extend and mixed batches): max bs = chunked_prefill_size tokens,
sizes from ``generate_prefill_cuda_graph_batch_sizes``, a batch padded past twice its tokens runs
eager (runner/prefill_cuda_graph_runner.py, ``can_replay_locally``). ``--disable-cuda-graph`` turns
both off (arg_groups/cuda_graph_hook.py, ``parse_cuda_graph_config``).
"""

from __future__ import annotations

from costmodel.errors import require
from costmodel.execution import Execution

VLLM = "vllm 0.33"
SGLANG = "sglang 0.5.23"
VLLM_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
LEVEL_MODE = {0: "NONE", 1: "PIECEWISE", 2: "FULL_AND_PIECEWISE", 3: "FULL_AND_PIECEWISE"}
WITHOUT_PIECEWISE = {"PIECEWISE": "NONE", "FULL_AND_PIECEWISE": "FULL_DECODE_ONLY"}
DECODE_REGIME = {"NONE": "eager", "PIECEWISE": "piecewise"}  # the FULL modes: "full"
MIXED_REGIME = {"NONE": "eager", "PIECEWISE": "piecewise", "FULL": "full", "FULL_DECODE_ONLY": "eager"}
MiB = 1 << 20


def vllm_capture_sizes(max_num_seqs: int, max_num_batched_tokens: int, max_size: int | None, blackwell: bool) -> list:
    """``VllmConfig._set_cudagraph_sizes`` without speculative decoding (decode query length 1)."""
    uniform = []
    if max_size is None:
        max_size = min(max_num_seqs * 2, 1024 if blackwell else 512)
        if max_num_seqs <= max_size:
            uniform = [max_num_seqs]
    max_size = min(max_num_batched_tokens, max_size)
    sizes = [i for i in (1, 2, 4) if i <= max_size]
    if max_size >= 8:
        sizes += list(range(8, min(max_size + 1, 256), 8))
    if max_size >= 256:
        sizes += list(range(256, max_size + 1, 16))
    if max_num_batched_tokens <= max_size:
        sizes.append(max_num_batched_tokens)
    return sorted(set(sizes + [s for s in uniform if s <= max_num_batched_tokens]))


def vllm_execution(
    cfg,
    enforce_eager: bool = False,
    optimization_level: int = 2,
    cudagraph_mode: str | None = None,
    max_cudagraph_capture_size: int | None = None,
    capture_sizes: list | None = None,
    blackwell: bool = False,
) -> Execution:
    """vLLM's regime for a VLLMConfig `cfg` and its compilation flags (None: vLLM's default)."""
    require(optimization_level in LEVEL_MODE, "optimization_level", optimization_level, "must be 0, 1, 2 or 3")
    mode = (cudagraph_mode or LEVEL_MODE[optimization_level]).upper()
    require(mode in VLLM_MODES, "cudagraph_mode", cudagraph_mode, f"must be one of {', '.join(VLLM_MODES)}")
    if enforce_eager:
        mode = "NONE"
    elif optimization_level == 0:
        mode = WITHOUT_PIECEWISE.get(mode, mode)  # no compilation: no piecewise graphs
    sizes: list = []
    if mode != "NONE":
        if capture_sizes:
            sizes = sorted({int(s) for s in capture_sizes if s <= cfg.max_num_batched_tokens})
        else:
            sizes = vllm_capture_sizes(
                cfg.max_num_seqs, cfg.max_num_batched_tokens, max_cudagraph_capture_size, blackwell
            )
    return Execution(
        engine=VLLM,
        decode_regime=DECODE_REGIME.get(mode, "full"),
        decode_sizes=tuple(sizes),
        mixed_regime=MIXED_REGIME.get(mode, "piecewise"),
        mixed_sizes=tuple(sizes),
        sources=(
            f"cudagraph_mode {mode}: vllm/config/vllm.py OPTIMIZATION_LEVEL_0{optimization_level}"
            + (", --enforce-eager" if enforce_eager else "")
            + (", --compilation-config" if cudagraph_mode else ""),
            f"capture sizes up to {sizes[-1] if sizes else 0}"
            + (" (given)" if capture_sizes or max_cudagraph_capture_size else "")
            + ": VllmConfig._set_cudagraph_sizes",
            "dispatch: v1/cudagraph_dispatcher.py CudagraphDispatcher.dispatch",
        ),
    )


def sglang_decode_max_bs(memory_bytes: float, tp: int) -> int:
    """``_handle_gpu_memory_settings``: cuda_graph_config[decode].max_bs by GPU memory (MiB) and tp."""
    mib = memory_bytes / MiB
    if mib < 20 * 1024:
        return 8
    if mib < 35 * 1024:
        return 48 if tp < 4 else 160
    if mib < 60 * 1024:
        return 32 if tp < 4 else 160
    if mib < 160 * 1024:
        return 256 if tp < 4 else 512
    return 512


def sglang_decode_sizes(max_bs: int) -> list:
    """``generate_decode_cuda_graph_batch_sizes``, no speculative decoding, padding on."""
    bs = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16)) + list(range(512, max_bs + 1, 32))
    bs = [b for b in bs if b <= max_bs]
    return sorted(set(bs + [max_bs]))


def sglang_prefill_sizes(max_bs: int) -> list:
    """``generate_prefill_cuda_graph_batch_sizes``: captured token counts."""
    sizes = (
        list(range(4, 33, 4))
        + list(range(48, 257, 16))
        + list(range(288, 513, 32))
        + list(range(576, 1025, 64))
        + list(range(1280, 4097, 256))
        + list(range(4608, max_bs + 1, 512))
    )
    return [s for s in sizes if s <= max_bs]


def sglang_execution(
    cfg,
    memory_bytes: float,
    tp: int = 1,
    disable_cuda_graph: bool = False,
    disable_decode_cuda_graph: bool = False,
    disable_prefill_cuda_graph: bool = False,
    cuda_graph_max_bs_decode: int | None = None,
    cuda_graph_max_bs_prefill: int | None = None,
    max_total_tokens: int | None = None,
) -> Execution:
    """SGLang's regime for an SGLangConfig `cfg` on a GPU of `memory_bytes` at tensor parallel `tp`."""
    decode_bs = cuda_graph_max_bs_decode
    if decode_bs is None:
        decode_bs = min(sglang_decode_max_bs(memory_bytes, tp), cfg.max_running_requests)
    prefill_bs = cuda_graph_max_bs_prefill
    if prefill_bs is None:
        prefill_bs = cfg.chunk or 0  # chunking off: chunked_prefill_size -1, no token buckets
        if max_total_tokens:
            prefill_bs = min(prefill_bs, max_total_tokens)
    decode_on = not (disable_cuda_graph or disable_decode_cuda_graph)
    prefill_on = not (disable_cuda_graph or disable_prefill_cuda_graph) and prefill_bs > 0
    return Execution(
        engine=SGLANG,
        decode_regime="full" if decode_on else "eager",
        decode_sizes=tuple(sglang_decode_sizes(decode_bs)) if decode_on else (),
        mixed_regime="piecewise" if prefill_on else "eager",
        mixed_sizes=tuple(sglang_prefill_sizes(prefill_bs)) if prefill_on else (),
        mixed_pad_factor=2.0,
        sources=(
            f"decode graph {'full' if decode_on else 'off'} up to {decode_bs}"
            + (" (--cuda-graph-max-bs-decode)" if cuda_graph_max_bs_decode else "")
            + ": arg_groups/memory_hook.py _handle_gpu_memory_settings, generate_decode_cuda_graph_batch_sizes",
            f"prefill graph {'breakable' if prefill_on else 'off'} up to {prefill_bs} tokens"
            + (" (--cuda-graph-max-bs-prefill)" if cuda_graph_max_bs_prefill else "")
            + ": model_executor/cuda_graph_config.py default_prefill_backend, generate_prefill_cuda_graph_batch_sizes",
            "padding past 2x runs eager: runner/prefill_cuda_graph_runner.py can_replay_locally",
        ),
    )
