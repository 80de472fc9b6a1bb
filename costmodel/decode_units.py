"""Decode (generation) attention from the units of work its kernel runs, per layer.

TensorRT-LLM's decode kernels take one of two shapes (AIConfigurator's collector,
``collector/trtllm/collect_attn.py``, notes the grouped kernel's limit of 32 query heads per KV
head in a thread block):
  grouped  (XQA; 1 < g = h/h_kv ≤ 32): one unit per (sequence, KV head) serves its g query heads,
           so each KV head is read once;
  per-head (MMHA; g = 1, or g > 32): one unit per (sequence, query head); a KV head shared by g
           query heads is read g times, all but the first from the L2.
With n sequences of mean length kv, B the KV bytes of the layer, F its FLOPs (4·h·d·Σ(kv + 1)):
  units    = n·h_kv (grouped) or n·h (per-head); q = g (grouped) or 1 query heads per unit
  r        = 1/(1 + (B/C)⁶)                     (share of B resident in the L2, C ≤ the spec L2)
  t_mem    = B·(1-r)/min(β_k, flow) + (B·r + B_re)/min(β_L2, flow),  B_re = (g-1)·B per-head, else 0
  t        = √((F/π)² + t_mem² + t_fix²) + t_wave + m·c_comb·[m > 1] + o_k
where m is the thread blocks per unit (split-KV "multi-block" mode) and c_comb the cost of combining
a split unit's m partial results (the last block's merge of their softmax sums), per block. How m
and the flow are found is the ``split`` the fit picks among ``SPLITS``:
  flow  m = clip(⌊SMs/units⌋, 1, ⌈kv/256⌉), flow = units·m·β_cta (Little's law: bytes in flight per
        thread block), t_fix = units·u_k·(1 + c_q·q), t_wave = 0;
  xqa   TensorRT-LLM's own block counts. Grouped (XQA, ``decoderXQAImplCommon.h``
        computeMultiBlockCount; constants in ``decoderXQAConstants.h``): m = ⌊kv/128⌋, at most
        round(√(8m)), cut to ⌊m·8/w⌋ when the w = units·m/SMs waves exceed kTargetWaveFactor = 8, at
        most 6000/n sub-sequences; per-head (MMHA, ``decoderMaskedMultiheadAttentionLaunch.h``
        multi_block_grid_setup): m = clip(⌈SMs/units⌉, 1, ⌈kv/128⌉). The units·m blocks run in
        W = ⌈units·m/SMs⌉ waves of one block per SM: flow = units·m/W·β_cta; grouped t_wave =
        W·u_k·(1 + c_q·q) (u_k: one wave's fixed latency), t_fix = 0; per-head t_fix = units·u_mha.
  launch TensorRT-LLM's dispatch (XQA only when its blocks fill the GPU, else MMHA) and MMHA's launch
        rules (block size, blocks per SM, split, key walk, the value pass of K-only tables): see
        ``decode_launch.py``, which prices it.
  gen   Blackwell (SM100): the grouped rows (g_min ≤ g ≤ g_max) run trtllm-gen's generation kernels,
        priced as flow with each block's first K_h keys (``hidden_keys``) under its fixed latency, the
        memory time scaled by max(0, 1 - K_h·(128/d)·m/kv) (B200, 32 query / 4 KV heads, 1,024 sequences:
        64.9-66.9 µs from 2 to 256 keys; fitted K_h ~140); the rest fall back to MMHA, priced as in launch (``xqaDispatcher.cpp``,
        XqaDispatcher::shouldUse under mUseTllmGen: "Fallback to MMHA as num_q_heads per kv_head > 16
        is not supported by TRTLLM-GEN kernels"). B200, 32 query heads on one KV head, one sequence of
        65,536 keys: 363 µs for 17 MB of keys, a latency-bound walk by 32 query-head units, not a
        stream at the L2's rate (B200 held out 6.3 → 5.5 with the hidden keys: bench_kernels).
On A100 the grouped rows follow the xqa form: time depends on units and kv, not on how units split
into sequences and KV heads, and steps with the waves (1,023 keys: 20.8 µs at 1 unit, 16.7 µs at 4,
108 µs at 512 units in 5 waves of 1,024-key blocks, 198 µs at 1,024 units in 10). B200's grouped
rows keep the flow form: on SM ≥ 100 TensorRT-LLM's attention op runs its trtllm-gen kernels, not
XQA (``cpp/tensorrt_llm/common/attentionOp.h``, AttentionOp's mUseTllmGen), and MMHA beyond 16
query heads per KV head (the gen split).
Which group sizes the grouped kernel takes is the GPU's and library's (B200's TensorRT-LLM runs
g = 24 and 32 like the per-head kernel, ~10× slower than grouped; the L40S's g = 1 fits the
grouped kernel): the fit picks (g_min, g_max) among ``GROUPINGS`` by its loss on a sample.
k is the kernel (grouped or per-head): β_k ≤ the spec HBM bandwidth, u_k, o_k its own. The per-unit
(flow) or per-wave (xqa) term is what makes 2,048 one-token sequences cost ~1 ms on an A100 while
their KV is 8 MB; the L2
term lets small working sets run above HBM speed only while they fit (the β ≤ spec bound stays
honest for HBM). Used by the fit (``calibration/operator_models.py``) and by fitted attention.
"""

from __future__ import annotations

import math

import numpy as np

GROUP_MAX = 32
SPLITS = ("flow", "xqa", "launch", "gen")  # how the kernels split the KV sequence, chosen by the fit (see above)
GROUPINGS = tuple((a, b, s) for s in SPLITS for a, b in ((2, 32), (2, 16), (1, 32), (1, 16)))  # (g_min, g_max, split)
XQA_MIN_TOKENS, XQA_WAVES, XQA_SUB_SEQ = 128.0, 8.0, 6000.0  # TensorRT-LLM's kMinHistoryTokensPerBlock,
#   kTargetWaveFactor, getXqaMaxNumSubSeq (decoderXQAConstants.h)
MMHA_TOKENS = 128.0  # MMHA's seq_len_per_kv_loop for 16-bit, d = 128: ⌈256 threads / 16 per value⌉·8
XQA_MIN_BLOCKS = 4.0  # kEnableMinBlockFactor: XQA runs when its blocks × 4 reach the SMs (else MMHA)
MMHA_BLOCKS_SM, MMHA_THREAD_BLOCK = (
    4.0,
    256.0,
)  # MMHA: 256-thread blocks per SM (register-limited: 32 warps), its base block
MMHA_OCCUPANCY = (4, 3)  # the blocks per SM the fit tries (groups' fourth element; see ``decode_launch``)
MMHA_WALK_KEYS = 64.0  # MMHA's key walk: one latency (loop_mha) per 64 of a block's keys, whatever its size
PARAMS = (
    "pi_decode",
    "beta_decode",
    "beta_decode_mha",
    "beta_l2_decode",
    "l2_decode",
    "cta_decode",
    "unit_q",
    "unit",
    "overhead_decode",
    "unit_mha",
    "overhead_decode_mha",
    "combine",
    "pi_decode_mha",
    "loop_mha",
    "l2_pass",
    "hidden_keys",
    "combine_fixed",
    "beta_issue",
)
FIELDS = {
    "pi_decode": "attn_decode_pi",
    "beta_decode": "beta_attn",
    "beta_decode_mha": "attn_decode_beta_mha",
    "beta_l2_decode": "attn_decode_l2_beta",
    "l2_decode": "attn_decode_l2_bytes",
    "cta_decode": "attn_decode_cta_beta",
    "unit_q": "attn_decode_unit_q",
    "unit": "attn_decode_unit_s",
    "overhead_decode": "attn_decode_overhead_s",
    "unit_mha": "attn_decode_unit_mha_s",
    "overhead_decode_mha": "attn_decode_overhead_mha_s",
    "combine": "attn_decode_combine_s",
    "pi_decode_mha": "attn_decode_pi_mha",
    "loop_mha": "attn_decode_loop_mha_s",
    "l2_pass": "attn_decode_l2_pass_bytes",
    "hidden_keys": "attn_decode_hidden_keys",
    "combine_fixed": "attn_decode_combine_fixed_s",
    "beta_issue": "attn_decode_issue_beta",
}
UNITS = {
    "pi_decode": "FLOP/s",
    "beta_decode": "B/s",
    "beta_decode_mha": "B/s",
    "beta_l2_decode": "B/s",
    "l2_decode": "B",
    "cta_decode": "B/s",
    "unit_q": "1",
    "unit": "s",
    "overhead_decode": "s",
    "unit_mha": "s",
    "overhead_decode_mha": "s",
    "combine": "s",
    "pi_decode_mha": "FLOP/s",
    "loop_mha": "s",
    "l2_pass": "B",
    "hidden_keys": "1",
    "combine_fixed": "s",
    "beta_issue": "B/s",
}


def xqa_blocks(n, units, kv, sms):
    """XQA's thread blocks per (sequence, KV head) in multi-block mode (numpy or float; ``SPLITS``)."""
    m0 = np.maximum(np.floor(kv / XQA_MIN_TOKENS), 1.0)
    m = np.maximum(np.minimum(m0, np.round(np.sqrt(8.0 * m0))), 1.0)
    wave = units * m / sms
    m = np.where(wave > XQA_WAVES, np.floor(m * XQA_WAVES / np.maximum(wave, 1e-30)), m)
    return np.maximum(np.minimum(m, np.floor(XQA_SUB_SEQ / np.maximum(n, 1.0))), 1.0)


def xqa_block_count(n: float, units: float, kv: float, sms: int) -> float:
    """``xqa_blocks`` for one batch, in floats (the scalar pricing paths)."""
    m0 = max(math.floor(kv / XQA_MIN_TOKENS), 1.0)
    split = max(min(m0, float(round(math.sqrt(8.0 * m0)))), 1.0)
    wave = units * split / sms
    if wave > XQA_WAVES:
        split = math.floor(split * XQA_WAVES / wave)
    return max(min(split, math.floor(XQA_SUB_SEQ / max(n, 1.0))), 1.0)


def decode_unit_times(v, n, kv_mean, F, B, h, h_kv, sms: int, groups=(2, GROUP_MAX), alias=0.0, hidden=False):
    """Seconds per layer (numpy arrays or floats); v: the ``PARAMS`` values in order; groups:
    (g_min, g_max) or (g_min, g_max, split), split one of ``SPLITS`` ("flow" when absent); alias:
    1 where V aliases K (a K-only table, see ``decode_launch``), 0 in serving."""
    if len(groups) > 2 and groups[2] == "launch":
        return launch_times(v, n, kv_mean, F, B, h, h_kv, sms, groups, alias)
    if len(groups) > 2 and groups[2] == "gen":
        g = h / h_kv
        return np.where(
            (g >= groups[0]) & (g <= groups[1]),
            decode_unit_times(v, n, kv_mean, F, B, h, h_kv, sms, groups[:2], alias, True),
            launch_times(v, n, kv_mean, F, B, h, h_kv, sms, (np.inf, np.inf) + tuple(groups[2:]), alias),
        )
    pi, beta, beta_mha, beta_l2, l2, cta, cq, unit, over, unit_mha, over_mha, comb = v[:12]
    g = h / h_kv
    grouped = (g >= groups[0]) & (g <= groups[1])
    units = np.where(grouped, n * h_kv, n * h)
    one = np.maximum(units, 1.0)
    if len(groups) > 2 and groups[2] == "xqa":
        split = np.where(
            grouped,
            xqa_blocks(n, units, kv_mean, sms),
            np.clip(np.ceil(sms / one), 1.0, np.maximum(np.ceil(kv_mean / MMHA_TOKENS), 1.0)),
        )
        waves = np.ceil(units * split / sms)
        flow = units * split / waves * cta
        add = np.where(grouped, waves * unit * (1.0 + cq * g), 0.0)
        fixed = np.where(grouped, 0.0, units * unit_mha)
    else:
        split = np.clip(np.floor(sms / one), 1.0, np.maximum(np.ceil(kv_mean / 256.0), 1.0))
        flow = units * split * cta
        add = 0.0  # type: ignore[assignment]
        fixed = units * np.where(grouped, unit, unit_mha) * (1.0 + cq * np.where(grouped, g, 1.0))
    x = (B / l2) ** 2
    r = 1.0 / (1.0 + x * x * x)
    reread = np.where(grouped, 0.0, B * (g - 1.0))
    mem = B * (1.0 - r) / np.minimum(np.where(grouped, beta, beta_mha), flow) + (B * r + reread) / np.minimum(
        beta_l2, flow
    )
    if hidden:
        mem = mem * np.where(
            grouped, np.maximum(1.0 - v[15] * (16.0 / key_threads(F, n * h, kv_mean)) * split / kv_mean, 0.0), 1.0
        )
    c = F / pi
    comb = np.where(split > 1.0, split * comb, 0.0)
    return np.sqrt(c * c + mem * mem + fixed * fixed) + add + comb + np.where(grouped, over, over_mha)


def decode_unit_time(
    v,
    n: float,
    kv_mean: float,
    F: float,
    B: float,
    h: float,
    h_kv: float,
    sms: int,
    groups=(2, GROUP_MAX),
    hidden: bool = False,
) -> float:
    """``decode_unit_times`` on plain floats (the simulator's hot path), the same arithmetic."""
    if len(groups) > 2 and groups[2] == "launch":
        return launch_time(v, n, kv_mean, F, B, h, h_kv, sms, groups)
    if len(groups) > 2 and groups[2] == "gen":
        if groups[0] <= h / h_kv <= groups[1]:
            return decode_unit_time(v, n, kv_mean, F, B, h, h_kv, sms, groups[:2], True)
        return launch_time(v, n, kv_mean, F, B, h, h_kv, sms, (math.inf, math.inf) + tuple(groups[2:]))
    pi, beta, beta_mha, beta_l2, l2, cta, cq, unit, over, unit_mha, over_mha, comb = v[:12]
    g = h / h_kv
    grouped = groups[0] <= g <= groups[1]
    units = n * h_kv if grouped else n * h
    add, fixed = 0.0, 0.0
    if len(groups) > 2 and groups[2] == "xqa":
        if grouped:
            split = xqa_block_count(n, units, kv_mean, sms)
        else:
            split = min(max(math.ceil(sms / max(units, 1.0)), 1.0), max(math.ceil(kv_mean / MMHA_TOKENS), 1.0))
        waves = math.ceil(units * split / sms)
        flow = units * split / waves * cta
        if grouped:
            add = waves * unit * (1.0 + cq * g)
        else:
            fixed = units * unit_mha
    else:
        split = min(max(math.floor(sms / max(units, 1.0)), 1.0), max(math.ceil(kv_mean / 256.0), 1.0))
        flow = units * split * cta
        fixed = units * (unit if grouped else unit_mha) * (1.0 + cq * (g if grouped else 1.0))
    x = (B / l2) ** 2
    r = 1.0 / (1.0 + x * x * x)
    reread = 0.0 if grouped else B * (g - 1.0)
    mem = B * (1.0 - r) / min(beta if grouped else beta_mha, flow) + (B * r + reread) / min(beta_l2, flow)
    if hidden and grouped:
        mem *= max(1.0 - v[15] * (16.0 / _key_threads(F, n * h, kv_mean)) * split / kv_mean, 0.0)
    c = F / pi
    comb = split * comb if split > 1.0 else 0.0
    return math.sqrt(c * c + mem * mem + fixed * fixed) + add + comb + (over if grouped else over_mha)


from .decode_launch import _key_threads, key_threads, launch_time, launch_times  # noqa: E402  (it uses xqa_blocks and the constants above)
