"""A model is data: the seed's symbols derived from a Hugging Face ``config.json``.

Symbols (seed 000, FORMULAS): L layers, h query heads, h_kv KV heads, d_h head dim,
P total parameters, b bytes per element, k = 2·L·h_kv·d_h·b KV bytes per token.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .errors import InputError, require

MODELS_DIR = Path(__file__).parent / "models"
_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float8": 1}


@dataclass(frozen=True)
class ModelSpec:
    name: str
    L: int                      # decoder layers
    H: int                      # hidden size
    h: int                      # query heads
    h_kv: int                   # KV heads
    d_h: int                    # head dim
    ffn: int                    # dense MLP intermediate size
    vocab: int
    tied: bool                  # lm_head shares the embedding matrix
    b: int = 2                  # bytes per weight / KV element
    num_experts: int = 0        # 0 = dense
    experts_per_tok: int = 0
    expert_ffn: int = 0
    shared_expert_ffn: int = 0
    moe_layers: int = 0         # layers whose MLP is MoE (the rest are dense)
    qkv_bias: bool = False
    max_model_len: int = 0

    # --- parameters, split the way the roofline streams them -----------------
    @property
    def attn_params_per_layer(self) -> int:
        q, kv = self.h * self.d_h, self.h_kv * self.d_h
        bias = (q + 2 * kv) if self.qkv_bias else 0
        return self.H * q + 2 * self.H * kv + q * self.H + bias + 2 * self.H  # + 2 norms

    @property
    def dense_mlp_params(self) -> int:
        return 3 * self.H * self.ffn  # gate, up, down

    @property
    def expert_params(self) -> int:
        return 3 * self.H * self.expert_ffn

    @property
    def moe_always_on_params_per_layer(self) -> int:
        """Router, plus the shared expert and its gate when the model has one."""
        shared = 3 * self.H * self.shared_expert_ffn + self.H if self.shared_expert_ffn else 0
        return self.H * self.num_experts + shared

    @property
    def dense_layers(self) -> int:
        return self.L - self.moe_layers

    @property
    def always_on_layer_params(self) -> int:
        """Layer weights every row uses: attention, dense MLPs, routers, shared experts."""
        return (self.L * self.attn_params_per_layer + self.dense_layers * self.dense_mlp_params
                + self.moe_layers * self.moe_always_on_params_per_layer + self.H)  # + final norm

    @property
    def embed_params(self) -> int:
        return self.vocab * self.H

    @property
    def head_params(self) -> int:
        return 0 if self.tied else self.vocab * self.H

    @property
    def P(self) -> int:
        """Total parameters."""
        return (self.always_on_layer_params + self.moe_layers * self.num_experts * self.expert_params
                + self.embed_params + self.head_params)

    @property
    def P_active(self) -> int:
        """Parameters one token touches (MoE: only its routed experts)."""
        return (self.always_on_layer_params + self.moe_layers * self.experts_per_tok * self.expert_params
                + self.embed_params + self.head_params)

    @property
    def weight_bytes(self) -> int:
        return self.P * self.b

    @property
    def kv_bytes_per_token(self) -> int:
        """k = 2·L·h_kv·d_h·b (seed 000: 131,072 B for Llama-3-8B)."""
        return 2 * self.L * self.h_kv * self.d_h * self.b

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0


def _field(cfg: dict, source: str, *names, default=None):
    for n in names:
        if cfg.get(n) is not None:
            return cfg[n]
    if default is not None:
        return default
    raise InputError(f"{source}:{names[0]}", None, "missing from config.json")


def model_from_config(cfg: dict, name: str = "model") -> ModelSpec:
    """Build a :class:`ModelSpec` from a Hugging Face ``config.json`` dictionary."""
    cfg = {**cfg, **cfg.get("text_config", {})}
    f = lambda *n, default=None: _field(cfg, name, *n, default=default)  # noqa: E731
    H, L, h = int(f("hidden_size", "d_model")), int(f("num_hidden_layers", "n_layer")), int(f("num_attention_heads"))
    h_kv = int(f("num_key_value_heads", default=h))
    d_h = int(cfg.get("head_dim") or H // h)
    E = int(cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts") or 0)
    moe_layers = 0
    if E:
        step = int(cfg.get("decoder_sparse_step") or 1)
        only_dense = set(cfg.get("mlp_only_layers") or [])
        first_dense = int(cfg.get("first_k_dense_replace") or 0)
        moe_layers = sum(1 for i in range(L) if (i + 1) % step == 0 and i not in only_dense and i >= first_dense)
    model_type = str(cfg.get("model_type", ""))
    spec = ModelSpec(
        name=name, L=L, H=H, h=h, h_kv=h_kv, d_h=d_h,
        ffn=int(f("intermediate_size", default=0)),
        vocab=int(f("vocab_size")),
        tied=bool(cfg.get("tie_word_embeddings", False)),
        b=_DTYPE_BYTES.get(str(cfg.get("torch_dtype", "bfloat16")), 2),
        num_experts=E,
        experts_per_tok=int(cfg.get("num_experts_per_tok") or (2 if E else 0)),
        expert_ffn=int(cfg.get("moe_intermediate_size") or cfg.get("intermediate_size") or 0) if E else 0,
        shared_expert_ffn=int(cfg.get("shared_expert_intermediate_size") or 0),
        moe_layers=moe_layers,
        qkv_bias=bool(cfg.get("attention_bias", model_type in ("qwen2", "qwen2_moe"))),
        max_model_len=int(cfg.get("max_position_embeddings") or 0),
    )
    for fld in ("L", "H", "h", "h_kv", "d_h", "vocab"):
        require(getattr(spec, fld) > 0, f"{name}:{fld}", getattr(spec, fld), "must be positive")
    require(spec.h % spec.h_kv == 0, f"{name}:num_key_value_heads", h_kv, f"must divide num_attention_heads={h}")
    require(spec.ffn > 0 or spec.moe_layers == L, f"{name}:intermediate_size", spec.ffn, "must be positive")
    return spec


def known_models() -> list[str]:
    return sorted(p.stem for p in MODELS_DIR.glob("*.json"))


def load_model(name_or_path: str) -> ModelSpec:
    """A short name (``llama-3.1-8b``), a ``config.json`` path, or a folder holding one."""
    path = Path(name_or_path)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        path = MODELS_DIR / f"{str(name_or_path).lower()}.json"
    if not path.is_file():
        raise InputError("model", name_or_path, f"unknown model; known: {', '.join(known_models())} (or a config.json path)")
    try:
        cfg = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise InputError("model", str(path), f"not valid JSON ({e.msg} at line {e.lineno})") from None
    name = path.stem if path.parent == MODELS_DIR else str(name_or_path)
    return model_from_config(cfg, name=name)
