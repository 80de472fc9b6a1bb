"""Weight and KV-cache precision: bytes a quantized weight and a KV element take, and the tensor-core
rate a quantized GEMM runs at.

A weight format is what the GEMMs read: ``bf16`` (also fp16), ``fp8`` (per-tensor or per-channel
scales, W8A8), ``fp8_block`` (128×128-block scales, DeepSeek-style), ``int8`` (W8A8, SmoothQuant),
``int8_wo`` / ``int4_wo`` (weight-only, AWQ / GPTQ, group 128: one fp16 scale and a packed zero
per group), ``nvfp4`` (FP4 E2M1, an fp8 scale per 16 weights). Only the decoder's linear layers
and experts are quantized; the embedding and the LM head stay 16-bit, as in vLLM's quantized
linear methods (``get_quant_method`` returns an unquantized method for other layers).

A W8A8 or W4A4 format computes at the GPU's rate for its dtype (``Hardware.dtype_peaks``); a GPU
without that rate runs the weights through a weight-only kernel at the 16-bit rate, as vLLM does
(``Fp8LinearMethod`` falls back to Marlin below compute capability 8.9; ModelOpt NVFP4 to Marlin
below SM100). Attention always computes at the 16-bit rate: an fp8 KV cache halves the bytes
attention reads, not its FLOPs (FlashInfer and Triton decode dequantize in registers).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import InputError

WEIGHT_FORMATS = {  # bytes per weight including scales, the dtype its GEMM computes in (None: 16-bit)
    "bf16": (2.0, None),
    "fp8": (1.0, "fp8"),
    "fp8_block": (1.0 + 4.0 / (128 * 128), "fp8"),
    "int8": (1.0, "int8"),
    "int8_wo": (1.0 + 2.0 / 128, None),
    "int4_wo": (0.5 + 2.5 / 128, None),
    "nvfp4": (0.5 + 1.0 / 16, "fp4"),
}

KV_FORMATS = {  # bytes per KV element
    "bf16": 2.0,
    "fp8": 1.0,
    "mxfp8": 1.0 + 1.0 / 32,
    "nvfp4": 0.5 + 1.0 / 16,
}

KV_DTYPES = {  # --kv-cache-dtype as vLLM (vllm/config/cache.py CacheDType) and SGLang spell it
    "auto": None,
    "bfloat16": "bf16",
    "bf16": "bf16",
    "float16": "bf16",
    "fp8": "fp8",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "mxfp8": "mxfp8",
    "nvfp4": "nvfp4",
    "fp4_mx_block16": "nvfp4",
}

QUANTIZATION = {  # --quantization (vLLM QuantizationMethods, SGLang QUANTIZATION_CHOICES) -> format
    "fp8": "fp8",
    "fp8_per_tensor": "fp8",
    "fp8_per_channel": "fp8",
    "fbgemm_fp8": "fp8",
    "modelopt_fp8": "fp8",
    "w8a8_fp8": "fp8",
    "fp8_per_block": "fp8_block",
    "w8a8_int8": "int8",
    "int8_per_channel_weight_only": "int8_wo",
    "awq": "int4_wo",
    "auto_awq": "int4_wo",
    "awq_marlin": "int4_wo",
    "gptq": "int4_wo",
    "auto_gptq": "int4_wo",
    "gptq_marlin": "int4_wo",
    "modelopt_fp4": "nvfp4",
    "nvfp4_online": "nvfp4",
    "nvfp4_per_token": "nvfp4",
}
NEEDS_CONFIG = {"modelopt", "compressed-tensors"}  # the format is in the checkpoint's quantization_config
DTYPES = {"auto", "bfloat16", "bf16", "float16", "half", "fp16"}  # --dtype values priced as 16-bit


class PrecisionError(InputError):
    """A precision flag or quantization_config that is not modelled."""


@dataclass(frozen=True)
class Precision:
    weights: str = "bf16"
    kv: str = "bf16"

    @property
    def kv_bytes(self) -> float:
        return KV_FORMATS[self.kv]

    @property
    def compute(self) -> str | None:
        return WEIGHT_FORMATS[self.weights][1]


def from_config(qc: dict | None, where: str) -> str | None:
    """The weight format a checkpoint's ``quantization_config`` declares (None: not quantized)."""
    if not qc:
        return None
    if not isinstance(qc, dict):
        raise PrecisionError(where, qc, "must be an object")
    method = str(qc.get("quant_method", "")).lower()
    if method == "fp8":
        return "fp8_block" if qc.get("weight_block_size") else "fp8"
    if method in ("awq", "gptq"):
        bits = qc.get("bits", qc.get("w_bit", 4))
        if bits in (4, 8):
            return "int4_wo" if bits == 4 else "int8_wo"
        raise PrecisionError(f"{where}.bits", bits, f"{method} is modelled at 4 or 8 bits")
    if method == "modelopt":
        algo = str(qc.get("quant_algo", (qc.get("quantization") or {}).get("quant_algo", ""))).upper()
        if algo in ("FP8", "NVFP4"):
            return "fp8" if algo == "FP8" else "nvfp4"
        raise PrecisionError(f"{where}.quant_algo", algo, "ModelOpt is modelled for FP8 and NVFP4")
    raise PrecisionError(
        f"{where}.quant_method",
        method,
        "not modelled (modelled: fp8, fp8 with weight_block_size, awq, gptq, modelopt FP8 / NVFP4)",
    )


def resolve(
    config_format: str | None,
    quantization: str | None = None,
    kv_cache_dtype: str | None = None,
    dtype: str | None = None,
) -> Precision:
    """The precision an engine runs a checkpoint at, from its ``quantization_config``'s format and
    the ``--quantization``, ``--kv-cache-dtype`` and ``--dtype`` flags. As vLLM
    (``ModelConfig._verify_quantization``), a flag naming another method than the checkpoint's is an error."""
    weights = config_format or "bf16"
    if quantization is not None:
        q = str(quantization).lower()
        if q in NEEDS_CONFIG:
            if not config_format:
                raise PrecisionError("quantization", quantization, "needs a checkpoint whose config.json declares it")
        elif q in QUANTIZATION:
            fmt = QUANTIZATION[q]
            if config_format and {fmt, config_format} != {"fp8", "fp8_block"} and fmt != config_format:
                raise PrecisionError(
                    "quantization",
                    quantization,
                    f"the checkpoint's quantization_config is {config_format}, not {fmt}",
                )
            weights = config_format or fmt
        else:
            raise PrecisionError(
                "quantization",
                quantization,
                f"not modelled (modelled: {', '.join(sorted(QUANTIZATION | dict.fromkeys(NEEDS_CONFIG)))})",
            )
    if dtype is not None and str(dtype).lower() not in DTYPES:
        raise PrecisionError("dtype", dtype, f"not modelled (modelled: {', '.join(sorted(DTYPES))}: 16-bit)")
    kv = "bf16"
    if kv_cache_dtype is not None:
        k = str(kv_cache_dtype).lower()
        if k not in KV_DTYPES:
            raise PrecisionError(
                "kv_cache_dtype", kv_cache_dtype, f"not modelled (modelled: {', '.join(sorted(KV_DTYPES))})"
            )
        kv = KV_DTYPES[k] or "bf16"
    return Precision(weights, kv)


def gemm_rate(weights: str, hw) -> float:
    """π of a ``weights``-format GEMM over the 16-bit π (0.0 for 16-bit weights): the GPU's dense peak
    for the format's compute dtype over its 16-bit peak, or 1 where the GPU has no such rate and the
    engine falls back to a weight-only kernel (fp8, fp4). W8A8 int8 has no fallback."""
    if weights == "bf16":
        return 0.0
    compute = WEIGHT_FORMATS[weights][1]
    if compute is None:
        return 1.0
    peak = (hw.dtype_peaks or {}).get(compute)
    if peak:
        return float(peak) / hw.peak_flops
    if compute == "int8":
        raise PrecisionError("quantization", weights, f"{hw.name} lists no int8 tensor-core rate (dtype_peaks)")
    return 1.0
