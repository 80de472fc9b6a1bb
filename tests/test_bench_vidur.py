"""benchmarks/bench_vidur_workload.py --vidur: the ratio report, the pinned commit, Vidur's
command line, and the whole alternation against a fake Vidur Python (no Vidur needed). The run
against Vidur itself is `pytest -m slow`, and skips unless a Vidur venv is there
(CHUNKSIM_VIDUR_PYTHON, or ../venvs/vidur/bin/python beside the repository)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
SHARED = Path(os.environ.get("CHUNKSIM_SHARED_DATA", ROOT.parent / "shared" / "data"))  # a worktree elsewhere
sys.path.insert(0, str(BENCH))
import bench_vidur_workload as bvw  # noqa: E402
import vidur_driver  # noqa: E402   (imports no Vidur at module level)


def test_report_ratio_is_paired_by_round():
    # 10,000 requests; chunksim 0.2 s and 0.25 s wall, Vidur 20 s and 10 s: rates 50k, 40k against
    # 500, 1,000, so the round ratios are 100 and 40 (not 50k / 1k or 40k / 500).
    lines = bvw.versus_report(10_000, [(0.2, 0.1), (0.25, 0.125)], [(20.0, 10.0), (10.0, 5.0)])
    text = "\n".join(lines)
    assert "chunksim  40,000 / 45,000 / 50,000   CPU 80,000 / 90,000 / 100,000" in text
    assert "Vidur     500 / 750 / 1,000   CPU 1,000 / 1,500 / 2,000" in text
    assert "ratio chunksim / Vidur, round by round: 40.0 / 70.0 / 100.0   CPU 40.0 / 70.0 / 100.0" in text
    assert "2 alternating rounds" in text


def test_setup_script_and_benchmark_pin_the_same_commit():
    script = (BENCH / "vidur_setup.sh").read_text()
    assert re.search(rf"^VIDUR_COMMIT={bvw.VIDUR_COMMIT}\b", script, re.M)
    assert re.fullmatch(r"[0-9a-f]{40}", bvw.VIDUR_COMMIT)


def test_vidur_command_line_is_the_speed_workload():
    argv = vidur_driver.vidur_argv("/t.csv", "/k", "/w")
    flags = {a: (b if not b.startswith("--") else None) for a, b in zip(argv, argv[1:] + ["--"]) if a.startswith("--")}
    assert flags["--replica_config_model_name"] == "codellama/CodeLlama-34b-Instruct-hf"
    assert flags["--replica_config_tensor_parallel_size"] == "2"
    assert flags["--replica_scheduler_config_type"] == "sarathi"
    assert flags["--sarathi_scheduler_config_chunk_size"] == "512"
    assert flags["--sarathi_scheduler_config_batch_size_cap"] == "128"
    assert flags["--sarathi_scheduler_config_block_size"] == "16"
    assert flags["--request_generator_config_type"] == "trace_replay"
    assert flags["--trace_request_generator_config_trace_file"] == "/t.csv"
    assert (
        flags["--random_forrest_execution_time_predictor_config_attention_input_file"]
        == "/k/legacy_acb95f6/a100/attention.csv"
    )
    assert flags["--metrics_config_cache_dir"] == "/w/cache"
    assert "--no-metrics_config_enable_chrome_trace" in argv  # the faster Vidur (the docstring)


FAKE = """#!{python}
import json, sys
# A stand-in for Vidur's Python: ignores the driver and answers as it would.
train = "--train-only" in sys.argv
out = {{"requests": 10000, "setup_s": 0.5}}
if not train:
    out.update(loop_wall_s=12.5, loop_cpu_s=12.0, completed={completed}, sim_end_s=5000.0, mean_e2e_s=9.5)
print("VIDUR_RESULT " + json.dumps(out))
"""


def run_bench(tmp_path, completed):
    fake = tmp_path / "python"
    fake.write_text(FAKE.format(python=sys.executable, completed=completed))
    fake.chmod(0o755)
    return subprocess.run(
        [
            sys.executable,
            str(BENCH / "bench_vidur_workload.py"),
            "--data",
            str(SHARED),
            "--vidur",
            str(fake),
            "--vidur-workdir",
            str(tmp_path / "w"),
            "--repeat",
            "2",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared/data")
def test_alternation_against_a_fake_vidur(tmp_path):
    p = run_bench(tmp_path, 10000)
    assert p.returncode == 0, p.stderr[-3000:]
    out = p.stdout
    assert "commit unknown" in out  # not a venv made by vidur_setup.sh
    assert out.count("round ") >= 2 and "Vidur 12.50 s (800 req/s" in out
    assert "Vidur     800 / 800 / 800" in out
    assert "completed: chunksim 10,000, Vidur 10,000" in out
    assert re.search(r"ratio chunksim / Vidur, round by round: [\d.]+ / [\d.]+ / [\d.]+", out)


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared/data")
def test_a_vidur_that_did_not_finish_the_workload_fails(tmp_path):
    p = run_bench(tmp_path, 9000)
    assert p.returncode != 0
    assert "Vidur completed 9000 of 10000 requests" in p.stderr


def vidur_python() -> str | None:
    for cand in (os.environ.get("CHUNKSIM_VIDUR_PYTHON"), str(ROOT.parent / "venvs" / "vidur" / "bin" / "python")):
        if cand and Path(cand).is_file():
            return cand
    return None


@pytest.mark.slow
@pytest.mark.skipif(vidur_python() is None, reason="no Vidur venv (benchmarks/vidur_setup.sh; CHUNKSIM_VIDUR_PYTHON)")
@pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared/data")
def test_against_vidur_itself(tmp_path):
    workdir = os.environ.get("CHUNKSIM_VIDUR_WORKDIR", str(tmp_path / "vidur"))  # a warm cache saves minutes
    p = subprocess.run(
        [
            sys.executable,
            str(BENCH / "bench_vidur_workload.py"),
            "--data",
            str(SHARED),
            "--vidur",
            vidur_python(),
            "--vidur-workdir",
            workdir,
            "--repeat",
            "1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert "completed: chunksim 10,000, Vidur 10,000" in p.stdout
    assert "ratio chunksim / Vidur" in p.stdout


def test_vidur_flags_reach_the_driver_after_its_own(tmp_path):
    fake = tmp_path / "python"
    fake.write_text(
        f"#!{sys.executable}\nimport json, sys\nprint('VIDUR_RESULT ' + json.dumps({{'argv': sys.argv}}))\n"
    )
    fake.chmod(0o755)
    out = bvw.run_vidur(
        str(fake), tmp_path / "w", None, train_only=True, flags=["--no-metrics_config_enable_chrome_trace"]
    )
    argv = out["argv"]
    assert argv[1] == str(BENCH / "vidur_driver.py")
    assert argv[-2:] == ["--train-only", "--no-metrics_config_enable_chrome_trace"]
