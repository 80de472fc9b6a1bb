"""Experiment files: defaults <- file <- explicit flags, the effective config reruns the run, bad input is one line."""

import json
from pathlib import Path

import pytest
import yaml

from experiments.cli import main
from experiments.experiment_file import effective, load_experiment

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "experiments" / "examples"
FIXTURES = ROOT / "workloads" / "fixtures"


def write(tmp_path, text: str, name: str = "exp.yaml") -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def simulate(argv, capsys) -> dict:
    assert main(["simulate", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_examples_load_and_resolve_paths_against_the_file():
    stall = load_experiment(EXAMPLES / "stall.yaml")
    assert stall["engine"]["max_num_batched_tokens"] == 2048 and stall["workload"]["scenario"] == "stall"
    moon = load_experiment(EXAMPLES / "mooncake_prefix.yaml")
    assert Path(moon["workload"]["trace"]["path"]) == FIXTURES / "mooncake_conv_30.jsonl"


def test_mooncake_example_reports_a_hit_rate(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    s = simulate(["-f", str(EXAMPLES / "mooncake_prefix.yaml")], capsys)
    assert s["completed"] == 30 and 0 < s["prefix_cache_hit_rate"] < 1


def test_precedence_defaults_file_flags():
    file_cfg = {
        "policy": "vllm",
        "tp": 2,
        "engine": {"max_num_batched_tokens": 2048, "max_num_seqs": 64},
        "workload": {
            "kind": "poisson",
            "request_rate": 5,
            "num_prompts": 40,
            "lengths": {"kind": "random", "input_len": 300, "output_len": 30},
        },
    }
    cfg = effective(
        file_cfg,
        {
            "max_num_seqs": 8,
            "request_rate": 9.0,
            "input_len": 100,
            "burstiness": 0.5,
            "seed": 3,
            "json": True,
            "out": None,
        },
    )
    assert cfg["model"] == "llama-3.1-8b" and cfg["hardware"] == "h100" and cfg["fast_forward"] is True
    assert cfg["tp"] == 2 and cfg["seed"] == 3
    assert cfg["engine"] == {"max_num_batched_tokens": 2048, "max_num_seqs": 8}
    w = cfg["workload"]
    assert w["kind"] == "gamma" and w["burstiness"] == 0.5 and w["request_rate"] == 9.0 and w["num_prompts"] == 40
    assert w["lengths"] == {"kind": "random", "input_len": 100, "output_len": 30}
    assert effective(None, {})["workload"]["lengths"] == {"kind": "fixed", "input_len": 1024, "output_len": 128}


def test_cli_flag_overrides_file_and_both_spellings_work(tmp_path, capsys):
    f = write(
        tmp_path,
        "engine: {max-num-batched-tokens: 512, max_num_seqs: 16}\n"
        "workload: {kind: constant, request_rate: 20, num_prompts: 30,\n"
        "           lengths: {kind: fixed, input_len: 900, output_len: 8}}\n",
    )
    assert main(["simulate", "-f", f, "--max-num-batched-tokens", "1024", "--out", str(tmp_path / "o")]) == 0
    cfg = yaml.safe_load((tmp_path / "o" / "config.yaml").read_text())
    assert cfg["engine"] == {"max_num_batched_tokens": 1024, "max_num_seqs": 16}
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["config"] == cfg
    assert "completed" in capsys.readouterr().out


def test_written_config_reruns_byte_identically(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["simulate", "-f", str(EXAMPLES / "stall.yaml"), "--seed", "4", "--out", str(a)]) == 0
    assert main(["simulate", "-f", str(a / "config.yaml"), "--out", str(b)]) == 0
    for name in ("config.yaml", "summary.json", "requests.csv"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    capsys.readouterr()


def test_same_seed_same_bytes_other_seed_differs(tmp_path, capsys):
    f = write(
        tmp_path,
        "workload: {kind: gamma, burstiness: 0.5, request_rate: 20, num_prompts: 60,\n"
        "           lengths: {kind: random, input_len: 400, output_len: 40, range_ratio: 0.5}}\n",
    )
    outs = [simulate(["-f", f, "--seed", s], capsys) for s in ("1", "1", "2")]
    assert json.dumps(outs[0]) == json.dumps(outs[1]) != json.dumps(outs[2])


def test_trace_flags_azure_closed_loop(tmp_path, capsys):
    assert (
        main(
            [
                "simulate",
                "--workload-file",
                str(FIXTURES / "azure_conv_120.csv"),
                "--max-concurrency",
                "4",
                "--max-num-seqs",
                "8",
                "--out",
                str(tmp_path),
                "--json",
            ]
        )
        == 0
    )
    s = json.loads(capsys.readouterr().out)
    w = yaml.safe_load((tmp_path / "config.yaml").read_text())["workload"]
    assert w["kind"] == "trace" and w["trace"]["format"] == "azure" and w["max_concurrency"] == 4
    assert s["completed"] + s["num_rejected"] == 120


@pytest.mark.parametrize(
    "text,argv,names",
    [
        ("model: llama-3.1-8b\nfoo: 1\nbar: 2\n", [], ["bar", "foo"]),
        ("engine: {max_num_batched_tokenz: 5}\n", [], ["max_num_batched_tokenz"]),
        ("workload: {kind: poisson, rate: 3}\n", [], ["rate"]),
        ("workload: {kind: trace, trace: {format: azure, path: x.csv, speed: 2}}\n", [], ["speed"]),
        ("workload: {scenario: stall, prompt_length: 9}\n", [], ["prompt_length"]),
        ("engine: {max-num-seqs: 4, max_num_seqs: 4}\n", [], ["engine", "twice"]),
        ("tp: two\n", [], ["tp"]),
        ("fast_forward: yes please\n", [], ["fast_forward"]),
        ("engine: {max_num_seqs: '4'}\n", [], ["engine:max_num_seqs", "integer"]),
        ("engine: {enable_chunked_prefill: 1}\n", [], ["enable_chunked_prefill"]),
        ("policy: sglang\nengine: {max_num_seqs: 4}\n", [], ["max_num_seqs", "not sglang flags"]),
        ("policy: tgi\n", [], ["policy"]),
        ("goodput: {ttfx: 3}\n", [], ["goodput"]),
        ("model: [\n", [], ["not valid YAML"]),
        ("- a\n", [], ["mapping"]),
        ("workload: {scenario: stall}\n", ["--request-rate", "3"], ["request_rate"]),
        ("seed: 1\n", ["--trace-format", "azure"], ["trace-format"]),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, text, argv, names):
    assert main(["simulate", "-f", write(tmp_path, text), *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    for n in names:
        assert n in err


def test_missing_files_exit_2(tmp_path, capsys):
    assert main(["simulate", "-f", str(tmp_path / "nope.yaml")]) == 2
    err = capsys.readouterr().err
    assert "nope.yaml" in err and "no such file" in err
    f = write(tmp_path, "workload: {kind: trace, trace: {format: mooncake, path: gone.jsonl}}\n")
    assert main(["simulate", "-f", f]) == 2
    assert "gone.jsonl" in capsys.readouterr().err
