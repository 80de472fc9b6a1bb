"""LLMServingSim's per-layer kernel profiles (``profiler/perf/<gpu>/<org>/<model>/<variant>/tp<N>/``).

Times are µs for one transformer layer on one GPU (LLMServingSim's profiler, vLLM 0.19 hooks):
  attention.csv     prefill_chunk, kv_prefill, n_decode, kv_decode, time_us: one attention call over a
                    batch of one prefill chunk of ``prefill_chunk`` new tokens after ``kv_prefill``
                    cached ones, beside ``n_decode`` decodes that each attend ``kv_decode`` cached tokens
  dense.csv         layer, tokens, time_us: each non-attention operator at a token count
  per_sequence.csv  layer, sequences, time_us: lm_head and sampler, by sequences sampled
The model's shape comes from the profile's ``meta.yaml`` (``model:``, e.g. meta-llama/Llama-3.1-8B,
read as a shipped model name) or the ``model`` argument; weights are split tp ways as vLLM does.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from ...errors import InputError, require
from ...model import ModelSpec, load_model
from ..timings import attention_row, gemm_row, layer_gemm_shapes, validate
from .tables import read_table

GEMMS = {
    "qkv_proj": "attn_pre_proj",
    "o_proj": "attn_post_proj",
    "gate_up_proj": "mlp_up_proj",
    "down_proj": "mlp_down_proj",
}
ELEMENTWISE = {
    "layernorm": "elementwise",
    "final_layernorm": "norm",
    "qk_norm": "norm",
    "act_fn": "elementwise",
    "rotary_emb": "elementwise",
    "embedding": "embedding",
}
# the per-layer kernels the roofline's "elementwise" operator prices (two RMSNorms, SiLU-and-mul,
# rotary embedding); final and q/k norms stay "norm" (once per pass / Qwen3 only)
US = 1e-6


def _model(folder: Path, model) -> ModelSpec:
    if isinstance(model, ModelSpec):
        return model
    if model:
        return load_model(model)
    for d in (folder, *folder.parents[:3]):
        meta = d / "meta.yaml"
        if meta.is_file():
            name = str((yaml.safe_load(meta.read_text()) or {}).get("model", ""))
            try:
                return load_model(name.split("/")[-1].lower())
            except InputError:
                raise InputError(f"{meta}:model", name, "not a shipped model; pass the model's config.json") from None
    raise InputError("from", str(folder), "no meta.yaml names the model; pass the model's config.json")


def _attention(path: Path, m: ModelSpec, tp: int) -> pd.DataFrame:
    cols = ["prefill_chunk", "kv_prefill", "n_decode", "kv_decode", "time_us"]
    raw = read_table(path, cols, cols)
    c, p, n, k = (raw[x].to_numpy(float) for x in cols[:4])
    h, hkv = m.h // tp, max(1, m.h_kv // tp)
    t = raw["time_us"].to_numpy(float) * US
    pre = attention_row("attention", (c > 0).astype(float), c, p, h, hkv, m.d_h, m.b, t)
    dec = attention_row("attention", n, 1.0, k, h, hkv, m.d_h, m.b, t)
    op = np.where(c > 0, np.where(n > 0, "attention_mixed", "attention_prefill"), "attention_decode")
    df = pd.DataFrame(
        dict(
            op_class="attention",
            op=op,
            tokens=c + n,
            m=c + n,
            k=np.maximum(p, k),
            n=m.d_h,
            tp=tp,
            workers=tp,
            dtype="bfloat16",
            flops=pre["flops"] + dec["flops"],
            bytes=pre["bytes"] + dec["bytes"],
            seqs=n,
            heads=h,
            kv_heads=hkv,
            decode_flops=dec["flops"],
            decode_bytes=dec["bytes"],
            prefill_seqs=(c > 0).astype(int),
            prefill_q=c,
            prefill_kv=p,
            time_s=t,
            source=str(path),
        )
    )
    return df[(c > 0) | (n > 0)]


def _dense(path: Path, m: ModelSpec, tp: int, notes: list) -> pd.DataFrame:
    raw = read_table(path, ["layer", "tokens", "time_us"], ["tokens", "time_us"])
    shapes = layer_gemm_shapes(m.H, m.h, m.h_kv, m.ffn, True, tp)
    shapes["attn_pre_proj"] = (m.H, (m.h // tp + 2 * max(1, m.h_kv // tp)) * m.d_h)
    shapes["attn_post_proj"] = (m.h // tp * m.d_h, m.H)
    frames, other = [], sorted(set(raw["layer"]) - set(GEMMS) - set(ELEMENTWISE))
    for layer, g in raw.groupby("layer"):
        T, t = g["tokens"].to_numpy(float), g["time_us"].to_numpy(float) * US
        cols = dict(tp=tp, workers=tp, dtype="bfloat16", source=str(path))
        if layer in GEMMS:
            k, n = shapes[GEMMS[layer]]  # type: ignore[index]
            frames.append(pd.DataFrame(gemm_row(layer, T, k, n, m.b, t, **cols)))  # type: ignore[arg-type]
        elif layer in ELEMENTWISE:
            width = {"qk_norm": m.d_h, "rotary_emb": 0, "act_fn": 0}.get(layer, m.H)  # type: ignore[arg-type]
            per_row = {
                "act_fn": 3 * m.ffn / tp,
                "rotary_emb": 2 * (m.h // tp + max(1, m.h_kv // tp)) * m.d_h,
                "qk_norm": 2 * (m.h // tp + max(1, m.h_kv // tp)) * m.d_h,
            }.get(layer, 2 * m.H)  # type: ignore[arg-type]
            frames.append(
                pd.DataFrame(
                    dict(
                        op_class=ELEMENTWISE[layer],  # type: ignore[index]
                        op=layer,
                        tokens=T,
                        m=T,
                        k=0,
                        n=width,
                        flops=0.0,
                        bytes=m.b * per_row * T,
                        time_s=t,
                        **cols,
                    )
                )
            )
    if other:
        notes.append(f"{path}: skipped layers {other} (no operator class for them)")
    return pd.concat(frames, ignore_index=True)


def _per_sequence(path: Path, m: ModelSpec, tp: int, notes: list) -> pd.DataFrame:
    raw = read_table(path, ["layer", "sequences", "time_us"], ["sequences", "time_us"])
    frames = []
    for layer, g in raw.groupby("layer"):
        S, t = g["sequences"].to_numpy(float), g["time_us"].to_numpy(float) * US
        cols = dict(tp=tp, workers=tp, dtype="bfloat16", source=str(path))
        if layer == "lm_head":
            frames.append(pd.DataFrame(gemm_row("lm_head", S, m.H, m.vocab / tp, m.b, t, **cols)))
        elif layer == "sampler":
            frames.append(
                pd.DataFrame(
                    dict(
                        op_class="sampler",
                        op="sampler",
                        tokens=S,
                        m=S,
                        k=0,
                        n=0,
                        seqs=S,
                        flops=0.0,
                        bytes=0.0,
                        time_s=t,
                        **cols,
                    )
                )
            )
        else:
            notes.append(f"{path}: skipped per-sequence layer {layer!r}")
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _tp_folders(p: Path) -> list[tuple[Path, int]]:
    if p.name.startswith("tp") and p.name[2:].isdigit():
        return [(p, int(p.name[2:]))]
    found = sorted((d, int(d.name[2:])) for d in p.glob("tp*") if d.is_dir() and d.name[2:].isdigit())
    require(bool(found), "from", str(p), "not an LLMServingSim profile folder (tp<N>/ with attention.csv, dense.csv)")
    return found


def read_llmservingsim(path, model=None, tp: int | None = None) -> tuple[pd.DataFrame, list[str]]:
    """A ``tp<N>`` folder, or the folder above holding several (``tp`` picks one); ``model`` a
    ModelSpec, shipped name or config.json (default: the profile's meta.yaml)."""
    p = Path(path)
    require(p.is_dir(), "from", str(p), "no such folder")
    folders = _tp_folders(p)
    if tp is not None:
        folders = [(d, n) for d, n in folders if n == tp]
        require(bool(folders), "tp", tp, f"no tp{tp}/ folder in {p}")
    spec = _model(folders[0][0], model)
    notes: list[str] = []
    frames = []
    for d, n in folders:
        names = ("attention.csv", "dense.csv", "per_sequence.csv")
        missing = [f for f in names if not (d / f).is_file()]
        require(not missing, "from", str(d), f"missing {', '.join(missing)}")
        frames += [
            _attention(d / names[0], spec, n),
            _dense(d / names[1], spec, n, notes),
            _per_sequence(d / names[2], spec, n, notes),
        ]
    return validate(pd.concat(frames, ignore_index=True), str(p)), notes


def skew_alpha(path, tp: int) -> float:
    """The profiler's decode skew for ``tp`` (``meta.yaml`` ``skew_fit.per_tp.<tp>.alpha_default``,
    fitted on its ragged-batch timings, skew.csv: t_skew = t_mean + α·(t_max - t_mean)), the
    profile's ``attn_decode_skew``; 0 where the folder has none (it was not profiled), and never
    below 0."""
    p = Path(path)
    for d in (p, *p.parents[:2]):
        meta = d / "meta.yaml"
        if meta.is_file():
            fit = ((yaml.safe_load(meta.read_text()) or {}).get("skew_fit") or {}).get("per_tp") or {}
            a = (fit.get(tp) or fit.get(str(tp)) or {}).get("alpha_default", 0.0)
            require(isinstance(a, (int, float)) and np.isfinite(a), f"{meta}:alpha_default", a, "must be a number")
            return max(float(a), 0.0)
    return 0.0
