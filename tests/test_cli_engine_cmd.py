"""--engine-cmd: the seed's four command lines pasted verbatim, and how a pasted line is read."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from cli_helpers import run_cli
from experiments.engine_cmd import parse_engine_cmd, shipped_model

SEED = Path(__file__).resolve().parents[2] / "shared" / "seeds" / "000_2c5a299f90953cdf.txt"
# The same four command lines as seed 000 prints them (used when ../shared is absent).
COPIES = [
    "vllm serve meta-llama/Llama-3.1-8B-Instruct \\\n  --max-model-len 65536 --max-num-seqs 64 \\\n"
    "  --max-num-batched-tokens 2048 \\\n  --long-prefill-token-threshold 1536",
    "vllm serve meta-llama/Llama-3.1-8B-Instruct \\\n  --max-model-len 65536 --no-enable-chunked-prefill \\\n"
    "  --max-num-batched-tokens 65536",
    "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \\\n"
    "  --context-length 65536 --chunked-prefill-size 2048 --enable-mixed-chunk",
    "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \\\n"
    "  --context-length 65536 --chunked-prefill-size -1",
]
EXPECTED = [
    ("vllm", {"max_model_len": 65536, "max_num_seqs": 64, "max_num_batched_tokens": 2048,
              "long_prefill_token_threshold": 1536}),
    ("vllm", {"max_model_len": 65536, "enable_chunked_prefill": False, "max_num_batched_tokens": 65536}),
    ("sglang", {"max_model_len": 65536, "chunked_prefill_size": 2048, "enable_mixed_chunk": True}),
    ("sglang", {"max_model_len": 65536, "chunked_prefill_size": -1}),
]


def seed_command_lines() -> list[str]:
    """The command lines as the seed file writes them: a line starting `vllm serve` or
    `python -m sglang.launch_server` and its backslash continuations."""
    if not SEED.is_file():
        return COPIES
    lines, out, cur = SEED.read_text().splitlines(), [], None
    for line in lines:
        if cur is None and re.match(r"\s*(vllm serve|python -m sglang\.launch_server)", line):
            cur = [line.strip()]
        elif cur is not None:
            cur.append(line)
        if cur is not None and not line.rstrip().endswith("\\"):
            out.append("\n".join(cur))
            cur = None
    return out


def test_seed_lines_found():
    lines = seed_command_lines()
    assert len(lines) == 4
    assert [" ".join(l.replace("\\\n", " ").split()) for l in lines] == \
        [" ".join(l.replace("\\\n", " ").split()) for l in COPIES]


@pytest.mark.parametrize("i", range(4))
def test_seed_command_line_verbatim(i, tmp_path):
    line = seed_command_lines()[i]
    rc, out, err = run_cli(["simulate", "--engine-cmd", line, "--scenario", "stall", "--out", tmp_path, "--quiet"])
    assert rc == 0, err
    cfg = yaml.safe_load((tmp_path / "config.yaml").read_text())
    policy, flags = EXPECTED[i]
    assert cfg["policy"] == policy and cfg["model"] == "llama-3.1-8b"
    assert {k: cfg["engine"][k] for k in flags} == flags
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["engine_config"]["max_model_len"]["value"] == 65536
    assert summary["completed"] == 33


def test_stall_ordering_across_the_seed_lines():
    """Seed 000's point: a 2048-token budget keeps decoders' worst gap far below no chunking."""
    gaps = []
    for line in seed_command_lines():
        rc, out, _ = run_cli(["simulate", "--engine-cmd", line, "--scenario", "stall", "--json"])
        gaps.append(json.loads(out)["max_itl_ms"])
    assert gaps[0] < gaps[1] / 3 and gaps[2] < gaps[3] / 3


def test_unmodelled_flags_listed_in_one_warning():
    line = "vllm serve meta-llama/Llama-3.1-8B-Instruct --port 8001 --max-num-seqs 32 --trust-remote-code --seed=3"
    rc, out, err = run_cli(["simulate", "--engine-cmd", line, "--num-prompts", "5"])
    warnings = [l for l in err.splitlines() if l.startswith("warning:")]
    assert rc == 0 and len(warnings) == 1
    assert "--port 8001" in warnings[0] and "--trust-remote-code" in warnings[0] and "--seed=3" in warnings[0]
    assert "max-num-seqs" not in warnings[0]


def test_explicit_flags_override_the_pasted_line(tmp_path):
    line = "python -m sglang.launch_server --model-path Qwen/Qwen3-8B --tp-size 2 --chunked-prefill-size 4096"
    rc, _, err = run_cli(["simulate", "--engine-cmd", line, "--chunked-prefill-size", "1024", "--num-prompts", "5",
                          "--out", tmp_path, "--quiet"])
    cfg = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert rc == 0, err
    assert cfg["model"] == "qwen3-8b" and cfg["tp"] == 2 and cfg["engine"]["chunked_prefill_size"] == 1024


def test_parse_forms():
    c = parse_engine_cmd("vllm serve --model=meta-llama/Llama-3.1-8B -tp 4 --gpu-memory-utilization=0.8 "
                         "--enable-prefix-caching --no-enable-chunked-prefill")
    assert (c.policy, c.model, c.tp) == ("vllm", "meta-llama/Llama-3.1-8B", 4)
    assert c.flags == {"gpu_memory_utilization": 0.8, "enable_prefix_caching": True, "enable_chunked_prefill": False}
    s = parse_engine_cmd("python3 -m sglang.launch_server --model-path x --disable-radix-cache --tp 2 "
                         "--mem-fraction-static 0.8 --max-total-tokens 100000")
    assert s.flags == {"disable_radix_cache": True, "mem_fraction_static": 0.8, "max_total_tokens": 100000}
    assert s.tp == 2


def test_model_ids(tmp_path):
    assert shipped_model("meta-llama/Llama-3.1-8B-Instruct") == "llama-3.1-8b"
    assert shipped_model("Qwen/Qwen2.5-7B-Instruct") == "qwen2.5-7b"
    assert shipped_model("mistralai/Mistral-7B-v0.1") == "mistral-7b"
    (tmp_path / "config.json").write_text("{}")
    assert shipped_model(str(tmp_path)) == str(tmp_path)
    with pytest.raises(ValueError, match="--model PATH"):
        shipped_model("org/unknown-13b")
