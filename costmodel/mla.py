"""Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): what its attention kernels compute and read.

Symbols (the model's config.json): h query heads (h/tp per GPU), r = kv_lora_rank (512), d_r =
qk_rope_head_dim (64), d_n = qk_nope_head_dim (128), d_v = v_head_dim (128). The KV cache holds one
latent of r + d_r elements per token and layer, shared by every head and so *not* split by tp
(each TP rank keeps the whole latent: SGLang's MLA backends).
  context (prefill)   the latent is expanded by kv_b_proj into per-head K (d_n + d_r) and V (d_v),
                      then ordinary causal attention: 2·h·(d_n + d_r + d_v) FLOPs per query-key pair
  generation (decode) the absorbed form: q is multiplied into the latent space (the ``mla_gen_pre``
                      BMM, h×d_n×r), attention runs over the latent (2·h·(r + d_r) + 2·h·r FLOPs per
                      pair, reading (r + d_r)·b bytes per cached token), and the output is projected
                      back (``mla_gen_post``, h×r×d_v)
DeepSeek-V2 paper (arXiv:2405.04434) §2.1.2-2.1.3; SGLang ``python/sglang/srt/models/deepseek_v2.py``
(``forward_absorb`` / ``forward_normal``). Fitted kernel times: ``time_context`` / ``time_generation``
with ``calibration/wideep_fit.py``'s constants; held-out figures in docs/kernel-notes.md.
"""

from __future__ import annotations

import numpy as np

CONTEXT_PARAMS = ("pi", "beta", "floor", "seq_s")
GENERATION_PARAMS = ("pi", "beta", "beta_fp8", "floor", "seq_s")
Q_TILE = 128  # prefill: query rows per CTA tile (FlashAttention-3)
HEAD_TILE = 64  # decode: heads padded to one 64-row MMA tile (FlashMLA, FlashInfer MLA)


def latent_elems(kv_lora_rank: int, rope_dim: int) -> int:
    """KV-cache elements per token and layer: the compressed latent and the shared rope key."""
    return kv_lora_rank + rope_dim


def context_flops_per_pair(heads: float, nope: int, rope: int, v: int) -> float:
    """Prefill: Q·Kᵀ over d_n + d_r and P·V over d_v, 2 FLOPs per multiply-add, per head."""
    return 2.0 * heads * (nope + rope + v)


def generation_flops_per_pair(heads: float, rank: int, rope: int) -> float:
    """Decode, absorbed: scores over the latent and the rope key (r + d_r), values over the latent (r)."""
    return 2.0 * heads * (rank + rope + rank)


def time_context(heads, batch, isl, kv_b, params: dict, nope=128, rope=64, v=128, rank=512):
    """Seconds of one prefill MLA call: ``batch`` sequences of ``isl`` new tokens (no prefix), per GPU
    ``heads``; causal pairs with the queries padded to the Q tile; bytes: Q, K, V, O once and the latent
    written at ``kv_b`` bytes an element."""
    h, b, s = (np.asarray(x, float) for x in (heads, batch, isl))
    padded = np.ceil(s / Q_TILE) * Q_TILE
    flops = context_flops_per_pair(1.0, nope, rope, v) * h * b * s * (padded + 1) / 2
    nbytes = 2.0 * b * s * h * (2 * (nope + rope) + 2 * v) + b * s * latent_elems(rank, rope) * np.asarray(kv_b, float)
    p = params
    return p["floor"] + p["seq_s"] * b + np.hypot(flops / p["pi"], nbytes / p["beta"])


def time_generation(heads, batch, kv_len, kv_b, params: dict, rank=512, rope=64):
    """Seconds of one decode MLA call: ``batch`` sequences each attending to ``kv_len`` cached tokens;
    heads padded to the head tile; the latent read at ``kv_b`` bytes an element (fp8 caches at their
    own rate: the kernel dequantizes as it reads)."""
    h, b, kv, kb = (np.asarray(x, float) for x in (heads, batch, kv_len, kv_b))
    hp = np.maximum(h, HEAD_TILE)
    flops = generation_flops_per_pair(1.0, rank, rope) * hp * b * kv
    nbytes = b * kv * latent_elems(rank, rope) * kb
    p = params
    mem = np.where(kb < 2, nbytes / p["beta_fp8"], nbytes / p["beta"])
    return p["floor"] + p["seq_s"] * b + np.hypot(flops / p["pi"], mem)
