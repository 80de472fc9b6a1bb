"""NVIDIA AIConfigurator's measured kernel tables (``systems/data/<gpu>/<framework>/<version>/``).

Column meanings follow AIConfigurator's ``sdk/perf_database.py``: ``latency`` is in ms; GEMMs are
(m×k)·(k×n); context attention is ``batch_size`` prompts of ``isl`` tokens with no cached prefix,
heads per GPU; generation attention is one decode step of ``batch_size`` sequences whose key
length is ``s = isl + step`` (the table's lookup key; its speed-of-light model reads s - 1 cached
tokens plus the new one); all-reduce message sizes are in elements of the dtype, each message
[size / 4096, 4096] (tokens × hidden) as the collector lays it out: the rows' token count.
All-reduce: where a GPU count has both, the custom table (TensorRT-LLM's own dispatch) is kept and
the NCCL table left out, but for its rows below the engine's NCCL switch on NVLink GPUs, kept as
reference rows for the fit's NCCL lines (``_engine_rows``). Rows faster than the spec sheet's float16 peak
(AIConfigurator's ``<gpu>.yaml`` beside the folder) are dropped and reported: no 16-bit kernel can
do that.
SGLang's attention tables (H100) come from AIConfigurator's ``collector/sglang/collect_normal_attn.py``
(``run_attention_torch``): FlashAttention-3's ``flash_attn_with_kvcache`` (sgl_kernel), called
without ``causal``, whose default is False (``sgl_kernel/flash_attn.py``), so every context query
sees the whole prompt (b·s² query-key pairs, ``causal`` = 0 in the rows), timed with Triton's
``testing.do_bench``, which evicts the L2 before every timed call. Those tables lose the rows
faster than their bytes at the spec HBM bandwidth or their FLOPs at the spec peak
(``drop_unmovable``), the rest of the rows at their 3 µs timing floor, and those more than 1.25×
slower than a problem at least as large in sequences, tokens, heads and KV heads
(``tables.drop_floor``, context: a kernel cannot get much slower for less work; these tables time many
small problems at tens to hundreds of µs for ~1 µs of work, in no order of problem size). The
generation table keeps only its leading rows written in the collector's case order
(``lone_worker_rows``: 75 float16 rows, 64 query on 64 KV heads); the interleaved rest is not a
kernel's time, so H100 generation attention has one measured head configuration.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from ...errors import require
from ...gemm_tiles import GEMM_DTYPES, element_bytes
from ...hardware import Hardware
from ..allreduce_model import NCCL_REFERENCE as REFERENCE, ONESHOT_MAX_TOKENS
from ..allreduce_runs import NCCL_PCIE
from ..moe_routing import table_touched
from ..timings import attention_row, gemm_row, validate
from .tables import drop_failed, drop_floor, keep_dtype, read_table

SIXTEEN_BIT = {"float16", "bfloat16", "half", "bf16", "fp16"}
ATTN = ["batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim", "step", "latency"]
MS = 1e-3
TOKEN_DIM = 4096  # the collector's all-reduce layout: [size / 4096, 4096] (collect_all_reduce.py, get_input_shape_and_comm_size)


def _gemm(path: Path, notes: list, gemm_dtype: str | None = None) -> pd.DataFrame:
    """The table's GEMMs of one dtype: the 16-bit rows (``gemm_dtype`` None), or one of the
    quantized labels (``GEMM_DTYPES``: fp8, fp8_block, nvfp4, sq, int8_wo, int4_wo), whose rows carry
    that label as their dtype and its weight and activation bytes per element (16-bit output)."""
    raw = keep_dtype(
        read_table(path, ["gemm_dtype", "m", "n", "k", "latency"], ["m", "n", "k", "latency"]),
        ["gemm_dtype"],
        SIXTEEN_BIT if gemm_dtype is None else {gemm_dtype.lower()},
        str(path),
        notes,
    )
    m, n, k = (raw[c].to_numpy(float) for c in "mnk")
    dtype = "float16" if gemm_dtype is None else gemm_dtype.lower()
    df = pd.DataFrame(gemm_row("gemm", m, k, n, 2, raw["latency"].to_numpy(float) * MS, dtype=dtype, source=str(path)))
    if gemm_dtype is not None:
        bw, bx = element_bytes(dtype)
        df["bytes"] = bw * k * n + bx * m * k + 2.0 * m * n
    return drop_failed(df, ["n", "k"], "m", str(path), notes)


def _attention(path: Path, op_class: str, notes: list) -> pd.DataFrame:
    raw = read_table(path, ATTN + ["attn_dtype", "kv_cache_dtype"], ATTN)
    sglang = "framework" in raw and bool((raw["framework"].astype(str).str.lower() == "sglang").all())
    if sglang and op_class == "attention_decode":
        raw = lone_worker_rows(raw, str(path), notes)
    raw = keep_dtype(raw, ["attn_dtype", "kv_cache_dtype"], SIXTEEN_BIT, str(path), notes)
    b, s, h, hkv, d, step = (raw[c].to_numpy(float) for c in ATTN[:-1])
    t = raw["latency"].to_numpy(float) * MS
    if op_class == "attention_prefill":
        df = pd.DataFrame(
            attention_row("attention", b, s, 0.0, h, hkv, d, 2, t, causal=not sglang, dtype="float16", source=str(path))
        )
    else:
        df = pd.DataFrame(
            attention_row("attention", b, 1.0, s + step - 1, h, hkv, d, 2, t, dtype="float16", source=str(path))
        )
        if k_only(raw):
            df["bytes"] -= 2.0 * d * b * hkv * (s + step)  # one of K and V per cached token: see k_only
            df["kv_alias"] = 1.0
            notes.append(
                f"{path}: generation rows read K only (TensorRT-LLM collector's SELFKONLY cache): "
                f"bytes are half the KV a serving decode reads"
            )
        df = df.assign(decode_flops=df["flops"], decode_bytes=df["bytes"])
    df["op"] = op_class
    if op_class == "attention_prefill":
        df = df.assign(seqs=0, b=b)
    if sglang:
        df = drop_unmovable(df, path, notes)
    if op_class == "attention_prefill":
        if sglang:
            df = drop_floor(df, ["n"], ["b", "prefill_q", "heads", "kv_heads"], str(path), notes, 1.25)
        return drop_failed(df, ["b", "heads", "kv_heads", "n"], "m", str(path), notes).drop(columns="b")
    return drop_failed(df, ["seqs", "heads", "kv_heads", "n"], "k", str(path), notes)


def lone_worker_rows(raw: pd.DataFrame, src: str, notes: list) -> pd.DataFrame:
    """The SGLang generation table's leading rows, up to the first (batch, heads, KV heads) block
    that comes back after another began. The collector (``collect_normal_attn.py``) walks its cases
    block by block, steps rising; the H100 file holds them in that order for its first 149 rows
    (64/64 heads, 1-256 sequences: monotone in keys, 0.01-3.0 TB/s, none at the 3 µs floor), then
    interleaved, cases from every block written out of order as from several workers at once, and
    there 81 % of the float16 rows sit at the 3 µs floor, 38 % beat the HBM bandwidth and 686 of
    4,548 steps to more keys run over 20 % faster: times no kernel of that size gives. Only the
    lone worker's rows are kept."""
    key = (
        raw["batch_size"].astype(str)
        + "|"
        + raw["num_heads"].astype(str)
        + "|"
        + raw["num_key_value_heads"].astype(str)
    )
    new = (key != key.shift()).to_numpy()
    back = new & key.duplicated().to_numpy()
    if not back.any():
        return raw
    end = int(np.argmax(back))
    notes.append(
        f"{src}: kept the first {end} rows, written in the collector's case order; skipped {len(raw) - end} "
        f"written interleaved across configurations (timed under other workers' load)"
    )
    return raw.iloc[:end].reset_index(drop=True)


def drop_unmovable(df: pd.DataFrame, path: Path, notes: list) -> pd.DataFrame:
    """Drop rows faster than their operands can cross HBM at the spec sheet's bandwidth. The SGLang
    collector times each call with Triton's ``testing.do_bench``, which zeroes a 256 MB buffer
    before every timed call to evict the L2 (``get_empty_cache_for_benchmark``), so Q, K, V and O
    all cross HBM: 1,597 of the H100's 4,900 float16 context rows and 2,141 of its 5,026 generation
    rows report times no kernel can reach (eight 16k-token prompts of 96 heads in 3 µs: failed launches)."""
    gpu = _spec(path).get("gpu") or {}
    bw, peak = float(gpu.get("mem_bw") or 0.0), float(gpu.get("float16_tc_flops") or 0.0)
    if not (bw and peak):
        return df
    bad = (np.maximum(df["bytes"] / bw, df["flops"] / peak) > df["time_s"]).to_numpy()  # type: ignore[union-attr]
    if bad.any():
        notes.append(
            f"{path}: skipped {int(bad.sum())} rows faster than their bytes at the spec sheet's "
            f"{bw / 1e12:.3g} TB/s or their FLOPs at {peak / 1e12:.4g} TFLOP/s (the collector's do_bench "
            f"evicts the L2 before each call: failed runs)"
        )
    return df[~bad].reset_index(drop=True)


def k_only(raw: pd.DataFrame) -> bool:
    """Whether a generation table was measured over a cache of keys only: AIConfigurator's
    TensorRT-LLM collector (``collector/trtllm/collect_attn.py``, ``run_attention_torch``) builds its
    KVCacheManager with ``CacheType.SELFKONLY``. The tables agree: counted as K + V, decode rows run
    at up to 1.7× (A100), 5.4× (L40S) and 1.6× (B200) the spec HBM bandwidth on working sets far
    beyond the L2, and the A100's and L40S's drop from L2 to HBM speed falls where K alone outgrows
    their 40 / 96 MiB L2; counted as K only, no A100 or B200 row exceeds the spec bandwidth and the
    L40S's only beyond the L2 are 52 of 10,042 rows within 8 % of its size (101–104 MB)."""
    return bool((raw["framework"].astype(str).str.upper() == "TRTLLM").all()) if "framework" in raw else False


def _allreduce(path: Path, notes: list, nccl: bool) -> pd.DataFrame:
    dt = "nccl_dtype" if nccl else "allreduce_dtype"
    raw = read_table(
        path, ["op_name", dt, "num_gpus", "message_size", "latency"], ["num_gpus", "message_size", "latency"]
    )
    if nccl:
        other = int((raw["op_name"] != "all_reduce").sum())
        if other:
            notes.append(f"{path}: skipped {other} rows of other collectives (all_gather, alltoall, reduce_scatter)")
        raw = raw[raw["op_name"] == "all_reduce"].reset_index(drop=True)
    raw = keep_dtype(raw, [dt], SIXTEEN_BIT, str(path), notes)
    nw, size = raw["num_gpus"].to_numpy(float), raw["message_size"].to_numpy(float) * 2
    tokens = np.maximum(1.0, np.floor(raw["message_size"].to_numpy(float) / TOKEN_DIM))
    df = pd.DataFrame(
        dict(
            op_class="allreduce",
            op="nccl_all_reduce" if nccl else "custom_all_reduce",
            tokens=tokens,
            m=size,
            k=0,
            n=0,
            tp=nw,
            workers=nw,
            dtype="float16",
            flops=0.0,
            bytes=2 * (nw - 1) / nw * size,
            time_s=raw["latency"].to_numpy(float) * MS,
            source=str(path),
        )
    )
    return df[df["workers"] > 1]


def _moe(path: Path, notes: list) -> pd.DataFrame:
    """Fused MoE layer: T tokens routed top-k among E experts of (gate, up, down) H×I, split
    moe_tp ways; FLOPs 2·3·H·I/tp per routed token; seqs = the experts the table's routing touches
    on one GPU (``moe_routing``), bytes their weights plus each routed row's activations in and
    out (``costmodel/moe_cost.py``)."""
    cols = ["num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size", "latency"]
    raw = keep_dtype(
        read_table(path, cols + ["moe_dtype", "distribution"], cols), ["moe_dtype"], SIXTEEN_BIT, str(path), notes
    )
    T, H, inter, k, E, tp, ep = (raw[c].to_numpy(float) for c in cols[:-1])
    per_expert = 3 * H * inter / tp
    dist = raw["distribution"].astype(str).to_numpy()
    touched = table_touched(T, k, E, ep, dist)
    return pd.DataFrame(
        dict(
            op_class="moe",
            op=dist,
            tokens=T,
            m=T,
            k=H,
            n=inter,
            tp=tp,
            workers=ep,
            dtype="float16",
            flops=2.0 * per_expert * T * k / ep,
            bytes=2.0 * (per_expert * touched + 2 * T * H * k / ep),
            seqs=touched,
            heads=k,
            kv_heads=E,
            time_s=raw["latency"].to_numpy(float) * MS,
            source=str(path),
        )
    )


READERS = {
    "gemm_perf.txt": _gemm,
    "moe_perf.txt": _moe,
    "context_attention_perf.txt": lambda p, n: _attention(p, "attention_prefill", n),
    "generation_attention_perf.txt": lambda p, n: _attention(p, "attention_decode", n),
    "custom_allreduce_perf.txt": lambda p, n: _allreduce(p, n, nccl=False),
    "nccl_perf.txt": lambda p, n: _allreduce(p, n, nccl=True),
}


def _engine_rows(ar: pd.DataFrame, nvlink: bool = False) -> pd.DataFrame:
    """The all-reduce the engine runs: per GPU count, the custom table's rows where it has any, else
    the NCCL table's. AIConfigurator's collector times the custom table through TensorRT-LLM's own
    ``AllReduce`` module with ``AllReduceStrategy.AUTO`` under a CUDA graph
    (``collector/collect_all_reduce.py``, ``benchmark_trtllm_allreduce``; the H100 table in the SGLang
    folder too: its rows say TRTLLM 1.0.0rc3), so each row is what the engine's dispatch picked at
    that size (``thop/allreduceOp.cpp``, ``AllreduceOp::selectImplementation`` and
    ``ifFallbackToNCCL``): NCCL past the workspace (16 MB on 2 GPUs, 8 MB on more:
    ``customAllReduceUtils.h``, ``getMaxRequiredWorkspaceSize``) or between GPUs without P2P or NVLink; else on
    2 GPUs the fused kernels, one-shot up to 128 tokens (``kOneShotMaxToken``) and two-shot beyond;
    on more GPUs one-shot up to 128 tokens and NCCL beyond. The NCCL table is nccl-tests'
    ``all_reduce_perf`` (``collector/collect_nccl.py``). Where the engine runs NCCL the two tables
    agree (median |difference| under 3 % per GPU count on H100, A100, B200: H100, 8 GPUs, 16M
    elements: 203.5 against 203.0 µs); where it runs its own kernels it keeps them even where NCCL
    is faster (A100, 8 GPUs, 512K elements, one-shot: 83.2 against 38.8 µs; B200, 2 GPUs, 1M,
    two-shot: 24.0 against 18.8 µs), which a faster-of-both envelope would price instead. L40S
    (PCIe, no NVLink) runs NCCL at every size: its custom rows match NCCL's at small sizes too.

    ``nvlink``: on more than 2 GPUs the engine goes from one-shot straight to NCCL at 128 tokens,
    so NCCL's curve below that switch continues the engine's NCCL rows above it: the NCCL table's
    rows at the one-shot sizes are kept as ``REFERENCE`` rows, which the fit prices by the NCCL
    lines alone and which are not the engine's time (``allreduce_model.oneshot_allowed``). They
    show the NCCL lines the sizes just above the switch (the engine's smallest NCCL message, 1M
    elements, otherwise priced from lines fitted on 2M up). Not on 2 GPUs, where two-shot runs
    in between, nor without NVLink, where the custom rows are NCCL's already."""
    custom = ar["op"] == "custom_all_reduce"
    has = set(ar.loc[custom, "workers"])
    keep = custom | ~ar["workers"].isin(has)
    ref = (~custom & ar["workers"].isin(has) & (ar["workers"] > 2) & (ar["tokens"] <= ONESHOT_MAX_TOKENS)).to_numpy()
    out = ar[keep.to_numpy() | (ref & nvlink)].copy()
    out.loc[~out["op"].eq("custom_all_reduce") & out["workers"].isin(has), "op"] = REFERENCE
    return out.sort_values(["workers", "m"])


def spec_nvlink(path) -> bool:
    """Whether the spec sheet beside the folder links its GPUs faster than PCIe
    (``node.intra_node_bw`` above ``node.pcie_bw``: NVLink, 450 GB/s against 64 on H100; the L40S's
    32 against 32); False without a sheet."""
    node = _spec(path).get("node") or {}
    try:
        return float(node["intra_node_bw"]) > float(node["pcie_bw"])
    except (KeyError, TypeError, ValueError):
        return False


def spec_pcie(path) -> bool:
    """Whether the spec sheet beside the folder links its GPUs by PCIe alone (``node.intra_node_bw``
    at most ``node.pcie_bw``: the L40S's 32 against 32); False without a sheet."""
    node = _spec(path).get("node") or {}
    try:
        return float(node["intra_node_bw"]) <= float(node["pcie_bw"])
    except (KeyError, TypeError, ValueError):
        return False


def read_aiconfigurator(path, classes=None, gemm_dtype: str | None = None) -> tuple[pd.DataFrame, list[str]]:
    """A ``<gpu>`` folder (every framework and NCCL table below it), a ``<gpu>/<framework>/<version>``
    folder, or one ``*_perf.txt`` file; the 16-bit rows as tidy timings, and notes on what was skipped.
    ``gemm_dtype``: the GEMM table's rows of that quantized dtype instead of its 16-bit rows (the
    other tables stay 16-bit), checked against that dtype's spec peak (``spec_dtype_peak``)."""
    require(
        gemm_dtype is None or gemm_dtype.lower() in GEMM_DTYPES,
        "gemm_dtype",
        gemm_dtype,
        f"not a quantized GEMM dtype ({', '.join(GEMM_DTYPES)}); None for the 16-bit rows",
    )
    p = Path(path)
    require(p.exists(), "from", str(p), "no such file or folder")
    files = [p] if p.is_file() else sorted(f for f in p.rglob("*_perf.txt") if f.name in READERS)
    require(bool(files), "from", str(p), f"holds none of AIConfigurator's tables ({', '.join(READERS)})")
    for f in files:
        require(f.name in READERS, "from", str(f), f"not one of AIConfigurator's tables ({', '.join(READERS)})")
    notes: list[str] = []
    frames = [_gemm(f, notes, gemm_dtype) if f.name == "gemm_perf.txt" else READERS[f.name](f, notes) for f in files]
    df = pd.concat(frames, ignore_index=True)
    ar = df["op_class"] == "allreduce"
    if ar.any() and df.loc[ar, "op"].nunique() > 1:
        before = int(ar.sum())
        df = pd.concat([df[~ar], _engine_rows(df[ar], spec_nvlink(p))], ignore_index=True)
        n_ref = int((df["op"] == REFERENCE).sum())
        notes.append(
            f"{p}: all-reduce: kept the custom table (the engine's own dispatch) where it has the GPU count, "
            f"skipped {before - int((df['op_class'] == 'allreduce').sum())} NCCL rows (nccl-tests)"
            + (f", kept {n_ref} below the engine's NCCL switch as reference rows for its NCCL lines" if n_ref else "")
        )
    if ar.any() and spec_pcie(p):
        eng = (df["op_class"] == "allreduce") & df["op"].isin(["custom_all_reduce", "nccl_all_reduce"])
        df.loc[eng, "op"] = NCCL_PCIE
        notes.append(
            f"{p}: all-reduce: no NVLink on the spec sheet, so the engine runs NCCL at every size "
            f"(TensorRT-LLM ifFallbackToNCCL): rows labelled {NCCL_PCIE}, fitted as NCCL's runs"
        )
    peak = spec_peak_flops(p)
    if peak:
        q_peak = spec_dtype_peak(p, gemm_dtype) if gemm_dtype else None
        q = (df["op_class"] == "gemm").to_numpy() & bool(q_peak)
        cap = np.where(q, q_peak or peak, peak)
        fast = (df["flops"] / df["time_s"] > cap).to_numpy()
        for cls in sorted(set(df.loc[fast, "op_class"])):
            top = (q_peak or peak) if cls == "gemm" else peak
            notes.append(
                f"{p}: skipped {int((fast & (df['op_class'] == cls)).sum())} {cls} rows faster than the "
                f"spec sheet's {top / 1e12:.4g} TFLOP/s (impossible: failed runs or another dtype)"
            )
        df = df[~fast]
    if classes is not None:
        df = df[df["op_class"].isin(classes)]
    return validate(df.reset_index(drop=True), str(p)), notes


def _spec(path) -> dict:
    y = spec_yaml(path)
    if y is None:
        return {}
    try:
        return yaml.safe_load(y.read_text()) or {}
    except yaml.YAMLError:
        return {}


def spec_peak_flops(path) -> float | None:
    """``gpu.float16_tc_flops`` of the AIConfigurator spec sheet next to the folder, if any."""
    v = (_spec(path).get("gpu") or {}).get("float16_tc_flops")
    return float(v) if v else None


FP4_PEAKS = {"b200_sxm": 9.0e15}  # dense FP4 tensor-core FLOP/s where the spec sheet has no fp4 field:
# NVIDIA's HGX/DGX B200 data sheet gives 144 PFLOPS FP4 per 8 GPUs with sparsity, so 18 sparse and
# 9 dense per GPU (its 72 PFLOPS FP8 likewise gives the sheet's fp8_tc_flops, 4.5 dense)


def spec_dtype_peak(path, dtype: str | None) -> float | None:
    """The spec peak a GEMM of ``dtype`` computes at, from the sheet beside the folder: fp8 and
    fp8_block ``fp8_tc_flops``, sq (W8A8) ``int8_tc_flops``, nvfp4 ``fp4_tc_flops`` or
    ``FP4_PEAKS``, weight-only int4/int8 and 16-bit ``float16_tc_flops`` (they compute in 16 bits)."""
    gpu = _spec(path).get("gpu") or {}
    d = (dtype or "float16").lower()
    key = {"fp8": "fp8_tc_flops", "fp8_block": "fp8_tc_flops", "sq": "int8_tc_flops", "nvfp4": "fp4_tc_flops"}
    v = gpu.get(key.get(d, "float16_tc_flops"))
    if not v and d == "nvfp4":
        y = spec_yaml(path)
        v = FP4_PEAKS.get(y.stem) if y is not None else None
    return float(v) if v else None


def spec_hardware(path) -> Hardware | None:
    """A base profile from the spec sheet beside the folder (peaks, memory, NVLink per direction);
    its effective fields start at the peaks and are what a fit replaces."""
    d = _spec(path)
    gpu, node = d.get("gpu") or {}, d.get("node") or {}
    try:
        flops, bw, mem = float(gpu["float16_tc_flops"]), float(gpu["mem_bw"]), float(gpu["mem_capacity"])
    except (KeyError, TypeError, ValueError):
        return None
    name = spec_yaml(path).stem  # type: ignore[union-attr]
    return Hardware(
        name,
        mem,
        flops,
        bw,
        flops,
        bw,
        interconnect_bandwidth=float(node.get("intra_node_bw") or 0.0),
        gpus_per_node=int(node.get("num_gpus_per_node") or 8),
        description=f"{name} (AIConfigurator spec sheet)",
        sources=[str(spec_yaml(path))],
        dtype_peaks={  # dense tensor-core peaks of the low-precision dtypes the sheet lists
            k: v
            for k, v in (("fp8", spec_dtype_peak(path, "fp8")), ("int8", spec_dtype_peak(path, "sq")))
            + (("fp4", FP4_PEAKS.get(name)),)
            if v
        },
    )


def spec_yaml(path) -> Path | None:
    """AIConfigurator's ``<gpu>.yaml`` spec sheet next to a ``<gpu>`` folder, when there is one."""
    p = Path(path).resolve()
    for d in (p, *p.parents):
        y = d.parent / f"{d.name}.yaml"
        if y.is_file():
            return y
    return None
