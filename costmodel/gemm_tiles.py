"""A GEMM's time from how cuBLAS/CUTLASS-style kernels run it: CTA tiles in waves over the SMs,
split-K for skinny problems, and the operands streamed from HBM (or the L2 while they fit).

For (m×k)·(k×n) in b-byte elements, each candidate kernel (a Tm×Tn output tile, K split s ways)
runs ctas = ⌈m/Tm⌉·⌈n/Tn⌉·s thread blocks, ⌈ctas/SMs⌉ waves of them, and costs

  t_tile   = ⌈k/s⌉·√((2·Tm·Tn/π_sm)² + (b·(Tm+Tn)/β_l2,sm)²) + wave + c·Tm·Tn/β_sm
             (main loop: tensor-core MMAs against the A and B tiles fed from the L2, which the
             pipeline overlaps; then a fixed per-tile latency and the epilogue's store of the
             output tile, c = b, or 4 for fp32 split-K partials, at β or β_l2 by r_o; π_sm = π/SMs …)
  t_comp   = ⌈ctas/SMs⌉ · t_tile
  t_mem    = (B·(1-r) + O·(1-r_o))/min(β, f·β_cta) + (B·r + O·r_o)/min(β_l2, f·β_cta),  f = ⌈n/Tn⌉·s
             (inputs B = W + X, weights W = b·n·k, activations X = b·m·k, output O = b·m·n +
             4·m·n·s partials; Little's law: a kernel of few thread blocks cannot keep enough bytes
             in flight to reach β, and only the f blocks of one row of tiles stream distinct weights
             (the other rows re-read them from the L2), so more rows never make it faster; B·r is
             W·ρ(W, C) + X·ρ(X, C_x), ρ(x, C) = 1/(1 + (x/C)⁸) the share of x bytes the L2 holds
             while they fit its resident capacity C (without C_x, a profile before it: B·ρ(B, C)),
             r_o the output's share written back to it below C_o; C, C_x, C_o ≤ the L2 size)
  t        = min over kernels of √(t_comp² + t_mem²) + [s > 1]·split_s, + floor,
             or the unsplit kernel's t₀ + τ·k where it is slower inside the region where the
             library runs it (gemm_serial.py), times the fitted shape correction where a
             profile has one (gemm_correction.py) and its residual field (gemm_residual.py)

the library picks the fastest kernel; a split-K kernel pays a second pass (the reduction).

Weights and activations have their own capacities because an operand stays in the L2 while the
bytes touched between two uses of it fit there. AIConfigurator's TensorRT-LLM tables come from
``collector/trtllm/collect_gemm.py`` (``run_gemm``, v0.4.0): five ``tensorrt_llm._torch.modules.linear
.Linear`` layers (bf16, distinct weights) applied to one shared input, captured in one CUDA graph and
replayed 6 times without flushing the L2, the time divided by 30. Between two uses of a weight the
other four weights stream through, so weights stay resident up to about L2/5; the shared input is
reused by every layer, up to about the whole L2. The fit finds just that on the L40S (96 MiB L2):
C = 18.6 MB, C_x = 101 MB, and the measured jumps sit there (m = 8,192, n = 32: k = 6,144, X = 101
MB, in 45.8 µs; k = 7,168, X = 117 MB, in 166.7 µs). The
tiles are CUTLASS's sm80/sm90 tensor-core tile shapes (64–256 rows and columns); splits 1–16.
π ≤ the spec peak, β ≤ the spec bandwidth and C, C_o ≤ the spec L2 bound the fit; π_sm, β_sm, β_l2,sm
spread the whole-GPU rates over the SMs. Used by the fit (``calibration/gemm_fit.py``) and by the
roofline to price weight GEMMs of profiles with gemm_form "tiles", so both are one formula.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .gemm_correction import Correction
from .gemm_residual import Field
from .gemm_serial import apply as serial_apply

TILES = ((64, 64), (64, 128), (128, 64), (128, 128), (128, 256), (256, 128))
SPLITS = (1, 2, 3, 4, 6, 8, 12, 16)
# Quantized weight GEMMs: (weight, activation) bytes per element. fp8 (per-tensor) and W8A8
# SmoothQuant ("sq"): 1 and 1; fp8_block (DeepSeek-style 128×128 weight / 1×128 activation scales,
# fp32): 1 + 4/128² and 1 + 4/128; nvfp4: 4-bit values with one fp8 scale per 16 (weights and
# activations): 0.5 + 1/16; weight-only int8 / int4 (TensorRT-LLM's WeightOnlyQuantMatmul,
# 16-bit activations): 1 and 0.5 + 2/128 (an fp16 scale per group of 128; per channel it is
# less). The output is 16-bit in every case.
GEMM_DTYPES = {
    "fp8": (1.0, 1.0),
    "fp8_block": (1.0 + 4.0 / 128**2, 1.0 + 4.0 / 128),
    "sq": (1.0, 1.0),
    "nvfp4": (0.5 + 1.0 / 16, 0.5 + 1.0 / 16),
    "int8_wo": (1.0, 2.0),
    "int4_wo": (0.5 + 2.0 / 128, 2.0),
}
PARAMS = ("pi", "beta", "beta_l2", "beta_cta", "floor", "split", "wave", "l2", "l2_out", "l2_act")
UNITS = {
    "pi": "FLOP/s",
    "beta": "B/s",
    "beta_l2": "B/s",
    "beta_cta": "B/s",
    "floor": "s",
    "split": "s",
    "wave": "s",
    "l2": "B",
    "l2_out": "B",
    "l2_act": "B",
}


def element_bytes(dtype: str | None) -> tuple[float, float]:
    """(weight, activation) bytes per element a GEMM of ``dtype`` streams (``GEMM_DTYPES``; 16-bit
    and unknown names: (2, 2))."""
    return GEMM_DTYPES.get(str(dtype), (2.0, 2.0))


def grid(m, n, k, sms: int, b: float = 2.0, bw=None, bx=None) -> dict:
    """The parameter-free part of every candidate kernel (configs × rows arrays), computed once
    per table so that a fit's many evaluations only redo the arithmetic in the constants.
    ``bw``, ``bx``: the weights' and activations' bytes per element where they are not ``b``
    (quantized GEMMs, ``GEMM_DTYPES``; scalars or one per row); the output stays b bytes."""
    m, n, k = (np.atleast_1d(np.asarray(x, float)) for x in (m, n, k))
    cfg = [(tm, tn, s) for tm, tn in TILES for s in SPLITS]
    tm = np.array([c[0] for c in cfg], float)[:, None]
    tn = np.array([c[1] for c in cfg], float)[:, None]
    s = np.array([c[2] for c in cfg], float)[:, None]
    ctas = np.ceil(m / tm) * np.ceil(n / tn) * s
    quant = bw is not None or bx is not None
    bw, bx = (b if bw is None else np.asarray(bw, float)), (b if bx is None else np.asarray(bx, float))
    W, X = bw * n * k + 0.0 * s + 0.0 * m, bx * m * k + 0.0 * s + 0.0 * n
    B = W + X
    out = b * m * n + np.where(s > 1, 4.0 * m * n * s, 0.0)
    return {
        "waves": np.ceil(ctas / sms),
        "kk": np.ceil(k / s),
        "ctas": np.ceil(n / tn) * s + 0.0 * m,
        "B": B,
        "W": W,
        "X": X,
        "out": out,
        "split": (s > 1) + 0.0 * m,
        "mma": 2.0 * tm * tn + 0 * m,
        "feed": (bx * tm + bw * tn if quant else b * (tm + tn)) + 0 * m,
        "store": np.where(s > 1, 4.0, b) * tm * tn + 0 * m,
        "sms": float(sms),
        "mnk": (m, n, k),
    }


def shortlist(g: dict, values, keep: int = 6) -> dict:
    """The grid cut to each row's ``keep`` fastest kernels at these constants (the fit refines on
    it: the library's choice moves little as the constants do)."""
    t = times_all(g, values)
    idx = np.argsort(t, axis=0)[:keep]
    return {k: (np.take_along_axis(v, idx, 0) if isinstance(v, np.ndarray) else v) for k, v in g.items()}


def times_on(g: dict, values) -> np.ndarray:
    """Seconds per row of the grid's GEMMs at the constants (``PARAMS`` order, SI)."""
    return times_all(g, values).min(axis=0) + float(values[4])


def _resident(x: np.ndarray, capacity: float) -> np.ndarray:
    """1/(1 + (x/C)⁸): the share of x bytes the L2 holds (1 well below C, 0 well above)."""
    x = x / capacity
    x *= x
    x *= x
    x *= x
    return 1.0 / (1.0 + x)


def times_all(g: dict, values) -> np.ndarray:
    """Seconds of every candidate kernel (configs × rows), without the launch floor."""
    pi, beta, beta_l2, beta_cta, floor, split, wave, l2, l2_out = (float(v) for v in values[:9])
    l2_act = float(values[9]) if len(values) > 9 else 0.0
    sms = g["sms"]
    a, c = g["mma"] * (sms / pi), g["feed"] * (sms / beta_l2)
    B, out = g["B"], g["out"]
    r_out = _resident(out, l2_out)
    if l2_act > 0:
        rB = g["W"] * _resident(g["W"], l2) + g["X"] * _resident(g["X"], l2_act)
    else:
        rB = B * _resident(B, l2)
    comp = g["kk"] * np.sqrt(a * a + c * c)
    comp += wave
    comp += g["store"] * sms * ((1.0 - r_out) / beta + r_out / beta_l2)
    comp *= g["waves"]
    flow = g["ctas"] * beta_cta
    hbm, l2f = np.minimum(flow, beta), np.minimum(flow, beta_l2)
    mem = (B - rB + out * (1.0 - r_out)) / hbm
    mem += (rB + out * r_out) / l2f
    comp *= comp
    mem *= mem
    comp += mem
    t = np.sqrt(comp, out=comp)
    t += split * g["split"]
    return t


@dataclass(frozen=True)
class GemmTiles:
    """The fitted constants (SI) and the GPU's SM count."""

    pi: float
    beta: float
    beta_l2: float
    beta_cta: float
    floor: float
    split: float
    wave: float
    l2: float
    l2_out: float
    sms: int
    corr_knots: tuple = ()  # the bounded shape correction (gemm_correction.py); empty: none
    corr: tuple = ()
    l2_act: float = 0.0  # activations' L2-resident capacity (0: inputs together below l2)
    field: tuple = ()  # (m grid, shapes, residuals, h, a): the residual field (gemm_residual.py); (): none
    serial: tuple = ()  # [t0, tau, S, K, M]: the unsplit kernel's region (gemm_serial.py); (): none
    w_bytes: float = 0.0  # weights' bytes per element where not the call's b (quantized: element_bytes); 0: b
    x_bytes: float = 0.0  # activations' bytes per element likewise; 0: b

    def __post_init__(self):
        object.__setattr__(self, "_corr", Correction(self.corr_knots, self.corr) if self.corr else None)
        object.__setattr__(self, "_field", Field(*self.field) if self.field and self.field[0] else None)

    @classmethod
    def from_profile(cls, hw, dtype: str | None = None, pi_scale: float = 1.0) -> GemmTiles | None:
        """The tile model of a profile with gemm_form "tiles" (a ``Hardware``), as the roofline builds
        it, π scaled by ``pi_scale``; with ``dtype``, the profile's fit for that quantized dtype
        (``Hardware.for_gemm_dtype``) streaming its element bytes, None where it has none."""
        if dtype is not None:
            hw = hw.for_gemm_dtype(dtype)
            if hw is None:
                return None
        w, x = element_bytes(dtype) if dtype is not None else (0.0, 0.0)
        fld = (
            (hw.gemm_field_m, hw.gemm_field_shapes, hw.gemm_field, hw.gemm_field_h, hw.gemm_field_shrink)
            if hw.gemm_field
            else ()
        )
        return cls(
            hw.pi_eff * pi_scale,
            hw.beta_eff,
            hw.gemm_l2_beta,
            hw.gemm_cta_beta,
            hw.kernel_overhead_s,
            hw.gemm_split_s,
            hw.gemm_wave_s,
            hw.gemm_l2_resident_bytes,
            hw.gemm_l2_out_bytes,
            hw.sms,
            tuple(map(tuple, hw.gemm_corr_knots)),
            tuple(hw.gemm_corr),
            l2_act=hw.gemm_l2_act_bytes,
            field=fld,
            serial=tuple(hw.gemm_serial),
            w_bytes=w,
            x_bytes=x,
        )

    @property
    def corrected(self) -> bool:
        """Whether a shape correction or residual field multiplies the tile model's time."""
        return self._corr is not None or self._field is not None  # type: ignore[attr-defined]

    @property
    def field_key(self) -> int:
        """A digest of the residual field and the unsplit kernel's region (0: neither), for caches
        keyed on the profile's GEMM factors."""
        key = self._field.key if self._field is not None else 0  # type: ignore[attr-defined]
        return hash((key, tuple(self.serial))) if self.serial else key

    def _log_factor(self, m, n, k) -> np.ndarray:
        m, n, k = np.broadcast_arrays(*(np.atleast_1d(np.asarray(x, float)) for x in (m, n, k)))
        c = self._corr(m, n, k) if self._corr is not None else 0.0  # type: ignore[attr-defined]
        return c + self._field(m, n, k) if self._field is not None else c  # type: ignore[attr-defined, return-value]

    @property
    def values(self) -> tuple:
        return tuple(getattr(self, p) for p in PARAMS)

    def on_grid(self, g: dict) -> np.ndarray:
        """Seconds per GEMM of a ``grid`` before the correction and field: the tile model's best
        kernel, or the unsplit kernel in its region."""
        t = times_on(g, self.values)
        return serial_apply(t, *g["mnk"], self.serial) if self.serial else t  # type: ignore[call-arg]

    def times(self, m, n, k, b: float = 2.0) -> np.ndarray:
        """Seconds per GEMM (arrays or scalars of rows m, output columns n, inner dimension k)."""
        bw, bx = self.w_bytes or None, self.x_bytes or None
        t = self.on_grid(grid(m, n, k, self.sms, b, bw, bx))
        if self.corrected:
            t = t * np.exp(self._log_factor(m, n, k))
        return t

    def factor(self, m, n, k) -> np.ndarray | float:
        """The shape correction's and residual field's factor per GEMM (1.0 without either)."""
        if not self.corrected:
            return 1.0
        return np.exp(self._log_factor(m, n, k))

    def time(self, m: int, n: float, k: float, b: float = 2.0) -> float:
        return float(self.times(m, n, k, b)[0])


def layer_gemms(model, tp: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(k, n, count) of the weight GEMMs of one pass per GPU under tensor parallelism tp: each
    full-attention layer's fused QKV (H → (h + 2·h_kv)·d_h/tp, KV heads replicated beyond h_kv,
    with Qwen3-Next's output gate) and O projections; each dense layer's gate/up (H → 2·ffn/tp,
    or ffn/tp ungated) and down projections (Megatron column/row splits). The other always-on
    weights (norms, routers, shared experts, linear-attention layers, MLA's low-rank projections)
    stay on the roofline."""
    m, La, Ld = model, 0 if model.is_mla else model.kv_layers, model.dense_layers
    q, kv = m.h * m.d_h / tp, max(1, m.h_kv // tp) * m.d_h
    qkv = q * (2 if m.attn_output_gate else 1) + 2 * kv
    k = np.array([m.H, q, m.H, m.ffn / tp], float)
    n = np.array([qkv, m.H, (2 if m.gated_mlp else 1) * m.ffn / tp, m.H], float)
    count = np.array([La, La, Ld, Ld], float)
    keep = (count > 0) & (k * n > 0)
    return k[keep], n[keep], count[keep]
