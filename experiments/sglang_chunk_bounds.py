"""Seed 001 §七 bounded: how much of its runtime change a larger ``chunked_prefill_size`` can buy.

The seed's rows: 429 fewer prefill batches and 900 s less runtime (106 → 91 min) at a TPOT P50
1.5 % higher. A pass holds at most ``chunked_prefill_size`` new tokens: SGLang's PrefillAdder
charges every admitted extend to ``rem_chunk_tokens`` (``_update_prefill_budget``) and cuts a
continuing request to what is left (``add_chunked_req``). Priced by the cost model at the seed's
deployment (TP 8), three figures:
- ``saving_per_avoided_pass_s``: the most GPU time one pass fewer saves, a request's chunk merged
  with its next tokens or two requests packed into one pass: the pass's fixed part (weights
  streamed once, a small pass's low GEMM and fused-MoE efficiency);
- ``prefill_ceiling_s``: the 8192 run's whole prefill, every one of its 2,214 passes priced as
  8,192 tokens at the end of the model's context (the dearest pass it could run): the runtime a
  larger chunk would save if it made prefill free;
- ``wait_share_needed``: at a fixed number of closed-loop clients and fixed outputs, runtime is
  proportional to the mean end-to-end latency, wait + decode, and decode to TPOT; the least share
  of it the 8192 run's clients must have spent before their first token for the seed's ratio.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from costmodel import CostModel, load_hardware, load_model
from experiments.sglang_chunk_study import SEED_TABLE

SMALL, LARGE = 8192, 16384  # the seed's two chunked_prefill_size values
MERGE_TAILS = (64, 512, 2048, 4096, 8192)  # tokens a request has left after one full chunk
PACK_SIZES = (1024, 4096, 8192)  # extends of two requests that share a pass only at the larger chunk


def _pass_s(cm: CostModel, q_lens, kv_lens) -> float:
    return cm.step_time(np.asarray(q_lens), np.asarray(kv_lens))


def _prefixes(context: int) -> list[int]:
    """Cached-prefix lengths to try, up to where a merged 16,384-token pass still fits the context."""
    top = context - LARGE
    return sorted({p for p in (0, 8192, 32768, 65536, 131072, top // 2, top) if 0 <= p <= top})


def saving_per_avoided_pass_s(model: str = "qwen3.5-122b-a10b", hardware: str = "h100-sxm", tp: int = 8) -> float:
    """Max over merges (8,192 tokens at prefix P, then r more: two passes → one) and packings (two
    requests, a + b > 8,192: two passes → one) of the GPU seconds saved."""
    m = load_model(model)
    cm = CostModel(m, load_hardware(hardware), tp=tp)
    best = 0.0
    for p in _prefixes(m.max_model_len):
        for r in MERGE_TAILS:
            best = max(best, _pass_s(cm, [SMALL], [p]) + _pass_s(cm, [r], [p + SMALL]) - _pass_s(cm, [SMALL + r], [p]))
        for a in PACK_SIZES:
            for b in PACK_SIZES:
                if a + b > SMALL:
                    both = _pass_s(cm, [a, b], [p, p])
                    best = max(best, _pass_s(cm, [a], [p]) + _pass_s(cm, [b], [p]) - both)
    return best


def prefill_ceiling_s(model: str = "qwen3.5-122b-a10b", hardware: str = "h100-sxm", tp: int = 8) -> float:
    """The seed's 8192-run prefill batches, each priced as a full chunk at the end of the context."""
    m = load_model(model)
    cm = CostModel(m, load_hardware(hardware), tp=tp)
    return SEED_TABLE[SMALL]["prefill_batches"] * _pass_s(cm, [SMALL], [m.max_model_len - SMALL])


def wait_share_needed() -> float:
    """1 − (runtime ratio)/(TPOT ratio): wait + decode must fall by the runtime ratio while decode
    rises by the TPOT ratio; with the larger chunk's wait at zero, the wait share this leaves."""
    a, b = SEED_TABLE[SMALL], SEED_TABLE[LARGE]
    return 1 - (b["runtime_min"] / a["runtime_min"]) / (b["median_tpot_ms"] / a["median_tpot_ms"])


def bounds(hardware=("h100", "h100-sxm"), model: str = "qwen3.5-122b-a10b", tp: int = 8) -> pd.DataFrame:
    """One row per hardware profile: the two prefill bounds beside the seed's 900 s."""
    a, b = SEED_TABLE[SMALL], SEED_TABLE[LARGE]
    avoided = a["prefill_batches"] - b["prefill_batches"]
    runtime_s, saved_s = a["runtime_min"] * 60, (a["runtime_min"] - b["runtime_min"]) * 60
    rows = []
    for hw in hardware:
        per = saving_per_avoided_pass_s(model, hw, tp)
        ceiling = prefill_ceiling_s(model, hw, tp)
        rows.append(
            dict(
                hardware=hw,
                saving_per_avoided_pass_ms=per * 1e3,
                avoided_passes_saving_s=per * avoided,
                prefill_ceiling_s=ceiling,
                prefill_ceiling_pct_of_runtime=ceiling / runtime_s * 100,
                seed_runtime_saved_s=saved_s,
            )
        )
    return pd.DataFrame(rows).set_index("hardware")


def format_bounds(df: pd.DataFrame) -> str:
    avoided = SEED_TABLE[SMALL]["prefill_batches"] - SEED_TABLE[LARGE]["prefill_batches"]
    lines = [f"what a larger chunk can save (the seed's {avoided} avoided prefill batches, TP 8):"]
    for hw, r in df.iterrows():
        lines.append(
            f"  {hw:9s} {r.saving_per_avoided_pass_ms:5.1f} ms a pass fewer x {avoided} = "
            f"{r.avoided_passes_saving_s:5.1f} s; all prefill free: <= {r.prefill_ceiling_s:4.0f} s "
            f"({r.prefill_ceiling_pct_of_runtime:.1f} % of 106 min); seed: {r.seed_runtime_saved_s:.0f} s"
        )
    lines.append(
        f"  closed loop: the 8192 run's clients must have waited for a first token >= "
        f"{wait_share_needed() * 100:.1f} % of their end-to-end latency"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    print(format_bounds(bounds()))
