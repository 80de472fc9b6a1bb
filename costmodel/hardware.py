"""A GPU is data: a YAML profile of spec and effective throughputs (SI units)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .datafiles import find
from .errors import InputError, require

HARDWARE_DIR = Path(__file__).parent / "hardware"
GEMM_DTYPE_FIELDS = (  # what one dtype's entry of gemm_dtypes replaces (Hardware.for_gemm_dtype)
    "peak_flops",
    "pi_eff",
    "beta_eff",
    "kernel_overhead_s",
    "gemm_l2_beta",
    "gemm_cta_beta",
    "gemm_split_s",
    "gemm_wave_s",
    "gemm_l2_resident_bytes",
    "gemm_l2_out_bytes",
    "gemm_l2_act_bytes",
    "gemm_corr_knots",
    "gemm_corr",
    "gemm_field_m",
    "gemm_field_shapes",
    "gemm_field",
    "gemm_field_h",
    "gemm_field_shrink",
    "gemm_serial",
)
GEMM_DTYPE_INFO = ("weight_bytes", "act_bytes")  # also in an entry: the bytes per element its fit priced
GiB = 1 << 30
COMBINES = ("max", "quadrature")
ATTN_FORMS = ("roofline", "separate", "varlen")
GEMM_FORMS = ("roofline", "tiles")


@dataclass(frozen=True)
class Hardware:
    name: str
    memory_bytes: float
    peak_flops: float  # spec sheet, bf16 dense, FLOP/s
    peak_bandwidth: float  # spec sheet, HBM bytes/s
    pi_eff: float  # achieved FLOP/s used by the roofline
    beta_eff: float  # achieved bytes/s used by the roofline
    step_overhead_s: float = 0.0  # fixed GPU cost per forward pass (launches, sampling)
    host_step_s: float = 0.0  # engine host time per step (scheduling, input preparation): costmodel/host.py
    host_per_seq_s: float = 0.0  # host time per sequence in the step
    host_per_prefill_seq_s: float = 0.0  # more host time per prefill sequence (q > 1)
    host_prefill_step_s: float = 0.0  # more host time once per step that has a prefill sequence
    host_per_launch_s: float = 0.0  # host time per kernel an eager pass launches, hidden under the GPU's: host.py
    kernel_floor_s: float = 0.0  # smallest time any one operator takes (launch floor, inside the max)
    kernel_overhead_s: float = 0.0  # added to every kernel's time (calibrated forms offset/smooth)
    gemm_tile_rows: int = 1  # GEMM MMA work is padded up to a multiple of this many rows (1: none)
    gemm_rows_break: int = 0  # GEMMs of more rows than this run at gemm_rows_pi_scale·π (0: one regime)
    gemm_rows_pi_scale: float = (
        1.0  # π's scale beyond gemm_rows_break or gemm_rows_budget (step-fitted: calibration/steps.py)
    )
    gemm_rows_budget: int = 0  # a step's GEMMs run this many rows at π, the rest at gemm_rows_pi_scale·π (0: none)
    roofline_combine: str = "max"  # how a kernel's F/π and B/β combine: max, or quadrature (√(a²+b²))
    pi_attn: float | None = None  # separate attention throughput when calibrated; None = pi_eff
    beta_attn: float | None = None
    attn_form: str = "roofline"  # attention: the roofline above, or fitted "separate" / "varlen" kernels
    attn_prefill_beta: float = 0.0  # fitted prefill: the tokens-linear term, KV bytes / this (B/s)
    attn_prefill_overhead_s: float = 0.0  # fitted prefill: fixed cost of the kernel per layer
    attn_prefill_l2_beta: float = 0.0  # ... the tokens-linear term's rate for bytes resident in the L2 (0: off)
    attn_prefill_l2_bytes: float = 0.0  # ... the layer's prefill bytes resident in the L2 below this (≤ l2_bytes)
    attn_prefill_kv_beta: float = 0.0  # ... the K/V part of those bytes at a rate of its own (0: with the rest)
    attn_prefill_kv_l2_beta: float = 0.0  # ... and its rate while resident in the L2
    attn_prefill_kv_l2_bytes: float = 0.0  # ... and the L2 capacity its resident share is of (0: attn_prefill_l2_bytes)
    attn_prefill_dram_exposed: float = (
        1.0  # ... the share of their DRAM time the compute does not hide (1: none hidden)
    )
    attn_prefill_row_s: float = 0.0  # ... and a cost per prefill row·head in that DRAM time
    attn_tail_key_s: float = 0.0  # quantized wave model: the causal tail tile's latency per key
    attn_q_tile: int = 0  # wave model: query rows per prefill CTA tile (0: shape.Q_TILE, 64)
    attn_softmax_rate: float = 0.0  # fitted prefill: score elements per second of its softmax (0: in π_attn)
    attn_decode_pi: float = 0.0  # fitted decode: FLOP/s of the decode kernel (beta_attn is its B/s)
    attn_decode_seq_s: float = 0.0  # fitted decode: cost per decode sequence per layer
    attn_decode_overhead_s: float = 0.0  # fitted decode: fixed cost of the kernel per layer
    attn_decode_unit_s: float = (
        0.0  # unit decode model (costmodel/decode_units.py; 0: off): grouped kernel's cost per (sequence, KV head)
    )
    attn_decode_unit_q: float = 0.0  # ... its growth per query head the unit serves
    attn_decode_unit_mha_s: float = 0.0  # ... per-head kernel's cost per (sequence, query head)
    attn_decode_overhead_mha_s: float = 0.0  # ... per-head kernel's fixed cost per layer
    attn_decode_beta_mha: float = 0.0  # ... per-head kernel's HBM bandwidth (grouped: beta_attn)
    attn_decode_l2_beta: float = 0.0  # ... bandwidth of KV served from the L2
    attn_decode_l2_bytes: float = 0.0  # ... KV working set resident in the L2 below this (≤ l2_bytes)
    attn_decode_cta_beta: float = 0.0  # ... bandwidth one thread block keeps in flight
    attn_decode_group_min: int = 2  # ... query heads per KV head the grouped kernel takes: from
    attn_decode_group_max: int = 32  # ... g_min to g_max (others run the per-head kernel)
    attn_decode_split: str = "flow"  # ... how the kernels split the KV sequence (decode_units.SPLITS)
    attn_decode_mmha_blocks: int = (
        4  # ... launch / gen: MMHA's 256-thread blocks per SM (its register-limited occupancy)
    )
    attn_decode_combine_s: float = 0.0  # ... a split sequence's combine of its partial results, per thread block
    attn_decode_pi_mha: float = 0.0  # ... "launch" and "gen" splits (costmodel/decode_launch.py): MMHA's FLOP/s
    attn_decode_loop_mha_s: float = 0.0  # ... MMHA's walk over a block's keys, per 64 of them (decode_launch)
    attn_decode_l2_pass_bytes: float = (
        0.0  # ... MMHA's value pass re-reads K-only tables' key lines from the L2 below this
    )
    attn_decode_hidden_keys: float = 0.0  # ... keys of each grouped block (XQA, trtllm-gen) whose loads its fixed latency hides (at d = 128; 128/d times that at d)
    attn_decode_combine_fixed_s: float = (
        0.0  # ... a split launch's fixed cost of its reduction (once, beside the per-block part)
    )
    attn_decode_issue_beta: float = 0.0  # ... the rate MMHA's issued key rows are served at (0: attn_decode_l2_beta)
    attn_mixed_pi: float = 0.0  # varlen: FLOP/s of a decode's FLOPs when it rides a prefill kernel
    attn_mixed_seq_s: float = 0.0  # varlen: cost per decode sequence beside a prefill chunk, per layer
    attn_decode_skew: float = (
        0.0  # fitted decode: α, a batch of uneven contexts costs t_mean + α·(t_max - t_mean) (0: off)
    )
    attn_wave_s: float = 0.0  # prefill wave model: one query tile's time per cached key (0: off; needs sms)
    attn_wave_form: str = "max"  # ... max(F'/π, waves·wave·…), or "quantized": F'/π·waves·SMs/tiles + waves·wave·…
    sms: int = 0  # streaming multiprocessors (spec; the attention wave model needs it)
    l2_bytes: float = 0.0  # L2 cache (spec; the tile GEMM and unit decode models' L2-resident regime)
    gemm_form: str = "roofline"  # weight GEMMs: the roofline above, or "tiles" (costmodel/gemm_tiles.py)
    gemm_l2_beta: float = 0.0  # tiles: L2 → SM bandwidth (B/s)
    gemm_cta_beta: float = 0.0  # tiles: bandwidth one thread block keeps in flight (B/s)
    gemm_split_s: float = 0.0  # tiles: the reduction pass of a split-K kernel
    gemm_wave_s: float = 0.0  # tiles: fixed latency of one wave of output tiles
    gemm_l2_resident_bytes: float = 0.0  # tiles: inputs served from the L2 below this (≤ l2_bytes)
    gemm_l2_out_bytes: float = 0.0  # tiles: output written back to the L2 below this (≤ l2_bytes)
    gemm_l2_act_bytes: float = 0.0  # tiles: activations served from the L2 below this, the weights below
    # gemm_l2_resident_bytes (≤ l2_bytes; 0: both operands together below that)
    gemm_corr_knots: list = field(default_factory=list)  # tiles: the shape correction's log2 m, n, k knots
    gemm_corr: list = field(
        default_factory=list
    )  # ... its ln factor at each knot triple (costmodel/gemm_correction.py)
    gemm_field_m: list = field(
        default_factory=list
    )  # tiles: the residual field's log2 m grid (costmodel/gemm_residual.py)
    gemm_field_shapes: list = field(default_factory=list)  # ... its measured shapes' [log2 n, log2 k]
    gemm_field: list = field(default_factory=list)  # ... its ln residual per shape and grid m (NaN: unmeasured)
    gemm_field_h: list = field(default_factory=list)  # ... its kernel widths along n and k (grid steps)
    gemm_field_shrink: float = 0.0  # ... and its shrinkage
    gemm_serial: list = field(
        default_factory=list
    )  # tiles: the unsplit kernel's [t0, tau, S, K, M(, N, M_w)] (costmodel/gemm_serial.py)
    gemm_dtypes: dict = field(
        default_factory=dict
    )  # tiles: quantized GEMM dtype -> its own fit (GEMM_DTYPE_FIELDS, peak_flops the dtype's): for_gemm_dtype
    elementwise_beta: float = 0.0  # per-layer norms, activation, rotary embedding: bytes/s (0: not priced)
    elementwise_floor_s: float = 0.0  # ... and the fixed cost of each of those kernels
    sampler_s: float = 0.0  # GPU sampling after the LM head: fixed per pass
    sampler_seq_s: float = 0.0  # ... and per sampled sequence
    allreduce_regimes: dict = field(default_factory=dict)  # tp -> [latency, bandwidth] per regime, flattened
    allreduce_oneshot_tokens: int = 0  # > 0: each tp's first two regimes (one-shot) only up to this many tokens
    allreduce_oneshot_alone: list = field(default_factory=list)  # tps whose passes up to that take those two alone
    allreduce_switches: dict = field(
        default_factory=dict
    )  # tp -> gaps between its regimes taken as runs (NCCL over PCIe)
    allreduce_oneshot_max: list = field(default_factory=list)  # tps whose two one-shot lines combine as their maximum
    allreduce_soft: list = field(default_factory=list)  # tps whose later (NCCL) lines combine as a soft minimum
    allreduce_wave_s: dict = field(
        default_factory=dict
    )  # tp -> one-shot time added past sms tokens (grid capped at the SMs)
    moe_pi: float = 0.0  # fitted fused-MoE layer (costmodel/moe_cost.py; 0: experts on the roofline)
    moe_beta: float = 0.0  # ... its weight-streaming bandwidth
    moe_floor_s: float = 0.0  # ... its fixed cost per MoE layer
    moe_pad_rows: float = 0.0  # ... rows of padding per touched expert
    moe_tile_depth: float = 0.0  # ... fixed cost per output tile, in reduction steps
    moe_tuned_pi: float = 0.0  # ... its compute rate for the shapes the engine has a tuned kernel for
    moe_tuned_shapes: list = field(default_factory=list)  # ... those shapes: [experts, expert width per GPU]
    interconnect_bandwidth: float = 0.0  # bytes/s per direction per GPU, for tensor parallelism
    interconnect_latency_s: float = 0.0  # per ring step
    pcie_gts: float = 0.0  # > 0: tp > 1 over PCIe, priced by NCCL's tuning model (costmodel/pcie.py): GT/s a lane
    pcie_lanes: int = 16  # ... the GPU's link width
    pcie_p2p: bool = True  # ... whether the driver allows GPU peer-to-peer (GeForce: no; then NCCL's SHM path)
    pcie_switch: bool = False  # ... GPUs behind a PCIe switch (NCCL PATH_PXB), else on the CPU's root ports
    pcie_channel_bw: float = 0.0  # ... measured NCCL busbw a ring channel carries, bytes/s (0: NCCL's search speed)
    host_link_bandwidth: float = 0.0  # bytes/s one way GPU <-> host memory (HiCache's copies, costmodel/host_tier.py)
    host_cpu: str = ""  # ... "intel", "amd" or "" (unknown): NCCL's P2P level and Intel P2P overhead
    compute_capability: float = 0.0  # ... the GPU's (8.9, 12.0): NCCL's speed array and compcap index
    gpus_per_node: int = 8
    counting: str = "seed"  # FLOP-counting convention the effective numbers belong to
    description: str = ""
    sources: list = field(default_factory=list)
    notes: str = ""
    calibration: dict = field(default_factory=dict)
    dtype_peaks: dict = field(default_factory=dict)  # spec sheet dense FLOP/s per low-precision dtype (fp8, int8, fp4)

    @property
    def pi_attention(self) -> float:
        return self.pi_attn or self.pi_eff

    @property
    def beta_attention(self) -> float:
        return self.beta_attn or self.beta_eff

    @property
    def ridge_spec(self) -> float:
        """Roofline ridge point I* = π/β on the spec sheet, FLOP/byte."""
        return self.peak_flops / self.peak_bandwidth

    @property
    def ridge_achieved(self) -> float:
        return self.pi_eff / self.beta_eff

    def replace(self, **changes) -> Hardware:
        return dataclasses.replace(self, **changes)

    def for_gemm_dtype(self, dtype: str) -> Hardware | None:
        """This profile with the GEMM fit of a quantized weight dtype (``gemm_dtypes``: fp8,
        fp8_block, nvfp4, sq, int8_wo, int4_wo) in place of the 16-bit one: pi_eff, beta_eff,
        kernel_overhead_s (the tile model's floor), every gemm_* field of the tile model and
        peak_flops (the dtype's spec peak); None when the profile has no fit for it. The fit
        priced the weights and activations at ``gemm_tiles.element_bytes(dtype)`` bytes each
        (also the entry's weight_bytes and act_bytes): a GemmTiles built from the copy takes
        them as w_bytes and x_bytes."""
        d = (self.gemm_dtypes or {}).get(dtype)
        if not d:
            return None
        return dataclasses.replace(self, **{k: d[k] for k in GEMM_DTYPE_FIELDS if k in d})

    def to_yaml(self) -> str:
        return yaml.dump(dataclasses.asdict(self), Dumper=_Dumper, sort_keys=False)


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """Lists of numbers on one line each (a profile's GEMM residual field holds thousands)."""


def _flow_numbers(dumper, data):
    flow = bool(data) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow or None)


_Dumper.add_representer(list, _flow_numbers)
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml where present: ~10x faster on a shipped profile


def hardware_from_dict(d: dict, source: str = "hardware") -> Hardware:
    names = {f.name for f in dataclasses.fields(Hardware)}
    unknown = sorted(set(d) - names)
    require(not unknown, f"{source}:keys", unknown, f"unknown keys; allowed: {', '.join(sorted(names))}")
    try:
        hw = Hardware(**d)
    except TypeError as e:
        raise InputError(source, sorted(d), f"missing fields ({e})") from None
    for f in dataclasses.fields(
        Hardware
    ):  # a scalar field given as a string, a list or null: named, not a TypeError later
        if isinstance(f.default, (int, float)) and not isinstance(f.default, bool):
            v = getattr(hw, f.name)
            require(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v),
                f"{source}:{f.name}",
                v,
                "must be a finite number",
            )
    for fld in ("memory_bytes", "peak_flops", "peak_bandwidth", "pi_eff", "beta_eff"):
        v = getattr(hw, fld)
        require(isinstance(v, (int, float)) and v > 0, f"{source}:{fld}", v, "must be a positive number")
    require(isinstance(hw.dtype_peaks, dict), f"{source}:dtype_peaks", hw.dtype_peaks, "must be a mapping")
    for k, v in hw.dtype_peaks.items():
        require(k in ("fp8", "int8", "fp4"), f"{source}:dtype_peaks", k, "keys are fp8, int8 and fp4")
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
        require(ok, f"{source}:dtype_peaks.{k}", v, "must be a positive number (FLOP/s)")
    for fld in (
        "step_overhead_s",
        "host_step_s",
        "host_per_seq_s",
        "host_per_prefill_seq_s",
        "host_prefill_step_s",
        "host_per_launch_s",
        "kernel_floor_s",
        "kernel_overhead_s",
        "interconnect_bandwidth",
        "interconnect_latency_s",
        "attn_prefill_beta",
        "attn_prefill_overhead_s",
        "attn_decode_pi",
        "attn_decode_seq_s",
        "attn_decode_overhead_s",
        "attn_mixed_pi",
        "attn_mixed_seq_s",
        "attn_wave_s",
        "sampler_s",
        "elementwise_beta",
        "elementwise_floor_s",
        "attn_decode_unit_s",
        "attn_decode_unit_q",
        "attn_decode_unit_mha_s",
        "attn_decode_overhead_mha_s",
        "attn_decode_beta_mha",
        "attn_decode_l2_beta",
        "attn_decode_l2_bytes",
        "attn_decode_cta_beta",
        "attn_decode_combine_s",
        "attn_prefill_l2_beta",
        "attn_decode_pi_mha",
        "attn_decode_loop_mha_s",
        "attn_decode_l2_pass_bytes",
        "attn_decode_hidden_keys",
        "attn_decode_combine_fixed_s",
        "attn_decode_issue_beta",
        "attn_prefill_l2_bytes",
        "attn_prefill_kv_beta",
        "attn_prefill_kv_l2_beta",
        "attn_tail_key_s",
        "attn_softmax_rate",
        "attn_prefill_kv_l2_bytes",
        "attn_prefill_row_s",
        "sampler_seq_s",
        "moe_pi",
        "moe_beta",
        "moe_floor_s",
        "moe_pad_rows",
        "moe_tile_depth",
        "moe_tuned_pi",
        "pcie_channel_bw",
        "attn_decode_skew",
    ):
        require(getattr(hw, fld) >= 0, f"{source}:{fld}", getattr(hw, fld), "must be >= 0")
    if hw.pcie_gts:
        from .pcie import PCI_GEN_RATE

        require(
            float(hw.pcie_gts) in PCI_GEN_RATE,
            f"{source}:pcie_gts",
            hw.pcie_gts,
            f"must be 0 or a PCIe rate NCCL knows (GT/s: {', '.join(f'{k:g}' for k in PCI_GEN_RATE)})",
        )
        require(
            isinstance(hw.pcie_lanes, int) and not isinstance(hw.pcie_lanes, bool) and 1 <= hw.pcie_lanes <= 32,
            f"{source}:pcie_lanes",
            hw.pcie_lanes,
            "must be an integer from 1 to 32",
        )
        require(
            isinstance(hw.compute_capability, (int, float)) and 6.0 <= hw.compute_capability < 20,
            f"{source}:compute_capability",
            hw.compute_capability,
            "must be set (e.g. 8.9, 12.0) with pcie_gts",
        )
    for fld in ("pcie_p2p", "pcie_switch"):
        require(isinstance(getattr(hw, fld), bool), f"{source}:{fld}", getattr(hw, fld), "must be true or false")
    require(hw.host_cpu in ("", "intel", "amd"), f"{source}:host_cpu", hw.host_cpu, 'must be "intel", "amd" or ""')
    require(
        isinstance(hw.gemm_tile_rows, int) and hw.gemm_tile_rows >= 1,
        f"{source}:gemm_tile_rows",
        hw.gemm_tile_rows,
        "must be a positive integer",
    )
    require(
        isinstance(hw.allreduce_oneshot_tokens, int) and hw.allreduce_oneshot_tokens >= 0,
        f"{source}:allreduce_oneshot_tokens",
        hw.allreduce_oneshot_tokens,
        "must be a non-negative integer",
    )
    alone = hw.allreduce_oneshot_alone
    require(
        isinstance(alone, (list, tuple)) and all(isinstance(t, int) and t > 1 for t in alone),
        f"{source}:allreduce_oneshot_alone",
        alone,
        "must be a list of tensor-parallel sizes (integers > 1)",
    )
    for fld in ("allreduce_oneshot_max", "allreduce_soft"):
        tps = getattr(hw, fld)
        require(
            isinstance(tps, (list, tuple)) and all(isinstance(t, int) and t > 1 for t in tps),
            f"{source}:{fld}",
            tps,
            "must be a list of tensor-parallel sizes (integers > 1)",
        )
    require(
        (hw.moe_pi > 0) == (hw.moe_beta > 0),
        f"{source}:moe_beta",
        hw.moe_beta,
        "must be set together with moe_pi (both > 0 for a fitted MoE layer, or both 0)",
    )
    shapes = hw.moe_tuned_shapes
    require(
        isinstance(shapes, list)
        and all(
            isinstance(x, (list, tuple)) and len(x) == 2 and all(isinstance(v, int) and v > 0 for v in x)
            for x in shapes
        ),
        f"{source}:moe_tuned_shapes",
        shapes,
        "must be a list of [experts, expert width per GPU] integer pairs",
    )
    require(
        not shapes or hw.moe_tuned_pi > 0,
        f"{source}:moe_tuned_pi",
        hw.moe_tuned_pi,
        "must be > 0 when moe_tuned_shapes is set",
    )
    require(
        isinstance(hw.gemm_rows_break, int) and hw.gemm_rows_break >= 0,
        f"{source}:gemm_rows_break",
        hw.gemm_rows_break,
        "must be a non-negative integer",
    )
    require(
        isinstance(hw.gemm_rows_budget, int) and hw.gemm_rows_budget >= 0,
        f"{source}:gemm_rows_budget",
        hw.gemm_rows_budget,
        "must be a non-negative integer",
    )
    require(
        not (hw.gemm_rows_budget and hw.gemm_rows_break),
        f"{source}:gemm_rows_budget",
        hw.gemm_rows_budget,
        "cannot be set with gemm_rows_break (one rows regime per profile)",
    )
    require(
        isinstance(hw.gemm_rows_pi_scale, (int, float)) and hw.gemm_rows_pi_scale > 0,
        f"{source}:gemm_rows_pi_scale",
        hw.gemm_rows_pi_scale,
        "must be a positive number",
    )
    require(
        hw.roofline_combine in COMBINES,
        f"{source}:roofline_combine",
        hw.roofline_combine,
        f"must be one of {', '.join(COMBINES)}",
    )
    require(hw.attn_form in ATTN_FORMS, f"{source}:attn_form", hw.attn_form, f"must be one of {', '.join(ATTN_FORMS)}")
    if hw.attn_form != "roofline":
        for fld in ("attn_prefill_beta", "attn_decode_pi") + (("attn_mixed_pi",) if hw.attn_form == "varlen" else ()):
            require(
                getattr(hw, fld) > 0, f"{source}:{fld}", getattr(hw, fld), f"must be > 0 with attn_form {hw.attn_form}"
            )
    require(
        isinstance(hw.attn_q_tile, int) and hw.attn_q_tile >= 0,
        f"{source}:attn_q_tile",
        hw.attn_q_tile,
        "must be a non-negative integer",
    )
    require(isinstance(hw.sms, int) and hw.sms >= 0, f"{source}:sms", hw.sms, "must be a non-negative integer")
    require(
        isinstance(hw.attn_decode_group_min, int)
        and isinstance(hw.attn_decode_group_max, int)
        and 1 <= hw.attn_decode_group_min <= hw.attn_decode_group_max,
        f"{source}:attn_decode_group_min",
        [hw.attn_decode_group_min, hw.attn_decode_group_max],
        "must be integers with 1 <= group_min <= group_max",
    )
    require(
        isinstance(hw.attn_decode_mmha_blocks, int) and 1 <= hw.attn_decode_mmha_blocks <= 8,
        f"{source}:attn_decode_mmha_blocks",
        hw.attn_decode_mmha_blocks,
        "must be an integer from 1 to 8",
    )
    require(
        hw.attn_decode_split in ("flow", "xqa", "launch", "gen"),
        f"{source}:attn_decode_split",
        hw.attn_decode_split,
        "must be one of flow, xqa, launch, gen",
    )
    if hw.attn_decode_unit_s:
        for fld in (
            "sms",
            "attn_decode_pi",
            "beta_attn",
            "attn_decode_beta_mha",
            "attn_decode_l2_beta",
            "attn_decode_l2_bytes",
            "attn_decode_cta_beta",
            "attn_decode_unit_mha_s",
        ):
            require(
                (getattr(hw, fld) or 0) > 0, f"{source}:{fld}", getattr(hw, fld), "must be > 0 with attn_decode_unit_s"
            )
        if hw.attn_decode_split in ("launch", "gen"):
            require(
                hw.attn_decode_pi_mha > 0,
                f"{source}:attn_decode_pi_mha",
                hw.attn_decode_pi_mha,
                f"must be > 0 with attn_decode_split {hw.attn_decode_split}",
            )
    require(
        not hw.attn_prefill_l2_beta or hw.attn_prefill_l2_bytes > 0,
        f"{source}:attn_prefill_l2_bytes",
        hw.attn_prefill_l2_bytes,
        "must be > 0 with attn_prefill_l2_beta",
    )
    require(
        (hw.attn_prefill_kv_beta > 0) == (hw.attn_prefill_kv_l2_beta > 0)
        and (not hw.attn_prefill_kv_beta or hw.attn_prefill_l2_beta),  # type: ignore[arg-type]
        f"{source}:attn_prefill_kv_beta",
        hw.attn_prefill_kv_beta,
        "must be set together with attn_prefill_kv_l2_beta and attn_prefill_l2_beta (all > 0, or both K/V rates 0)",
    )
    require(
        0 < hw.attn_prefill_dram_exposed <= 1,
        f"{source}:attn_prefill_dram_exposed",
        hw.attn_prefill_dram_exposed,
        "must be in (0, 1]",
    )
    require(not hw.attn_wave_s or hw.sms > 0, f"{source}:attn_wave_s", hw.attn_wave_s, "needs sms (the GPU's SM count)")
    require(
        hw.attn_wave_form in ("max", "quantized"),
        f"{source}:attn_wave_form",
        hw.attn_wave_form,
        "must be one of max, quantized",
    )
    require(hw.gemm_form in GEMM_FORMS, f"{source}:gemm_form", hw.gemm_form, f"must be one of {', '.join(GEMM_FORMS)}")
    if hw.gemm_form == "tiles":
        for fld in ("sms", "gemm_l2_beta", "gemm_cta_beta", "gemm_l2_resident_bytes", "gemm_l2_out_bytes"):
            require(getattr(hw, fld) > 0, f"{source}:{fld}", getattr(hw, fld), "must be > 0 with gemm_form tiles")
    for fld in ("l2_bytes", "gemm_split_s", "gemm_wave_s", "gemm_l2_act_bytes"):
        require(getattr(hw, fld) >= 0, f"{source}:{fld}", getattr(hw, fld), "must be >= 0")
    from .gemm_correction import check

    check(hw.gemm_corr_knots, hw.gemm_corr, f"{source}:gemm_corr")
    from .gemm_residual import check as check_field

    try:
        check_field(
            hw.gemm_field_m,
            hw.gemm_field_shapes,
            hw.gemm_field,
            hw.gemm_field_h,
            hw.gemm_field_shrink,
            f"{source}:gemm_field",
        )
    except InputError:
        raise
    except (TypeError, ValueError) as e:
        raise InputError(
            f"{source}:gemm_field",
            str(e),
            "the residual field's lists (gemm_field_m, gemm_field_shapes, "
            "gemm_field, gemm_field_h) must be lists of numbers",
        ) from None
    from .gemm_serial import check as check_serial

    require(
        isinstance(hw.gemm_serial, (list, tuple)),
        f"{source}:gemm_serial",
        hw.gemm_serial,
        "must be a list [t0_s, tau_s_per_k, max_nk, max_k, max_m] or empty",
    )
    check_serial(hw.gemm_serial, f"{source}:gemm_serial")
    require(isinstance(hw.gemm_dtypes, dict), f"{source}:gemm_dtypes", hw.gemm_dtypes, "must be a mapping")
    for dt, entry in hw.gemm_dtypes.items():
        where = f"{source}:gemm_dtypes.{dt}"
        require(isinstance(entry, dict), where, entry, "must be a mapping of fields")
        bad = sorted(set(entry) - set(GEMM_DTYPE_FIELDS) - set(GEMM_DTYPE_INFO))
        require(not bad, where, bad, f"unknown keys; allowed: {', '.join(GEMM_DTYPE_FIELDS + GEMM_DTYPE_INFO)}")
        for key in ("peak_flops", "pi_eff", "beta_eff"):
            v = entry.get(key)
            require(isinstance(v, (int, float)) and v > 0, f"{where}.{key}", v, "must be a number > 0")
        check(entry.get("gemm_corr_knots", []), entry.get("gemm_corr", []), f"{where}.gemm_corr")
        check_serial(entry.get("gemm_serial", []), f"{where}.gemm_serial")
    regimes = hw.allreduce_regimes or {}
    require(
        isinstance(regimes, dict), f"{source}:allreduce_regimes", regimes, "must map tp to [latency_s, bandwidth, ...]"
    )
    for tp, v in regimes.items():
        ok = (
            isinstance(tp, int)
            and tp > 1
            and isinstance(v, (list, tuple))
            and len(v) >= 2
            and len(v) % 2 == 0
            and all(isinstance(x, (int, float)) and x > 0 for x in v)
        )
        require(
            ok,
            f"{source}:allreduce_regimes:{tp}",
            v,
            "must be tp (> 1) -> [latency_s, bandwidth, latency_s, bandwidth, ...] (one pair per regime), all > 0",
        )
    switches = hw.allreduce_switches or {}
    require(isinstance(switches, dict), f"{source}:allreduce_switches", switches, "must map tp to [bytes, bytes, ...]")
    for tp, v in switches.items():
        ok = (
            isinstance(tp, int)
            and tp in regimes
            and isinstance(v, (list, tuple))
            and len(v) == len(regimes[tp]) - 2
            and all(isinstance(x, (int, float)) and x >= 0 for x in v)
        )
        require(
            ok,
            f"{source}:allreduce_switches:{tp}",
            v,
            "must be a tp of allreduce_regimes -> one [a, b] pair of bus bytes (>= 0) per pair of consecutive regimes",
        )
        pairs = [(float(v[i]), float(v[i + 1])) for i in range(0, len(v), 2)]
        gaps = [p for p in pairs if p != (0.0, 0.0)]
        ok = (
            all(0 < a <= b for a, b in gaps)
            and all(p[1] <= q[0] for p, q in zip(gaps, gaps[1:]))
            and (len(gaps) == len(pairs) or hw.allreduce_oneshot_tokens > 0)
        )
        require(
            ok,
            f"{source}:allreduce_switches:{tp}",
            v,
            "each gap [a, b] must have 0 < a <= b and rise past the "
            "one before; [0, 0] (the token switch) needs allreduce_oneshot_tokens > 0",
        )
    waves = hw.allreduce_wave_s or {}
    require(
        isinstance(waves, dict)
        and all(
            isinstance(tp, int)
            and tp in regimes
            and isinstance(v, (int, float))
            and not isinstance(v, bool)
            and 0 <= v < math.inf
            for tp, v in waves.items()
        )
        and (not waves or hw.sms > 0),
        f"{source}:allreduce_wave_s",
        waves,
        "must map tps of allreduce_regimes to finite seconds (>= 0), and needs sms",
    )
    require(hw.counting in ("seed", "faithful"), f"{source}:counting", hw.counting, "must be 'seed' or 'faithful'")
    return hw


def known_hardware() -> list[str]:
    return sorted(p.stem for p in HARDWARE_DIR.glob("*.yaml"))


def load_hardware(name_or_path: str) -> Hardware:
    """A short name (``h100``) or a path to a YAML profile (for example one ``calibrate`` wrote)."""
    path = find("hardware", name_or_path, HARDWARE_DIR, ".yaml", "a YAML path")
    try:
        d = yaml.load(path.read_text(), Loader=_LOADER)
    except yaml.YAMLError as e:
        raise InputError("hardware", str(path), f"not valid YAML ({e})") from None
    require(isinstance(d, dict), "hardware", str(path), "YAML must be a mapping")
    d.setdefault("name", path.stem)
    return hardware_from_dict(d, source=str(name_or_path))
