"""benchmarks/gpu_check.py: the seed-000 scene it measures and the prediction side, without torch;
with torch and transformers, a CPU run end to end on a tiny config whose CSVs calibrate's readers parse,
and the attention plumbing (cache written in place, bottom-right causal, GQA) against HF's own."""

import json

import numpy as np
import pandas as pd
import pytest

from benchmarks import gpu_check as gc
from costmodel import CostModel, load_hardware, load_model
from costmodel.calibration.step_timings import load_steps
from costmodel.errors import InputError

TINY = {
    "_source": "test",
    "_provenance": "a tiny Llama for the CPU smoke test",
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
SMALL = ["--prompt-len", "256", "--chunk", "64", "--decodes", "4", "--context", "128"]


def test_the_scene_is_seed_000s():
    s = gc.SEED_SCENE
    assert (s.prompt, s.chunk, s.decodes, s.context) == (32768, 2048, 32, 2048)
    assert s.last_chunk_cached == 30720
    steps = {st.label: st for st in s.steps()}
    assert steps["prefill"].q_lens == (32768,) and steps["prefill"].kv_lens == (0,)
    assert steps["decode"].q_lens == (1,) * 32 and steps["decode"].kv_lens == (2048,) * 32
    assert steps["chunk_first"].kv_lens == (0,) and steps["chunk_last"].kv_lens == (30720,)
    first, last = steps["mixed_first"], steps["mixed_last"]
    assert first.q_lens == (2048,) + (1,) * 32 and first.kv_lens == (0,) + (2048,) * 32
    assert last.kv_lens == (30720,) + (2048,) * 32 and last.rows == 2048 + 32
    assert first.parts == ("chunk_first", "decode") and last.parts == ("chunk_last", "decode")
    assert last.shape() == "1x2048@30720 + 32x1@2048"
    defaults = gc.parse(["--out", "x"])
    assert (defaults.prompt_len, defaults.chunk, defaults.decodes, defaults.context) == (32768, 2048, 32, 2048)
    assert defaults.budget_s < 600 and gc.parse(["--out", "x", "--quick"]).budget_s < 60
    with pytest.raises(InputError):
        gc.Scene(prompt=1024, chunk=2048)


def _fake_times(scene):
    t = {"prefill": 1.7, "chunk_first": 0.065, "chunk_last": 0.12, "decode": 0.0105, "decode_kv0": 0.0062}
    return pd.DataFrame({"label": list(t), "time_s": list(t.values()), "mode": "graph"}), t


def test_predicted_vs_measured_from_a_measurements_csv(tmp_path):
    scene = gc.SEED_SCENE
    measured, t = _fake_times(scene)
    measured.to_csv(tmp_path / "scene_times.csv", index=False)
    model, hw = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    assert gc.main(["--predict-only", str(tmp_path)]) == 0  # no torch on this path
    pvm = pd.read_csv(tmp_path / "predicted_vs_measured.csv").set_index("step")
    assert list(pvm.index) == [s.label for s in scene.steps()]
    cm = CostModel(model, hw)
    for s in scene.steps():
        r = pvm.loc[s.label]
        assert r["predicted_s"] == pytest.approx(cm.step_time(list(s.q_lens), list(s.kv_lens)), rel=1e-12)
        assert r["error_pct"] == pytest.approx(100 * (r["predicted_s"] - r["measured_s"]) / r["measured_s"])
    assert pvm.loc["mixed_last", "measured_s"] == pytest.approx(t["chunk_last"] + t["decode"])
    assert pvm.loc["mixed_last", "measured_marginal_s"] == pytest.approx(
        t["chunk_last"] + t["decode"] - t["decode_kv0"]
    )
    assert pvm.loc["decode", "method"] == "direct:graph" and pvm.loc["mixed_first", "method"].startswith("sum:")
    numeric = pvm.select_dtypes("number").to_numpy(float)
    assert np.isfinite(numeric).all()
    # the seed's own arithmetic: the 32k prefill costs seconds, a decode step milliseconds
    assert 0.5 < pvm.loc["prefill", "predicted_s"] < 3 and pvm.loc["decode", "predicted_s"] < 0.02


def test_a_missing_part_leaves_its_mixed_step_out():
    measured, _ = _fake_times(gc.SEED_SCENE)
    pvm = gc.predicted_vs_measured(
        gc.SEED_SCENE,
        measured[measured["label"] != "chunk_last"],
        load_model("llama-3.1-8b"),
        load_hardware("h100-sxm"),
    )
    assert "mixed_last" not in set(pvm["step"]) and "mixed_first" in set(pvm["step"])
    with pytest.raises(InputError):
        gc.predicted_vs_measured(gc.SEED_SCENE, pd.DataFrame({"x": [1]}), None, None)


def test_the_steps_table_is_calibrates_steps_format(tmp_path):
    scene = gc.SEED_SCENE
    _, t = _fake_times(scene)
    gc.steps_table(scene.measured_steps(), t, "bf16", "H100").to_csv(tmp_path / "steps.csv", index=False)
    mixed = {s.label: sum(t[p] for p in s.parts) for s in scene.mixed_steps()}
    gc.steps_table(scene.mixed_steps(), mixed, "bf16", "H100").to_csv(tmp_path / "mixed.csv", index=False)
    steps = load_steps(tmp_path / "steps.csv", "steps")
    assert list(steps["kind"]) == ["prefill", "prefill", "prefill", "decode", "decode"]
    assert list(steps["rows"]) == [32768, 2048, 2048, 32, 32]
    assert steps["time_s"].tolist() == pytest.approx([t[s.label] for s in scene.measured_steps()])
    mixed_steps = load_steps(tmp_path / "mixed.csv", "steps")
    assert list(mixed_steps["kind"]) == ["mixed", "mixed"] and list(mixed_steps["seqs"]) == [33, 33]
    assert mixed_steps["prefill_groups"].tolist() == [((1, 2048, 0),), ((1, 2048, 30720),)]


# ---- with torch and transformers (the vllm venv; CI without them skips) ---------------------------


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY))
    return path


def test_cpu_run_end_to_end(tmp_path, tiny):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from costmodel.calibration.importers import load_source
    from costmodel.calibration.timings import load_timings

    out = tmp_path / "out"
    argv = ["--device", "cpu", "--quick", "--model", str(tiny), "--out", str(out), "--warmup", "0", "--repeats", "1"]
    assert gc.main(argv + SMALL) == 0
    steps = load_steps(out / "steps.csv", "steps")
    assert len(steps) == 5 and (steps["time_s"] > 0).all()
    mixed = load_steps(out / "steps_mixed_sum.csv", "steps")
    assert list(mixed["kind"]) == ["mixed", "mixed"]
    kernels = load_timings(out / "kernels.csv")
    assert {"gemm", "attention", "copy"} <= set(kernels["op_class"])
    assert {"attention_prefill", "attention_decode"} <= set(kernels["op"])
    assert len(load_source("timings", out / "kernels.csv")[0]) == len(kernels)
    pvm = pd.read_csv(out / "predicted_vs_measured.csv")
    assert list(pvm["step"]) == [s.label for s in gc.Scene(256, 64, 4, 128).steps()]
    assert np.isfinite(pvm[["predicted_s", "measured_s", "error_pct", "measured_marginal_s"]].to_numpy()).all()
    meta = json.loads((out / "meta.json").read_text())
    assert meta["scene"] == {"prompt": 256, "chunk": 64, "decodes": 4, "context": 128}
    assert meta["torch"] and meta["transformers"] and any("fp8" in n for n in meta["notes"])


def test_cached_chunk_matches_the_whole_prompt(tiny):
    """Logits of a prompt's last token: one HF pass with its stock attention, against the gpu_check
    path (cache written in place, a chunk over its cached prefix, then a decode over it), float32."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    notes: list = []
    _, kernel = gc.attention_kernel(torch, "cpu", notes)
    gc.register_attention(kernel)
    cfg = gc.hf_config(tiny)
    torch.manual_seed(0)
    model = gc.build_model(torch, cfg, "cpu", torch.float32)
    ids = torch.randint(0, cfg.vocab_size, (2, 24))
    hkv, d, L = cfg.num_key_value_heads, cfg.hidden_size // cfg.num_attention_heads, cfg.num_hidden_layers
    cache = {i: (torch.zeros(2, 25, hkv, d), torch.zeros(2, 25, hkv, d)) for i in range(L)}

    def ours(lo, hi):
        gc.STATE.cache, gc.STATE.prefix = cache, lo
        pos = torch.arange(lo, hi).unsqueeze(0).expand(2, -1)
        with torch.no_grad():
            return model.model(input_ids=ids_all[:, lo:hi], position_ids=pos, use_cache=False).last_hidden_state

    nxt = torch.randint(0, cfg.vocab_size, (2, 1))
    ids_all = torch.cat([ids, nxt], 1)
    ours(0, 16)
    chunk = ours(16, 24)
    dec = ours(24, 25)
    model.config._attn_implementation = "eager"
    for layer in model.model.layers:
        layer.self_attn.config._attn_implementation = "eager"
    with torch.no_grad():
        ref = model.model(input_ids=ids_all, use_cache=False).last_hidden_state
    assert torch.allclose(chunk, ref[:, 16:24], atol=1e-4)
    assert torch.allclose(dec, ref[:, 24:25], atol=1e-4)
