"""Decode-only runs under the unit decode model (costmodel/decode_units.py), priced without a
``time`` call per pass (mixed into CostModel through DecodeRuns): as arrays for long runs, as a
plain-float loop for short ones, under the "flow" split (the "xqa", "launch" and "gen" splits:
``decode_split_runs``). Both repeat ``decode_unit_time``'s operations in its order, the ones that
hold for a whole run (n fixed) once, so every duration is the bits of pricing the pass with ``time``
(tests/test_costmodel.py checks the calibrated profiles against it)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np


class UnitDecodeRuns:
    """Needs the CostModel's unit-model constants (``_init_fitted_attention``), ``_fixed_part`` and host terms."""

    if TYPE_CHECKING:  # the CostModel this mixes into provides these; declared for mypy only
        attn_coef: Any
        _fixed_part: Any
        has_host: Any
        host_prefill: Any
        host_seq: Any
        host_step: Any
        host_launch: Any
        hw: Any
        kv_coef: Any
        overlap_host: Any
        execution: Any
        _execution_s: Any
        unit_groups: Any
        unit_h: Any
        unit_hkv: Any
        unit_layers: Any
        unit_v: Any
        _with_host_array: Any

    def _unit_decode_run(self, x: np.ndarray, n: int) -> np.ndarray:
        """Durations of decode-only passes of n sequences with Σ(kv + 1) = x under the unit decode
        model, each as ``time`` prices it (``_fitted_attention_time`` → ``_unit_decode``): the
        operations of ``decode_unit_time`` elementwise, in its order, the per-run ones (n fixed)
        once. Its (B/C)² is Python's float power, per element (numpy squares instead, which can
        differ by an ulp), so the same bits as pricing each pass."""
        pi, beta, beta_mha, beta_l2, l2, cta, cq, unit, over, unit_mha, over_mha, comb = self.unit_v[:12]
        h, h_kv, La, (g0, g1) = self.unit_h, self.unit_hkv, self.unit_layers, self.unit_groups[:2]
        g = h / h_kv
        grouped = g0 <= g <= g1
        units = float(n) * h_kv if grouped else float(n) * h
        split = np.minimum(
            max(math.floor(self.hw.sms / max(units, 1.0)), 1.0), np.maximum(np.ceil((x / max(n, 1)) / 256.0), 1.0)
        )
        flow = units * split
        flow *= cta
        B = (self.kv_coef * x) / La
        r = np.array([(b / l2) ** 2 for b in B.tolist()])
        r = 1.0 / (1.0 + r * r * r)
        mem = B * (1.0 - r) / np.minimum(beta if grouped else beta_mha, flow)
        mem += (B * r + (0.0 if grouped else B * (g - 1.0))) / np.minimum(beta_l2, flow)
        fixed = units * (unit if grouped else unit_mha) * (1.0 + cq * (g if grouped else 1.0))
        c = ((self.attn_coef * x) / La) / pi
        att = np.sqrt(c * c + mem * mem + fixed * fixed)
        if comb:
            att += np.where(split > 1.0, split * comb, 0.0)
        att += over if grouped else over_mha
        att *= La
        d = self._fixed_part(n, n) + att
        return self._with_host_array(d, n) if self.has_host else d

    def _unit_decode_ends(self, n: int, x: float, steps: int, t: float, stop: float) -> list[float]:
        """``_unit_decode_run``'s operations on plain floats, pass by pass, summed into end times
        (short runs, where numpy's overhead does not pay)."""
        pi, beta, beta_mha, beta_l2, l2, cta, cq, unit, over, unit_mha, over_mha, comb = self.unit_v[:12]
        h, h_kv, La, (g0, g1) = self.unit_h, self.unit_hkv, self.unit_layers, self.unit_groups[:2]
        g = h / h_kv
        grouped = g0 <= g <= g1
        units = float(n) * h_kv if grouped else float(n) * h
        lo = max(math.floor(self.hw.sms / max(units, 1.0)), 1.0)
        beta_k, reread = (beta, 0.0) if grouped else (beta_mha, g - 1.0)
        fixed = units * (unit if grouped else unit_mha) * (1.0 + cq * (g if grouped else 1.0))
        ff, o = fixed * fixed, over if grouped else over_mha
        ac, kc, per, gemm, sqrt, ceil = (
            self.attn_coef,
            self.kv_coef,
            max(n, 1),
            self._fixed_part(n, n),
            math.sqrt,
            math.ceil,
        )
        host = self.has_host
        if host:
            hs, overlap = self.host_step + self.host_seq * n + self.host_prefill * 0, self.overlap_host
            hl = self.host_launch  # eager launches, hidden under the GPU's time (costmodel/host.py)
            hs = hs + hl if overlap else hs
            ex = self._execution_s(n, n, 0) if self.execution is not None else 0.0  # costmodel/execution.py
        out = []
        for _ in range(steps):
            split = max(ceil((x / per) / 256.0), 1.0)
            if lo < split:
                split = lo
            flow = units * split * cta
            B = kc * x / La
            y = (B / l2) ** 2
            r = 1.0 / (1.0 + y * y * y)
            mem = B * (1.0 - r) / (beta_k if beta_k <= flow else flow) + (B * r + (reread and B * reread)) / (
                beta_l2 if beta_l2 <= flow else flow
            )
            c = (ac * x / La) / pi
            d = gemm + La * ((sqrt(c * c + mem * mem + ff) + (split * comb if split > 1.0 else 0.0)) + o)
            if host:
                d += ex
                d = (d if d >= hs else hs) if overlap else (d if d >= hl else hl) + hs
            t += d
            out.append(t)
            if t >= stop:
                break
            x += n
        return out
