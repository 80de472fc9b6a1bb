"""The seed's stall study: one long prompt arrives while decoders run (seed 000, "Chunked prefill").

Every figure is derived from the cost model with the seed's conventions; the figures are
computed, never looked up. ``SEED_VALUES`` holds what the seed states, used only to print
the comparison column when the inputs are the seed's own scene.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from costmodel import CostModel, Hardware, ModelSpec, ShapeStats
from costmodel.errors import require

SEED_SCENE = dict(
    model="llama-3.1-8b",
    hardware="h100",
    prompt_len=32768,
    num_decodes=32,
    decode_context=2048,
    budget=2048,
    slo_ms=60.0,
    align=256,
    tp=1,
)

SEED_VALUES = {
    "prefill_s": 1.61,
    "prefill_tflop": 807,
    "decode_step_s": 0.0095,
    "kv_bytes_per_token": 131072,
    "weight_bytes": 16.06e9,
    "spike_ratio": 170,
    "num_chunks": 17,
    "first_chunk_s": 0.070,
    "max_chunk_s": 0.134,
    "chunked_total_s": 1.61 + 0.056,
    "piggyback_decode_s": 0.0043,
    "ridge_spec": 295,
    "ridge_achieved": 192,
    "kv_reread_crossover_tokens": 245e3,
    "kv_reread_fraction_at_128k": 0.53,
    "slo_budget_tokens": 1536,
    "decode_riding_along_s": 0.056,
}
JSON_KEYS = (
    "prefill_s",
    "prefill_tflop",
    "decode_step_s",
    "kv_bytes_per_token",
    "weight_bytes",
    "spike_ratio",
    "num_chunks",
    "first_chunk_s",
    "max_chunk_s",
    "chunked_total_s",
    "piggyback_decode_s",
    "ridge_spec",
    "ridge_achieved",
    "kv_reread_crossover_tokens",
    "kv_reread_fraction_at_128k",
    "slo_budget_tokens",
    "slo_chunk_tokens",
    "slo_chunk_step_s",
)


@dataclass(frozen=True)
class StallScene:
    prompt_len: int = 32768  # S, tokens of the long prompt
    num_decodes: int = 32  # requests decoding when it arrives
    decode_context: int = 2048  # tokens each decoder holds in KV
    budget: int = 2048  # vLLM max_num_batched_tokens
    slo_ms: float = 60.0  # p99 ITL target
    align: int = 256  # page alignment of the recommended chunk

    def __post_init__(self):
        for f in ("prompt_len", "num_decodes", "decode_context", "budget", "align"):
            require(getattr(self, f) > 0, f.replace("_", "-"), getattr(self, f), "must be positive")
        require(self.slo_ms > 0, "slo-ms", self.slo_ms, "must be positive")
        require(
            self.budget > self.num_decodes,
            "budget",
            self.budget,
            f"must exceed --num-decodes={self.num_decodes}: the decodes take one slot each and the prompt "
            "could never advance (vLLM rejects max_num_batched_tokens < max_num_seqs for this reason)",
        )

    @property
    def chunk(self) -> int:
        """New prompt tokens per chunked iteration: the budget left after one slot per decode."""
        return self.budget - self.num_decodes


def chunk_table(cm: CostModel, sc: StallScene) -> pd.DataFrame:
    """One row per chunk of the long prompt, each priced with the decodes riding along."""
    c, S, D, ctx = sc.chunk, sc.prompt_len, sc.num_decodes, sc.decode_context
    rows = []
    for i in range(math.ceil(S / c)):
        q = min(c, S - i * c)
        alone = cm.time(cm.shape([q], [i * c]))
        mixed = cm.time(cm.shape([q] + [1] * D, [i * c] + [ctx] * D))
        rows.append(dict(index=i + 1, new_tokens=q, cached_prefix=i * c, time_s=mixed, prefill_only_s=alone))
    return pd.DataFrame(rows)


def priced_step(cm: CostModel, sc: StallScene, c: int) -> float:
    """Seconds of the step the decoders feel most: a ``c``-token chunk of the prompt at its last
    position (cached prefix S − c, the most attention) with the D decodes riding along, priced by
    the cost model ``chunksim cost`` uses (attention and all-reduce included)."""
    q = min(c, sc.prompt_len)
    D = sc.num_decodes
    return cm.time(cm.shape([q] + [1] * D, [sc.prompt_len - q] + [sc.decode_context] * D))


def slo_chunk(cm: CostModel, sc: StallScene) -> int:
    """The largest multiple of ``align`` whose priced step (``priced_step``) is within the SLO; 0 when
    even ``align`` tokens are not. The step grows with c, so a bisection over multiples finds it."""
    slo = sc.slo_ms / 1e3
    lo, hi = 0, -(-sc.prompt_len // sc.align)  # in units of align: priced(lo) <= slo < priced(hi + 1)
    if priced_step(cm, sc, hi * sc.align) <= slo:
        return hi * sc.align
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if priced_step(cm, sc, mid * sc.align) <= slo else (lo, mid)
    return lo * sc.align


def stall_figures(model: ModelSpec, hw: Hardware, sc: StallScene, tp: int = 1, counting: str | None = None) -> dict:
    cm = CostModel(model, hw, tp, counting)
    S, D, ctx = sc.prompt_len, sc.num_decodes, sc.decode_context
    prefill = cm.breakdown(cm.shape([S], [0]))
    decode_step = cm.time(cm.shape([1] * D, [ctx] * D))
    chunks = chunk_table(cm, sc)
    full = chunks[chunks.new_tokens == sc.chunk]
    first = chunks.iloc[0]
    per_row = sum(fl for _, fl, *_ in cm.weight_terms(ShapeStats(1, 0, 0.0, 0.0, 0.0)))  # 2P per row
    big = ShapeStats(sc.budget, 1, 0.0, 0.0, 0.0)
    weight_stream = sum(by for _, _, by, *_ in cm.weight_terms(big))  # P·b per pass
    k = cm.kv_coef
    decode_kv = cm.breakdown(cm.shape([1] * D, [ctx] * D)).op("attention_decode").time_s
    c_slo = hw.pi_eff * (sc.slo_ms / 1e3 - decode_step) / per_row
    return {
        "prefill_s": prefill.time_s,
        "prefill_tflop": prefill.flops / 1e12,
        "decode_step_s": decode_step,
        "kv_bytes_per_token": model.kv_bytes_per_token,
        "weight_bytes": cm.weight_bytes_per_gpu,
        "spike_ratio": prefill.time_s / decode_step,
        "num_chunks": len(chunks),
        "first_chunk_s": float(first.time_s),
        "max_chunk_s": float((full if len(full) else chunks).time_s.max()),
        "chunked_total_s": float(chunks.time_s.sum()),
        "piggyback_decode_s": float(first.time_s - first.prefill_only_s),
        "ridge_spec": hw.ridge_spec,
        "ridge_achieved": hw.ridge_achieved,
        "kv_reread_crossover_tokens": 2 * weight_stream / k,
        "kv_reread_fraction_at_128k": (k * 131072 / 2) / weight_stream,
        "slo_budget_tokens": max(0, int(c_slo) // sc.align * sc.align),
        "slo_chunk_tokens": (c := slo_chunk(cm, sc)),
        "slo_chunk_step_s": priced_step(cm, sc, c) if c else float("nan"),
        "decode_riding_along_s": decode_kv * len(chunks),
    }


LABELS = {
    "prefill_s": ("prefill of the long prompt", "s"),
    "prefill_tflop": ("prefill FLOPs", "TFLOP"),
    "decode_step_s": ("decode step (all decoders)", "s"),
    "kv_bytes_per_token": ("KV bytes per token k", "B"),
    "weight_bytes": ("weight bytes per GPU", "B"),
    "spike_ratio": ("ITL spike, unchunked", "x"),
    "num_chunks": ("chunks at the budget", ""),
    "first_chunk_s": ("first chunk + decodes", "s"),
    "max_chunk_s": ("most expensive full chunk + decodes", "s"),
    "chunked_total_s": ("all chunks", "s"),
    "piggyback_decode_s": ("decodes folded into a chunk (marginal)", "s"),
    "decode_riding_along_s": ("decode KV reads riding along, all chunks", "s"),
    "ridge_spec": ("ridge point, spec", "FLOP/B"),
    "ridge_achieved": ("ridge point, achieved", "FLOP/B"),
    "kv_reread_crossover_tokens": ("KV re-read = weight re-stream at", "tokens"),
    "kv_reread_fraction_at_128k": ("KV re-read / weights at 128k", ""),
    "slo_budget_tokens": ("largest chunk meeting the SLO, seed's formula (weight GEMMs, one GPU)", "tokens"),
    "slo_chunk_tokens": ("largest chunk meeting the SLO, priced (as `cost`: last chunk, all-reduce)", "tokens"),
    "slo_chunk_step_s": ("that chunk's step, priced", "s"),
}
