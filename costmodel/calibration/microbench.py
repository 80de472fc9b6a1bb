"""Measure the kernels the roofline prices: one plan, two back ends.

The plan (which shapes, what FLOPs and bytes each moves) is built once from a model's shapes and
is the same for ``cpu`` (numpy, wall clock) and ``cuda`` (torch, CUDA events), so the CPU run
exercises the whole pipeline measure → fit → predict on any machine. Every kernel is warmed up,
then timed ``repeats`` times; the median is kept (robust to a preempted or throttled repeat).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputError, require
from .timings import DTYPE_BYTES, attention_row, gemm_row, layer_gemm_shapes, validate

DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class Kernel:
    """One planned call. shape: gemm (m, k, n); attention (heads, kv_heads, d_h, q, kv, sequences);
    copy (elements,)."""

    op_class: str
    op: str
    shape: tuple[int, ...]
    tokens: int


@dataclass(frozen=True)
class Plan:
    kernels: tuple[Kernel, ...]
    dtype: str
    warmup: int = 2
    repeats: int = 7


def _row(k: Kernel, b: int) -> dict:
    """The tidy-table fields of a planned kernel, FLOPs and bytes as ``timings`` defines them."""
    if k.op_class == "gemm":
        m, kk, n = k.shape
        return gemm_row(k.op, m, kk, n, b, np.nan)
    if k.op_class == "copy":
        (e,) = k.shape
        return dict(op_class="copy", op=k.op, tokens=0, m=e, k=0, n=0, flops=0.0, bytes=2.0 * b * e, time_s=np.nan)
    h, hkv, d, q, kv, n = k.shape
    row = attention_row("attention", n, q, kv, h, hkv, d, b, np.nan)
    dec = k.op_class == "attention_decode"
    return {
        **row,
        "op": k.op_class,
        "seqs": n if dec else 0,
        "decode_flops": row["flops"] if dec else 0.0,
        "decode_bytes": row["bytes"] if dec else 0.0,
    }


def plan_table(plan: Plan) -> pd.DataFrame:
    b = DTYPE_BYTES[plan.dtype]
    return pd.DataFrame([_row(k, b) for k in plan.kernels]).assign(dtype=plan.dtype, tp=1, workers=1)


def build_plan(
    h: int,
    heads: int,
    kv_heads: int,
    ffn: int,
    tokens,
    prefill,
    decode_kv,
    copy_elements,
    dtype: str,
    tp: int = 1,
    warmup: int = 2,
    repeats: int = 7,
) -> Plan:
    """GEMMs of one layer (tp shard) at each token count; prefill attention at each (q, kv);
    decode attention (q = 1) at each kv, or each (sequences, kv); a copy of each size."""
    require(dtype in DTYPE_BYTES, "dtype", dtype, f"must be one of {sorted(DTYPE_BYTES)}")
    require(heads % tp == 0, "tp", tp, f"must divide {heads} heads")
    shapes = layer_gemm_shapes(h, heads, kv_heads, ffn, True, tp)
    d = h // heads
    hq, hkv = heads // tp, max(1, kv_heads // tp)
    ks = [Kernel("gemm", op, (int(t), int(k), int(n)), int(t)) for t in tokens for op, (k, n) in shapes.items()]
    ks += [
        Kernel("attention_prefill", "attention_prefill", (hq, hkv, d, int(q), int(kv), 1), int(q)) for q, kv in prefill
    ]
    dec = [(1, kv) if np.isscalar(kv) else tuple(kv) for kv in decode_kv]
    ks += [Kernel("attention_decode", "attention_decode", (hq, hkv, d, 1, int(kv), int(n)), int(n)) for n, kv in dec]
    ks += [Kernel("copy", "copy", (int(e),), 0) for e in copy_elements]
    return Plan(tuple(ks), dtype, warmup, repeats)


def model_plan(model, tp: int = 1, dtype: str = "float16") -> Plan:
    """The CUDA plan: a model's real shapes over the token range a scheduler produces."""
    tokens = [1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 8192]
    prefill = [(q, kv) for q in (128, 512, 2048, 8192) for kv in (0, 2048, 16384)]
    decode = [(n, kv) for n in (1, 8, 64, 256) for kv in (256, 1024, 4096, 16384, 65536) if n * kv <= 1 << 22]
    return build_plan(
        model.H,
        model.h,
        model.h_kv,
        model.ffn,
        tokens,
        prefill,
        decode,
        [1 << e for e in range(16, 31, 2)],
        dtype,
        tp,
        warmup=5,
        repeats=20,
    )


def cpu_plan() -> Plan:
    """Small shapes that run in a few seconds on two cores (float32: numpy has no fast fp16 GEMM)."""
    tokens = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512]
    prefill = [(q, kv) for q in (16, 32, 64, 128, 256) for kv in (0, 256, 1024)]
    return build_plan(
        512,
        8,
        8,
        1024,
        tokens,
        prefill,
        [32, 64, 128, 256, 512, 1024, 2048, 4096, 8192],
        [1 << e for e in range(16, 26)],
        "float32",
    )


def _numpy_call(k: Kernel, dtype, rng):
    if k.op_class == "gemm":
        m, kk, n = k.shape
        a, w = rng.standard_normal((m, kk)).astype(dtype), rng.standard_normal((kk, n)).astype(dtype)
        return lambda: a @ w
    if k.op_class == "copy":
        src = rng.standard_normal(k.shape).astype(dtype)
        dst = np.empty_like(src)
        return lambda: np.copyto(dst, src)
    h, hkv, d, q, kv, n = k.shape
    Q = rng.standard_normal((n, h, q, d)).astype(dtype)
    K, V = (rng.standard_normal((n, hkv, kv + q, d)).astype(dtype) for _ in range(2))
    rep = h // hkv
    mask = np.triu(np.full((q, kv + q), -np.inf, dtype=dtype), k=kv + 1)

    def attend():
        s = np.matmul(Q, np.repeat(K, rep, 1).transpose(0, 1, 3, 2)) / np.sqrt(d) + mask
        p = np.exp(s - s.max(-1, keepdims=True))
        return np.matmul(p / p.sum(-1, keepdims=True), np.repeat(V, rep, 1))

    return attend


def _time_cpu(fn, warmup: int, repeats: int) -> float:
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def _cuda_timer(torch, fn, warmup: int, repeats: int) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        ts.append(start.elapsed_time(end) * 1e-3)  # elapsed_time is in ms
    return float(np.median(ts))


def _flash_attn():
    try:
        from flash_attn import flash_attn_func

        return flash_attn_func
    except ImportError:
        return None


def _torch_attention(torch, k: Kernel, dtype, dev: str):
    return _torch_attention_inputs(torch, k, dtype, dev)[0]


def _torch_attention_inputs(torch, k: Kernel, dtype, dev: str):
    """flash-attn's ``flash_attn_func`` when installed (causal masks align bottom-right, so a chunk
    of q over kv cached tokens is one call), else torch's ``scaled_dot_product_attention``: causal
    flag without a prefix (its flash/efficient kernels), a boolean mask with one; GQA by
    repeating K and V (``enable_gqa`` needs torch 2.5)."""
    h, hkv, d, q, kv, n = k.shape
    fa = _flash_attn() if dev == "cuda" else None
    if fa is not None:
        Q = torch.randn(n, q, h, d, dtype=dtype, device=dev)
        K, V = (torch.randn(n, kv + q, hkv, d, dtype=dtype, device=dev) for _ in range(2))
        return (lambda: fa(Q, K, V, causal=True)), (Q, K, V)
    Q = torch.randn(n, h, q, d, dtype=dtype, device=dev)
    K, V = (torch.randn(n, hkv, kv + q, d, dtype=dtype, device=dev).repeat_interleave(h // hkv, 1) for _ in range(2))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    if kv == 0:
        return (lambda: sdpa(Q, K, V, is_causal=True)), (Q, K, V)
    if q == 1:
        return (lambda: sdpa(Q, K, V)), (Q, K, V)
    mask = torch.ones(q, kv + q, dtype=torch.bool, device=dev).tril(kv)
    return (lambda: sdpa(Q, K, V, attn_mask=mask)), (Q, K, V)


def _torch_call(torch, k: Kernel, dtype, dev: str = "cuda"):
    if k.op_class == "gemm":
        m, kk, n = k.shape
        a, w = torch.randn(m, kk, dtype=dtype, device=dev), torch.randn(kk, n, dtype=dtype, device=dev)
        return lambda: a @ w
    if k.op_class == "copy":
        src = torch.randn(k.shape, dtype=dtype, device=dev)
        dst = torch.empty_like(src)
        return lambda: dst.copy_(src)
    return _torch_attention(torch, k, dtype, dev)


THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _cpu_times(plan: Plan, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    return [_time_cpu(_numpy_call(k, np.dtype(plan.dtype), rng), plan.warmup, plan.repeats) for k in plan.kernels]


def _cpu_times_isolated(plan: Plan, seed: int) -> list[float]:
    """A threaded BLAS stalls a whole GEMM for a scheduler tick whenever another process holds a
    core; one BLAS thread in a child process measures the kernel, not the neighbours."""
    spec = {
        "kernels": [[k.op_class, k.op, list(k.shape), k.tokens] for k in plan.kernels],
        "dtype": plan.dtype,
        "warmup": plan.warmup,
        "repeats": plan.repeats,
        "seed": seed,
    }
    root = str(Path(__file__).resolve().parents[2])
    env = {
        **os.environ,
        **{v: "1" for v in THREAD_VARS},
        "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]),
    }
    out = subprocess.run(
        [sys.executable, "-m", __name__], input=json.dumps(spec), capture_output=True, text=True, env=env, check=True
    )
    return json.loads(out.stdout)


def measure(plan: Plan, device: str = "cpu", seed: int = 0) -> pd.DataFrame:
    """Run every kernel of the plan; the tidy table with measured ``time_s`` and source 'microbench:<device>'."""
    require(device in DEVICES, "device", device, f"must be one of {DEVICES}")
    if device == "cuda":
        try:
            import torch
        except ImportError:
            raise InputError("device", device, "needs torch: pip install 'chunksim[gpu]'") from None
        require(torch.cuda.is_available(), "device", device, "torch sees no CUDA device")
        dtype = getattr(torch, plan.dtype)
        times = [_cuda_timer(torch, _torch_call(torch, k, dtype), plan.warmup, plan.repeats) for k in plan.kernels]
        out = plan_table(plan).assign(time_s=times, source=f"microbench:{device}")
        gpus = torch.cuda.device_count()
        if gpus > 1:
            from .allreduce_bench import measure_allreduce

            out = pd.concat([out] + [measure_allreduce(w, "cuda") for w in (2, 4, 8) if w <= gpus], ignore_index=True)
        return validate(out, f"microbench:{device}")
    times = _cpu_times_isolated(plan, seed)
    return validate(plan_table(plan).assign(time_s=times, source=f"microbench:{device}"), f"microbench:{device}")


def split_holdout(df: pd.DataFrame, every: int = 3) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(fit, held-out): every ``every``-th kernel of each class, in plan order, is held out, so the
    held-out shapes lie between fitted ones of the same class."""
    held = df.groupby("op_class").cumcount() % every == every - 1
    return df[~held].reset_index(drop=True), df[held].reset_index(drop=True)


if __name__ == "__main__":
    spec = json.load(sys.stdin)
    kernels = tuple(Kernel(c, o, tuple(sh), t) for c, o, sh, t in spec["kernels"])
    print(json.dumps(_cpu_times(Plan(kernels, spec["dtype"], spec["warmup"], spec["repeats"]), spec["seed"])))
