"""The unit decode model's "launch" split (``decode_units.SPLITS``): TensorRT-LLM's own dispatch
and launch rules for its two decode kernels, per layer.

Which kernel: a grouped configuration (g_min ≤ g ≤ g_max) runs XQA only when XQA's blocks fill the
GPU, n·h_kv·max(1, ⌊kv/128⌋)·4 ≥ SMs (``decoderXQAImplJIT.cpp`` DecoderXQAImplJIT::mayHavePerfGain,
kEnableMinBlockFactor = 4); otherwise, and for every other g, MMHA runs one unit per (sequence,
query head). XQA's blocks are ``xqa_blocks`` in waves of one per SM, as in the "xqa" split, except
that each block's first K_h keys (``hidden_keys``) load under its wave's latency: the grouped memory
time is scaled by max(0, 1 - K_h·(128/d)·m/kv). On A100 (32 query / 4 KV heads, 512 sequences: 131.8,
136.0, 142.3, 180.2, 242.5 µs at 2, 64, 128, 256, 512 keys) the first ~128 keys cost ~10 µs and
each later 256 ~60 µs, the HBM rate; the flat part is the waves' latency alone (fitted K_h: A100
~95 keys, L40S ~37). K_h counts keys of d = 128: the loads a block has in flight under its latency
are bytes, so at head dim d it hides K_h·128/d keys (L40S, d = 64 and 128: XQA at many units over
127-511 keys was priced 10-30 % slow at d = 64 and within a few % at d = 128 with one K_h in keys;
held out, grouping fixed, L40S 6.29 → 6.03; A100 and B200 have d = 128 alone).
MMHA (``decoderMaskedMultiheadAttentionLaunch.h``, mmha_launch_kernel_ex and multi_block_grid_setup):
u = n·h units; with b blocks of 256 threads per SM (cudaOccupancyMaxActiveBlocksPerMultiprocessor,
register-limited; its note: 32 warps per SM, b = 4), a grid short of b·SMs blocks gets larger
blocks, factor = min(⌈b·SMs/u⌉, b): T = 256·factor rounded down to 256, 512 or 1024 threads,
P = ⌊256·b/T⌋ of them per SM; each unit splits into m = clip(⌈SMs·P/u⌉, 1, min(⌈(kv + 1)/L⌉,
⌈SMs/u⌉)) blocks, run in W = ⌈u·m/(SMs·P)⌉ waves. L = ⌈T/t_v⌉·8 keys per KV loop, t_v = d·2/16
threads per value (16-bit: 16 at d = 128, 8 at d = 64), over tlength + 1 keys; ⌈SMs/u⌉ is the
split buffers' size, getMaxNumSeqLenTile's one 1,024-thread block per SM (AttentionOp, "we only
want one wave of blocks"), which multi_block_grid_setup clamps the balanced split to. On A100
(MHA, d = 128) 192 units run 31-127 keys in 14.1-14.4 µs, as 96 units do in one wave, not as 128
units in two (21.7-26.2 µs): ⌈216/192⌉ = 2 blocks per unit would be two waves; 64 units take 14.8
µs at 255 keys and 33.5 at 511 (⌈513/512⌉ = 2 blocks: 128 in two waves), 48 units 20.3 and 35.9 at
511 and 1,023 (2, then 3 blocks: 96 in one wave, 144 in two), 32 units 21.8 and 39.2 at 1,023 and
2,047 (3, then 4); on L40S every MHA configuration of few units steps up at 511 keys at d = 128
(8.5 → 11.7 µs: the split launch's reduction) and at 1,023 at d = 64 (8.4 → 11.6: L = 1,024).
Held out (seeds 0-2, the grouping fixed at the shipped one's, beside beta_issue below): A100
5.08 → 4.96, L40S 6.50 → 6.29 (the one-wave cap alone 6.45; tlength + 1 without the head dim's
loop 6.56), B200 4.74 → 4.70. b is the fit's (``MMHA_OCCUPANCY``): A100 and L40S follow b = 4 (in sample on the decode rows
alone, b = 3: A100 6.9 → 7.4, L40S 8.4 → 9.7), B200's MMHA fallback b = 3 (6.2 → 5.0; b = 2: 5.9):
there 32 query heads on one KV head take 8.8 µs at 2 keys over 128 units (512-thread blocks, one
wave), 14.7 over 256 (two waves) and over 512 (256-thread blocks, three per SM: two waves), where
b = 4 gives 256 units one wave of 512-thread blocks, two per SM.
  t_mmha  = √((F/π_mha)² + mem² + (W·(u_mha + τ·R(L, T)/64))²) + (m·c_comb + c_red)·[m > 1] + o_mha
c_red (``combine_fixed``, both kernels) is a split launch's reduction, paid once: in multi-block
mode each block writes its partial max, sum and output, and the last block of a unit (an atomic
counter, mmha's block_counter / XQA's semaphores) reloads them and merges, a dependent chain after
the key walk that no other block overlaps (fitted c_red ~1.7 µs on A100, ~1.2 µs on L40S, against
~0.4 and ~0.1 µs per block for c_comb).
At many waves the walk is bound by the rate the rows every block issues (clamped loads included)
are served, not by one block's latency: W·τ·R/64 becomes max(W·τ·R/64, u·m·R·256 B/β_iss)
(A100 MMHA, 32 heads, 8,192 units: 137, 198, 265 µs at R = 8, 64, 128 rows, +1.07 µs per row, 134
MB of rows per 68 µs, ~2 TB/s, against τ ~0.9 µs per wave of 64 rows at small grids). Held out
(seeds 0-2) A100 5.4/3.7/12.1 → 5.3/3.7/11.1, L40S 6.6/4.7/13.3 → 6.5/4.6/13.1, B200 4.8 → 4.7
(at the HBM rate β_mha instead: A100 5.6). β_iss (``beta_issue``) is that rate, fitted apart
from the L2-resident KV's β_L2: A100, 8,192 units, 7 → 15 keys (64 more rows a block) +43 µs and
63 → 127 +63 µs, 134 MB of rows each, 2-3 TB/s, where the shared β_L2 fitted 4.6 TB/s and
priced 15-31 keys 10-13 % fast (held out, grouping fixed: A100 5.31 → 5.08, L40S 6.52 → 6.50,
B200 4.74 → 4.74). Fitted on every decode row: A100 β_iss 3.3 TB/s, and β_L2 then leaves its
range (463 TB/s: the resident bytes' time is the issue term's), L40S 8.4 and 23 TB/s.
u_mha is one wave's fixed latency and τ·R/64 a block's walk over its L = (kv - 1)/m cached keys:
R(L, T) the key rows its threads load, in 256-byte rows (``mmha_walk``: the loop's T/4-key iterations, each thread
group of 16 loading 4 rows of every iteration it starts, so 2-8 keys load 32 rows at T = 256 and
16-64 keys 64; A100, 32 heads, 8,192 units: 135, 140, 151, 194, 198, 203 µs at 2 to 64 keys). With
kv/m in place of R (before): in sample on the decode rows A100 6.1 → 5.4 (the 64-key dip of
small grids, -16 %, gone), held out (seeds 0-2) A100 6.2 → 6.0, L40S 7.7 → 7.4; with the head
dim's threads per key (L40S's d = 64 rows step at 16 → 32 keys, not 8 → 16): L40S in sample 7.5 →
7.2, held out 7.4 → 7.2. τ per 16 KB of rows (64 rows at d = 128) whatever the block's size: the larger blocks a small grid gets do not walk their keys faster.
Priced per pass of T/16 keys (16 threads per value), 1,024-thread blocks ran slow and 256-thread ones
fast (A100 MMHA rows at 64-512 keys: -9 to -14 % and +9 to +14 %; L40S at 512-2,047 keys: -14 %
and +10 to +18 %); with a second latency per pass growing with T/1024 the fit sends the per-pass
one to ~0 (A100 8e-8 s against 8.5e-7, L40S 1e-10 against 3.6e-7), i.e. to this form (in sample
on the decode rows alone: A100 6.9 → 6.1, L40S 8.35 → 7.7, B200 5.0 either way). τ (~0.9 µs on
A100, ~ a DRAM round trip) is what 4–96 units over 512–2,047 keys cost on an A100 (19–22 µs against
11 µs at one key), far above their bytes. MMHA reads all keys (QK) before all values (PV): in AIConfigurator's
K-only tables (``importers/aiconfigurator.k_only``, rows with kv_alias = 1) the value pass reads the
key lines again, from the L2 while the resident blocks' key spans fit, W_r = B/(u·m)·min(u·m, SMs·P):
share r_w = 1/(1 + (W_r/C_p)⁶) at β_L2, the rest from HBM. On A100 MMHA rows over a few hundred
keys run faster than their key bytes at the HBM rate allows twice, and at long keys at half the rate
of one read. The key bytes' resident share is that of a looping stream under a replacement policy
that keeps what fits: r = min(1, (C/B)⁶), whole up to the capacity (the unit model's 1/(1 + (B/C)⁶)
halves it there). L40S rows whose keys fill its 96 MiB L2 exactly (48 heads, 8 sequences × 1,023
keys: 101 MB, 52 µs; 2,047 keys: 490 µs) ran at L2 speed while priced 44 % slow in log (held-out
rows at B/C in (0.98, 1.02]: 83 % MAPE, a tenth of its error). Held out (seeds 0-2) L40S 7.46 /
6.98 / 6.90 → 6.64 / 6.73 / 6.50, A100 5.25 / 5.31 / 5.65 → 5.33 / 5.30 / 5.71, B200 4.9 → 4.8;
the same form for the value pass's share (``l2_pass``) gave L40S 6.47 but A100 6.2, not kept.
Serving reads distinct K and V (B counts both; alias = 0): no second pass. π_mha is
MMHA's own rate (CUDA cores, not XQA's tensor cores). Grouped rows are priced as in the "xqa" split,
except that a wave's latency grows with XQA's query rows past its first 16-row MMA tile, its g heads
padded to whole tiles (``xqa_rows``), not with g: A100 at 8,192 keys runs g = 2 to 16 alike (4-128 units: within
2 %) and g = 24, 32 18-22 % slower (held out A100 6.0 → 6.0, L40S 7.2 → 7.2, per draw A100 6.62 / 5.62 / 5.75 → 6.69 / 5.47 / 5.81; in sample 5.4 → 5.3,
7.2 → 7.0).
"""
from __future__ import annotations

import math

import numpy as np

from .decode_units import MMHA_BLOCKS_SM, MMHA_THREAD_BLOCK, MMHA_WALK_KEYS, XQA_MIN_BLOCKS, XQA_MIN_TOKENS, xqa_block_count, xqa_blocks


WALK_BYTES = 16.0 * 16.0 * MMHA_WALK_KEYS   # bytes of one walk unit: 64 key rows of 16 threads × 16 B


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
    cap = np.minimum(np.maximum(np.ceil((kv + 1.0) / (threads / tpv * 8.0)), 1.0), np.ceil(sms / np.maximum(units, 1.0)))
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
    pi, beta, beta_mha, beta_l2, l2, cta, cq, unit, over, unit_mha, over_mha, comb, pi_mha, loop, l2p, hide, comb0 = v[:17]
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
    mem = B * (1.0 - r) / np.minimum(np.where(grouped, beta, beta_mha), flow) + (B * r + reread) / np.minimum(beta_l2, flow)
    blocks = np.maximum(units * split, 1.0)
    w = (B / blocks * np.minimum(blocks, slots) / l2p) ** 2
    rw = 1.0 / (1.0 + w * w * w)
    mem = mem * np.where(grouped, np.maximum(1.0 - hide * (16.0 / tpk) * split / kv, 0.0), 1.0)   # each XQA block's first bytes: under its latency
    mem = mem + np.where(grouped, 0.0, alias * B * ((1.0 - rw) / np.minimum(beta_mha, flow) + rw / np.minimum(beta_l2, flow)))
    c = F / np.where(grouped, pi, pi_mha)
    comb = np.where(split > 1.0, split * comb + comb0, 0.0)
    return np.sqrt(c * c + mem * mem + fixed * fixed) + add + comb + np.where(grouped, over, over_mha)


def launch_time(v, n: float, kv: float, F: float, B: float, h: float, h_kv: float, sms: int, groups) -> float:
    """``launch_times`` on plain floats for serving (no K-only alias), the same arithmetic."""
    pi, beta, beta_mha, beta_l2, l2, cta, cq, unit, over, unit_mha, over_mha, comb, pi_mha, loop, l2p, hide, comb0 = v[:17]
    g = h / h_kv
    grouped = groups[0] <= g <= groups[1] and n * h_kv * max(math.floor(kv / XQA_MIN_TOKENS), 1.0) * XQA_MIN_BLOCKS >= sms
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
        split = min(max(math.ceil(sms * per_sm / max(units, 1.0)), 1.0),
                    min(max(math.ceil((kv + 1.0) / (threads / tpk * 8.0)), 1.0), math.ceil(sms / max(units, 1.0))))
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
