"""Fit the shipped calibrated GPU profiles from the kernel tables in ../shared/data, and write
each profile's error report (fit and held out by shape).

    python benchmarks/fit_profiles.py            # writes costmodel/hardware/<gpu>.yaml and
                                                 # benchmarks/profile_reports/<gpu>.md
    python benchmarks/fit_profiles.py --gemm-dtypes [gpu ...]  # only the quantized GEMM fits
                                                 # (gemm_dtypes) into the shipped profiles, the rest as is
    python benchmarks/fit_profiles.py --wideep   # only costmodel/wideep_h200.json: DeepEP, grouped
                                                 # MoE and MLA constants (calibration/wideep_fit.py)
Held out by shape: a quarter of the whole GEMM (n, k) shapes, attention head configurations and
all-reduce message sizes (``costmodel.calibration.holdout``) is left out of a first fit and
predicted; the shipped profile is then fitted on every row. The spec sheets (the caps of the
fit) are AIConfigurator's own ``<gpu>.yaml`` figures, the same as NVIDIA's data sheets.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from costmodel import load_hardware  # noqa: E402
from costmodel.calibration.fit import fit  # noqa: E402
from costmodel.calibration.holdout import error_table, split_by_shape  # noqa: E402
from costmodel.calibration.importers import read_aiconfigurator  # noqa: E402
from costmodel.calibration.importers.aiconfigurator import spec_dtype_peak  # noqa: E402
from costmodel.calibration.profile import profile_from_fit  # noqa: E402
from costmodel.calibration.timings import load_timings  # noqa: E402
from costmodel.gemm_tiles import element_bytes  # noqa: E402
from costmodel.hardware import GEMM_DTYPE_FIELDS, HARDWARE_DIR, Hardware  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "kernels" / "aiconfigurator"
SPEC = "AIConfigurator 0.4.0 systems/<gpu>.yaml (float16_tc_flops, mem_bw, intra_node_bw)"
GPUS = {  # shipped name: (AIConfigurator folder, base profile or spec fields)
    "h100-sxm": ("h100_sxm", "h100"),
    "a100-sxm": ("a100_sxm", "a100-80gb"),
    "l40s": (
        "l40s",
        dict(
            name="l40s",
            description="NVIDIA L40S 48GB GDDR6 (PCIe Gen4 x16, no NVLink)",
            memory_bytes=48e9,
            peak_flops=362.05e12,
            peak_bandwidth=864e9,
            pi_eff=183.0e12,
            beta_eff=670.6e9,
            interconnect_bandwidth=32e9,
            interconnect_latency_s=5.7e-6,
            gpus_per_node=8,
            sources=[
                SPEC,
                "https://www.nvidia.com/en-us/data-center/l40s/ (48GB GDDR6, 864GB/s, "
                "PCIe Gen4 x16, BF16 Tensor Core 362.05 TFLOPS dense)",
            ],
        ),
    ),
    "b200": (
        "b200_sxm",
        dict(
            name="b200",
            description="NVIDIA B200 SXM (HBM3e)",
            memory_bytes=193273528320.0,
            peak_flops=2250e12,
            peak_bandwidth=8.0e12,
            pi_eff=2250e12 * 500 / 989,
            beta_eff=8.0e12 * 2.6 / 3.35,
            interconnect_bandwidth=900e9,
            interconnect_latency_s=3.4e-6,
            gpus_per_node=8,
            sources=[SPEC, "https://www.nvidia.com/en-us/data-center/dgx-b200/"],
        ),
    ),
}


SMS = {"h100-sxm": 132, "a100-sxm": 108, "l40s": 142, "b200": 148}  # SM counts (NVIDIA architecture whitepapers)
MiB = 1 << 20
L2 = {"h100-sxm": 50 * MiB, "a100-sxm": 40 * MiB, "l40s": 96 * MiB, "b200": 126 * MiB}
# L2 sizes: NVIDIA A100 (Ampere) and H100 (Hopper) architecture whitepapers; Ada (AD102) whitepaper
# for the L40S; B200: chipsandcheese.com "Nvidia's B200: Keeping the CUDA Juggernaut Rolling" (126 MB)


Q_TILES = {
    "b200": 128,
    "h100-sxm": 128,
}  # context attention's query rows per CTA tile where not shape.Q_TILE (64): TensorRT-LLM
# runs Blackwell's context attention with the trtllm-gen kernels, whose causal context cubins are all
# TileSizeQ128 (cpp/tensorrt_llm/kernels/trtllmGenKernels/fmha/cubin/, e.g. FmhaSm100Kernel_..._H128LayoutPagedKv
# MaskCausalP32VarSeqLenTileSizeQ128PersistentContext); sm80/sm89 flash kernels for head dim 128 step 64 query
# rows (contextFusedMultiHeadAttention/cubin: fmha_v2_flash_attention_fp16_64_128_S_..._128_sm80/sm89)
# H100 (SGLang's FlashAttention-3): 128 query rows per tile at head dim 128 in 16 bits, causal or not
# (flash-attention hopper/tile_size.h, tile_size_fwd_sm90: kBlockM 128; kBlockN 176 without the mask, 128 with it)


GEMM_DTYPES_FITTED = {  # quantized GEMM dtypes fitted per GPU into the profile's gemm_dtypes
    "h100-sxm": ("fp8", "fp8_block"),
    "a100-sxm": ("int4_wo", "int8_wo", "sq"),
    "l40s": ("fp8", "fp8_block", "int4_wo", "int8_wo", "sq"),
    "b200": ("fp8", "nvfp4"),
}  # H100's SGLang table also labels rows int4_wo and int8_wo, but they are its fp8 rows' times
# (92 % within 3 %; up to 1,690 TFLOP/s against the 989 a 16-bit weight-only kernel computes at),
# as its float16 rows are: not a weight-only kernel's, so not fitted


def load_gemm_dtype(folder: str, dtype: str):
    """(the GEMM rows of one quantized dtype, notes)."""
    return read_aiconfigurator(DATA / folder, classes=["gemm"], gemm_dtype=dtype)


def dtype_base(base: Hardware, folder: str, dtype: str) -> Hardware:
    """The fit's spec for a quantized dtype: the base with the dtype's spec peak as π's cap."""
    return base.replace(peak_flops=spec_dtype_peak(DATA / folder, dtype))


def gemm_dtype_entry(name: str, folder: str, base: Hardware, dtype: str) -> dict:
    """One dtype's entry of gemm_dtypes: the GEMM fit on every row of that dtype, as the fields
    the 16-bit fit writes (``profile_from_fit``) with the dtype's spec peak and element bytes."""
    df, _ = load_gemm_dtype(folder, dtype)
    spec = dtype_base(base, folder, dtype)
    hw = profile_from_fit(fit(df, form="physical", spec=spec), spec, f"{folder} {dtype}", name)
    w, x = element_bytes(dtype)
    return {**{k: getattr(hw, k) for k in GEMM_DTYPE_FIELDS}, "weight_bytes": w, "act_bytes": x}


def gemm_dtypes_of(name: str, folder: str, base: Hardware) -> dict:
    return {d: gemm_dtype_entry(name, folder, base, d) for d in GEMM_DTYPES_FITTED.get(name, ())}


def base_of(spec, name: str | None = None) -> Hardware:
    hw = load_hardware(spec) if isinstance(spec, str) else Hardware(**spec)
    return hw.replace(
        sms=SMS.get(name, hw.sms),
        l2_bytes=float(L2.get(name, hw.l2_bytes)),
        attn_q_tile=Q_TILES.get(name, hw.attn_q_tile),
    )


VIDUR = ROOT.parent / "shared" / "data" / "kernels" / "vidur" / "compute" / "h100"
GEMM_FROM_VIDUR = {"h100_sxm"}  # see below
NOT_FITTED: dict = {}  # folder: (class or op, why) for tables no model should be fitted to
NOT_SHIPPED = {"h100_sxm": "attention"}  # fitted and reported (held out), not written into the profile:
# the SGLang tables time small problems far above their work (see benchmarks/bench_kernels.py),
# so the fitted per-call overheads are the table's, not the GPU's


def load(folder: str):
    """AIConfigurator's tables of the GPU. H100: its SGLang GEMM table runs faster than any 16-bit
    kernel can (4096³ at 1,580 TFLOP/s against a 989 TFLOP/s peak; m = 1 GEMMs stream weights at
    4.5 TB/s against 3.35 TB/s; every dtype label gives the same times, as if all ran fp8), so the
    H100 GEMMs come from Vidur's fp16 H100 tables instead (4 models, TP 1–8)."""
    df, notes = read_aiconfigurator(DATA / folder)
    if folder in GEMM_FROM_VIDUR:
        v = pd.concat([load_timings(f) for f in sorted(VIDUR.rglob("mlp.csv"))], ignore_index=True)
        df = pd.concat([df[df["op_class"] != "gemm"], v[v["op_class"] == "gemm"]], ignore_index=True)
        notes.append(
            f"{folder}: GEMMs from Vidur's fp16 H100 mlp.csv tables ({int((v['op_class'] == 'gemm').sum())} rows), "
            "not AIConfigurator's SGLang table (faster than fp16 can be)"
        )
    if folder in NOT_FITTED:
        cls, why = NOT_FITTED[folder]
        notes.append(f"{folder}: {cls} not fitted: {why}")
        df = df[(df["op_class"] != cls) & (df["op"] != cls)]
    return df, notes


def evaluate(folder: str, base: Hardware, seed: int = 0):
    """(table, notes, held-out fit, training rows, held-out rows)."""
    df, notes = load(folder)
    train, held = split_by_shape(df, 0.25, seed)
    return df, notes, fit(train, form="physical", spec=base), train, held


def md_table(df: pd.DataFrame) -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in df.itertuples(index=False):
        lines.append("| " + " | ".join(f"{v:.2f}" if isinstance(v, float) else str(v) for v in r) + " |")
    return "\n".join(lines)


def write_profile(name: str, folder: str, base: Hardware) -> pd.DataFrame:
    df, notes, f_held, train, held = evaluate(folder, base)
    t0 = time.perf_counter()
    full = fit(df, form="physical", spec=base)
    seconds = time.perf_counter() - t0
    shipped = full
    if folder in NOT_SHIPPED:
        shipped = fit(df[df["op_class"] != NOT_SHIPPED[folder]], form="physical", spec=base)
        notes.append(f"{folder}: {NOT_SHIPPED[folder]} fitted and reported here, not written into the profile")
    hw = profile_from_fit(shipped, base, f"AIConfigurator 0.4.0 kernel tables, {folder}", name)
    hw = hw.replace(
        notes=hw.notes
        + f" Fitted by benchmarks/fit_profiles.py; error report in benchmarks/profile_reports/{name}.md.",
        gemm_dtypes=gemm_dtypes_of(name, folder, base),
    )
    (HARDWARE_DIR / f"{name}.yaml").write_text(hw.to_yaml())
    held_err, fit_err = error_table(f_held, held), error_table(full, df)
    report = [
        f"# {name}: calibrated from AIConfigurator's {folder} kernel tables",
        "",
        f"Base (spec caps): {base.name} — {base.peak_flops / 1e12:.4g} TFLOP/s, "
        f"{base.peak_bandwidth / 1e12:.4g} TB/s, interconnect {base.interconnect_bandwidth / 1e9:.4g} GB/s.",
        f"Rows: {len(df)} (fit on all {len(df)} in {seconds:.1f} s; held-out check: fit on {len(train)}, "
        f"predict {len(held)} rows of whole shapes the fit never saw).",
        "",
        "## Held out by shape (percent)",
        "",
        md_table(held_err),
        "",
        "## On the fitted rows (percent)",
        "",
        md_table(fit_err),
        "",
        "## Parameters",
        "",
        md_table(full.table()[["parameter", "value", "unit", "rel_sigma", "active_points"]]),
        "",
        "## Skipped on import",
        "",
        *[f"- {n}" for n in notes],
        "",
        "## Warnings",
        "",
        *[f"- {w}" for w in full.warnings],
    ]
    (ROOT / "benchmarks" / "profile_reports" / f"{name}.md").write_text("\n".join(report) + "\n")
    return held_err.assign(gpu=name)


def write_gemm_dtypes(name: str, folder: str, base: Hardware) -> None:
    """The shipped profile with its gemm_dtypes refitted, every other field as it was."""
    path = HARDWARE_DIR / f"{name}.yaml"
    hw = load_hardware(str(path)).replace(gemm_dtypes=gemm_dtypes_of(name, folder, base))
    path.write_text(hw.to_yaml())


def write_wideep() -> None:
    """costmodel/wideep_h200.json: every wide-EP family fitted on all its rows, and the held-out figures."""
    import json

    from costmodel.calibration import wideep_fit
    from costmodel.wideep import WIDEEP_FILE

    df = wideep_fit.load(DATA)
    held = wideep_fit.summary(df)
    doc = {
        "_source": f"AIConfigurator 0.4.0 {wideep_fit.FOLDER} (benchmarks/fit_profiles.py --wideep)",
        "_held_out": {r.family: {"mape": r.mape, "median": r.median_ape, "p90": r.p90_ape} for r in held.itertuples()},
        **wideep_fit.fit_all(df),
    }
    WIDEEP_FILE.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(held.to_string(index=False))


def main(names=None) -> None:
    names = list(names or [])
    if "--wideep" in names:
        return write_wideep()
    dtypes_only = "--gemm-dtypes" in names
    names = [n for n in names if n != "--gemm-dtypes"]
    for name, (folder, spec) in GPUS.items():
        if names and name not in names:
            continue
        if dtypes_only:
            print(f"{name}: gemm_dtypes {', '.join(GEMM_DTYPES_FITTED.get(name, ()))}")
            write_gemm_dtypes(name, folder, base_of(spec, name))
            continue
        print(f"{name}:")
        print(write_profile(name, folder, base_of(spec, name)).to_string(index=False))


if __name__ == "__main__":
    main(sys.argv[1:])
