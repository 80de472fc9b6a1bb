"""The unit decode model's "launch" split (``decode_units.SPLITS``): TensorRT-LLM's own dispatch
and launch rules for its two decode kernels, per layer.

Which kernel: a grouped configuration (g_min ≤ g ≤ g_max) runs XQA only when XQA's blocks fill the
GPU, n·h_kv·max(1, ⌊kv/128⌋)·4 ≥ SMs (``decoderXQAImplJIT.cpp`` DecoderXQAImplJIT::mayHavePerfGain,
kEnableMinBlockFactor = 4); otherwise, and for every other g, MMHA runs one unit per (sequence,
query head). XQA is priced as in the "xqa" split, except that each block's first K_h keys
(``hidden_keys``, counted at head dim 128: K_h·128/d keys at d) load under its wave's latency, and
a wave's latency grows with its query heads padded to 16-row MMA tiles (``xqa_rows``).
MMHA (``decoderMaskedMultiheadAttentionLaunch.h``, mmha_launch_kernel_ex and multi_block_grid_setup):
u = n·h units; with b blocks of 256 threads per SM (``MMHA_OCCUPANCY``, fitted), a grid short of
b·SMs blocks gets larger blocks, factor = min(⌈b·SMs/u⌉, b): T = 256·factor rounded down to 256,
512 or 1024 threads, P = ⌊256·b/T⌋ of them per SM; each unit splits into m = clip(⌈SMs·P/u⌉, 1,
min(⌈(kv + 1)/L⌉, ⌈SMs/u⌉)) blocks, run in W = ⌈u·m/(SMs·P)⌉ waves; L = ⌈T/t_v⌉·8 keys per KV
loop, t_v = d·2/16 threads per value.
  t_mmha  = √((F/π_mha)² + mem² + (W·(u_mha + τ·R(L, T)/64))²) + (m·c_comb + c_red)·[m > 1] + o_mha
u_mha is one wave's fixed latency, τ·R/64 a block's walk over the 256-byte key rows its loop loads
(``mmha_walk``), bound at many waves by the rate issued rows are served at (``beta_issue``):
max(W·τ·R/64, u·m·R·256 B/β_iss). c_red (``combine_fixed``, both kernels) is a split launch's
reduction, paid once; c_comb the combine per block. π_mha is MMHA's own rate (CUDA cores). Over
AIConfigurator's K-only tables MMHA's value pass re-reads key lines from the L2 while they fit
(``l2_pass``); serving reads distinct K and V, with no second pass.

The measured rows behind each term and the held-out figures before and after it:
docs/kernel-notes.md.
"""

from __future__ import annotations

import math

import numpy as np

from .decode_units import (
    MMHA_BLOCKS_SM,
    MMHA_THREAD_BLOCK,
    MMHA_WALK_KEYS,
    XQA_MIN_BLOCKS,
    XQA_MIN_TOKENS,
    xqa_block_count,
    xqa_blocks,
)

WALK_BYTES = 16.0 * 16.0 * MMHA_WALK_KEYS  # bytes of one walk unit: 64 key rows of 16 threads × 16 B


def xqa_dispatched(n, h_kv, kv, sms):
    """Whether TensorRT-LLM runs XQA (not MMHA) for a grouped configuration (numpy or float)."""
    return n * h_kv * np.maximum(np.floor(kv / XQA_MIN_TOKENS), 1.0) * XQA_MIN_BLOCKS >= sms


def mmha_blocks(groups) -> float:
    """MMHA's 256-thread blocks per SM (its occupancy) from the groups tuple's fourth element (4 when absent)."""
    return float(groups[3]) if len(groups) > 3 else MMHA_BLOCKS_SM


def mmha_launch(units, kv, sms, blocks=MMHA_BLOCKS_SM, tpv=16.0):
    """MMHA's (threads per block, blocks per SM, blocks per unit) for u units over kv keys (numpy),
    with ``blocks`` 256-thread blocks per SM and tpv threads per value (16 at d = 128, 8 at d = 64)."""
    factor = np.minimum(np.ceil(sms * blocks / np.maximum(units, 1.0)), blocks)
    threads = np.where(factor >= 4.0, 1024.0, np.where(factor >= 2.0, 512.0, 256.0))
    per_sm = np.floor(MMHA_THREAD_BLOCK * blocks / threads)
    cap = np.minimum(
        np.maximum(np.ceil((kv + 1.0) / (threads / tpv * 8.0)), 1.0), np.ceil(sms / np.maximum(units, 1.0))
    )
    split = np.clip(np.ceil(sms * per_sm / np.maximum(units, 1.0)), 1.0, cap)
    return threads, per_sm, split


def mmha_walk(keys, threads, tpk=16.0):
    """MMHA's key walk over a block's cached keys (``keys`` = kv_loop_length, the current one
    apart), in latencies of 16 KB: the key rows its threads load (``decoderMaskedMultiheadAttentionTemplate.h``,
    16-bit: tpk = threads_per_key = d·2/16 threads a key, 16 at d = 128, 8 at d = 64). T/tpk keys a
    step, K_LOOP_UNROLL = 4 steps an iteration of 4·T/tpk keys, up to keys rounded up to
    UNROLLED_K_PER_WARP = 4·32/tpk; a thread whose first key is past the end loads nothing, the
    others load all 4 rows of each iteration they start, clamped to the last key
    (valid_time_now = min(..., kv_token_idx_bound)); an iteration with no more keys left than one
    warp's unrolled span (UNROLLED_K_PER_WARP) costs those keys' rows alone, its clamped loads
    falling on lines already in flight: at d = 128, T = 256, 2 to 8 keys cost 8 rows, 9 to 64 keys
    64; at d = 64 the steps come at 16 and 128. Chosen on the fits: A100 MMHA rows of 8,192
    units (32 heads, 256 sequences) take 135-151 µs at 1-7 keys, 194-203 at 15-63 and 265 at 127,
    a step from 7 to 15 keys as large as from 63 to 127, which 32 rows at 8 keys (half of 64)
    priced +5 to +13 % at 1-7 keys and -11 to -20 % at 15-31; in sample on the decode rows A100
    5.31 → 5.16, L40S 6.98 → 6.90, held out (seeds 0-2) A100 6.69 / 5.47 / 5.81 → 5.25 / 5.31 /
    5.65, L40S 7.50 / 7.10 / 6.90 → 7.46 / 6.98 / 6.90. Why the clamped loads past one warp's
    span cost as distinct rows is not established. Numpy or float."""
    per_warp = 128.0 / tpk
    end = np.ceil(keys / per_warp) * per_warp
    groups = threads / tpk
    full = np.floor(end / (4.0 * groups))
    part = end - 4.0 * groups * full
    part = np.where(part <= per_warp, part, 4.0 * np.minimum(part, groups))
    return (4.0 * groups * full + part) * tpk / (16.0 * MMHA_WALK_KEYS)


def key_threads(F, units, kv):
    """MMHA's threads per key, d·2/16 capped at 32 (a power of two), from the FLOPs 4·d·u·kv of u
    per-head units over kv keys (numpy or float)."""
    return np.minimum(np.exp2(np.round(np.log2(np.maximum(F / (32.0 * np.maximum(units * kv, 1.0)), 1.0)))), 32.0)


def launch_times(v, n, kv, F, B, h, h_kv, sms: int, groups, alias=0.0):
    """Seconds per layer under the launch split (numpy arrays or floats; ``decode_unit_times``'s arguments)."""
    pi, beta, beta_mha, beta_l2, l2, cta, cq, unit, over, unit_mha, over_mha, comb, pi_mha, loop, l2p, hide, comb0 = v[
        :17
    ]
    g = h / h_kv
    grouped = (g >= groups[0]) & (g <= groups[1]) & xqa_dispatched(n, h_kv, kv, sms)
    units = np.where(grouped, n * h_kv, n * h)
    tpk = key_threads(F, n * h, kv)
    threads, per_sm, msplit = mmha_launch(units, kv, sms, mmha_blocks(groups), tpk)
    split = np.where(grouped, xqa_blocks(n, units, kv, sms), msplit)
    slots = np.where(grouped, sms, sms * per_sm)
    waves = np.ceil(units * split / slots)
    flow = units * split / waves * cta * np.where(grouped, 1.0, threads / 256.0)
    add = np.where(grouped, waves * unit * (1.0 + cq * xqa_rows(g)), 0.0)
    walk = mmha_walk(np.maximum(kv - 1.0, 0.0) / split, threads, tpk)
    issued = units * split * walk * WALK_BYTES / issue_rate(v)
    fixed = np.where(grouped, 0.0, waves * unit_mha + np.maximum(waves * loop * walk, issued))
    x = np.maximum(B / l2, 1.0) ** 2
    r = 1.0 / (x * x * x)
    reread = np.where(grouped, 0.0, B * (g - 1.0))
    mem = B * (1.0 - r) / np.minimum(np.where(grouped, beta, beta_mha), flow) + (B * r + reread) / np.minimum(
        beta_l2, flow
    )
    blocks = np.maximum(units * split, 1.0)
    w = (B / blocks * np.minimum(blocks, slots) / l2p) ** 2
    rw = 1.0 / (1.0 + w * w * w)
    mem = mem * np.where(
        grouped, np.maximum(1.0 - hide * (16.0 / tpk) * split / kv, 0.0), 1.0
    )  # each XQA block's first bytes: under its latency
    mem = mem + np.where(
        grouped, 0.0, alias * B * ((1.0 - rw) / np.minimum(beta_mha, flow) + rw / np.minimum(beta_l2, flow))
    )
    c = F / np.where(grouped, pi, pi_mha)
    comb = np.where(split > 1.0, split * comb + comb0, 0.0)
    return np.sqrt(c * c + mem * mem + fixed * fixed) + add + comb + np.where(grouped, over, over_mha)


def launch_time(v, n: float, kv: float, F: float, B: float, h: float, h_kv: float, sms: int, groups) -> float:
    """``launch_times`` on plain floats for serving (no K-only alias), the same arithmetic."""
    pi, beta, beta_mha, beta_l2, l2, cta, cq, unit, over, unit_mha, over_mha, comb, pi_mha, loop, l2p, hide, comb0 = v[
        :17
    ]
    g = h / h_kv
    grouped = (
        groups[0] <= g <= groups[1] and n * h_kv * max(math.floor(kv / XQA_MIN_TOKENS), 1.0) * XQA_MIN_BLOCKS >= sms
    )
    if grouped:
        units = n * h_kv
        split = xqa_block_count(n, units, kv, sms)
        waves = math.ceil(units * split / sms)
        flow = units * split / waves * cta
        add, fixed = waves * unit * (1.0 + cq * (16.0 * (math.ceil(g / 16.0) - 1.0))), 0.0
    else:
        units, nb = n * h, mmha_blocks(groups)
        factor = min(math.ceil(sms * nb / max(units, 1.0)), nb)
        threads = 1024.0 if factor >= 4.0 else (512.0 if factor >= 2.0 else 256.0)
        per_sm = math.floor(MMHA_THREAD_BLOCK * nb / threads)
        tpk = _key_threads(F, units, kv)
        split = min(
            max(math.ceil(sms * per_sm / max(units, 1.0)), 1.0),
            min(max(math.ceil((kv + 1.0) / (threads / tpk * 8.0)), 1.0), math.ceil(sms / max(units, 1.0))),
        )
        waves = math.ceil(units * split / (sms * per_sm))
        flow = units * split / waves * cta * (threads / 256.0)
        walk = _walk(max(kv - 1.0, 0.0) / split, threads, tpk)
        lat, issued = waves * loop * walk, units * split * walk * WALK_BYTES / issue_rate(v)
        add, fixed = 0.0, waves * unit_mha + (lat if lat >= issued else issued)
    x = max(B / l2, 1.0) ** 2
    r = 1.0 / (x * x * x)
    reread = 0.0 if grouped else B * (g - 1.0)
    mem = B * (1.0 - r) / min(beta if grouped else beta_mha, flow) + (B * r + reread) / min(beta_l2, flow)
    if grouped:
        mem *= max(1.0 - hide * (16.0 / _key_threads(F, n * h, kv)) * split / kv, 0.0)
    c = F / (pi if grouped else pi_mha)
    comb = split * comb + comb0 if split > 1.0 else 0.0
    return math.sqrt(c * c + mem * mem + fixed * fixed) + add + comb + (over if grouped else over_mha)


def issue_rate(v) -> float:
    """The rate the SMs' loads serve the key rows MMHA's blocks issue (``beta_issue``; the L2's
    rate, beta_l2_decode, for profiles fitted before it)."""
    return v[17] if len(v) > 17 and v[17] else v[3]


def _walk(keys: float, threads: float, tpk: float) -> float:
    """``mmha_walk`` on floats."""
    per_warp = 128.0 / tpk
    end = math.ceil(keys / per_warp) * per_warp
    groups = threads / tpk
    full = math.floor(end / (4.0 * groups))
    part = end - 4.0 * groups * full
    part = part if part <= per_warp else 4.0 * min(part, groups)
    return (4.0 * groups * full + part) * tpk / (16.0 * MMHA_WALK_KEYS)


def _key_threads(F: float, units: float, kv: float) -> float:
    """``key_threads`` on floats."""
    return min(2.0 ** round(math.log2(max(F / (32.0 * max(units * kv, 1.0)), 1.0))), 32.0)


def xqa_rows(g):
    """XQA's query rows past a block's first 16-row MMA tile: its g query heads padded to whole tiles,
    less the first (numpy or float; the first tile's cost is the wave latency itself)."""
    return 16.0 * (np.ceil(g / 16.0) - 1.0)
