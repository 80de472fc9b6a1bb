"""An engine's execution of a chosen batch: which CUDA-graph regime runs it, padded to what size,
and how many kernels it launches from the host (mixed into CostModel by costmodel/host.py).

Three regimes, named as vLLM's ``CUDAGraphMode`` names its runtime modes (vllm/config/compilation.py):
  full       the whole forward pass is one captured graph: one launch, the batch padded up to the
             next captured size (vLLM FULL for uniform decode; SGLang's decode graph)
  piecewise  the layers' GEMMs and elementwise ops replay as graph pieces between attention, which
             runs outside them (vLLM PIECEWISE; SGLang's breakable prefill graph): per layer the
             attention's kernels (the KV-cache write and the attention itself) plus one piece
  eager      every kernel launched by the host (vLLM NONE or --enforce-eager, batches past the
             largest capture size; SGLang with the phase's graph disabled or past its max bs)

A step's GPU time becomes  gpu(rows, seqs) + [gpu(padded) − gpu(rows, seqs)] + launches · launch_s:
padding costs the padded rows' compute where the GEMMs are compute-bound (nothing where they stream
weights); a kernel launched outside a graph leaves the GPU idle for launch_s (additive: the measured
eager-minus-graph gap grows with the kernel count, not hidden by the GPU time; docs/engines.md).
Kernels per layer of a dense (Llama-style) decoder, eager, as vLLM's ``LlamaDecoderLayer.forward``
launches them: input RMSNorm, QKV GEMM, rotary, KV-cache write, attention, O GEMM, post-attention
RMSNorm, gate/up GEMM, SiLU-and-mul, down GEMM = 10, plus 2 all-reduces at tp > 1; per pass the
embedding and the final norm. Other layer kinds (MoE, linear attention) are not counted: refused.
The step fit's eager-launch term (``host_per_launch_s``, costmodel/host.py) counts instead as the
engine of its measurements launched them, from each model's architecture (``layer_kernels``).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from .errors import InputError, require

REGIMES = ("full", "piecewise", "eager")
EAGER_LAYER_KERNELS = 10  # LlamaDecoderLayer.forward, enumerated above
TP_LAYER_KERNELS = 2  # the attention's and the MLP's all-reduce (RowParallelLinear) at tp > 1
PASS_KERNELS = 2  # embedding, final norm
PIECEWISE_OUTSIDE = 2  # per layer, outside the pieces: the KV-cache write and attention (vLLM splitting ops)
LAUNCH_S = 6.1e-6
"""Seconds a kernel launched from the host adds to a step: pie-project/pie#348 (Qwen2.5-72B-AWQ, A100,
single sequence) measured eager 22.68 vs full-decode-graph 15.39 ms a token, 7.29 ms over ~1200
kernels (80 layers × ~15, the PR's count): 6.1 µs a kernel. The kernel count is the PR's estimate
(12-20 a layer gives 4.6-7.6 µs): LAUNCH_BAND carries that as the term's uncertainty."""
LAUNCH_BAND = (4.6e-6, 7.6e-6)


@dataclass(frozen=True)
class Execution:
    """One engine's execution profile. ``decode_sizes``: the captured batch sizes of the regime a
    pure-decode batch (every sequence one new token) gets up to its largest; ``mixed_sizes``: the
    captured token counts of the regime other batches get; past the largest of each, eager."""

    engine: str  # "vllm 0.33" / "sglang 0.5.23": whose defaults these are
    decode_regime: str  # full, piecewise or eager
    decode_sizes: tuple[int, ...]
    mixed_regime: str  # full, piecewise or eager
    mixed_sizes: tuple[int, ...]
    mixed_pad_factor: float = 0.0  # > 0: a mixed batch padded past this many times its tokens runs eager (SGLang)
    launch_s: float = LAUNCH_S
    sources: tuple[str, ...] = ()  # where each default came from (file and function)

    def __post_init__(self):
        for name in ("decode_regime", "mixed_regime"):
            v = getattr(self, name)
            require(v in REGIMES, name, v, f"must be one of {', '.join(REGIMES)}")
        for name in ("decode_sizes", "mixed_sizes"):
            v = getattr(self, name)
            ok = all(isinstance(x, int) and x > 0 for x in v) and list(v) == sorted(set(v))
            require(ok, name, v, "must be increasing positive integers")
        require(self.launch_s >= 0, "launch_s", self.launch_s, "must be >= 0")

    def regime(self, rows: int, seqs: int, prefill_seqs: int) -> tuple[str, int, int]:
        """(regime, padded rows, padded sequences) of a pass of `rows` tokens over `seqs` sequences,
        `prefill_seqs` of them with more than one new token (vLLM's dispatcher: a uniform decode
        batch takes the full graph's key, anything else the piecewise one; both pad the token count
        up to the next captured size, the full graph's the requests too: cudagraph_dispatcher.py)."""
        decode = prefill_seqs == 0 and rows == seqs
        regime, sizes = (self.decode_regime, self.decode_sizes) if decode else (self.mixed_regime, self.mixed_sizes)
        if regime == "eager" or not sizes or rows > sizes[-1]:
            return "eager", rows, seqs
        padded = sizes[bisect.bisect_left(sizes, rows)]
        if not decode and self.mixed_pad_factor and padded > rows * self.mixed_pad_factor:
            return "eager", rows, seqs
        return regime, padded, padded if regime == "full" and decode else seqs

    def launches(self, regime: str, layers: int, tp: int) -> int:
        """Kernels the host launches for one pass under `regime` (a graph replay counts as one)."""
        if regime == "full":
            return 1
        if regime == "piecewise":
            return layers * PIECEWISE_OUTSIDE + layers + 1
        return eager_launches(layers, tp)


def eager_launches(layers: int, tp: int) -> int:
    """Kernels the host launches for one eager pass of a dense decoder (module docstring)."""
    return layers * (EAGER_LAYER_KERNELS + (TP_LAYER_KERNELS if tp > 1 else 0)) + PASS_KERNELS


def layer_kernels(model, tp: int) -> int:
    """Kernels one dense decoder layer launches eagerly, counted from the model's architecture as
    vLLM's model code of 2023 launches them (v0.2, the eager engine of Splitwise's step timings:
    ``LlamaDecoderLayer.forward``, ``BloomBlock.forward`` with the Megatron-style
    ``ColumnParallelLinear`` / ``RowParallelLinear`` of ``parallel_utils/tensor_parallel/layers.py``):

      2 norms (RMSNorm's custom op, or nn.LayerNorm), 2 residual adds (not fused into the norm then)
      QKV GEMM (a column-parallel bias rides in the GEMM: torch's addmm with a 1-D bias runs
      cuBLASLt's bias epilogue), rotary embedding where the model rotates q and k (ALiBi's slopes
      are an argument of the attention kernel, learned positions are added once per pass)
      KV-cache write (``reshape_and_cache``) and attention: 2
      O GEMM and the MLP's three (gate_up, SiLU-and-mul, down; or up, GELU, down)
      at tp > 1 an all-reduce after each row-parallel GEMM, and each row-parallel bias added after
      it (``RowParallelLinear.forward``: output_ + bias, its own kernel)

    Llama-2-70B: 14 at tp > 1; BLOOM-176B: 15 (no rotary, two bias adds)."""
    if model.is_moe or model.linear_layers or model.is_mla:
        raise InputError(
            "model",
            model.name,
            "only a dense decoder's eager kernels per layer are counted (no MoE, linear-attention or MLA layers)",
        )
    fixed = 2 + 2 + 1 + 2 + 1 + 3  # norms, residual adds, QKV, cache write + attention, O, MLP
    return fixed + int(model.rotary) + model.out_biases + (TP_LAYER_KERNELS if tp > 1 else 0)


def model_launches(model, tp: int) -> int:
    """Kernels one eager pass of ``model`` launches (``layer_kernels`` per layer, plus the pass's):
    the count ``host_per_launch_s`` multiplies (costmodel/host.py)."""
    return model.L * layer_kernels(model, tp) + PASS_KERNELS


def check_model(model, execution: Execution) -> None:
    """The kernel counts above are a dense decoder's: refuse the layer kinds they do not count."""
    if model.is_moe or model.linear_layers:
        kind = "MoE" if model.is_moe else "linear-attention (hybrid)"
        raise InputError(
            "execution",
            execution.engine,
            f"{model.name} has {kind} layers, whose kernels per layer the engine execution profile does "
            "not count (dense decoders only); run with --execution kernels",
        )
