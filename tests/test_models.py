import json

import pytest

from costmodel import InputError, known_models, load_model, model_from_config

# Published parameter counts (model cards): total, active.
PUBLISHED = {
    "llama-3.1-8b": (8.03e9, 8.03e9),
    "llama-3.1-70b": (70.6e9, 70.6e9),
    "mixtral-8x7b": (46.7e9, 12.9e9),
    "qwen3-30b-a3b": (30.5e9, 3.3e9),
    "qwen3-8b": (8.2e9, 8.2e9),
}


@pytest.mark.parametrize("name", PUBLISHED)
def test_parameter_counts_match_published(name):
    m = load_model(name)
    total, active = PUBLISHED[name]
    assert m.P == pytest.approx(total, rel=0.01)
    # Qwen's card says "3.3B activated"; counting embedding and lm_head gives 3.35B, i.e. the card truncates.
    assert m.P_active == pytest.approx(active, rel=0.02 if name == "qwen3-30b-a3b" else 0.01)


def test_seed_symbols_for_llama_3_1_8b():
    m = load_model("llama-3.1-8b")
    assert (m.L, m.h, m.h_kv, m.d_h, m.b) == (32, 32, 8, 128, 2)
    assert m.kv_bytes_per_token == 2 * m.L * m.h_kv * m.d_h * m.b


def test_required_shipped_models_present():
    assert {"llama-3.1-8b", "llama-3.1-70b", "qwen3-8b", "qwen3-30b-a3b", "mixtral-8x7b"} <= set(known_models())


def test_head_dim_overrides_hidden_over_heads():
    m = load_model("qwen3-30b-a3b")
    assert m.d_h == 128 and m.H // m.h == 64


def test_tied_embeddings_counted_once():
    base = dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=1000,
    )
    untied = model_from_config({**base, "tie_word_embeddings": False})
    tied = model_from_config({**base, "tie_word_embeddings": True})
    assert untied.P - tied.P == 1000 * 64


def test_qwen_moe_shared_expert_is_always_active():
    m = load_model("qwen1.5-moe-a2.7b")
    assert m.shared_expert_ffn > 0
    assert m.P_active == pytest.approx(2.7e9, rel=0.03)


def test_any_path_works(tmp_path):
    cfg = json.loads((load_model.__globals__["MODELS_DIR"] / "llama-3.1-8b.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert load_model(str(tmp_path)).P == load_model("llama-3.1-8b").P


def test_unknown_model_lists_known_ones():
    with pytest.raises(InputError, match="llama-3.1-8b"):
        load_model("gpt-17")


def test_missing_field_is_named(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10}))
    with pytest.raises(InputError, match="num_hidden_layers"):
        load_model(str(p))


# --- hybrid attention (Qwen3-Next, Qwen3.5): only the full-attention layers keep a KV cache ---


def test_qwen3_5_122b_a10b_parameters_and_kv_layers():
    m = load_model("qwen3.5-122b-a10b")
    assert (m.L, m.kv_layers, m.linear_layers) == (48, 12, 36)
    # Model card: 122B total, 10B activated (embedding and lm_head counted; the MTP layer and vision tower not).
    assert m.P == pytest.approx(122e9, rel=0.01)
    assert m.P_active == pytest.approx(10e9, rel=0.03)
    assert m.kv_bytes_per_token == 2 * 12 * m.h_kv * m.d_h * m.b == 24576


def test_qwen3_next_interval_gives_same_layers_as_layer_types():
    m = load_model("qwen3-next-80b-a3b")  # full_attention_interval only, no layer_types
    assert (m.kv_layers, m.linear_layers) == (12, 36)
    assert m.P == pytest.approx(80e9, rel=0.01)
    assert 3e9 < m.P_active - m.embed_params - m.head_params < 3.3e9  # "A3B": non-embedding active
    cfg = json.loads((load_model.__globals__["MODELS_DIR"] / "qwen3.5-122b-a10b.json").read_text())
    text = dict(cfg["text_config"])
    del text["layer_types"]
    assert model_from_config({**cfg, "text_config": text}, "x").kv_layers == 12


@pytest.mark.parametrize("name", sorted(set(known_models()) - {"qwen3-next-80b-a3b", "qwen3.5-122b-a10b"}))
def test_plain_transformers_keep_every_layer_as_kv_layer(name):
    m = load_model(name)
    assert m.kv_layers == m.L and m.linear_layers == 0 and m.linear_attn_params_per_layer == 0


def test_bad_layer_types_is_named():
    base = dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=1000,
    )
    with pytest.raises(InputError, match="layer_types"):
        model_from_config({**base, "layer_types": ["full_attention"]})
    with pytest.raises(InputError, match="linear_num_key_heads"):
        model_from_config({**base, "layer_types": ["linear_attention", "full_attention"]})


def test_opt_reads_ffn_dim_and_a_plain_relu_mlp():
    """OPT (DistServe's model): ffn_dim, fc1/fc2 not gated, biases, tied embeddings; parameters
    counted here from the architecture (q, k, v, o and fc1, fc2 per layer, one embedding table)."""
    m = load_model("opt-13b")
    assert (m.L, m.H, m.h, m.h_kv, m.ffn, m.gated_mlp, m.qkv_bias, m.tied) == (
        40,
        5120,
        40,
        40,
        20480,
        False,
        True,
        True,
    )
    H, F, L, V = 5120, 20480, 40, 50272
    assert m.P == pytest.approx(L * (4 * H * H + 2 * H * F) + V * H, rel=2e-3)
    assert m.kv_bytes_per_token == 2 * L * H * 2  # K and V, fp16, every head
