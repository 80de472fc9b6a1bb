"""Runs of decode-only passes priced in one call (mixed into CostModel): the simulator's hot path.

A decode-only pass of n sequences costs the fixed part of n rows plus an attention part that
depends on Σ(kv + 1) alone. Each method here repeats exactly the float operations ``time``
would make on each pass, in the same order, so a run's durations and end times are the bits
stepping would get (tests/test_costmodel.py checks every variant against ``time``).
"""

from __future__ import annotations

import math
from itertools import accumulate
from typing import TYPE_CHECKING, Any

import numpy as np

from .decode_split_runs import SplitDecodeRuns
from .decode_unit_runs import UnitDecodeRuns

UNIT_ARRAY_STEPS = 24  # unit-model decode runs this long are priced as arrays (numpy's overhead pays)
SPLIT_ARRAY_STEPS = 16  # under the xqa, launch and gen splits (a pass priced in plain floats costs more)
DECODE_TABLE_CAP = 1 << 22  # Σ(kv + 1) values tabulated for decode runs (32 MiB); larger ones are computed


class DecodeRuns(UnitDecodeRuns, SplitDecodeRuns):
    """Needs the CostModel's coefficients, ``_fixed_part`` and ``_decode_memory_bound``."""

    if TYPE_CHECKING:  # the CostModel this mixes into provides these; declared for mypy only
        _attention_time: Any
        attn_bound: Any
        attn_coef: Any
        dec_coef: Any
        attn_fitted: Any
        dec_over: Any
        dec_seq: Any
        _decode_by_n: Any
        _decode_memory_bound: Any
        _fixed: Any
        _fixed_part: Any
        _fixed_time: Any
        _fixed_uses_seqs: Any
        floor_attn: Any
        has_host: Any
        hw: Any
        kv_coef: Any
        _lead_fixed: Any
        over_layers: Any
        qo_coef: Any
        quadrature: Any
        shape: Any
        _step_lengths: Any
        step_time: Any
        time: Any
        unit_runs: Any
        units: Any
        _with_host: Any
        _with_host_array: Any

    def decode_ends_list(self, n: int, decode_kv0: float, steps: int, t: float, stop: float = math.inf) -> list[float]:
        """End times of the steps of ``decode_run`` started at t: t + d₀, (t + d₀) + d₁, … in plain
        floats, the same operations in the same order (so bit-identical), cheaper than numpy's
        per-call overhead for short runs (the replica's hottest path). With `stop`, only the steps
        that start before it (the first always does)."""
        try:
            stepwise, fixed_of, by_seqs, kc, beta, floor, over, fitted, memory_bound = self._decode_terms  # type: ignore[has-type]
        except AttributeError:
            stepwise, fixed_of, by_seqs, kc, beta, floor, over, fitted, memory_bound = self._decode_terms = (
                bool(self.has_host or self.units),
                self._fixed,
                self._fixed_uses_seqs,
                self.kv_coef,
                self.hw.beta_attention,
                self.floor_attn,
                self.over_layers,
                self.attn_fitted,
                self._decode_memory_bound,
            )
        if stepwise:  # host terms, unit decode model: step by step (``time``'s operations)
            return self._decode_ends_host(n, decode_kv0, steps, t, stop)
        fixed = fixed_of.get((n, n) if by_seqs else n)
        if fixed is None:
            fixed = self._fixed_part(n, n)
        out = []
        x, nf = decode_kv0, float(n)  # kv0 + n·j, exact: integers (x + n converts n as float(n) does)
        if fitted:
            hw = self.hw
            ac, pi, per_n, qo = self.attn_coef, hw.attn_decode_pi, self.dec_seq * n + self.dec_over, self.qo_coef * n
            for _ in range(steps):
                a, m = ac * x / pi, (kc * x + qo) / beta
                t += (math.sqrt(a * a + m * m) + per_n) + fixed
                out.append(t)
                if t >= stop:
                    break
                x += nf
            return out
        if memory_bound:
            if x * kc / beta >= floor:  # x only grows, and so does x·kc/β: the floor never acts
                for _ in range(steps):
                    t += x * kc / beta + over + fixed
                    out.append(t)
                    if t >= stop:
                        break
                    x += nf
                return out
            for _ in range(steps):
                m = x * kc / beta
                t += (m if m >= floor else floor) + over + fixed
                out.append(t)
                if t >= stop:
                    break
                x += nf
            return out
        ac, pi = self.dec_coef, self.hw.pi_attention
        for _ in range(steps):
            a, m = ac * x / pi, x * kc / beta
            d = math.sqrt(a * a + m * m) if self.quadrature else (a if a >= m else m)
            t += (d if d >= floor else floor) + over + fixed
            out.append(t)
            if t >= stop:
                break
            x += nf
        return out

    def prefill_step_end(self, m: int, decode_kv0: int, q: int, kv: int, t: float) -> float:
        """``prefill_lead_ends(m, decode_kv0, (0, q), kv, t)[0]``: one step's end, the length of a
        prefill alone memoized by shape (a length does not depend on when the step starts, and
        t + length is the addition the run makes: the same bits). Beside decodes the shape
        includes their Σ(kv + 1), which seldom repeats: computed."""
        if m:
            return self.prefill_lead_ends(m, decode_kv0, (0, q), kv, t)[0]
        key = (q, kv)
        length = self._step_lengths.get(key)
        if length is None:
            if len(self._step_lengths) >= 1 << 17:
                self._step_lengths.clear()
            length = self._step_lengths[key] = self.prefill_lead_ends(m, decode_kv0, (0, q), kv, 0.0)[0]
        return t + length

    def prefill_lead_ends(
        self,
        m: int,
        decode_kv0: int,
        qs,
        kv: int,
        t: float,
        stop: float = math.inf,
        sealed: int = 0,
        leaves=(),
        head=(),
    ) -> list[float]:
        """End times, from t, of steps j = 1, 2, … of a chunked prefill run: one sequence takes
        qs[j] new tokens over kv + Σ qs[1:j] cached, beside m decodes whose Σ(kv + 1) is
        decode_kv0 + m·j. Each is ``step_time((qs[j],), (kv_j,), m, decode_kv0 + m·j)`` with its
        integer sums and float operations, unrolled (the same bits). `leaves`: (f, base) in step
        order, a decode not in steps f, f + 1, … whose Σ(kv + 1) at step j is base + j. With
        `stop`, step j > sealed is taken only if it starts before stop. `head`: (q, kv) of the
        sequences among the m that take q > 1 tokens in step 1 (a prompt's last chunk), decodes
        from step 2 on with Σ(kv + 1) counted in decode_kv0 + m·j as such. With m == 0,
        decode_kv0 is not read (as step_time reads no decode Σ without decodes)."""
        if not m:
            decode_kv0 = 0
        if self.attn_fitted or self.has_host:  # each step as step_time prices it
            return self._lead_ends_general(m, decode_kv0, qs, kv, t, stop, sealed, leaves, head)
        try:
            lead_fixed, bound, ac, dc, kc, pi, beta, floor, over, quad, by_seqs = self._lead_terms  # type: ignore[has-type]
        except AttributeError:
            lead_fixed, bound, ac, dc, kc, pi, beta, floor, over, quad, by_seqs = self._lead_terms = (
                self._lead_fixed,
                self.attn_bound,
                self.attn_coef,
                self.dec_coef,
                self.kv_coef,
                self.hw.pi_attention,
                self.hw.beta_attention,
                self.floor_attn,
                self.over_layers,
                self.quadrature,
                self._fixed_uses_seqs,
            )
        if len(lead_fixed) >= 1 << 17:  # _fixed_time, memoized here by one int key
            lead_fixed.clear()
        sqrt = math.sqrt
        decodes_compute_bound = 1 > bound
        out = []
        d = decode_kv0
        pared = not decodes_compute_bound and not by_seqs  # the common step's loop body: its sums written out
        li, nl = 0, len(leaves)
        for j in range(1, len(qs)):
            if t >= stop and j > sealed:
                break
            while li < nl and leaves[li][0] == j:
                d -= leaves[li][1] + j - 1
                m -= 1
                li += 1
            q = qs[j]
            d += m
            if pared and not (head and j == 1):  # P beside m decodes (Σ(kv + 1) = d), memory-bound
                p, kq = q * kv + q * (q + 1) // 2, kv + q
                g = lead_fixed.get(m + q)
                if g is None:
                    g = lead_fixed[m + q] = self._fixed_time(m + q, m + 1)
                if p > bound * kq:  # P compute-bound
                    x, y = (ac * p) / pi, (kc * kq) / beta
                    x = sqrt(x * x + y * y) if quad else (x if x >= y else y)
                    a = (x if x >= floor else floor) + over
                    if d:
                        x, y = (dc * d) / pi, (kc * d) / beta
                        x = sqrt(x * x + y * y) if quad else (x if x >= y else y)
                        a += (x if x >= floor else floor) + over
                else:  # P memory-bound too
                    x, y = (dc * (d + p)) / pi, (kc * (d + kq)) / beta
                    x = sqrt(x * x + y * y) if quad else (x if x >= y else y)
                    a = (x if x >= floor else floor) + over
                t += g + a
                out.append(t)
                kv += q
                continue
            lump, rows = d, m + q
            if head and j == 1:
                for hq, hkv in head:
                    lump -= hkv + hq
                    rows += hq - 1
            p = q * kv + q * (q + 1) // 2
            pairs = pkv = dkv = dpairs = 0
            if decodes_compute_bound:
                pairs = pkv = lump
            else:
                dkv = dpairs = lump
            if p > bound * (kv + q):
                pairs += p
                pkv += kv + q
            else:
                dpairs += p
                dkv += kv + q
            if head and j == 1:
                for hq, hkv in head:
                    hp = hq * hkv + hq * (hq + 1) // 2
                    if hp > bound * (hkv + hq):
                        pairs += hp
                        pkv += hkv + hq
                    else:
                        dpairs += hp
                        dkv += hkv + hq
            key = rows << 20 | m + 1 if by_seqs else rows  # _fixed_time of (rows, seqs < 2^20), or of rows alone
            g = lead_fixed.get(key)
            if g is None:
                g = lead_fixed[key] = self._fixed_time(rows, m + 1)
            a = 0.0  # _attention_time's operators, inlined (float × int converts the int as float() does)
            if pkv:
                x, y = (ac * pairs) / pi, (kc * pkv) / beta
                x = sqrt(x * x + y * y) if quad else (x if x >= y else y)
                a += (x if x >= floor else floor) + over
            if dkv:
                x, y = (dc * dpairs) / pi, (kc * dkv) / beta
                x = sqrt(x * x + y * y) if quad else (x if x >= y else y)
                a += (x if x >= floor else floor) + over
            t += g + a
            out.append(t)
            kv += q
        return out

    def _lead_ends_general(self, m, d, qs, kv, t, stop, sealed, leaves, head) -> list[float]:
        out, li, nl = [], 0, len(leaves)
        for j in range(1, len(qs)):
            if t >= stop and j > sealed:
                break
            while li < nl and leaves[li][0] == j:
                d -= leaves[li][1] + j - 1
                m -= 1
                li += 1
            q = qs[j]
            d += m
            if head and j == 1:
                t += self.step_time(
                    [hq for hq, _ in head] + [q],
                    [hkv for _, hkv in head] + [kv],
                    m - len(head),
                    d - sum(hq + hkv for hq, hkv in head),
                )
            else:
                t += self.step_time((q,), (kv,), m, d)
            out.append(t)
            kv += q
        return out

    def _decode_ends_host(self, n: int, x: float, steps: int, t: float, stop: float) -> list[float]:
        if self.units and steps >= (UNIT_ARRAY_STEPS if self.unit_runs else SPLIT_ARRAY_STEPS) and x > 0:  # one array
            xs = np.arange(steps, dtype=np.float64) * n + x
            d = (self._unit_decode_run(xs, n) if self.unit_runs else self._split_decode_run(xs, n)).tolist()
            if stop == math.inf:
                d[0] += t
                return list(accumulate(d))
            out = []
            for v in d:
                t += v
                out.append(t)
                if t >= stop:
                    break
            return out
        if self.units and x > 0:
            return (self._unit_decode_ends if self.unit_runs else self._split_decode_ends)(n, x, steps, t, stop)
        out, fixed = [], self._fixed_part(n, n)
        for _ in range(steps):
            t += self._with_host(fixed + self._attention_time(0.0, 0.0, x, x, n, n), n, 0)
            out.append(t)
            if t >= stop:
                break
            x += n
        return out

    def decode_run(self, n: int, decode_kv0: float, steps: int) -> np.ndarray:
        """Durations of `steps` consecutive decode-only passes of n sequences, the j-th with
        Σ(kv+1) = decode_kv0 + n·j. Bit-identical to calling ``time`` on each shape in turn: the
        attention part of a decode-only pass depends on Σ(kv + 1) alone, so it is read from a table
        (a strided view; beyond the table's cap it is computed the same way) and the fixed part of
        n sequences added."""
        lo = int(decode_kv0)
        hi = lo + n * steps
        if self.unit_runs:  # unit decode model: every pass at once, ``time``'s operations elementwise
            return self._unit_decode_run(np.arange(lo, hi, n, dtype=np.float64), n)
        if self.units:  # the xqa, launch and gen splits (decode_split_runs), each pass as ``time`` prices it
            return (
                self._split_decode_run(np.arange(lo, hi, n, dtype=np.float64), n)
                if lo > 0
                else np.array([self.time(self.shape((), (), n, x)) for x in range(lo, hi, n)])
            )
        if self.attn_fitted:  # fitted decode attention depends on n too: computed, not tabulated
            att = self._fitted_decode_of(np.arange(lo, hi, n, dtype=np.float64), n)
            return (att + (self.dec_seq * n + self.dec_over)) + self._fixed_part(n, n)
        if hi > DECODE_TABLE_CAP:
            d = self._decode_attention_of(np.arange(lo, hi, n, dtype=np.float64)) + self._fixed_part(n, n)
        else:
            table = self._decode_attention if len(self._decode_attention) >= hi else self._grow_decode_attention(hi)
            d = table[lo:hi:n] + self._fixed_part(n, n)
        return self._with_host_array(d, n) if self.has_host else d

    def decode_run_ends(self, n: int, decode_kv0: float, steps: int, t: float, lead: bool = False) -> np.ndarray:
        """End times of the ``decode_run(n, decode_kv0, steps)`` passes from t: their cumulative
        sum after t, or with `lead` with t in place of the first duration (t itself first). For a
        tabulated model and n ≤ 2 the durations are read from a table with the fixed part already
        added (the same addition, made once per entry) and copied once."""
        lo = int(decode_kv0)
        hi = lo + n * steps
        table = self._decode_by_n.get(n)
        if table is None or len(table) < hi:
            table = self._decode_table_of(n, hi)
        d = self.decode_run(n, decode_kv0, steps) if table is None else table[lo:hi:n].copy()
        if lead:
            d[0] = t
        else:
            d[0] += t
        return np.add.accumulate(d, out=d)

    def _decode_table_of(self, n: int, hi: int):
        """``_decode_attention`` plus the fixed part of n sequences, for a plain tabulated model (no
        units, fitted attention or host terms), n ≤ 2 and Σ(kv + 1) below 2^20; else None."""
        if n > 2 or hi > 1 << 20 or self.unit_runs or self.units or self.attn_fitted or self.has_host:
            return None
        base = self._decode_attention if len(self._decode_attention) >= hi else self._grow_decode_attention(hi)
        table = self._decode_by_n[n] = base + self._fixed_part(n, n)
        return table

    def _grow_decode_attention(self, hi: int) -> np.ndarray:
        """The table for every Σ(kv + 1) below at least `hi` (it doubles, so it is rebuilt O(log) times)."""
        size = min(max(hi, 2 * len(self._decode_attention), 4096), DECODE_TABLE_CAP)  # type: ignore[has-type]
        self._decode_attention = self._decode_attention_of(np.arange(size, dtype=np.float64))
        return self._decode_attention

    def _fitted_decode_of(self, x: np.ndarray, n: int) -> np.ndarray:
        """√(a² + m²) of fitted decode attention for n sequences with Σ(kv + 1) = x (``_attention_time``'s
        operations; the Q/O bytes make it depend on n, so it is not tabulated)."""
        a = self.attn_coef * x
        a /= self.hw.attn_decode_pi
        m = self.kv_coef * x
        m += self.qo_coef * n
        m /= self.hw.beta_attention
        return np.sqrt(a * a + m * m)

    def _decode_attention_of(self, x: np.ndarray) -> np.ndarray:
        """The attention time of decode-only passes with Σ(kv + 1) = x, priced as ``_attention_time``
        does (x is overwritten)."""
        hw = self.hw
        if self._decode_memory_bound:
            x *= self.kv_coef
            x /= hw.beta_attention
            t = x
        else:
            a = self.dec_coef * x
            a /= hw.pi_attention
            m = x
            m *= self.kv_coef
            m /= hw.beta_attention
            if self.quadrature:
                a = np.sqrt(a * a + m * m)
            else:
                np.maximum(a, m, out=a)
            t = a
        np.maximum(t, self.floor_attn, out=t)
        t += self.over_layers
        return t
