"""`pytest -m slow`: the benchmarks docs/benchmarks.md lists, each run as its own script at its default
size, checked to finish and print its figures (no timing assertions: machines differ)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
pytestmark = pytest.mark.slow

BENCHMARKS = [  # script, args, needs ../shared/data, words the output must hold
    ("benchmarks/bench_simulator.py", [], False, ["req/s"]),
    ("benchmarks/bench_cost.py", [], False, ["µs"]),
    ("benchmarks/bench_cluster.py", [], False, ["replicas"]),
    ("benchmarks/bench_traces.py", [], True, ["mooncake"]),
    ("benchmarks/calibration_bench.py", [], True, ["InternLM-20B"]),
    ("benchmarks/workload_bench.py", ["--repeat", "1"], False, ["sharegpt"]),
    ("benchmarks/bench_hicache.py", ["--requests", "1000"], True, ["write_through", "hit rate"]),
    ("experiments/sglang_chunk_study.py", [], False, ["chunked_prefill_size", "recomputed_tokens"]),
    ("benchmarks/bench_vidur_workload.py", ["--repeat", "1"], True, ["simulated req/s"]),
    ("benchmarks/bench_kernels.py", [], True, ["held out by shape"]),
    ("benchmarks/bench_steps.py", [], True, ["fit of a 40,000-step table"]),
    ("benchmarks/bench_validate.py", [], True, ["mean |relative error|"]),
    ("benchmarks/bench_engines.py", [], False, ["sglang - vllm, engine", "launches"]),
]


@pytest.mark.parametrize("script,args,shared,words", BENCHMARKS, ids=[b[0] for b in BENCHMARKS])
def test_benchmark_runs(script, args, shared, words):
    if shared and not SHARED.is_dir():
        pytest.skip("needs ../shared/data")
    cmd = (
        [sys.executable, script, *args]
        if script.startswith("benchmarks/")
        else [sys.executable, "-m", script[:-3].replace("/", "."), *args]
    )
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, p.stderr[-3000:]
    out = p.stdout.lower()
    for w in words:
        assert w.lower() in out, (script, p.stdout[-2000:])
