"""A model is data: the seed's symbols derived from a Hugging Face ``config.json``.

Symbols (seed 000, FORMULAS): L layers, h query heads, h_kv KV heads, d_h head dim,
P total parameters, b bytes per element, k = 2·L·h_kv·d_h·b KV bytes per token.

Hybrid models (Qwen3-Next, Qwen3.5: ``layer_types`` / ``full_attention_interval``) interleave
full-attention layers, which keep a KV cache, with Gated DeltaNet linear-attention layers, which
keep a fixed-size state per sequence instead: there ``kv_layers`` < L and k = 2·kv_layers·h_kv·d_h·b.
Every other model has kv_layers = L, and nothing about it changes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .datafiles import find
from .errors import InputError, require
from .precision import WEIGHT_FORMATS, from_config

MODELS_DIR = Path(__file__).parent / "models"
_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float8": 1}


@dataclass(frozen=True)
class ModelSpec:
    name: str
    L: int  # decoder layers
    H: int  # hidden size
    h: int  # query heads
    h_kv: int  # KV heads
    d_h: int  # head dim
    ffn: int  # dense MLP intermediate size
    vocab: int
    tied: bool  # lm_head shares the embedding matrix
    b: int = 2  # bytes per weight / KV element
    num_experts: int = 0  # 0 = dense
    experts_per_tok: int = 0
    expert_ffn: int = 0
    shared_expert_ffn: int = 0
    moe_layers: int = 0  # layers whose MLP is MoE (the rest are dense)
    qkv_bias: bool = False
    max_model_len: int = 0
    kv_layers: int | None = None  # full-attention layers (a KV cache each); None = L
    attn_output_gate: bool = False  # Qwen3-Next gated attention: q_proj also emits a sigmoid gate
    lin_k_heads: int = 0  # Gated DeltaNet layers (L - kv_layers of them): key heads,
    lin_v_heads: int = 0  # value heads,
    lin_k_dim: int = 0  # key head dim,
    lin_v_dim: int = 0  # value head dim,
    lin_conv_kernel: int = 0  # causal short-convolution width
    gated_mlp: bool = True  # gate, up, down (Llama, Qwen); False: up, down (BLOOM's 4h GELU MLP)
    rotary: bool = True  # RoPE on q and k in every layer; False: ALiBi (BLOOM) or learned positions (OPT)
    out_biases: int = 0  # the layer's row-parallel projections with a bias (attention out, MLP down): BLOOM, OPT 2
    weights: str = "bf16"  # the decoder's linear weights' format (costmodel/precision.py); embedding, head: b
    kv_b: float = 0.0  # bytes per KV element (0: b)
    kv_lora_rank: int = 0  # MLA (DeepSeek-V2/V3, Kimi-K2; costmodel/mla.py): latent width r (0: not MLA)
    q_lora_rank: int = 0  # ... the query's low-rank width (0: a full-rank q_proj)
    qk_rope_dim: int = 0  # ... the decoupled rope key d_r, shared by the heads and cached beside the latent
    v_head_dim: int = 0  # ... d_v; d_h is then the query/key head dim d_n + d_r

    def __post_init__(self):
        if self.kv_layers is None:
            object.__setattr__(self, "kv_layers", self.L)

    @property
    def linear_layers(self) -> int:
        """Linear-attention layers: no KV cache, a fixed state per sequence (0 for plain transformers)."""
        return self.L - self.kv_layers  # type: ignore[operator]

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def mla_params_per_layer(self) -> int:
        """q_a (H→q_lora) and q_b (q_lora→h·d_h), or q_proj; kv_a (H→r + d_r); kv_b (r→h·(d_n + d_v));
        o_proj (h·d_v→H); the q/kv latent norms and the layer's 2 norms (HF DeepseekV3Attention)."""
        r, qr, hd = self.kv_lora_rank, self.q_lora_rank, self.h * self.d_h
        q = self.H * qr + qr + qr * hd if qr else self.H * hd
        nope = self.d_h - self.qk_rope_dim
        kv = self.H * (r + self.qk_rope_dim) + r + r * self.h * (nope + self.v_head_dim)
        return q + kv + self.h * self.v_head_dim * self.H + 2 * self.H

    # --- parameters, split the way the roofline streams them -----------------
    @property
    def attn_params_per_layer(self) -> int:
        if self.is_mla:
            return self.mla_params_per_layer
        q, kv = self.h * self.d_h, self.h_kv * self.d_h
        bias = (q + 2 * kv) if self.qkv_bias else 0
        gate = self.H * q if self.attn_output_gate else 0
        return self.H * q + gate + 2 * self.H * kv + q * self.H + bias + 2 * self.H  # + 2 norms

    @property
    def linear_key_dim(self) -> int:
        return self.lin_k_heads * self.lin_k_dim

    @property
    def linear_value_dim(self) -> int:
        return self.lin_v_heads * self.lin_v_dim

    @property
    def linear_conv_dim(self) -> int:
        """Channels of the short convolution: q, k and v (z and the gates bypass it)."""
        return 2 * self.linear_key_dim + self.linear_value_dim

    @property
    def linear_attn_params_per_layer(self) -> int:
        """One Gated DeltaNet layer (HF Qwen3NextGatedDeltaNet): in_proj_qkvz H→2·key+2·value,
        in_proj_ba H→2·h_v, depthwise conv1d (no bias), dt_bias and A_log per value head, the
        gated RMSNorm over one value head, out_proj value→H, plus the layer's 2 norms."""
        if not self.lin_v_heads:
            return 0
        kd, vd, hv = self.linear_key_dim, self.linear_value_dim, self.lin_v_heads
        return (
            self.H * (2 * kd + 2 * vd + 2 * hv)
            + self.linear_conv_dim * self.lin_conv_kernel
            + 2 * hv
            + self.lin_v_dim
            + vd * self.H
            + 2 * self.H
        )

    @property
    def linear_state_elems(self) -> int:
        """Recurrent state of one linear-attention layer for one sequence: h_v·d_k·d_v."""
        return self.lin_v_heads * self.lin_k_dim * self.lin_v_dim

    @property
    def linear_conv_state_elems(self) -> int:
        """Short-convolution state of one linear-attention layer for one sequence: the last K-1 inputs."""
        return self.linear_conv_dim * max(0, self.lin_conv_kernel - 1)

    @property
    def dense_mlp_params(self) -> int:
        return (3 if self.gated_mlp else 2) * self.H * self.ffn  # gate, up, down (or up, down)

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
        return (
            self.kv_layers * self.attn_params_per_layer  # type: ignore[operator]
            + self.linear_layers * self.linear_attn_params_per_layer
            + self.dense_layers * self.dense_mlp_params
            + self.moe_layers * self.moe_always_on_params_per_layer
            + self.H
        )  # + final norm

    @property
    def embed_params(self) -> int:
        return self.vocab * self.H

    @property
    def head_params(self) -> int:
        return 0 if self.tied else self.vocab * self.H

    @property
    def P(self) -> int:
        """Total parameters."""
        return (
            self.always_on_layer_params
            + self.moe_layers * self.num_experts * self.expert_params
            + self.embed_params
            + self.head_params
        )

    @property
    def P_active(self) -> int:
        """Parameters one token touches (MoE: only its routed experts)."""
        return (
            self.always_on_layer_params
            + self.moe_layers * self.experts_per_tok * self.expert_params
            + self.embed_params
            + self.head_params
        )

    @property
    def w_b(self) -> float:
        """Bytes per decoder linear weight: b, or the quantized format's (scales included)."""
        return self.b if self.weights == "bf16" else WEIGHT_FORMATS[self.weights][0]

    @property
    def kv_elem_bytes(self) -> float:
        return self.kv_b or self.b

    @property
    def weight_bytes(self) -> float:
        """P·b; quantized, the decoder's weights at w_b and the embedding and LM head at b."""
        if self.weights == "bf16":
            return self.P * self.b
        outer = self.embed_params + self.head_params
        return (self.P - outer) * self.w_b + outer * self.b

    @property
    def kv_bytes_per_token(self) -> float:
        """k = 2·L·h_kv·d_h·b (seed 000: 131,072 B for Llama-3-8B); hybrid models: kv_layers for L;
        an fp8 KV cache: its bytes per element for b; MLA: one latent of r + d_r per layer (costmodel/mla.py)."""
        if self.is_mla:
            return self.kv_layers * (self.kv_lora_rank + self.qk_rope_dim) * self.kv_elem_bytes  # type: ignore[operator]
        return 2 * self.kv_layers * self.h_kv * self.d_h * self.kv_elem_bytes  # type: ignore[operator]

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0


def _field(cfg: dict, source: str, *names, default=None):
    for n in names:
        if cfg.get(n) is not None:
            return _checked(cfg, source, n)
    if default is not None:
        return default
    raise InputError(f"{source}:{names[0]}", None, "missing from config.json")


INT_FIELDS = (
    "hidden_size",
    "d_model",
    "num_hidden_layers",
    "n_layer",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "ffn_dim",
    "vocab_size",
    "num_local_experts",
    "num_experts",
    "n_routed_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "decoder_sparse_step",
    "first_k_dense_replace",
    "max_position_embeddings",
    "full_attention_interval",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
    "n_shared_experts",
    "kv_lora_rank",
    "q_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
)
BOOL_FIELDS = ("tie_word_embeddings", "attention_bias", "attn_output_gate")


def _checked(cfg: dict, source: str, key: str):
    """An integer that is an integer (not a bool, string, float or NaN); a bool that is a bool."""
    v = cfg[key]
    if key in INT_FIELDS and v is not None:
        require(isinstance(v, int) and not isinstance(v, bool), f"{source}:{key}", v, "must be an integer")
        require(v >= 0, f"{source}:{key}", v, "must be >= 0")
    if key in BOOL_FIELDS and v is not None:
        require(isinstance(v, bool), f"{source}:{key}", v, "must be true or false")
    return v


def _check_types(cfg, source: str) -> dict:
    require(isinstance(cfg, dict), source, type(cfg).__name__, "config.json must be a JSON object")
    if "text_config" in cfg:
        require(isinstance(cfg["text_config"], dict), f"{source}:text_config", cfg["text_config"], "must be an object")
    merged = {**cfg, **cfg.get("text_config", {})}
    for key in INT_FIELDS + BOOL_FIELDS:
        if key in merged:
            _checked(merged, source, key)
    for key in ("mlp_only_layers", "layer_types"):
        require(
            merged.get(key) is None or isinstance(merged[key], list),
            f"{source}:{key}",
            merged.get(key),
            "must be a list",
        )
    require(
        isinstance(merged.get("torch_dtype", "bfloat16"), str),
        f"{source}:torch_dtype",
        merged.get("torch_dtype"),
        "must be a string",
    )
    return merged


def _hybrid_layers(cfg: dict, name: str, L: int) -> tuple[int, dict]:
    """(KV-cache layers, linear-attention fields). ``layer_types`` names each layer (anything but
    "linear_attention" keeps a KV cache); without it, ``full_attention_interval`` n makes layer i
    full attention when (i+1) % n == 0 and linear otherwise (HF Qwen3NextConfig's default)."""
    types = cfg.get("layer_types")
    if types is not None:
        require(
            isinstance(types, list) and len(types) == L,
            f"{name}:layer_types",
            types if not isinstance(types, list) else len(types),
            f"must list one type per layer ({L})",
        )
        linear = sum(1 for t in types if t == "linear_attention")
    elif cfg.get("full_attention_interval"):
        n = int(cfg["full_attention_interval"])
        require(n >= 1, f"{name}:full_attention_interval", n, "must be >= 1")
        linear = sum(1 for i in range(L) if (i + 1) % n)
    else:
        linear = 0
    if not linear:
        return L, {}
    f = lambda k: int(_field(cfg, name, k))  # noqa: E731
    lin = dict(
        lin_k_heads=f("linear_num_key_heads"),
        lin_v_heads=f("linear_num_value_heads"),
        lin_k_dim=f("linear_key_head_dim"),
        lin_v_dim=f("linear_value_head_dim"),
        lin_conv_kernel=int(cfg.get("linear_conv_kernel_dim") or 0),
    )
    for k, v in lin.items():
        require(v > 0 or k == "lin_conv_kernel", f"{name}:{k}", v, "must be positive")
    return L - linear, lin


def model_from_config(cfg: dict, name: str = "model") -> ModelSpec:
    """Build a :class:`ModelSpec` from a Hugging Face ``config.json`` dictionary."""
    cfg = _check_types(cfg, name)
    f = lambda *n, default=None: _field(cfg, name, *n, default=default)  # noqa: E731
    H, L, h = (
        int(f("hidden_size", "d_model")),
        int(f("num_hidden_layers", "n_layer")),
        int(f("num_attention_heads", "n_head")),
    )
    h_kv = int(f("num_key_value_heads", default=h))
    for key, v in (
        ("hidden_size", H),
        ("num_hidden_layers", L),
        ("num_attention_heads", h),
        ("num_key_value_heads", h_kv),
    ):
        require(v > 0, f"{name}:{key}", v, "must be positive")
    mla = int(cfg.get("kv_lora_rank") or 0)
    d_h = int(f("qk_nope_head_dim")) + int(f("qk_rope_head_dim")) if mla else int(cfg.get("head_dim") or H // h)
    E = int(cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts") or 0)
    moe_layers = 0
    if E:
        step = int(cfg.get("decoder_sparse_step") or 1)
        only_dense = set(cfg.get("mlp_only_layers") or [])
        first_dense = int(cfg.get("first_k_dense_replace") or 0)
        moe_layers = sum(1 for i in range(L) if (i + 1) % step == 0 and i not in only_dense and i >= first_dense)
    model_type = str(cfg.get("model_type", ""))
    kv_layers, lin = _hybrid_layers(cfg, name, L)
    bloom = model_type == "bloom"  # HF BloomConfig: no intermediate_size, the MLP is 4h wide, not gated
    opt = model_type == "opt"  # HF OPTConfig: ffn_dim, a ReLU MLP (fc1, fc2), biases, tied embeddings
    spec = ModelSpec(
        name=name,
        L=L,
        H=H,
        h=h,
        h_kv=h_kv,
        d_h=d_h,
        ffn=int(cfg.get("n_inner") or 4 * H) if bloom else int(f("ffn_dim" if opt else "intermediate_size", default=0)),
        vocab=int(f("vocab_size")),
        tied=bool(cfg.get("tie_word_embeddings", bloom or opt)),
        b=_DTYPE_BYTES.get(str(cfg.get("torch_dtype", "bfloat16")), 2),
        num_experts=E,
        experts_per_tok=int(cfg.get("num_experts_per_tok") or (2 if E else 0)),
        expert_ffn=int(cfg.get("moe_intermediate_size") or cfg.get("intermediate_size") or 0) if E else 0,
        shared_expert_ffn=int(
            cfg.get("shared_expert_intermediate_size")
            or int(cfg.get("n_shared_experts") or 0) * int(cfg.get("moe_intermediate_size") or 0)
        ),
        moe_layers=moe_layers,
        qkv_bias=bool(cfg.get("attention_bias", model_type in ("qwen2", "qwen2_moe", "bloom", "opt"))),
        gated_mlp=not (bloom or opt),
        rotary=not (bloom or opt),
        out_biases=2 if (bloom or opt) else int(bool(cfg.get("attention_bias", False))),
        max_model_len=int(cfg.get("max_position_embeddings") or 0),
        kv_layers=kv_layers,
        attn_output_gate=bool(cfg.get("attn_output_gate", False)),
        weights=from_config(cfg.get("quantization_config"), f"{name}:quantization_config") or "bf16",
        kv_lora_rank=mla,
        q_lora_rank=int(cfg.get("q_lora_rank") or 0) if mla else 0,
        qk_rope_dim=int(cfg.get("qk_rope_head_dim") or 0) if mla else 0,
        v_head_dim=int(cfg.get("v_head_dim") or 0) if mla else 0,
        **lin,
    )
    for fld in ("L", "H", "h", "h_kv", "d_h", "vocab"):
        require(getattr(spec, fld) > 0, f"{name}:{fld}", getattr(spec, fld), "must be positive")
    require(spec.h % spec.h_kv == 0, f"{name}:num_key_value_heads", h_kv, f"must divide num_attention_heads={h}")
    require(spec.ffn > 0 or spec.moe_layers == L, f"{name}:intermediate_size", spec.ffn, "must be positive")
    return spec


class _Constant(Exception):
    pass


def _no_constant(name: str):
    raise _Constant(name)


def known_models() -> list[str]:
    return sorted(p.stem for p in MODELS_DIR.glob("*.json"))


HF_SUFFIXES = ("-instruct", "-chat", "-hf", "-it")


def shipped_sources() -> dict:
    """short name -> the Hugging Face id its config came from (``_source``), for every shipped model."""
    out = {}
    for f in sorted(MODELS_DIR.glob("*.json")):
        try:
            out[f.stem] = str(json.loads(f.read_text()).get("_source", ""))
        except (OSError, ValueError):
            continue
    return out


def shipped_for_id(model_id: str) -> str | None:
    """A Hugging Face id (``meta-llama/Llama-3.1-8B-Instruct``) as the short name of the shipped config
    whose ``_source`` names it or its base model (an -Instruct/-Chat/-hf/-it suffix dropped); else None."""
    want = str(model_id).strip().lower()
    candidates = {want} | {want[: -len(s)] for s in HF_SUFFIXES if want.endswith(s)}
    return next((stem for stem, src in shipped_sources().items() if src.lower() in candidates), None)


def load_model(name_or_path: str) -> ModelSpec:
    """A short name (``llama-3.1-8b``), a Hugging Face id of a shipped config (``Qwen/Qwen3-8B``),
    a ``config.json`` path, or a folder holding one."""
    p = Path(str(name_or_path)).expanduser()
    if "/" in str(name_or_path) and not p.exists() and shipped_for_id(name_or_path):
        name_or_path = shipped_for_id(name_or_path)  # type: ignore[assignment]
    path = find(
        "model",
        name_or_path,
        MODELS_DIR,
        ".json",
        "a Hugging Face id of one of them, or a config.json path",
        folder_file="config.json",
    )
    try:
        cfg = json.loads(path.read_bytes().decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError as e:
        raise InputError("model", str(path), f"not UTF-8 text (byte {e.start})") from None
    except _Constant as e:
        raise InputError("model", str(path), f"{e} is not a valid config.json value") from None
    except json.JSONDecodeError as e:
        raise InputError("model", str(path), f"not valid JSON ({e.msg} at line {e.lineno})") from None
    except OSError as e:
        raise InputError("model", str(path), f"cannot read ({e.strerror})") from None
    name = path.stem if path.parent == MODELS_DIR else str(name_or_path)
    return model_from_config(cfg, name=name)
