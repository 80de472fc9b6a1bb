"""Decode-only runs under the unit decode model's "xqa" and "launch" splits (``decode_units``,
``decode_launch``), priced without a ``time`` call per pass (mixed into CostModel through
DecodeRuns): as arrays for long runs, a hoisted loop over ``decode_unit_time`` for short ones.

The array path repeats ``xqa_block_count`` / ``launch_time`` / ``decode_unit_time``'s float
operations elementwise, in their order (the few that add 0.0 to a non-negative value are left
out: that changes no bit), each pass taking the kernel ``time`` would pick for it: under
"launch" a grouped configuration runs XQA only where its blocks fill the GPU, which depends on
the pass's mean KV length, so a run may start under MMHA and go on under XQA. (B/C)² is
Python's float power per element, as in ``decode_unit_runs``. The durations are the bits of
pricing each pass with ``time`` (tests/test_decode_split_runs.py checks it)."""
from __future__ import annotations

import math

import numpy as np

from .decode_units import (MMHA_BLOCKS_SM, MMHA_THREADS_SM, MMHA_TOKENS, MMHA_VALUE_THREADS, XQA_MIN_BLOCKS,
                           XQA_MIN_TOKENS, XQA_SUB_SEQ, XQA_WAVES, decode_unit_time)


class SplitDecodeRuns:
    """Needs the CostModel's unit-model constants (``_init_fitted_attention``), ``_fixed_part`` and host terms."""

    def _split_decode_run(self, x: np.ndarray, n: int) -> np.ndarray:
        """Durations of decode-only passes of n sequences with Σ(kv + 1) = x (> 0) under the xqa or
        launch split, each the bits of ``time`` on its shape."""
        pi, beta, beta_mha, beta_l2, l2, cta, cq, unit, over, unit_mha, over_mha, comb, pi_mha, loop = self.unit_v[:14]
        h, h_kv, La, (g0, g1, split) = self.unit_h, self.unit_hkv, self.unit_layers, self.unit_groups
        sms, nf, g = self.hw.sms, float(n), h / h_kv
        kv = x / max(n, 1)
        F = (self.attn_coef * x) / La
        B = (self.kv_coef * x) / La
        y = np.array([(b / l2) ** 2 for b in B.tolist()])
        r = 1.0 / (1.0 + y * y * y)
        if not g0 <= g <= g1:
            xqa = np.zeros(len(x), dtype=bool)
        elif split == "launch":   # decode_launch.xqa_dispatched
            xqa = nf * h_kv * np.maximum(np.floor(kv / XQA_MIN_TOKENS), 1.0) * XQA_MIN_BLOCKS >= sms
        else:
            xqa = np.ones(len(x), dtype=bool)
        nx = int(np.count_nonzero(xqa))
        if nx == len(x):
            att = _xqa(kv, F, B, r, nf, h_kv, g, sms, pi, beta, beta_l2, cta, cq, unit, over, comb)
        else:
            args = (nf * h, g, sms, beta_mha, beta_l2, cta, comb, over_mha)
            mmha = _mmha_launch if split == "launch" else _mmha_xqa
            per = (pi_mha, unit_mha, loop) if split == "launch" else (pi, unit_mha)
            if not nx:
                att = mmha(kv, F, B, r, *args, *per)
            else:
                att = np.empty(len(x))
                att[xqa] = _xqa(kv[xqa], F[xqa], B[xqa], r[xqa], nf, h_kv, g, sms, pi, beta, beta_l2, cta, cq, unit, over, comb)
                rest = ~xqa
                att[rest] = mmha(kv[rest], F[rest], B[rest], r[rest], *args, *per)
        att *= La
        d = self._fixed_part(n, n) + att
        return self._with_host_array(d, n) if self.has_host else d

    def _split_decode_ends(self, n: int, x: float, steps: int, t: float, stop: float) -> list[float]:
        """End times from t of a short run under the xqa or launch split: ``time``'s path for a
        decode-only pass with its per-run work hoisted (``_unit_decode``'s arguments, the same
        ``decode_unit_time``)."""
        v, h, h_kv, La, groups, sms = self.unit_v, self.unit_h, self.unit_hkv, self.unit_layers, self.unit_groups, self.hw.sms
        ac, kc, nf, per, gemm = self.attn_coef, self.kv_coef, float(n), max(n, 1), self._fixed_part(n, n)
        host, out = self.has_host, []
        for _ in range(steps):
            d = gemm + La * decode_unit_time(v, nf, x / per, (ac * x) / La, kc * x / La, h, h_kv, sms, groups)
            t += self._with_host(d, n, 0) if host else d
            out.append(t)
            if t >= stop:
                break
            x += n
        return out


def _xqa(kv, F, B, r, nf, h_kv, g, sms, pi, beta, beta_l2, cta, cq, unit, over, comb):
    """XQA (grouped) passes: ``xqa_block_count`` and the grouped branch of ``launch_time``, elementwise."""
    units = nf * h_kv
    m0 = np.maximum(np.floor(kv / XQA_MIN_TOKENS), 1.0)
    split = np.maximum(np.minimum(m0, np.round(np.sqrt(8.0 * m0))), 1.0)
    wave = units * split / sms
    split = np.where(wave > XQA_WAVES, np.floor(split * XQA_WAVES / wave), split)
    split = np.maximum(np.minimum(split, math.floor(XQA_SUB_SEQ / max(nf, 1.0))), 1.0)
    waves = np.ceil(units * split / sms)
    flow = units * split / waves * cta
    add = waves * unit * (1.0 + cq * g)
    mem = B * (1.0 - r) / np.minimum(beta, flow) + B * r / np.minimum(beta_l2, flow)
    c = F / pi
    return np.sqrt(c * c + mem * mem) + add + np.where(split > 1.0, split * comb, 0.0) + over


def _mmha_launch(kv, F, B, r, units, g, sms, beta_mha, beta_l2, cta, comb, over_mha, pi_mha, unit_mha, loop):
    """MMHA passes under the launch split: the per-head branch of ``launch_time``, elementwise."""
    factor = min(math.ceil(sms * MMHA_BLOCKS_SM / max(units, 1.0)), MMHA_BLOCKS_SM)
    threads = 1024.0 if factor >= 4.0 else (512.0 if factor >= 2.0 else 256.0)
    per_sm = MMHA_THREADS_SM / threads
    split = np.minimum(max(math.ceil(sms * per_sm / max(units, 1.0)), 1.0), np.maximum(np.ceil(kv / (threads / 2.0)), 1.0))
    waves = np.ceil(units * split / (sms * per_sm))
    flow = units * split / waves * cta * (threads / 256.0)
    fixed = waves * (unit_mha + loop * kv / (split * threads / MMHA_VALUE_THREADS))
    mem = B * (1.0 - r) / np.minimum(beta_mha, flow) + (B * r + B * (g - 1.0)) / np.minimum(beta_l2, flow)
    c = F / pi_mha
    return np.sqrt(c * c + mem * mem + fixed * fixed) + np.where(split > 1.0, split * comb, 0.0) + over_mha


def _mmha_xqa(kv, F, B, r, units, g, sms, beta_mha, beta_l2, cta, comb, over_mha, pi, unit_mha):
    """Per-head passes under the xqa split: the per-head branch of ``decode_unit_time``, elementwise."""
    split = np.minimum(max(math.ceil(sms / max(units, 1.0)), 1.0), np.maximum(np.ceil(kv / MMHA_TOKENS), 1.0))
    waves = np.ceil(units * split / sms)
    flow = units * split / waves * cta
    fixed = units * unit_mha
    mem = B * (1.0 - r) / np.minimum(beta_mha, flow) + (B * r + B * (g - 1.0)) / np.minimum(beta_l2, flow)
    c = F / pi
    return np.sqrt(c * c + mem * mem + fixed * fixed) + np.where(split > 1.0, split * comb, 0.0) + over_mha
