"""Operator classes whose time is not one roofline: attention, the sampler (all-reduce: ``allreduce_model``).

Each is a small closed-form model of its measured kernel, fitted like the roofline classes
(log residuals, soft_l1, parameters as ln(p/p0), 1σ from the Jacobian), and priced the same way
by ``costmodel/roofline.py`` when a profile carries it.

attention   one varlen attention kernel per layer over the batch (vLLM's FlashAttention backend
            runs prefill chunks and decodes in one call):
              t = F_p/π_p + B_p/β_p                       prefill chunks (q > 1)
                + √((F_d/π_d)² + (B_d/β_d)²) + c_seq·n_d   decodes (q = 1)
                + t_p, t_d                                  each kernel's fixed cost
            TensorRT-LLM runs context and generation attention as separate kernels (the parts add).
            vLLM's FlashAttention backend runs one varlen call per layer: with a prefill chunk in
            the batch its decodes become one-row query tiles of the prefill kernel (FlashAttention's
            flash_api.cpp mha_varlen_fwd swaps decode heads into split-KV kernels only when
            max_seqlen_q == 1), which LLMServingSim's attention.csv shows as decodes costing ~4×
            more beside a chunk than alone: ``attention_times``' varlen form.
            F = 4·h·d·pairs, B = the KV read and written. For FlashAttention prefill the efficiency
            F/(π_p·t) rises with the prompt: the B_p/β_p term is the part of the time linear in
            tokens (loading Q, K, V tiles, the softmax rescaling, the epilogue), which a long prompt
            amortises over its quadratic FLOPs. Decode streams the KV cache (β_d) and pays a fixed
            cost per sequence (c_seq: its split's launch within the kernel, the combine of splits).
sampler     t = t_0 + c_seq · sequences (LLMServingSim's per_sequence.csv sampler rows).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from ..decode_units import (
    GROUPINGS,
    MMHA_OCCUPANCY,
    PARAMS as DECODE_UNITS,
    UNITS as DECODE_UNIT_UNITS,
    decode_unit_times,
)
from ..prefill_memory import l2_resident_share, overlap_dram
from ..shape import Q_TILE
from .attention_apart import apart, fit_apart
from .fit import F_SCALE, LOSS, ClassFit, ape_stats
from .identify import identify

ATTENTION = ("pi_prefill", "beta_prefill", "overhead_prefill", "pi_decode", "beta_decode", "seq", "overhead_decode")
ATTENTION_VARLEN = ATTENTION + ("pi_mixed", "seq_mixed")
ATTENTION_UNITS = ("pi_prefill", "beta_prefill", "overhead_prefill") + DECODE_UNITS  # decode: decode_units.py
PREFILL_L2 = ("beta_prefill_l2", "l2_prefill")  # kernel-separate tables: prefill bytes resident in the L2
PREFILL_KV = ("beta_prefill_kv", "beta_prefill_kv_l2")  # ... their K/V part at rates of its own (``attention_times``)
PREFILL_KV_L2 = ("l2_prefill_kv",)  # ... and an L2 capacity of its own, where head dims differ
PREFILL_DRAM = ("exposed_prefill",)  # ... the share of their DRAM time the compute does not hide (``overlap_dram``)
PREFILL_ROW = ("row_prefill",)  # ... and a cost per query row·head in it, where head dims differ (else: Q/O bytes' β)
SOFTMAX = ("softmax_prefill",)  # score elements per second of the softmax, where head dims differ
TAIL = ("tail_key",)  # the causal tail tile's per-key latency (``prefill_compute``)

SAMPLER = ("floor", "per_seq")
UNITS = {
    "l2_prefill_kv": "B",
    "exposed_prefill": "1",
    "row_prefill": "s",
    "wave": "s",
    "wave_q": "s",
    "tail_key": "s",
    "softmax_prefill": "1/s",
    "beta_prefill_kv": "B/s",
    "beta_prefill_kv_l2": "B/s",
    "beta_prefill_l2": "B/s",
    "l2_prefill": "B",
    "pi_mixed": "FLOP/s",
    "seq_mixed": "s",
    "pi_prefill": "FLOP/s",
    "beta_prefill": "B/s",
    "pi_decode": "FLOP/s",
    "beta_decode": "B/s",
    "seq": "s",
    "overhead_prefill": "s",
    "overhead_decode": "s",
    "floor": "s",
    "per_seq": "s",
}
UNITS.update(DECODE_UNIT_UNITS)
CUSTOM_CLASSES = ("attention", "sampler")
ATTENTION_COLUMNS = (
    "flops",
    "bytes",
    "decode_flops",
    "decode_bytes",
    "seqs",
    "prefill_seqs",
    "prefill_q",
    "prefill_kv",
    "heads",
    "kv_heads",
    "n",
    "k",
    "causal",
    "kv_alias",
)


def base_name(p: str) -> str:
    return p.split("@", 1)[0]


def _cols(df: pd.DataFrame):
    f, b = df["flops"].to_numpy(float), df["bytes"].to_numpy(float)
    fd, bd = df["decode_flops"].to_numpy(float), df["decode_bytes"].to_numpy(float)
    return f - fd, b - bd, fd, bd, df["seqs"].to_numpy(float)


def prefill_compute(
    fp: np.ndarray,
    df: pd.DataFrame,
    pi_p: float,
    wave: float,
    sms: int,
    quantized: bool = False,
    tail_key: float = 0.0,
    tile: int = Q_TILE,
) -> np.ndarray:
    """Prefill's compute time: F/π, or with the wave model (sms > 0) max(F'/π, waves·wave·(kv_max + T/2)):
    F' pads each chunk's queries to whole T-row tiles, h·Σ⌈q/T⌉ tiles run ⌈·/SMs⌉ waves, each as long
    as a tile over the longest prefix. It is what makes short chunks over long prefixes cost the
    same as 256-token ones (LLMServingSim's RTX 4090 attention.csv: 16- to 256-token chunks over a
    16k prefix all take ~520 µs). ``quantized`` (kernel-separate tables, AIConfigurator's): the
    last wave's idle SMs cost their share, F'/π · waves·SMs/tiles, plus the waves' fixed latency
    waves·wave·(kv_max + T/2) (held out on A100 / B200 context tables: 6.5 → 4.7 %, 13.4 → 8.5 %),
    plus the causal tail: a chunk's last query tile sees (q - T)/2 more keys than its average one,
    so the kernel ends that much after its waves, at one SM's rate, 4·d·T·SMs/π per key (held out:
    A100 4.8 → 3.6 %, L40S 8.3 → 7.3 %, B200 7.5 → 6.9 %), plus ``tail_key`` per key: that tile runs
    alone on its SM once the others have drained, so each of its key blocks also pays the
    dependency chain of one CTA's pipeline (K/V block load, QKᵀ MMA, softmax, PV MMA), which a full
    wave hides behind other CTAs' work. TensorRT-LLM's sm80/sm89 flash kernels launch one CTA per
    (query step, head, sequence) in that order (``fused_multihead_attention_v2.h``,
    ``FusedMultiHeadAttentionXMMAKernelV2::run``: grid (steps, h, b)), so a sequence's longest
    tiles are its last. Fitted only where causal rows have chunks longer than a tile.
    Rows with ``causal`` = 0 (a benchmark without the mask: SGLang's H100 tables) give every query
    all kv + q keys, both in F' and in the waves' latency; compute and latency then both scale as
    waves·keys, so such a table alone fixes only their sum per key, not π and wave apart."""
    if not sms:
        return fp / pi_p
    b, q, kv = (df[c].to_numpy(float) for c in ("prefill_seqs", "prefill_q", "prefill_kv"))
    h, d = df["heads"].to_numpy(float), df["n"].to_numpy(float)
    causal = df["causal"].to_numpy(float) > 0 if "causal" in df else np.ones(len(df), bool)
    tiles = b * np.ceil(q / tile)
    padded = 4 * h * d * tile * tiles * np.where(causal, kv + q / 2, kv + q)
    waves = np.ceil(h * tiles / sms)
    keys = np.where(causal, kv + tile / 2, kv + q)  # the wave's tile: its keys beyond the causal diagonal
    if quantized:
        tail = np.where(causal, np.maximum(q - tile, 0.0) / 2, 0.0) * (4 * d * tile * sms / pi_p + tail_key)
        return padded / pi_p * (waves * sms / np.maximum(h * tiles, 1.0)) + waves * wave * keys + tail
    return np.maximum(padded / pi_p, waves * wave * keys)


def attention_times(
    v: np.ndarray, df: pd.DataFrame, params=ATTENTION, sms: int = 0, groups=(2, 32), tile: int = Q_TILE
) -> np.ndarray:
    """Separate kernels: prefill and decode parts add, each with its overhead. One varlen kernel
    (pi_mixed, seq_mixed): a batch with a prefill chunk runs its decodes as one-row query tiles of
    the prefill kernel, 4·h·d·(kv + 1) FLOPs each at π_mixed (π_prefill over the padding of the
    tile) plus seq_mixed per decode; a decode-only batch runs the decode kernel. With "wave" (and
    the GPU's SM count), prefill compute follows ``prefill_compute``'s wave model; with
    "softmax_prefill" (tables of several head dims) each score element also costs 1/ρ on top of its
    4·d FLOPs: the softmax (max, exp, rescale) works per element whatever the head dim, so a head
    dim of 64 runs fewer FLOP/s than one of 128 (FlashAttention-3, Shah et al. 2024, §3: the
    exponentials' throughput is far below the MMAs'; L40S context table: d = 64 rows ran 5 %
    slower per FLOP than the fit of one π gave them). With "l2_prefill_kv" the K/V bytes' resident
    share is of a capacity of their own (``prefill_memory.l2_resident_share``): L40S MHA rows just
    past the L2 (48 heads of 48, d = 128, 16 × 128 tokens, 101 MB) ran 4.9× the time of half their
    bytes, 30 % slower than one shared capacity priced them, while GQA rows of the same working set
    (K/V 4 % of it) kept their residency; fitted 63 MB for K/V, 96 MB for Q/O. Fitted where a
    table holds several head dims (L40S), as row_prefill is: elsewhere it moved nothing held out
    (A100 2.63 → 2.64, B200 4.72 → 4.70, H100 5.89 → 5.87) and cost the 40k-row fit ~1.6 CPU-s."""
    p = dict(zip(params, v))
    fp, bp, fd, bd, n = _cols(df)
    pre = fp > 0
    if "unit" in p:  # B: the KV part of the bytes (Q read, O written: 2·d·b per head and sequence, b = 2)
        decode, d = np.zeros(len(df)), n > 0
        h, hkv, dh = (df[c].to_numpy(float)[d] for c in ("heads", "kv_heads", "n"))
        decode[d] = decode_unit_times(
            [p[q] for q in DECODE_UNITS],
            n[d],
            df["k"].to_numpy(float)[d] + 1.0,
            fd[d],
            bd[d] - 4.0 * dh * n[d] * h,
            h,
            np.maximum(hkv, 1.0),
            sms,
            groups,
            df["kv_alias"].to_numpy(float)[d] if "kv_alias" in df else 0.0,
        )
    elif "seq" in p:
        decode = (
            np.hypot(fd / p["pi_decode"], bd / p["beta_decode"])
            + p["seq"] * n
            + np.where(n > 0, p["overhead_decode"], 0.0)
        )
    else:  # a table of prefill kernels only
        decode = np.zeros(len(df))
    wave = p.get("wave", p.get("wave_q", 0.0))
    pi = (
        p["pi_prefill"]
        if "softmax_prefill" not in p
        else 1.0 / (1.0 / p["pi_prefill"] + 1.0 / (4.0 * df["n"].to_numpy(float) * p["softmax_prefill"]))
    )
    comp = prefill_compute(
        fp,
        df,
        pi,
        wave,  # type: ignore[arg-type]
        sms if ("wave" in p or "wave_q" in p) else 0,
        "wave_q" in p,
        p.get("tail_key", 0.0),
        tile,
    )
    if "beta_prefill_l2" in p:  # the share of the bytes resident in the L2 (capacity l2_prefill) moves at β_L2
        r = l2_resident_share(bp / p["l2_prefill"])
        bkv = prefill_kv_bytes(df) if "beta_prefill_kv" in p else 0.0
        resident = (bp - bkv) * r / p["beta_prefill_l2"]
        dram = (bp - bkv) * (1.0 - r) / p["beta_prefill"]
        if "beta_prefill_kv" in p:  # ... K/V's own share: its capacity l2_prefill_kv
            rk = l2_resident_share(bp / p["l2_prefill_kv"]) if "l2_prefill_kv" in p else r
            resident, dram = (
                resident + bkv * rk / p["beta_prefill_kv_l2"],
                dram + bkv * (1.0 - rk) / p["beta_prefill_kv"],
            )
        if "exposed_prefill" in p:
            rows = df["prefill_seqs"].to_numpy(float) * df["prefill_q"].to_numpy(float) * df["heads"].to_numpy(float)
            comp = overlap_dram(comp, dram + (1.0 - r) * rows * p.get("row_prefill", 0.0), p["exposed_prefill"])
        else:
            comp = comp + dram
        comp = comp + resident
    else:
        comp = comp + bp / p["beta_prefill"]
    prefill = comp + np.where(pre, p["overhead_prefill"], 0.0)
    if "pi_mixed" not in p:
        return prefill + decode
    return np.where(pre, prefill + fd / p["pi_mixed"] + p["seq_mixed"] * n, decode)


def prefill_kv_bytes(df: pd.DataFrame) -> np.ndarray:
    """The K and V part of a prefill row's bytes, 2·2·d·b·h_kv·(kv + q) (the rest is Q read and O
    written, ∝ heads)."""
    return (
        4.0
        * df["n"].to_numpy(float)
        * df["prefill_seqs"].to_numpy(float)
        * df["kv_heads"].to_numpy(float)
        * (df["prefill_q"].to_numpy(float) + df["prefill_kv"].to_numpy(float))
    )


def sampler_times(v: np.ndarray, df: pd.DataFrame) -> np.ndarray:
    return v[0] + v[1] * df["m"].to_numpy(float)


def _start(op_class: str, params, df: pd.DataFrame, t: np.ndarray) -> np.ndarray:
    if op_class == "attention":
        fp, bp, fd, bd, n = _cols(df)
        tmin = float(np.min(t))
        env = lambda q: float(np.max(q[q > 0] / t[q > 0])) if (q > 0).any() else 1.0  # noqa: E731
        seq = tmin / max(1.0, float(np.median(n[n > 0])) if (n > 0).any() else 1.0)
        out = [env(fp), env(bp), 0.5 * tmin]
        if "overhead_decode" not in params:
            pass
        elif "unit" in params:
            out += [
                env(fd) * 0.1,
                env(bd) * 0.5,
                env(bd) * 0.4,
                env(bd) * 2,
                1e7,
                env(bd) * 0.01,
                0.05,
                5e-8,
                tmin,
                2e-8,
                tmin,
                1e-7,
                env(fd) * 0.5,
                5e-7,
                1e7,
                64.0,
                1e-6,
                env(bd) * 2,
            ]
        else:
            out += [env(fd) * 0.1, env(bd), seq, 0.5 * tmin]
        out += [env(fd) * 0.1, seq] if "pi_mixed" in params else []
        out = out + [1e-8] if ("wave" in params or "wave_q" in params) else out
        out = out + [5e-9] if "tail_key" in params else out
        out = out + [env(fp) / 50.0] if "softmax_prefill" in params else out
        out = out + [2 * env(bp), 1e7] if "beta_prefill_l2" in params else out
        out = out + [env(bp), 2 * env(bp)] if "beta_prefill_kv" in params else out
        out = out + [1e7] if "l2_prefill_kv" in params else out
        out = out + [0.5] if "exposed_prefill" in params else out
        return np.array(out + [1e-10] if "row_prefill" in params else out)
    m = df["m"].to_numpy(float)
    return np.array([0.5 * float(np.min(t)), float(np.median(t / m))])


@dataclass(frozen=True)
class ModelFit(ClassFit):
    """A ClassFit whose times come from one of this module's models."""

    units: dict = None  # type: ignore[assignment]
    sms: int = 0
    groups: tuple = (2, 32)  # unit decode model: the group sizes the grouped kernel takes
    q_tile: int = Q_TILE  # prefill wave model: query rows per CTA tile

    def predict(self, df: pd.DataFrame) -> np.ndarray:
        return model_times(self.op_class, self.params, self.values, df, self.sms, self.groups, self.q_tile)


def model_times(
    op_class: str, params, values, df: pd.DataFrame, sms: int = 0, groups=(2, 32), tile: int = Q_TILE
) -> np.ndarray:
    if op_class == "attention":
        return attention_times(values, df, params, sms, groups, tile)
    return sampler_times(values, df)


def _long_causal(df: pd.DataFrame, tile: int = Q_TILE) -> bool:
    """Whether any causal prefill row has a chunk longer than one query tile (the tail's keys)."""
    causal = df["causal"].to_numpy(float) > 0 if "causal" in df else np.ones(len(df), bool)
    return bool((causal & (df["prefill_q"].to_numpy(float) > tile)).any())


def class_params_for(
    op_class: str, df: pd.DataFrame, sms: int = 0, l2: float = 0.0, tile: int = Q_TILE
) -> tuple[str, ...]:
    if op_class == "attention":
        mixed = (df["decode_flops"].to_numpy(float) > 0) & (
            df["flops"].to_numpy(float) > df["decode_flops"].to_numpy(float)
        )
        waves = ("wave",) if sms and (df["prefill_seqs"].to_numpy(float) > 0).any() else ()
        if mixed.any():
            return ATTENTION_VARLEN + waves
        waves = (
            ("wave_q",) + TAIL if waves and l2 and _long_causal(df, tile) else ("wave_q",) if waves and l2 else waves  # type: ignore[assignment]
        )
        pre_d = df["n"].to_numpy(float)[df["prefill_seqs"].to_numpy(float) > 0]
        dims = waves and l2 and len(np.unique(pre_d)) > 1
        waves = waves + SOFTMAX if dims else waves  # type: ignore[assignment]
        # kernel-separate tables: the quantized wave form (with the causal tail's per-key latency where it shows)
        l2p = (
            PREFILL_L2 + PREFILL_KV + (PREFILL_KV_L2 if dims else ()) + PREFILL_DRAM + (PREFILL_ROW if dims else ())
            if waves and l2
            else ()
        )
        if not (df["decode_flops"].to_numpy(float) > 0).any():
            return ATTENTION_UNITS[:3] + waves + l2p
        return ATTENTION_UNITS + waves + l2p if sms and l2 else ATTENTION + waves
    return SAMPLER


def fit_model_class(
    df: pd.DataFrame, op_class: str, form: str, upper: dict, sms: int = 0, l2: float = 0.0, tile: int = 0
) -> ModelFit:
    """Fit one of this module's classes; ``upper`` caps parameters (SI) by their base name (the
    physical bounds); a capped parameter whose fit lands on its cap is reported as clamped; ``sms``
    (the GPU's SM count, 0: unknown) turns on attention's wave model, with ``l2`` (its L2 bytes)
    the unit decode model (``costmodel/decode_units.py``) for tables without mixed batches."""
    tile = tile or Q_TILE
    params = class_params_for(op_class, df, sms, l2, tile)
    if op_class == "attention" and apart(df, params):  # context and generation kernels: two problems
        return fit_apart(df, params, form, upper, sms, l2, tile)
    t = df["time_s"].to_numpy(float)
    if op_class == "attention":  # one float block: the solver reads these columns thousands of times
        df = df[[c for c in ATTENTION_COLUMNS if c in df]].astype(float)
    upper = {
        **upper,
        "exposed_prefill": 1.0,
        "l2_decode": l2 or np.inf,
        "l2_prefill": l2 or np.inf,
        "l2_pass": l2 or np.inf,
        "l2_prefill_kv": l2 or np.inf,
    }
    p0 = _start(op_class, params, df, t)
    for c in (
        "l2_decode",
        "l2_prefill",
        "l2_pass",
        "l2_prefill_kv",
    ):  # start the resident capacity near the spec L2 (the cliff's scale)
        if c in params and l2:
            p0[params.index(c)] = 0.8 * l2
    cap = np.array([upper.get(base_name(p), np.inf) for p in params])
    p0 = np.where(p0 >= cap, 0.5 * cap, p0)
    hi = np.log(cap / p0)
    lo = np.full(len(params), -np.log(1e6))
    groups = (2, 32)
    x0 = np.zeros(len(params))
    if "unit" in params and (df["decode_flops"].to_numpy(float) > 0).any():
        groups, x0 = _grouping(df, op_class, params, p0, lo, hi, t, sms, tile=tile)
        p0 = _split_start(params, p0, groups)  # the final fit starts where the chosen grouping's sample fit ended
    fn = _Residuals(
        lambda x, d: model_times(op_class, params, p0 * np.exp(x), d, sms, groups, tile),
        df,
        t,
        params,
        op_class,
        lo,
        hi,
    )
    solver = (
        {"tr_solver": "lsmr"} if ("unit" in params or "wave_q" in params) else {}
    )  # no SVD per step: fast on 10k rows
    res = least_squares(
        fn,
        np.clip(x0, lo, hi),
        jac=fn.jac,
        bounds=(lo, hi),
        loss=LOSS,
        f_scale=F_SCALE,
        method="trf",
        x_scale=1.0,
        **solver,
    )
    values = p0 * np.exp(res.x)
    units = {p: UNITS[base_name(p)] for p in params}
    active, cov, s2, warns = identify(
        op_class,
        params,
        values,
        lambda v: model_times(op_class, params, v, df, sms, groups, tile),
        res,
        len(t),
        cap,
        units,
    )
    errors = ape_stats(model_times(op_class, params, values, df, sms, groups, tile), t)
    return ModelFit(
        op_class,
        form,
        params,
        values,
        cov,
        float(np.sqrt(s2)),
        active,
        errors,
        tuple(warns),
        units=units,
        sms=sms,
        groups=groups,
        q_tile=tile,
    )


def _split_start(params, p0: np.ndarray, groups) -> np.ndarray:
    """The start under the groups' split: the launch and gen splits' unit_mha is per wave, not per unit."""
    if len(groups) > 2 and groups[2] in ("launch", "gen"):
        p0 = p0.copy()
        p0[params.index("unit_mha")] *= 100.0
    return p0


def _grouping(df, op_class, params, p0, lo, hi, t, sms, sample: int = 2000, tile: int = Q_TILE) -> tuple:
    """The (g_min, g_max, split) of least loss on a sample of the rows: every (g_min, g_max, split)
    of ``GROUPINGS``, then where MMHA runs (launch, gen) its blocks per SM among ``MMHA_OCCUPANCY``
    (a fourth element where not the first); and its sample fit's solution (ln(p/p0) under that
    split's start). Not the grouping under the flow split first and its split after: B200's
    (2, 16) and (1, 16) tie under flow (sample loss 7.90 / 7.91 on one draw) while only (1, 16)
    suits the gen split (4.1 against 10.0), so that order cost it the gen split on one draw of three
    (held out 6.5 against 4.8 there). Kernel-separate tables come here with their decode rows alone
    (``attention_apart``)."""
    idx = np.random.default_rng(0).permutation(len(t))[:sample]
    sub, ts = df.iloc[idx].reset_index(drop=True), t[idx]

    def cost(groups):
        q0 = _split_start(params, p0, groups)
        fn = _Residuals(
            lambda x, d: model_times(op_class, params, q0 * np.exp(x), d, sms, groups, tile),
            sub,
            ts,
            params,
            op_class,
            lo,
            hi,
        )
        r = least_squares(
            fn,
            np.zeros(len(params)),
            jac=fn.jac,
            bounds=(lo, hi),
            loss=LOSS,
            f_scale=F_SCALE,
            method="trf",
            ftol=1e-3,
            tr_solver="lsmr",
        )
        return r.cost, groups, r.x

    best = min((cost(g) for g in GROUPINGS), key=lambda c: c[0])
    if best[1][2] in ("launch", "gen"):  # MMHA's occupancy: 256-thread blocks per SM (decode_launch.mmha_launch)
        best = min([best] + [cost(best[1][:3] + (b,)) for b in MMHA_OCCUPANCY[1:]], key=lambda c: c[0])
    return best[1], best[2]


PREFILL_ONLY = {
    "pi_prefill",
    "beta_prefill",
    "overhead_prefill",
    "wave",
    "wave_q",
    "tail_key",
    "softmax_prefill",
    "beta_prefill_l2",
    "l2_prefill",
    "beta_prefill_kv",
    "beta_prefill_kv_l2",
    "l2_prefill_kv",
    "exposed_prefill",
    "row_prefill",
}


def touched_rows(op_class: str, params, df: pd.DataFrame) -> list:
    """Per parameter, the rows whose time can depend on it (None: all). Kernel-separate attention
    tables (no varlen parameters): a prefill parameter prices only rows with a prefill part, a
    decode one only rows with decodes; every other row's part is exactly 0 whatever its value."""
    if op_class != "attention" or "pi_mixed" in params:
        return [None] * len(params)
    cols = lambda *c: np.any([df[k].to_numpy(float) > 0 for k in c if k in df], axis=0)  # noqa: E731
    pre = np.flatnonzero(
        cols("prefill_seqs", "prefill_q", "prefill_kv")
        | (df["flops"].to_numpy(float) > df["decode_flops"].to_numpy(float))
        | (df["bytes"].to_numpy(float) > df["decode_bytes"].to_numpy(float))
    )
    dec = np.flatnonzero(cols("seqs", "decode_flops", "decode_bytes"))
    return [pre if p in PREFILL_ONLY else dec for p in params]


class _Residuals:
    """ln(t_model/t) of x = ln(p/p0) for least_squares, with the same 2-point Jacobian scipy's
    finite differences take (its steps, within the bounds; the same columns to the bit), each
    parameter's column evaluated only on the rows it touches (``touched_rows``); context
    attention's rows of SGLang's collector in relative error instead (``relative_rows``)."""

    def __init__(self, times, df: pd.DataFrame, t: np.ndarray, params, op_class: str, lo, hi):
        self.times, self.df, self.t = times, FloatColumns(df), t
        self.lo, self.hi = (
            np.broadcast_to(lo, len(params)).astype(float),
            np.broadcast_to(hi, len(params)).astype(float),
        )
        self.rel = relative_rows(op_class, params, df)
        subs = {}
        self.rows = []  # type: ignore[var-annotated]
        for r in touched_rows(op_class, params, df):
            if r is None or len(r) == len(t):
                self.rows.append(None)  # type: ignore[arg-type]
                continue
            key = r.tobytes()
            if key not in subs:
                subs[key] = (r, FloatColumns(df.iloc[r]), t[r], None if self.rel is None else self.rel[r])
            self.rows.append(subs[key])
        self.last = None

    def __call__(self, x: np.ndarray) -> np.ndarray:
        f = _residual(self.times(x, self.df), self.t, self.rel)
        self.last = (np.array(x, float), f)  # type: ignore[assignment]
        return f

    def jac(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, float)
        f0 = self.last[1] if self.last is not None and np.array_equal(self.last[0], x) else self(x)
        h = np.sqrt(np.finfo(float).eps) * ((x >= 0).astype(float) * 2 - 1) * np.maximum(1.0, np.abs(x))
        h = _step_in_bounds(x, h, self.lo, self.hi)
        jt = np.empty((len(x), len(f0)))
        for i, rows in enumerate(self.rows):
            x1 = x.copy()
            x1[i] = x[i] + h[i]
            if rows is None:
                df = _residual(self.times(x1, self.df), self.t, self.rel) - f0
            else:
                idx, sub, ts, rel = rows
                df = np.zeros(len(f0))
                df[idx] = _residual(self.times(x1, sub), ts, rel) - f0[idx]
            jt[i] = df / (x1[i] - x[i])
        return jt.T


def _residual(model: np.ndarray, t: np.ndarray, rel) -> np.ndarray:
    """ln(model/t), or model/t - 1 on the rows ``rel`` marks."""
    if rel is None:
        return np.log(model / t)
    return np.where(rel, model / t - 1.0, np.log(model / t))


def relative_rows(op_class: str, params, df: pd.DataFrame):
    """The rows fitted in relative error (model/t - 1) instead of ln(model/t): context-attention
    rows timed without the causal mask in kernel-separate tables, i.e. SGLang's collector (Triton's
    do_bench around a Python call: ``importers/aiconfigurator.py``); None where there are none. The
    two agree to first order; they part on a population of rows timed far above their kernel, as
    that H100 table's small prompts are (3.5-5, ~24 and 140-250 µs for ~1-10 µs of work, in no order
    of problem size: ``benchmarks/bench_kernels.py``), whose centre in log error (their geometric
    mean) prices the fast ones several times over, while their centre in relative error, what the
    error report measures, sits near the fastest. TensorRT-LLM's tables (CUDA-graph replays) gain
    nothing from it held out (A100 2.63 → 2.62, B200 4.73 → 4.72, L40S 4.99 → 4.97) and their
    fits take twice the solver steps, so they keep log error."""
    if op_class != "attention" or "pi_mixed" in params or "causal" not in df:
        return None
    pre = (
        (df["prefill_seqs"].to_numpy(float) > 0)
        & ~(df["decode_flops"].to_numpy(float) > 0)
        & ~(df["causal"].to_numpy(float) > 0)
    )
    return pre if pre.any() else None


def _step_in_bounds(x, h, lb, ub):
    """scipy's one-sided finite-difference step kept inside the bounds (``_numdiff._adjust_scheme_to_bounds``)."""
    if np.all((lb == -np.inf) & (ub == np.inf)):
        return h
    h = h.copy()
    lower, upper = x - lb, ub - x
    x1 = x + h
    violated = (x1 < lb) | (x1 > ub)
    fitting = np.abs(h) <= np.maximum(lower, upper)
    h[violated & fitting] *= -1
    forward = (upper >= lower) & ~fitting
    h[forward] = upper[forward]
    backward = (upper < lower) & ~fitting
    h[backward] = -lower[backward]
    return h


class FloatColumns:
    """A table's columns as float arrays, read as a DataFrame's are (``df[c].to_numpy(float)``,
    ``c in df``, ``len(df)``): the solver prices the same rows thousands of times, and pandas'
    column lookup costs more than the model's arithmetic."""

    def __init__(self, df: pd.DataFrame):
        self._df, self._cols, self._len = df, {}, len(df)  # type: ignore[var-annotated]

    def __getitem__(self, c: str) -> _Column:
        if c not in self._cols:
            col = self._df[c]
            self._cols[c] = _Column(col.to_numpy(float) if pd.api.types.is_numeric_dtype(col) else col.to_numpy(str))
        return self._cols[c]

    def __contains__(self, c: str) -> bool:
        return c in self._df

    def __len__(self) -> int:
        return self._len


class _Column:
    def __init__(self, a: np.ndarray):
        self._a = a

    def to_numpy(self, dtype=None) -> np.ndarray:
        return self._a
