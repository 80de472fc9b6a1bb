"""A batch's shape as the roofline needs it: exact integer sums over (q_lens, kv_lens)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from .errors import require

Q_TILE = 64  # query rows per FlashAttention CTA (FA2's kBlockM for head dim 128 on sm8x/sm89): the wave model's tile


def attention_sums(
    q_lens, kv_lens, bound: float, decodes: int, decode_tokens: int
) -> tuple[int, int, int, int, int, int]:
    """(rows, compute-bound pairs, their KV tokens, memory-bound KV tokens, their pairs, prefill
    sequences (q > 1)), exact integers; `decodes` more q = 1 sequences come as their total Σ(kv + 1),
    compute-bound only when bound < 1. At bound 1 (fitted attention) the prefill sequences are
    exactly the compute-bound ones: q·kv + q(q+1)/2 > kv + q exactly when q > 1."""
    rows, pairs, pkv, dkv, dpairs, pseqs = decodes, 0, 0, 0, 0, 0
    if decodes:
        if 1 > bound:
            pairs = pkv = decode_tokens
        else:
            dkv = dpairs = decode_tokens
    for q, kv in zip(q_lens, kv_lens):
        q, kv = int(q), int(kv)
        rows += q
        pseqs += q > 1
        p = q * kv + q * (q + 1) // 2
        if p > bound * (kv + q):
            pairs += p
            pkv += kv + q
        else:
            dpairs += p
            dkv += kv + q
    return rows, pairs, pkv, dkv, dpairs, pseqs


@dataclass(frozen=True)
class ShapeStats:
    """What the roofline needs of a batch, reduced from (q_lens, kv_lens).

    Attention is priced per sequence, max(F_i/π, B_i/β) (varlen attention gives each sequence
    its own thread blocks), which is what keeps the cost monotone in every q and kv. Summing
    the compute-bound sequences and the memory-bound ones separately gives the same total with
    two operators: a sequence is compute-bound when its query-key pairs exceed `bound` times its
    KV tokens. In any real batch that is prefill versus decode, hence the operator names."""

    rows: int  # T = Σ q
    seqs: int  # B, one sampled row each
    prefill_pairs: float  # compute-bound sequences: Σ q·kv + q(q+1)/2  (query-key pairs)
    prefill_kv: float  # compute-bound sequences: Σ kv + q           (KV tokens touched)
    decode_kv: float  # memory-bound sequences: Σ kv + q; for decodes (q = 1) pairs = tokens
    decode_pairs: float = -1.0  # memory-bound sequences' pairs; -1: equal to decode_kv (all decodes)
    prefill_seqs: int = 0  # sequences with q > 1 (host time's per-prefill term; at bound 1 the compute-bound ones)
    prefill_tiles: int = 0  # with a query tile T (attention wave model): Σ⌈q/T⌉ over the compute-bound ones
    prefill_tile_work: int = 0  # Σ⌈q/T⌉·(2·kv + q): their query-key pairs with q padded to whole tiles, ×2/T
    prefill_kv_max: int = 0  # their longest cached prefix
    prefill_q_max: int = 0  # their longest chunk (the wave model's causal tail)
    decode_kv_max: int = 0  # with decode_max: the longest memory-bound sequence's kv + q (the decode skew)

    @classmethod
    def of(
        cls,
        q_lens,
        kv_lens,
        bound: float = 1.0,
        decodes: int = 0,
        decode_tokens: int = 0,
        tile: int = 0,
        decode_max: bool = False,
    ) -> ShapeStats:
        """Exact integer sums: plain Python for small batches, numpy for wide ones (same results).
        `decodes` more sequences with q = 1 whose Σ(kv + 1) is `decode_tokens` may be given as totals;
        `tile` > 0 also sums the compute-bound sequences' query tiles (the attention wave model);
        `decode_max` also finds the longest memory-bound sequence, which totals do not tell."""
        if decode_max:
            require(not decodes, "decodes", decodes, "given as totals: the decode skew needs each sequence's context")
            s = cls.of(q_lens, kv_lens, bound, 0, 0, tile)
            longest = 0
            for q, kv in zip(q_lens, kv_lens):
                q, kv = int(q), int(kv)
                if q * kv + q * (q + 1) // 2 <= bound * (kv + q):  # memory-bound: attention_sums' decode side
                    longest = max(longest, kv + q)
            return dataclasses.replace(s, decode_kv_max=longest)
        if len(q_lens) > 48:
            s = cls._of_wide(np.asarray(q_lens, dtype=np.int64), np.asarray(kv_lens, dtype=np.int64), bound, tile)
            return s._plus_decodes(decodes, decode_tokens, bound) if decodes else s
        rows, pairs, pkv, dkv, dpairs, pseqs = attention_sums(q_lens, kv_lens, bound, decodes, decode_tokens)
        tiles = work = kvmax = qmax = 0
        if tile:
            for q, kv in zip(q_lens, kv_lens):
                q, kv = int(q), int(kv)
                if q * kv + q * (q + 1) // 2 > bound * (kv + q):
                    nt = -(-q // tile)
                    tiles, work, kvmax, qmax = tiles + nt, work + nt * (2 * kv + q), max(kvmax, kv), max(qmax, q)
        return cls(
            rows,
            len(q_lens) + decodes,
            float(pairs),
            float(pkv),
            float(dkv),
            float(dpairs),
            pseqs,
            tiles,
            work,
            kvmax,
            qmax,
        )

    def _plus_decodes(self, n: int, tokens: int, bound: float) -> ShapeStats:
        """Integer-valued float sums stay exact below 2**53, so adding the totals here is exact."""
        rows, pairs, pkv, dkv, dpairs, pseqs = attention_sums((), (), bound, n, tokens)
        return ShapeStats(
            self.rows + rows,
            self.seqs + n,
            self.prefill_pairs + pairs,
            self.prefill_kv + pkv,
            self.decode_kv + dkv,
            self.decode_pairs + dpairs,
            self.prefill_seqs + pseqs,
            self.prefill_tiles,
            self.prefill_tile_work,
            self.prefill_kv_max,
            self.prefill_q_max,
        )

    @classmethod
    def _of_wide(cls, q: np.ndarray, kv: np.ndarray, bound: float, tile: int = 0) -> ShapeStats:
        p = q * kv + q * (q + 1) // 2
        tokens = kv + q
        hot = p > bound * tokens
        tiles = work = kvmax = qmax = 0
        if tile and hot.any():
            nt = -(-q[hot] // tile)
            tiles, work, kvmax = int(nt.sum()), int((nt * (2 * kv[hot] + q[hot])).sum()), int(kv[hot].max())
            qmax = int(q[hot].max())
        return cls(
            int(q.sum()),
            len(q),
            float(p[hot].sum()),
            float(tokens[hot].sum()),
            float(tokens[~hot].sum()),
            float(p[~hot].sum()),
            int((q > 1).sum()),
            tiles,
            work,
            kvmax,
            qmax,
        )

    @property
    def memory_bound_pairs(self) -> float:
        return self.decode_kv if self.decode_pairs < 0 else self.decode_pairs
