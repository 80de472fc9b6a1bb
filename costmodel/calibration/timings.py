"""The tidy timing table: one row per measured kernel call, in SI units, with the FLOPs and bytes
the roofline prices it by. Importers turn Vidur's profiling CSVs and our own microbenchmark
output into it; every unit conversion happens here, once.

Columns: op_class, op, tokens, m, k, n, tp, workers, dtype, flops, bytes, time_s, source, seqs, heads,
kv_heads (attention: sequences in the batch and the query / KV heads per GPU; 0 elsewhere),
decode_flops, decode_bytes (class "attention": the part of flops and bytes that the q = 1 sequences
of the batch make; seqs then counts those sequences), prefill_seqs, prefill_q, prefill_kv (its
prefill chunks: how many, each of q new tokens over kv cached ones).
  gemm        (m×k)·(k×n): 2·m·k·n FLOPs, b·(k·n + m·k + m·n) bytes (weights + activations in/out)
  norm, rope, activation, residual_add, embedding, copy: memory-bound, bytes as the importer says
              (norm: m rows of n = h elements, bytes = b·(2·m·h + h): input, output, weight)
  attention_prefill / attention_decode: 4·h·d·pairs FLOPs, pairs = Σ q·kv + q(q+1)/2; bytes =
              2·d·b·Σ(h_kv·(kv + q) + h·q): the KV read and written, and Q read and O written
  attention   one attention kernel over a batch of prefill chunks (q > 1) and decodes (q = 1): the
              fitted form of ``fit.attention_times``; op says prefill, decode or mixed
  sampler     per-sequence GPU work after the LM head (m = sequences)
  allreduce   ring: bytes = 2(n-1)/n · size (what each GPU sends), workers = n, tokens = the message's
              tokens where the table says (AIConfigurator: size / 4096), else 0
  moe         fused MoE layer: tokens T, k = hidden, n = expert intermediate, heads = top-k, kv_heads =
              experts, tp, workers = ep, seqs = experts the batch touches on one GPU (expected)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputError, require

COLUMNS = [
    "op_class",
    "op",
    "tokens",
    "m",
    "k",
    "n",
    "tp",
    "workers",
    "dtype",
    "flops",
    "bytes",
    "time_s",
    "source",
    "seqs",
    "heads",
    "kv_heads",
    "decode_flops",
    "decode_bytes",
    "prefill_seqs",
    "prefill_q",
    "prefill_kv",
    "causal",
    "kv_alias",
]
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
GEMM_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
VIDUR_ELEMENTWISE = {
    "input_layernorm": "norm",
    "post_attention_layernorm": "norm",
    "attn_rope": "rope",
    "mlp_act": "activation",
    "add": "residual_add",
    "emb": "embedding",
}
VIDUR_SHAPE = [
    "n_head",
    "n_kv_head",
    "n_embd",
    "n_expanded_embd",
    "use_gated_mlp",
    "num_tokens",
    "num_tensor_parallel_workers",
]
NETWORK_SHAPE = ["num_workers", "size"]


def gemm_row(op: str, m, k, n, b: int, time_s, **extra) -> dict:
    return dict(
        op_class="gemm",
        op=op,
        tokens=m,
        m=m,
        k=k,
        n=n,
        flops=2.0 * m * k * n,
        bytes=float(b) * (k * n + m * k + m * n),
        time_s=time_s,
        **extra,
    )


def layer_gemm_shapes(h, nq, nkv, ffn, gated, tp) -> dict:
    """(k, n) of one layer's weight GEMMs on one of tp shards (Megatron: QKV and up column-split,
    O and down row-split; KV heads replicated when tp exceeds them). Works on scalars and arrays."""
    d = h / nq
    q_cols, kv_cols = nq * d / tp, np.maximum(1.0, nkv / tp) * d
    return {
        "attn_pre_proj": (h, q_cols + 2 * kv_cols),
        "attn_post_proj": (q_cols, h),
        "mlp_up_proj": (h, np.where(gated, 2, 1) * ffn / tp),
        "mlp_down_proj": (ffn / tp, h),
    }


def validate(df: pd.DataFrame, source: str = "timings") -> pd.DataFrame:
    """Check a tidy table and return it with COLUMNS in order; raise InputError on the first fault."""
    missing = [c for c in ("op_class", "flops", "bytes", "time_s") if c not in df.columns]
    require(not missing, f"{source}:columns", sorted(df.columns), f"missing columns {missing}")
    require(len(df) > 0, source, 0, "no timing rows")
    for col in ("flops", "bytes", "time_s"):
        v = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float)
        bad = ~np.isfinite(v)
        require(not bad.any(), f"{source}:{col}", df[col][bad].iloc[0] if bad.any() else None, "must be a number")
    t = df["time_s"].to_numpy(dtype=float)
    require(
        bool((t > 0).all()),
        f"{source}:time_s",
        float(t[t <= 0][0]) if (t <= 0).any() else None,
        f"times must be positive ({int((t <= 0).sum())} rows are not)",
    )
    require(bool((df["bytes"] >= 0).all() and (df["flops"] >= 0).all()), f"{source}:bytes", None, "must be >= 0")
    out = df.copy()
    for col, default in (
        ("op", out["op_class"]),
        ("tokens", 0),
        ("m", 0),
        ("k", 0),
        ("n", 0),
        ("tp", 1),
        ("workers", 1),
        ("dtype", "float16"),
        ("source", source),
        ("seqs", 0),
        ("heads", 0),
        ("kv_heads", 0),
        ("decode_flops", 0.0),
        ("decode_bytes", 0.0),
        ("prefill_seqs", 0),
        ("prefill_q", 0),
        ("prefill_kv", 0),
        ("causal", 1),
        ("kv_alias", 0.0),
    ):
        if col not in out.columns:
            out[col] = default
        elif not isinstance(default, pd.Series) and out[col].isna().any():
            out[col] = out[col].fillna(default)
    return out[COLUMNS].reset_index(drop=True)


def attention_row(op_class: str, seqs, q, kv, heads, kv_heads, d, b: int, time_s, causal: bool = True, **extra) -> dict:
    """``seqs`` sequences of q new tokens over kv cached ones each (scalars or arrays); ``causal``
    False: every query sees all kv + q keys (a benchmark that leaves the mask off)."""
    pairs = seqs * (q * kv + (q * (q + 1) / 2 if causal else q * q))
    pre = np.asarray(q) > 1
    return dict(
        op_class=op_class,
        op=op_class,
        tokens=seqs * q,
        m=seqs * q,
        k=kv,
        n=d,
        seqs=seqs,
        heads=heads,
        prefill_seqs=np.where(pre, seqs, 0),
        prefill_q=np.where(pre, q, 0),
        prefill_kv=np.where(pre, kv, 0),
        causal=int(bool(causal)),
        kv_heads=kv_heads,
        flops=4.0 * heads * d * pairs,
        bytes=2.0 * d * b * seqs * (kv_heads * (kv + q) + heads * q),
        time_s=time_s,
        **extra,
    )


def _read_csv(path, source: str, nrows: int | None = None) -> pd.DataFrame:
    try:
        return pd.read_csv(path, nrows=nrows)
    except FileNotFoundError:
        raise InputError(source, str(path), "no such file") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise InputError(source, str(path), f"not a readable CSV ({e})") from None


def _median_ms(raw: pd.DataFrame, op: str) -> np.ndarray:
    return raw[f"time_stats.{op}.median"].to_numpy(dtype=float) * TIME_UNITS["ms"]


def read_vidur_mlp(path, b: int = 2) -> pd.DataFrame:
    """Vidur ``mlp.csv``: one row per (num_tokens, tp) of one layer's non-attention ops, times in ms.
    Shapes are per TP shard (ColumnParallel splits n, RowParallel splits k); fp16, b = 2."""
    src = str(path)
    raw = _read_csv(path, "vidur-mlp")
    missing = [c for c in VIDUR_SHAPE if c not in raw.columns]
    require(not missing, f"{src}:columns", missing, "missing Vidur mlp.csv shape columns")
    ops = [op for op in (*GEMM_OPS, *VIDUR_ELEMENTWISE) if f"time_stats.{op}.median" in raw.columns]
    require(bool(ops), f"{src}:columns", [], "no time_stats.<op>.median columns (times must be in ms)")
    T = raw["num_tokens"].to_numpy(dtype=float)
    tp = raw["num_tensor_parallel_workers"].to_numpy(dtype=float)
    h, ffn = raw["n_embd"].to_numpy(dtype=float), raw["n_expanded_embd"].to_numpy(dtype=float)
    nq, nkv = raw["n_head"].to_numpy(dtype=float), raw["n_kv_head"].to_numpy(dtype=float)
    gated = raw["use_gated_mlp"].astype(str).str.lower().isin(["true", "1"]).to_numpy()
    gemm_shapes = layer_gemm_shapes(h, nq, nkv, ffn, gated, tp)
    q_cols = gemm_shapes["attn_post_proj"][0]
    kv_cols = (gemm_shapes["attn_pre_proj"][1] - q_cols) / 2
    ffn_tp = ffn / tp
    elem_bytes = {
        "input_layernorm": 2 * T * h + h,
        "post_attention_layernorm": 2 * T * h + h,
        "attn_rope": 2 * T * (q_cols + kv_cols),
        "mlp_act": np.where(gated, 3, 2) * T * ffn_tp,
        "add": 3 * T * h,
        "emb": 2 * T * h,
    }
    frames = []
    for op in ops:
        cols = dict(tp=tp, workers=tp, dtype="float16", source=src)
        if op in gemm_shapes:
            k, n = gemm_shapes[op]
            frames.append(pd.DataFrame(gemm_row(op, T, k, n, b, _median_ms(raw, op), **cols)))
        else:
            width = h if VIDUR_ELEMENTWISE[op] == "norm" else 0  # norm: one block per row of h elements
            frames.append(
                pd.DataFrame(
                    dict(
                        op_class=VIDUR_ELEMENTWISE[op],
                        op=op,
                        tokens=T,
                        m=T,
                        k=0,
                        n=width,
                        flops=0.0,
                        bytes=b * elem_bytes[op],
                        time_s=_median_ms(raw, op),
                        **cols,
                    )
                )
            )
    return validate(pd.concat(frames, ignore_index=True), src)


def read_vidur_network(path) -> pd.DataFrame:
    """Vidur ``network/*/all_reduce.csv``: NCCL kernel time (ms) vs buffer size (bytes), per rank.
    The ranks of one collective are reduced to their median."""
    src = str(path)
    raw = _read_csv(path, "vidur-network")
    col = "time_stats.all_reduce.median"
    missing = [c for c in (*NETWORK_SHAPE, col) if c not in raw.columns]
    require(not missing, f"{src}:columns", missing, "missing Vidur all_reduce.csv columns (times in ms)")
    g = raw.groupby(["num_workers", "size"], as_index=False)[col].median()
    nw, size = g["num_workers"].to_numpy(dtype=float), g["size"].to_numpy(dtype=float)
    df = pd.DataFrame(
        dict(
            op_class="allreduce",
            op="all_reduce",
            tokens=0,
            m=size,
            k=0,
            n=0,
            tp=nw,
            workers=nw,
            dtype="float16",
            flops=0.0,
            bytes=2 * (nw - 1) / nw * size,
            time_s=g[col].to_numpy(dtype=float) * TIME_UNITS["ms"],
            source=src,
        )
    )
    return validate(df[df["workers"] > 1], src)


def read_timings_csv(path) -> pd.DataFrame:
    """Our own table (what ``calibrate --measure`` writes): COLUMNS with ``time`` + ``time_unit``
    in place of ``time_s``, so the unit is always explicit."""
    src = str(path)
    raw = _read_csv(path, "timings")
    if "time_s" not in raw.columns:
        missing = [c for c in ("time", "time_unit") if c not in raw.columns]
        require(not missing, f"{src}:columns", missing, "need time and time_unit (s, ms, us, ns)")
        units = set(raw["time_unit"].astype(str))
        unknown = sorted(units - set(TIME_UNITS))
        require(
            not unknown,
            f"{src}:time_unit",
            unknown[0] if unknown else None,
            f"unknown time unit; known: {', '.join(TIME_UNITS)}",
        )
        raw = raw.assign(time_s=pd.to_numeric(raw["time"], errors="coerce") * raw["time_unit"].map(TIME_UNITS))
    return validate(raw, src)


def write_timings_csv(df: pd.DataFrame, path) -> None:
    out = df.drop(columns="time_s").assign(time=df["time_s"], time_unit="s")
    out.to_csv(path, index=False)


def load_timings(path) -> pd.DataFrame:
    """A file or a folder: Vidur ``mlp.csv``/``all_reduce.csv`` are recognised by their columns;
    a folder is searched recursively for them."""
    p = Path(path)
    if p.is_dir():
        files = sorted(p.rglob("mlp.csv")) + sorted(p.rglob("all_reduce.csv"))
        require(bool(files), "from", str(p), "folder holds no mlp.csv or all_reduce.csv")
        return pd.concat([load_timings(f) for f in files], ignore_index=True)
    require(p.is_file(), "from", str(p), "no such file or folder")
    header = _read_csv(p, "timings", nrows=0).columns
    if "num_tokens" in header or any(str(c).startswith("time_stats.") and "all_reduce" not in str(c) for c in header):
        return read_vidur_mlp(p)
    if "time_stats.all_reduce.median" in header:
        return read_vidur_network(p)
    return read_timings_csv(p)
