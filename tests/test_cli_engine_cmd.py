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
    (
        "vllm",
        {
            "max_model_len": 65536,
            "max_num_seqs": 64,
            "max_num_batched_tokens": 2048,
            "long_prefill_token_threshold": 1536,
        },
    ),
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
    assert [" ".join(l.replace("\\\n", " ").split()) for l in lines] == [
        " ".join(l.replace("\\\n", " ").split()) for l in COPIES
    ]


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
    rc, _, err = run_cli(
        [
            "simulate",
            "--engine-cmd",
            line,
            "--chunked-prefill-size",
            "1024",
            "--num-prompts",
            "5",
            "--out",
            tmp_path,
            "--quiet",
        ]
    )
    cfg = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert rc == 0, err
    assert cfg["model"] == "qwen3-8b" and cfg["tp"] == 2 and cfg["engine"]["chunked_prefill_size"] == 1024


def test_parse_forms():
    c = parse_engine_cmd(
        "vllm serve --model=meta-llama/Llama-3.1-8B -tp 4 --gpu-memory-utilization=0.8 "
        "--enable-prefix-caching --no-enable-chunked-prefill"
    )
    assert (c.policy, c.model, c.tp) == ("vllm", "meta-llama/Llama-3.1-8B", 4)
    assert c.flags == {"gpu_memory_utilization": 0.8, "enable_prefix_caching": True, "enable_chunked_prefill": False}
    s = parse_engine_cmd(
        "python3 -m sglang.launch_server --model-path x --disable-radix-cache --tp 2 "
        "--mem-fraction-static 0.8 --max-total-tokens 100000"
    )
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


def test_environment_prefix_accepted_and_listed():
    c = parse_engine_cmd("CUDA_VISIBLE_DEVICES=0,1 VLLM_USE_V1=1 vllm serve meta-llama/Llama-3.1-8B -tp 2")
    assert (c.policy, c.tp, c.env) == ("vllm", 2, ["CUDA_VISIBLE_DEVICES=0,1", "VLLM_USE_V1=1"])
    assert parse_engine_cmd("env A=1 python -m sglang.launch_server --model-path x").policy == "sglang"
    rc, _, err = run_cli(
        [
            "simulate",
            "--engine-cmd",
            "CUDA_VISIBLE_DEVICES=0 vllm serve meta-llama/Llama-3.1-8B",
            "--num-prompts",
            "3",
            "--quiet",
        ]
    )
    assert rc == 0 and "(environment) CUDA_VISIBLE_DEVICES=0" in err


@pytest.mark.parametrize("size", ["0", "-1", "-5"])
def test_sglang_chunking_off_at_any_size_up_to_zero(size, tmp_path):
    """SGLang reads chunked_prefill_size <= 0 as chunking off (scheduler.py init_chunked_prefill)."""
    line = f"python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B --chunked-prefill-size {size}"
    assert parse_engine_cmd(line).flags == {"chunked_prefill_size": int(size)}
    rc, out, err = run_cli(["simulate", "--engine-cmd", line, "--scenario", "stall", "--json"])
    assert rc == 0, err
    rc2, out2, _ = run_cli(
        ["simulate", "--engine-cmd", line.rsplit(" ", 1)[0] + " -1", "--scenario", "stall", "--json"]
    )
    assert json.loads(out)["max_itl_ms"] == json.loads(out2)["max_itl_ms"]
    rc3, out3, _ = run_cli(
        ["simulate", "--policy", "sglang", "--chunked-prefill-size", size, "--scenario", "stall", "--json"]
    )
    assert rc3 == 0 and json.loads(out3)["max_itl_ms"] == json.loads(out)["max_itl_ms"]


def test_typos_are_errors_with_a_suggestion():
    with pytest.raises(ValueError, match="did you mean --max-num-batched-tokens"):
        parse_engine_cmd("vllm serve m --max-num-batched-token 2048")
    with pytest.raises(ValueError, match="did you mean --enable-mixed-chunk"):
        parse_engine_cmd("python -m sglang.launch_server --enable-mixd-chunk")
    with pytest.raises(ValueError, match="sglang's flag"):
        parse_engine_cmd("vllm serve m --page-size 16")


def test_real_unmodelled_flags_are_not_read_as_typos():
    from experiments.engine_cmd import NOT_TYPOS

    for engine, prog in (("vllm", "vllm serve m"), ("sglang", "python -m sglang.launch_server --model-path m")):
        for flag in NOT_TYPOS[engine]:
            assert parse_engine_cmd(f"{prog} {flag} 1", allow_unmodeled=True).ignored, flag
    c = parse_engine_cmd("vllm serve m --port 8000 --host 0.0.0.0 --dtype bfloat16 --trust-remote-code")
    assert len(c.ignored) == 3 and c.flags == {"dtype": "bfloat16"}  # --dtype is modelled (16-bit)


@pytest.mark.parametrize(
    "line,router",
    [
        ("vllm serve meta-llama/Llama-3.1-8B -dp 2 --max-num-seqs 8", "vllm_dp"),
        ("vllm serve meta-llama/Llama-3.1-8B --data-parallel-size=2 --max-num-seqs 8", "vllm_dp"),
        ("python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B --dp-size 2", "round_robin"),
    ],
)
def test_data_parallel_is_replicas_behind_the_engines_balancer(line, router, tmp_path):
    rc, out, err = run_cli(["simulate", "--engine-cmd", line, "--num-prompts", "8", "--out", tmp_path, "--quiet"])
    assert rc == 0, err
    cfg = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert cfg["replicas"] == 2 and cfg["router"] == router
    assert "modelled as 2 replicas of tp=1" in err
    assert "2 replica(s)" in out
    rc, _, err = run_cli(
        ["simulate", "--engine-cmd", line, "--replicas", "3", "--num-prompts", "3", "--out", tmp_path, "--quiet"]
    )
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["replicas"] == 3  # explicit flags win


def test_engine_flags_declared_once():
    """Every modelled flag's spellings reach simulate's parser, the pasted-line reader and the
    experiment file's engine: section from the one declaration in engine_flags."""
    from experiments.cli import build_parser
    from experiments.engine_cmd import TABLES
    from experiments.engine_flags import FLAGS, POLICY_FLAGS
    from experiments.engines import NOCHUNK_FLAGS, SGLANG_FLAGS, VLLM_FLAGS
    from experiments.experiment_file import ENGINE_FLAGS

    sim = next(
        a
        for a in build_parser()._subparsers._group_actions[0].choices["simulate"]._actions
        if a.dest == "max_model_len"
    )
    assert set(sim.option_strings) == {"--max-model-len", "--context-length"}
    opts = {
        o for a in build_parser()._subparsers._group_actions[0].choices["simulate"]._actions for o in a.option_strings
    }
    for name, spec in FLAGS.items():
        assert not spec.cli or set(spec.spellings) <= opts, name
        for engine in ("vllm", "sglang"):
            assert all(TABLES[engine][s][0] == name for s in getattr(spec, engine))
    assert (VLLM_FLAGS, SGLANG_FLAGS, NOCHUNK_FLAGS) == (
        POLICY_FLAGS["vllm"],
        POLICY_FLAGS["sglang"],
        POLICY_FLAGS["nochunk"],
    )
    assert ENGINE_FLAGS == set(FLAGS)


def test_sglang_dp_attention_line_is_ranks_of_the_attention_tp(tmp_path):
    line = "python -m sglang.launch_server --model-path Qwen/Qwen3-30B-A3B --tp 4 --dp 2 --enable-dp-attention"
    rc, out, err = run_cli(["simulate", "--engine-cmd", line, "--num-prompts", "20", "--out", tmp_path, "--quiet"])
    assert rc == 0, err
    cfg = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert (cfg["tp"], cfg["replicas"], cfg["router"]) == (2, 2, "round_robin")  # 4 GPUs in all
    assert cfg["engine"]["enable_dp_attention"] is True and "2 attention ranks of tp=2" in err
    rc, _, err = run_cli(["simulate", "--engine-cmd", line.replace("--tp 4", "--tp 3"), "--num-prompts", "4"])
    assert rc == 2 and "--tp-size" in err and "multiple of --dp-size 2" in err
    rc, _, err = run_cli(["simulate", "--engine-cmd", line.replace("Qwen/Qwen3-30B-A3B", "meta-llama/Llama-3.1-8B")])
    assert rc == 2 and "enable_dp_attention" in err and "dense" in err


@pytest.mark.parametrize("method", ["auto", "round_robin", "total_requests", "total_tokens", "follow_bootstrap_room"])
def test_sglang_load_balance_method_round_robin_or_refused(method):
    """The DP controller's dispatch is modelled as round robin (what auto resolves to outside PD);
    the load-snapshot and PD methods are one clear error naming the flag and the value."""
    line = f"python -m sglang.launch_server --model-path m --dp 2 --enable-dp-attention --load-balance-method {method}"
    if method in ("auto", "round_robin"):
        cmd = parse_engine_cmd(line)
        assert cmd.dp == 2 and not any("load-balance" in t for t in cmd.ignored)
        return
    with pytest.raises(ValueError, match=f"load-balance-method.*{method}"):
        parse_engine_cmd(line)
    rc, _, err = run_cli(
        ["simulate", "--engine-cmd", line.replace("--model-path m", "--model-path Qwen/Qwen3-30B-A3B")]
    )
    assert rc == 2 and "round_robin" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "line,flag",
    [
        ("vllm serve m --pipeline-parallel-size 2", "--pipeline-parallel-size"),
        ("vllm serve m --enable-lora", "--enable-lora"),
        ("vllm serve m --scheduling-policy priority", "--scheduling-policy"),
        ("vllm serve m --kv-cache-memory-bytes=8000000000", "--kv-cache-memory-bytes"),
        ("python -m sglang.launch_server --model-path m --pp-size 2", "--pp-size"),
        ("python -m sglang.launch_server --model-path m --schedule-policy lpm", "--schedule-policy"),
    ],
)
def test_answer_changing_unmodelled_flags_are_errors_unless_allowed(line, flag):
    from experiments.engine_cmd import UnmodeledFlag

    with pytest.raises(UnmodeledFlag, match=f"{flag}.*--allow-unmodeled"):
        parse_engine_cmd(line)
    c = parse_engine_cmd(line, allow_unmodeled=True)
    assert [u.split()[0] for u in c.unmodeled] == [flag] and any(i.startswith(flag) for i in c.ignored)


def test_answer_changing_flags_at_their_default_are_neutral():
    for line in (
        "vllm serve m --pipeline-parallel-size 1 --scheduling-policy fcfs --port 8000",
        "python -m sglang.launch_server --model-path m --pp-size 1 --schedule-policy fcfs --host 0.0.0.0",
    ):
        c = parse_engine_cmd(line)
        assert c.unmodeled == [] and len(c.ignored) == 3


def test_allow_unmodeled_runs_and_lists_the_flag_and_matches_the_run_without_it():
    base = "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-num-batched-tokens 512"
    argv = ["simulate", "--scenario", "stall", "--json", "--engine-cmd"]
    rc, _, err = run_cli(argv + [base + " --pipeline-parallel-size 2"])
    assert rc == 2 and "--pipeline-parallel-size" in err and "Traceback" not in err
    rc, out, err = run_cli(argv + [base + " --pipeline-parallel-size 2", "--allow-unmodeled"])
    assert rc == 0 and "--pipeline-parallel-size 2" in err and "allowed by --allow-unmodeled" in err
    rc0, out0, _ = run_cli(argv + [base])
    assert rc0 == 0 and out == out0  # the flag really was ignored, nothing else changed


PD_M = "meta-llama/Llama-3.1-8B-Instruct"
PD_P = (
    f"vllm serve {PD_M} -tp 2 -dp 2 --max-num-batched-tokens 8192 --no-async-scheduling "
    '--kv-transfer-config \'{"kv_connector":"NixlConnector","kv_role":"kv_producer"}\''
)
PD_D = (
    f"vllm serve {PD_M} -tp 1 -dp 3 --max-num-batched-tokens 512 "
    '--kv-transfer-config \'{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}\''
)


def test_prefill_and_decode_lines_set_each_pool():
    import json

    rc, out, err = run_cli(["simulate", "--num-prompts", "10", "--prefill-cmd", PD_P, "--decode-cmd", PD_D, "--json"])
    assert rc == 0, err
    pd = json.loads(out)["pd"]
    assert (pd["prefill_replicas"], pd["prefill_tp"], pd["decode_replicas"], pd["decode_tp"]) == (2, 2, 3, 1)
    assert "kv_producer" in pd["kv_transfer_config"] and "kv_consumer" in pd["decode_kv_transfer_config"]


def test_prefill_and_decode_lines_keep_their_own_budgets():
    import argparse

    from experiments.cli import build_parser
    from experiments.cli.simulate_pd import _pair

    args = build_parser().parse_args(["simulate", "--prefill-cmd", PD_P, "--decode-cmd", PD_D])
    cfg_p, _notes, cfg_d = _pair(argparse.Namespace(**vars(args)))
    assert cfg_d is not None
    assert cfg_p["engine"]["max_num_batched_tokens"] == 8192 and cfg_d["engine"]["max_num_batched_tokens"] == 512


@pytest.mark.parametrize(
    "extra,field",
    [
        (["--prefill-cmd", PD_P, "--decode-cmd", "vllm serve Qwen/Qwen3-8B"], "--decode-cmd model"),
        (["--prefill-cmd", PD_P], "--decode-cmd"),
        (["--prefill-cmd", PD_P, "--decode-cmd", PD_D + " --pipeline-parallel-size 2"], "--pipeline-parallel-size"),
        (["--prefill-cmd", "python -m sglang.launch_server --model-path m", "--decode-cmd", PD_D], "model"),
        (
            ["--prefill-cmd", f"python -m sglang.launch_server --model-path {PD_M}", "--decode-cmd", PD_D],
            "--decode-cmd",
        ),
    ],
)
def test_bad_prefill_decode_pairs_are_one_line_errors(extra, field):
    rc, _, err = run_cli(["simulate", "--num-prompts", "5", *extra])
    assert rc == 2 and field in err and "Traceback" not in err


def test_sglang_dp_attention_keeps_a_given_mem_fraction_labelled_given():
    """DP attention rewrites chunked_prefill_size and schedule_conservativeness per rank, not a
    mem_fraction_static the user gave (server_args._handle_data_parallelism): it is labelled given."""
    line = "python -m sglang.launch_server --model-path Qwen/Qwen3-30B-A3B --tp 4 --dp 2 --enable-dp-attention"
    for extra, why in (("", "SGLang default"), (" --mem-fraction-static 0.77", "given")):
        rc, out, err = run_cli(["simulate", "--engine-cmd", line + extra, "--num-prompts", "4", "--quiet"])
        assert rc == 0, err
        row = next(l for l in out.splitlines() if l.startswith("mem_fraction_static"))
        assert why in row and ("0.77" in row) == bool(extra)
