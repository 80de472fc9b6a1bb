"""The Chrome/Perfetto trace: structure the Perfetto UI's JSON importer needs, and what it says."""

import json
from collections import defaultdict

import pytest

from costmodel import load_hardware, load_model
from experiments.cli import main
from experiments.engines import build_engine
from experiments.perfetto import chrome_trace
from experiments.scenarios import stall_scene
from simcore.simulation import Simulation
from workloads.traffic import chat_with_long_prompts


def run(policy, flags, wl, replicas=1):
    m, hw = load_model("llama-3.1-8b"), load_hardware("h100")
    engines = [build_engine(policy, m, hw, 1, flags)[:3] for _ in range(replicas)]
    router = (lambda req, reps: req.rid % len(reps)) if replicas > 1 else None
    return Simulation(engines, wl, record_iterations=True, router=router).run()


SCENES = [
    ("vllm", {"max_num_batched_tokens": 2048}, stall_scene(8192, 8, 1024), 1),
    (
        "sglang",
        {"chunked_prefill_size": 1024},
        chat_with_long_prompts(8, num_prompts=60, long_prompt_len=8192, long_every=20),
        2,
    ),
]


def check_structure(trace: dict) -> None:
    """What ui.perfetto.dev's legacy JSON importer relies on."""
    json.dumps(trace, allow_nan=False)
    events = trace["traceEvents"]
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in events if e["ph"] == "M"}
    slices, stacks = defaultdict(list), defaultdict(list)
    for e in events:
        assert e["ph"] in {"M", "X", "b", "e", "i"} and isinstance(e["pid"], int) and isinstance(e["name"], str)
        if e["ph"] == "M":
            continue
        assert e["ts"] >= 0 and (e["pid"], 0) in names
        if e["ph"] == "X":
            assert e["dur"] >= 0
            slices[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for e in sorted((e for e in events if e["ph"] in "be"), key=lambda e: e["ts"]):
        key = (e["pid"], e["cat"], e["id"])
        if e["ph"] == "b":
            stacks[key].append(e["name"])
        else:
            assert stacks[key] and stacks[key][-1] == e["name"], "async slices must nest"
            stacks[key].pop()
    assert not any(stacks.values())
    for spans in slices.values():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:]):
            assert start >= end - 1e-6, "slices on one thread must not overlap"


@pytest.mark.parametrize("policy,flags,wl,replicas", SCENES)
def test_trace_structure_and_content(policy, flags, wl, replicas):
    res = run(policy, flags, wl, replicas)
    trace = chrome_trace(res)
    check_structure(trace)
    ev = trace["traceEvents"]
    its = [e for e in ev if e["ph"] == "X"]
    assert len(its) == len(res.iterations) and sum(e["args"]["steps"] for e in its) == res.summary["num_iterations"]
    assert sum(e["args"]["prefill_tokens"] for e in its) == int(res.requests.prompt_len.sum())
    assert {e["pid"] for e in its} == set(range(1, replicas + 1))
    first = its[0]["args"]
    assert {"prefill_tokens", "decode_tokens", "sequences", "cost_ms"} <= set(first)
    assert any(k.startswith("attention") for k in first["cost_ms"])
    phases = [e["name"] for e in ev if e["ph"] == "b" and e["id"] == 0]
    assert phases == ["request 0", "queued", "prefilling", "decoding"]


def test_simulate_writes_a_trace_and_plots(tmp_path, capsys):
    assert (
        main(
            [
                "simulate",
                "--scenario",
                "stall",
                "--max-num-batched-tokens",
                "2048",
                "--trace",
                str(tmp_path / "run.json"),
                "--plots",
                str(tmp_path / "plots"),
            ]
        )
        == 0
    )
    check_structure(json.loads((tmp_path / "run.json").read_text()))
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "iteration_composition.png",
        "itl_timeline.png",
        "latency_cdfs.png",
    ]


def test_trace_size_is_announced_even_quiet(tmp_path, capsys):
    assert main(["simulate", "--scenario", "stall", "--quiet", "--json", "--trace", str(tmp_path / "run.json")]) == 0
    err = capsys.readouterr().err
    assert "wrote trace:" in err and " MB" in err


def test_trace_within_budget_samples_requests_then_merges_passes():
    res = run(
        "vllm",
        {"max_num_batched_tokens": 512},
        chat_with_long_prompts(8, num_prompts=200, long_prompt_len=8192, long_every=20),
    )
    full = chrome_trace(res)
    assert full["otherData"]["requests_shown"] == 200 and full["otherData"]["entries_per_slice"] == 1
    small = chrome_trace(res, max_bytes=60_000)
    check_structure(small)
    o = small["otherData"]
    assert o["requests_shown"] < 200 and len(json.dumps(small)) < 2 * 60_000
    its = [e for e in small["traceEvents"] if e["ph"] == "X"]
    assert sum(e["args"]["steps"] for e in its) == res.summary["num_iterations"]
