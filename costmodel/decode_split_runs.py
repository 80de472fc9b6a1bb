"""Decode-only runs under the unit decode model's "xqa", "launch" and "gen" splits (``decode_units``,
``decode_launch``), priced without a ``time`` call per pass (mixed into CostModel through
DecodeRuns): as arrays for long runs, a hoisted loop over ``decode_unit_time`` for short ones.

The array path repeats the float operations of the branch ``decode_unit_time`` takes for each pass
(``xqa_block_count``, ``launch_time``, the flow branch with hidden keys for gen's grouped rows)
elementwise, in their order; the few that add 0.0 to a non-negative value or multiply by exactly
1.0 (no hidden keys) are left out: that changes no bit. Per-run values (n fixed: units, MMHA's
block size and blocks per SM) are Python floats computed as the scalar path does. Under "launch" a
grouped configuration runs XQA only where its blocks fill the GPU, which depends on the pass's mean
KV length, so a run may start under MMHA and go on under XQA; under "xqa" and "gen" the kernel is
fixed by h/h_kv for the whole run. (B/C)² is Python's float power per element, as in
``decode_unit_runs``. The durations are the bits of pricing each pass with ``time``
(tests/test_decode_split_runs.py checks it)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from .decode_units import MMHA_THREAD_BLOCK, MMHA_TOKENS, XQA_MIN_TOKENS, XQA_SUB_SEQ, XQA_WAVES, decode_unit_time

# isort: split
from .decode_launch import (  # after decode_units, which imports it last
    WALK_BYTES,
    issue_rate,
    key_threads,
    mmha_blocks,
    mmha_walk,
    xqa_dispatched,
)


class SplitDecodeRuns:
    """Needs the CostModel's unit-model constants (``_init_fitted_attention``), ``_fixed_part`` and host terms."""

    if TYPE_CHECKING:  # the CostModel this mixes into provides these; declared for mypy only
        attn_coef: Any
        _fixed_part: Any
        has_host: Any
        hw: Any
        kv_coef: Any
        unit_groups: Any
        unit_h: Any
        unit_hkv: Any
        unit_layers: Any
        unit_v: Any
        _with_host: Any
        _with_host_array: Any

    def _split_decode_run(self, x: np.ndarray, n: int) -> np.ndarray:
        """Durations of decode-only passes of n sequences with Σ(kv + 1) = x (> 0) under the xqa,
        launch or gen split, each the bits of ``time`` on its shape."""
        v, h, h_kv, La, groups, sms = (
            self.unit_v,
            self.unit_h,
            self.unit_hkv,
            self.unit_layers,
            self.unit_groups,
            self.hw.sms,
        )
        g0, g1, split = groups[:3]
        nf, g = float(n), h / h_kv
        kv = x / max(n, 1)
        F = (self.attn_coef * x) / La
        B = (self.kv_coef * x) / La
        l2 = v[4]
        grouped = g0 <= g <= g1
        if split == "launch" or (split == "gen" and not grouped):  # ``launch_time``'s residency
            y = np.array([max(b / l2, 1.0) ** 2 for b in B.tolist()])
            r = 1.0 / (y * y * y)
        else:
            y = np.array([(b / l2) ** 2 for b in B.tolist()])
            r = 1.0 / (1.0 + y * y * y)
        if split == "gen":
            att = (
                _flow_hidden(v, nf * h_kv, g, kv, F, B, r, sms, nf * h)
                if grouped
                else _mmha_launch(v, nf * h, g, kv, F, B, r, sms, mmha_blocks(groups))
            )
        elif split == "xqa":
            att = (
                _xqa(v, nf, nf * h_kv, g, kv, F, B, r, sms, False, nf * h)
                if grouped
                else _mmha_xqa(v, nf * h, g, kv, F, B, r, sms)
            )
        else:
            xqa = xqa_dispatched(nf, h_kv, kv, sms) if grouped else np.zeros(len(x), dtype=bool)
            nx = int(np.count_nonzero(xqa))
            if nx == len(x):
                att = _xqa(v, nf, nf * h_kv, g, kv, F, B, r, sms, True, nf * h)
            elif not nx:
                att = _mmha_launch(v, nf * h, g, kv, F, B, r, sms, mmha_blocks(groups))
            else:
                att = np.empty(len(x))
                att[xqa] = _xqa(v, nf, nf * h_kv, g, kv[xqa], F[xqa], B[xqa], r[xqa], sms, True, nf * h)
                rest = ~xqa
                att[rest] = _mmha_launch(v, nf * h, g, kv[rest], F[rest], B[rest], r[rest], sms, mmha_blocks(groups))
        att *= La
        d = self._fixed_part(n, n) + att
        return self._with_host_array(d, n) if self.has_host else d

    def _split_decode_ends(self, n: int, x: float, steps: int, t: float, stop: float) -> list[float]:
        """End times from t of a short run under the xqa, launch or gen split: ``time``'s path for a
        decode-only pass with its per-run work hoisted (``_unit_decode``'s arguments, the same
        ``decode_unit_time``)."""
        v, h, h_kv, La, groups, sms = (
            self.unit_v,
            self.unit_h,
            self.unit_hkv,
            self.unit_layers,
            self.unit_groups,
            self.hw.sms,
        )
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


def _mem(B, r, beta_k, beta_l2, flow, reread):
    """``t_mem``: B·(1-r)/min(β_k, flow) + (B·r + B_re)/min(β_L2, flow), B_re = B·reread (None: 0)."""
    resident = B * r if reread is None else B * r + B * reread
    return B * (1.0 - r) / np.minimum(beta_k, flow) + resident / np.minimum(beta_l2, flow)


def _xqa(v, nf, units, g, kv, F, B, r, sms, launch, nh):
    """XQA passes: ``xqa_block_count`` and the grouped branch of ``decode_unit_time`` ("xqa") or of
    ``launch_time`` (``launch``: each block's hidden keys and the reduction's fixed cost), elementwise."""
    pi, beta, beta_l2, cta, cq, unit, over, comb, hide, comb0 = (
        v[0],
        v[1],
        v[3],
        v[5],
        v[6],
        v[7],
        v[8],
        v[11],
        v[15],
        v[16],
    )
    m0 = np.maximum(np.floor(kv / XQA_MIN_TOKENS), 1.0)
    split = np.maximum(np.minimum(m0, np.round(np.sqrt(8.0 * m0))), 1.0)
    wave = units * split / sms
    split = np.where(wave > XQA_WAVES, np.floor(split * XQA_WAVES / wave), split)
    split = np.maximum(np.minimum(split, math.floor(XQA_SUB_SEQ / max(nf, 1.0))), 1.0)
    waves = np.ceil(units * split / sms)
    flow = units * split / waves * cta
    add = waves * unit * (1.0 + cq * (16.0 * (math.ceil(g / 16.0) - 1.0) if launch else g))
    mem = _mem(B, r, beta, beta_l2, flow, None)
    if launch and hide:
        mem *= np.maximum(1.0 - hide * (16.0 / key_threads(F, nh, kv)) * split / kv, 0.0)
    c = F / pi
    many = split * comb + comb0 if launch else split * comb
    return np.sqrt(c * c + mem * mem) + add + np.where(split > 1.0, many, 0.0) + over


def _mmha_launch(v, units, g, kv, F, B, r, sms, nb):
    """MMHA passes under the launch split (and gen's fallback): the per-head branch of ``launch_time``
    with nb 256-thread blocks per SM, elementwise."""
    beta_l2, cta, unit_mha, over_mha, comb, pi_mha, loop, comb0, beta_mha = (
        v[3],
        v[5],
        v[9],
        v[10],
        v[11],
        v[12],
        v[13],
        v[16],
        v[2],
    )
    factor = min(math.ceil(sms * nb / max(units, 1.0)), nb)
    threads = 1024.0 if factor >= 4.0 else (512.0 if factor >= 2.0 else 256.0)
    per_sm = math.floor(MMHA_THREAD_BLOCK * nb / threads)
    tpk = key_threads(F, units, kv)
    split = np.minimum(
        max(math.ceil(sms * per_sm / max(units, 1.0)), 1.0),
        np.minimum(np.maximum(np.ceil((kv + 1.0) / (threads / tpk * 8.0)), 1.0), math.ceil(sms / max(units, 1.0))),
    )
    waves = np.ceil(units * split / (sms * per_sm))
    flow = units * split / waves * cta * (threads / 256.0)
    walk = mmha_walk(np.maximum(kv - 1.0, 0.0) / split, threads, tpk)
    fixed = waves * unit_mha + np.maximum(waves * loop * walk, units * split * walk * WALK_BYTES / issue_rate(v))
    mem = _mem(B, r, beta_mha, beta_l2, flow, g - 1.0)
    c = F / pi_mha
    return np.sqrt(c * c + mem * mem + fixed * fixed) + np.where(split > 1.0, split * comb + comb0, 0.0) + over_mha


def _mmha_xqa(v, units, g, kv, F, B, r, sms):
    """Per-head passes under the xqa split: the per-head branch of ``decode_unit_time``, elementwise."""
    pi, beta_mha, beta_l2, cta, unit_mha, over_mha, comb = v[0], v[2], v[3], v[5], v[9], v[10], v[11]
    split = np.minimum(max(math.ceil(sms / max(units, 1.0)), 1.0), np.maximum(np.ceil(kv / MMHA_TOKENS), 1.0))
    waves = np.ceil(units * split / sms)
    flow = units * split / waves * cta
    fixed = units * unit_mha
    mem = _mem(B, r, beta_mha, beta_l2, flow, g - 1.0)
    c = F / pi
    return np.sqrt(c * c + mem * mem + fixed * fixed) + np.where(split > 1.0, split * comb, 0.0) + over_mha


def _flow_hidden(v, units, g, kv, F, B, r, sms, nh):
    """Grouped passes under the gen split (trtllm-gen): the flow branch of ``decode_unit_time`` with
    each block's hidden keys, elementwise."""
    pi, beta, beta_l2, cta, cq, unit, over, comb, hide = v[0], v[1], v[3], v[5], v[6], v[7], v[8], v[11], v[15]
    split = np.minimum(max(math.floor(sms / max(units, 1.0)), 1.0), np.maximum(np.ceil(kv / 256.0), 1.0))
    flow = units * split * cta
    fixed = units * unit * (1.0 + cq * g)
    mem = _mem(B, r, beta, beta_l2, flow, None)
    if hide:
        mem *= np.maximum(1.0 - hide * (16.0 / key_threads(F, nh, kv)) * split / kv, 0.0)
    c = F / pi
    return np.sqrt(c * c + mem * mem + fixed * fixed) + np.where(split > 1.0, split * comb, 0.0) + over
