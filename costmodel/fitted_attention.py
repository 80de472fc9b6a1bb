"""Fitted attention (mixed into CostModel): profiles with attn_form "separate" or "varlen" price
attention with the kernel models ``calibration/operator_models.py`` fits, per layer × L:

  prefill chunks (q > 1)  compute + B/attn_prefill_beta + attn_prefill_overhead_s, compute = F/π_attn
                          (with attn_prefill_l2_beta, each layer's bytes resident in the L2 move at it,
                          the DRAM part partly under the compute: attn_prefill_dram_exposed),
                          or with attn_wave_s the wave model max(F'/π_attn, waves·wave·(kv_max + T/2)),
                          T = attn_q_tile (0: shape.Q_TILE)
                          (attn_wave_form "quantized": F'/π_attn·waves·SMs/tiles + waves·wave·(kv_max + T/2)
                          + the causal tail (q_max - T)/2·(4·d·T·SMs/π_attn + attn_tail_key_s));
                          with attn_prefill_kv_beta, B's K/V part moves at its own rates; with
                          attn_softmax_rate ρ, π_attn becomes 1/(1/π_attn + 1/(4·d·ρ)) for prefill
  decodes (q = 1)         √((F/attn_decode_pi)² + (B/β_attn)²) + attn_decode_seq_s·n + attn_decode_overhead_s
  varlen, beside a chunk  F/attn_mixed_pi + attn_mixed_seq_s·n (the decodes ride the prefill kernel)
  attn_decode_unit_s > 0  decodes by the unit model of ``decode_units`` (grouped or per-head kernel,
                          per-unit cost, L2-resident KV, Little's-law bandwidth), per layer × L

B is the KV read and written plus Q read and O written. ``_fitted_attention_time`` is the hot path;
``decode_runs`` repeats its decode-only float operations in the same order (bit-identical).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from .decode_units import decode_unit_time
from .prefill_memory import l2_resident_share_one, overlap_dram
from .shape import Q_TILE, ShapeStats


class FittedAttention:
    """Needs the CostModel's attn_coef, kv_coef and hw."""

    if TYPE_CHECKING:  # the CostModel this mixes into provides these; declared for mypy only
        attn_coef: Any
        hw: Any
        kv_coef: Any

    def _init_fitted_attention(self, m, hw, tp: int, La: int, b: int) -> None:
        self.attn_fitted = hw.attn_form != "roofline"
        if self.attn_fitted:  # q > 1 is prefill, q = 1 decode: pairs > 1·(kv + q) exactly when q > 1
            self.attn_bound = 1.0
            self.varlen = hw.attn_form == "varlen"
            self.pre_over, self.dec_over = La * hw.attn_prefill_overhead_s, La * hw.attn_decode_overhead_s
            self.dec_seq, self.mix_seq = La * hw.attn_decode_seq_s, La * hw.attn_mixed_seq_s
            self.qo_coef = 2 * La * (m.h // tp) * m.d_h * b  # Q read and O written, bytes per row
            self.pre_l2 = La * hw.attn_prefill_l2_bytes if hw.attn_prefill_l2_beta else 0.0  # C, over all layers
            self.pre_l2_kv = La * hw.attn_prefill_kv_l2_bytes if hw.attn_prefill_l2_beta else 0.0  # K/V's own C (0: C)
            rho = hw.attn_softmax_rate  # prefill FLOP rate with the softmax's per-element cost: 1/(1/π + 1/(4·d·ρ))
            self.pi_pre = 1.0 / (1.0 / hw.pi_attention + 1.0 / (4.0 * m.d_h * rho)) if rho else hw.pi_attention
            self.row_coef = La * (m.h // tp) * hw.attn_prefill_row_s  # per prefill row beyond the L2, over all layers
        self.decode_skew = hw.attn_decode_skew if self.attn_fitted else 0.0
        self.units = self.attn_fitted and bool(hw.attn_decode_unit_s)
        if self.units:  # unit decode model: per layer, the layer's KV bytes and FLOPs
            self.unit_v = (
                hw.attn_decode_pi,
                hw.beta_attention,
                hw.attn_decode_beta_mha,
                hw.attn_decode_l2_beta,
                hw.attn_decode_l2_bytes,
                hw.attn_decode_cta_beta,
                hw.attn_decode_unit_q,
                hw.attn_decode_unit_s,
                hw.attn_decode_overhead_s,
                hw.attn_decode_unit_mha_s,
                hw.attn_decode_overhead_mha_s,
                hw.attn_decode_combine_s,
                hw.attn_decode_pi_mha,
                hw.attn_decode_loop_mha_s,
                hw.attn_decode_l2_pass_bytes,
                hw.attn_decode_hidden_keys,
                hw.attn_decode_combine_fixed_s,
                hw.attn_decode_issue_beta,
            )
            self.unit_layers, self.unit_h, self.unit_hkv = La, m.h // tp, max(1, m.h_kv // tp)
            self.unit_groups = (
                hw.attn_decode_group_min,
                hw.attn_decode_group_max,
                hw.attn_decode_split,
                hw.attn_decode_mmha_blocks,
            )
        self.unit_runs = self.units and hw.attn_decode_split == "flow"  # decode runs priced by decode_unit_runs
        self.q_tile = (hw.attn_q_tile or Q_TILE) if self.attn_fitted and hw.attn_wave_s else 0
        if self.q_tile:  # wave model: h·Σ⌈q/T⌉ tiles in ⌈·/SMs⌉ waves, each a tile over the longest prefix
            self.heads_gpu, self.wave_coef = m.h // tp, La * hw.attn_wave_s
            self.tail_coef = (
                La * 4 * m.d_h * self.q_tile * hw.sms / 2
            )  # causal tail: (q_max - T)/2 keys at one SM's rate
            self.tail_key = La * hw.attn_tail_key_s / 2  # ... and each key's latency on its lone SM

    def _fitted_attention_terms(self, s: ShapeStats):
        """(name, time) of the fitted attention kernels; their sum is ``_attention_time``'s."""
        hw, n = self.hw, s.seqs - s.prefill_seqs
        out = []
        if s.prefill_kv:
            by = self.kv_coef * s.prefill_kv + self.qo_coef * (s.rows - n)
            t = self._prefill_time(self._prefill_compute(s), by, self.kv_coef * s.prefill_kv, s.rows - n)
            out.append(("attention_prefill", self.attn_coef * s.prefill_pairs, by, t + self.pre_over))
        if s.decode_kv:
            fl, by = self.attn_coef * s.memory_bound_pairs, self.kv_coef * s.decode_kv + self.qo_coef * n
            if self.varlen and s.prefill_kv:
                t = fl / hw.attn_mixed_pi + self.mix_seq * n
            elif self.units:
                t = self._unit_decode(fl, s.decode_kv, n)
            else:
                a, m = fl / hw.attn_decode_pi, by / hw.beta_attention
                t = math.sqrt(a * a + m * m) + (self.dec_seq * n + self.dec_over)
            out.append(("attention_decode", fl, by, t + self._decode_skew(s)))
        return out

    def _decode_skew(self, s: ShapeStats) -> float:
        """α·(t_max - t_mean) of the batch's decodes (attn_decode_skew): the decode part priced with
        every decode at the longest context, less it at the batch's own. LLMServingSim's profiler
        times ragged decode batches (skew.csv: t_skew = t_mean + α·(t_max - t_mean), α per batch)
        and fits one α_default a GPU and tp (meta.yaml skew_fit): the kernel's blocks wait on the
        longest sequence, which a price linear in Σkv cannot see. 0 without a skew or longest context."""
        n = s.seqs - s.prefill_seqs
        if not (self.decode_skew and s.decode_kv_max and n):
            return 0.0
        top, mixed = float(n * s.decode_kv_max), bool(s.prefill_kv)
        return self.decode_skew * (
            self._decode_part(top, top, n, mixed) - self._decode_part(s.memory_bound_pairs, s.decode_kv, n, mixed)
        )

    def _decode_part(self, pairs: float, decode_kv: float, n: int, mixed: bool) -> float:
        """The decode branch of ``_fitted_attention_time`` (n decodes, their pairs and Σ(kv + 1))."""
        hw, fl = self.hw, self.attn_coef * pairs
        if self.varlen and mixed:
            return fl / hw.attn_mixed_pi + self.mix_seq * n
        if self.units:
            return self._unit_decode(fl, decode_kv, n)
        a, m = fl / hw.attn_decode_pi, (self.kv_coef * decode_kv + self.qo_coef * n) / hw.beta_attention
        return math.sqrt(a * a + m * m) + (self.dec_seq * n + self.dec_over)

    def _prefill_time(self, c: float, by: float, kv: float, rows: int) -> float:
        """Compute c plus B/β_prefill; with attn_prefill_l2_beta, the share r = ``l2_resident_share``(B_layer/C)
        of each layer's bytes resident in the L2 (C = attn_prefill_l2_bytes) moves at that rate
        instead; with attn_prefill_kv_beta, the K/V part ``kv`` of B at the K/V rates (its resident share
        of attn_prefill_kv_l2_bytes where set: ``calibration.operator_models.attention_times``); the DRAM
        part D (plus attn_prefill_row_s per row·head) meets c as ``overlap_dram``: e·D plus a soft
        max(c, (1 - e)·D), e = attn_prefill_dram_exposed (``calibration.operator_models.attention_times``)."""
        hw = self.hw
        if not self.pre_l2:
            return c + by / hw.attn_prefill_beta
        r = l2_resident_share_one(by / self.pre_l2)
        if hw.attn_prefill_kv_beta and self.pre_l2_kv:
            rk = l2_resident_share_one(by / self.pre_l2_kv)
            dram = (1.0 - r) * ((by - kv) / hw.attn_prefill_beta + self.row_coef * rows) + (
                1.0 - rk
            ) * kv / hw.attn_prefill_kv_beta
            resident = r * (by - kv) / hw.attn_prefill_l2_beta + rk * kv / hw.attn_prefill_kv_l2_beta
            return overlap_dram(c, dram, hw.attn_prefill_dram_exposed) + resident
        if hw.attn_prefill_kv_beta:
            dram = (by - kv) / hw.attn_prefill_beta + kv / hw.attn_prefill_kv_beta
            resident = (by - kv) / hw.attn_prefill_l2_beta + kv / hw.attn_prefill_kv_l2_beta
        else:
            dram, resident = by / hw.attn_prefill_beta, by / hw.attn_prefill_l2_beta
        dram = (1.0 - r) * (dram + self.row_coef * rows)
        return overlap_dram(c, dram, hw.attn_prefill_dram_exposed) + r * resident

    def _unit_decode(self, flops: float, decode_kv: float, n: int) -> float:
        """The unit decode model over all layers (``decode_units``): n sequences, Σ(kv + 1) = decode_kv."""
        La = self.unit_layers
        return La * decode_unit_time(
            self.unit_v,
            float(n),
            decode_kv / max(n, 1),
            flops / La,
            self.kv_coef * decode_kv / La,
            self.unit_h,
            self.unit_hkv,
            self.hw.sms,
            self.unit_groups,
        )

    def _prefill_compute(self, s: ShapeStats) -> float:
        """F/π_attn, or the wave model's max(F'/π_attn, waves·wave·(kv_max + T/2))
        (``calibration.operator_models.prefill_compute``)."""
        c = (self.attn_coef * s.prefill_pairs) / self.pi_pre
        if not self.q_tile:
            return c
        padded = (self.attn_coef * self.q_tile * s.prefill_tile_work / 2) / self.pi_pre
        tiles = self.heads_gpu * s.prefill_tiles
        waves = math.ceil(tiles / self.hw.sms)
        latency = waves * self.wave_coef * (s.prefill_kv_max + self.q_tile / 2)
        if self.hw.attn_wave_form == "quantized":
            over = max(s.prefill_q_max - self.q_tile, 0)
            tail = self.tail_coef * over / self.pi_pre + self.tail_key * over
            return padded * (waves * self.hw.sms / max(tiles, 1)) + latency + tail
        return max(padded, latency)

    def _fitted_attention_time(
        self,
        prefill_pairs: float,
        prefill_kv: float,
        decode_pairs: float,
        decode_kv: float,
        decodes: int,
        rows: int,
        compute: float | None,
    ) -> float:
        hw = self.hw
        t = 0.0
        if prefill_kv:
            by = self.kv_coef * prefill_kv + self.qo_coef * (rows - decodes)
            c = (self.attn_coef * prefill_pairs) / self.pi_pre if compute is None else compute
            t += self._prefill_time(c, by, self.kv_coef * prefill_kv, rows - decodes) + self.pre_over
        if decode_kv:
            fl = self.attn_coef * decode_pairs
            if self.varlen and prefill_kv:
                t += fl / hw.attn_mixed_pi + self.mix_seq * decodes
            elif self.units:
                t += self._unit_decode(fl, decode_kv, decodes)
            else:
                a, m = fl / hw.attn_decode_pi, (self.kv_coef * decode_kv + self.qo_coef * decodes) / hw.beta_attention
                t += math.sqrt(a * a + m * m) + (self.dec_seq * decodes + self.dec_over)
        return t
