"""The CLI's manners: --version, help on every flag, one-line usage errors, a closed pipe, the
progress bar, the trace-size warning, the engine configuration in force, generic traces."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from cli_helpers import run_cli

import experiments.cli.simulate_run as sr
from experiments.cli import build_parser, package_version

ROOT = Path(__file__).resolve().parents[1]


def _subparsers(p):
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            return a
    raise AssertionError


def test_version():
    rc, out, _ = run_cli(["--version"])
    assert rc == 0 and out.strip() == f"chunksim {package_version()}" and package_version() != "unknown"


def test_help_on_every_flag_and_whole_verb_summaries():
    p = build_parser()
    sub = _subparsers(p)
    for name, parser in sub.choices.items():
        assert parser.allow_abbrev is False
        for a in parser._actions:
            if a.option_strings and a.dest != "help":
                assert a.help, (name, a.option_strings)
    for choice in sub._choices_actions:
        assert choice.help.rstrip().endswith("."), choice.help
    rc, out, _ = run_cli(["--help"])
    assert rc == 0 and "stall" in out
    for name in sub.choices:
        rc, out, _ = run_cli([name, "--help"])
        assert rc == 0 and out.startswith("usage: chunksim " + name)


def test_usage_error_is_one_line_with_a_pointer():
    rc, _, err = run_cli(["simulate", "--num-prompts"])
    assert rc == 2 and err.count("\n") == 1 and "see `chunksim simulate --help`" in err


def test_closed_stdout_pipe_exits_quietly():
    p = subprocess.Popen(
        [sys.executable, "-m", "experiments.cli", "stall", "--chunks", "--no-simulate"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 0 and err == ""


def test_progress_bar_shows_on_long_runs_and_is_silent_otherwise(monkeypatch):
    argv = ["simulate", "--num-prompts", "600", "--request-rate", "50", "--input-len", "128", "--output-len", "16"]
    monkeypatch.setattr(sr, "PROGRESS_DELAY_S", 0.0)
    rc, out, err = run_cli(argv)
    assert rc == 0 and "simulate" in err and "req" in err
    assert run_cli(argv + ["--quiet"])[2] == ""
    rc, js, err = run_cli(argv + ["--json"])
    assert rc == 0 and err == ""
    monkeypatch.setattr(sr, "PROGRESS_DELAY_S", 2.0)
    assert json.loads(run_cli(argv + ["--json"])[1]) == json.loads(js)


def test_trace_size_announced_even_when_quiet(tmp_path):
    """The trace's size goes to stderr with --quiet too, and is the file's size."""
    path = tmp_path / "run.json"
    rc, _, err = run_cli(["simulate", "--num-prompts", "300", "--request-rate", "10", "--trace", path, "--quiet"])
    assert rc == 0
    line = [l for l in err.splitlines() if l.startswith("wrote trace:")]
    assert len(line) == 1
    mb = float(line[0].rsplit("(", 1)[1].split(" MB")[0])
    assert abs(mb * 2**20 - path.stat().st_size) <= 0.05 * 2**20


@pytest.mark.parametrize(
    "hw,tokens,tier",
    [("h100", 8192, "≥ 70 GiB"), ("a100-80gb", 2048, "< 70 GiB or A100"), ("l40s", 2048, "< 70 GiB or A100")],
)
def test_engine_defaults_resolved_for_the_gpu(tmp_path, hw, tokens, tier):
    rc, out, _ = run_cli(["simulate", "--hardware", hw, "--num-prompts", "5", "--out", tmp_path, "--quiet"])
    assert rc == 0
    row = next(l for l in out.splitlines() if l.startswith("max_num_batched_tokens"))
    assert str(tokens) in row and tier in row
    text = (tmp_path / "config.yaml").read_text()
    assert f"#   max_num_batched_tokens: {tokens}  (vLLM default for {tier}" in text
    cfg = yaml.safe_load(text)
    assert "max_num_batched_tokens" not in cfg["engine"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["engine_config"]["max_num_batched_tokens"] == {
        "value": tokens,
        "why": row.split(str(tokens), 1)[1].strip(),
    }
    rc, out2, _ = run_cli(["simulate", "-f", tmp_path / "config.yaml", "--json"])
    assert rc == 0 and json.loads(out2)["completed"] == 5


def test_sglang_defaults_named(tmp_path):
    rc, out, _ = run_cli(["simulate", "--policy", "sglang", "--num-prompts", "5", "--quiet"])
    assert rc == 0
    row = next(l for l in out.splitlines() if l.startswith("chunked_prefill_size"))
    assert "8192" in row and "SGLang default" in row


def test_generic_trace_from_the_cli(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("when_ms,inp,out\n0,100,5\n250,200,6\n1000,300,7\n")
    rc, _, err = run_cli(
        [
            "simulate",
            "--workload-file",
            trace,
            "--trace-format",
            "csv",
            "--trace-columns",
            "arrival=when_ms,prompt_len=inp,output_len=out",
            "--time-unit",
            "ms",
            "--out",
            tmp_path / "o",
            "--quiet",
        ]
    )
    assert rc == 0, err
    df = pd.read_csv(tmp_path / "o" / "requests.csv")
    assert df.arrival_s.tolist() == [0.0, 0.25, 1.0] and df.prompt_len.tolist() == [100, 200, 300]
    rc, _, _ = run_cli(
        [
            "simulate",
            "--workload-file",
            trace,
            "--trace-format",
            "csv",
            "--trace-columns",
            "arrival=when_ms,prompt_len=inp,output_len=out",
            "--time-unit",
            "s",
            "--out",
            tmp_path / "p",
            "--quiet",
            "--num-prompts",
            "2",
        ]
    )
    assert pd.read_csv(tmp_path / "p" / "requests.csv").arrival_s.tolist() == [0.0, 250.0]


def test_sweep_with_failed_points_exits_1(tmp_path):
    rc, out, err = run_cli(
        [
            "sweep",
            "--itl-slo-ms",
            "60",
            "--policies",
            "vllm",
            "--max-num-batched-tokens",
            "512",
            "1000000000",
            "--request-rates",
            "4",
            "--num-prompts",
            "20",
            "--long-every",
            "10",
            "--no-progress",
        ]
    )
    assert rc == 1 and "1 of 2 points failed" in err
    assert "recommend" not in err and "vllm" in out


def test_sweep_takes_vllm_dataset_flags(tmp_path):
    rc, out, err = run_cli(
        [
            "sweep",
            "--itl-slo-ms",
            "100",
            "--policies",
            "vllm",
            "--max-num-batched-tokens",
            "512",
            "--request-rates",
            "5",
            "--dataset-name",
            "random",
            "--random-input-len",
            "256",
            "--random-output-len",
            "16",
            "--random-range-ratio",
            "0.5",
            "--num-prompts",
            "30",
            "--no-progress",
            "--out",
            tmp_path,
            "--no-plots",
            "--json",
        ]
    )
    assert rc == 0, err
    row = pd.read_csv(tmp_path / "sweep.csv").iloc[0]
    w = json.loads(row.workload)
    assert w["lengths"] == {"kind": "random", "input_len": 256, "output_len": 16, "range_ratio": 0.5}
    assert row.completed == 30 and json.loads(out)["points"] == 1
