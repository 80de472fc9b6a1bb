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

CONTEXT_PARAMS = ("pi", "pi_fp8", "beta", "floor", "cta_s", "solo", "sms")
GENERATION_PARAMS = ("pi", "beta", "beta_fp8", "beta_one", "floor", "cta_s", "sms")
Q_TILE = 128  # prefill: query rows per CTA tile (FlashAttention-3)
HEAD_TILE = 64  # decode: heads padded to one 64-row MMA tile (FlashMLA); a fit may pick another
HEAD_TILES = (16, 32, 64, 128)  # the candidates calibration/wideep_fit.py tries


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
    ``heads``. FlashAttention's causal tiling: n = ⌈s/Q_TILE⌉ query tiles per sequence and head, each
    a CTA that runs its diagonal's n(n+1)/2 full Q_TILE² blocks; the CTAs share the ``sms`` SMs
    (``cta_s`` each to start), and the longest CTA's blocks on one SM, at ``solo`` times an SM's
    share of π, bound the time when there are few (one head of one long sequence): n blocks, or
    n/splits when fewer CTAs than SMs let the kernel split the keys sms/CTAs ways; the two bounds in
    quadrature (the uneven causal CTAs pack imperfectly). Bytes: Q, K, V, O once and the latent written at ``kv_b`` an element."""
    h, b, s = (np.asarray(x, float) for x in (heads, batch, isl))
    p = params
    n = np.ceil(s / Q_TILE)
    block = context_flops_per_pair(1.0, nope, rope, v) * Q_TILE * Q_TILE
    splits = np.maximum(1.0, np.floor(p["sms"] / (h * b * n)))  # split-KV when the CTAs are few
    flops = np.hypot(block * h * b * n * (n + 1) / 2, block * np.ceil(n / splits) * p["sms"] / p["solo"])
    ctas = h * b * n / p["sms"]
    nbytes = 2.0 * b * s * h * (2 * (nope + rope) + 2 * v) + b * s * latent_elems(rank, rope) * np.asarray(kv_b, float)
    pi = np.where(np.asarray(kv_b, float) < 2, p["pi_fp8"], p["pi"])  # an fp8 cache: FA3's fp8 kernel
    return p["floor"] + p["cta_s"] * ctas + np.hypot(flops / pi, nbytes / p["beta"])


def time_generation(heads, batch, kv_len, kv_b, params: dict, rank=512, rope=64):
    """Seconds of one decode MLA call: ``batch`` sequences each attending to ``kv_len`` cached tokens.
    FLOPs with the heads padded to the head tile (``head_tile``: the fit picks it); bytes: the latent at ``kv_b`` an element (an fp8
    cache at its own rate ``beta_fp8``: the kernel dequantizes as it reads) plus each head's absorbed
    q in and latent-space output out (bf16); plus one sequence's latent at ``beta_one`` (the split-KV
    chain of the last sequence to finish, which few CTAs stream); ``cta_s`` per (sequence, head
    tile) CTA over the ``sms`` SMs."""
    h, b, kv, kb = (np.asarray(x, float) for x in (heads, batch, kv_len, kv_b))
    p = params
    tile = p.get("head_tile", HEAD_TILE)
    tiles = np.ceil(h / tile)
    flops = generation_flops_per_pair(1.0, rank, rope) * tiles * tile * b * kv
    latent = kv * latent_elems(rank, rope) * kb
    qo = 2.0 * h * (latent_elems(rank, rope) + rank)
    mem = b * latent / np.where(kb < 2, p["beta_fp8"], p["beta"]) + b * qo / p["beta"]
    mem = mem + latent / p["beta_one"]
    return p["floor"] + p["cta_s"] * b * tiles / p["sms"] + np.hypot(flops / p["pi"], mem)
