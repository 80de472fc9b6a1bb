"""The chunk-or-disaggregate study (experiments/disagg_study.py): candidates against an independent
enumeration, attainment against hand counts, the goodput search's bracket, goodput never falling
as an SLO loosens, and the recommendation moving the way the mechanism says when an SLO tightens."""

from __future__ import annotations

import functools
import itertools
import json

import numpy as np
import pandas as pd
import pytest

from experiments.cli import main
from experiments.disagg_study import Candidate, StudySpec, _probe, attainment, candidates, goodput, recommend, run_study

W = {"kind": "chat_with_long_prompts", "num_prompts": 120, "output_len": 128, "long_prompt_len": 8192, "long_every": 20}


def _spec(ttft: float, itl: float, **kw) -> StudySpec:
    args = dict(gpus=3, workload=W, budgets=(512, 4096), itl_per_request="max")
    return StudySpec(ttft_slo_ms=ttft, itl_slo_ms=itl, **{**args, **kw})


@functools.cache
def _study(ttft: float, itl: float):
    spec = _spec(ttft, itl)
    df = run_study(spec)
    return df, recommend(df, spec)


def test_candidates_are_every_fitting_split():
    spec = StudySpec(gpus=5, ttft_slo_ms=1, itl_slo_ms=1, tps=(1, 2), budgets=(256, 1024))
    got = candidates(spec)
    assert all(c.gpus <= 5 for c in got)
    coloc = {(c.tp, c.budget) for c in got if c.kind == "colocated"}
    assert coloc == set(itertools.product((1, 2), (256, 1024)))
    splits = {(c.prefill, c.prefill_tp, c.decode, c.decode_tp) for c in got if c.kind == "disaggregated"}
    brute = {
        (x, a, y, b) for x, a, y, b in itertools.product(range(1, 6), (1, 2), range(1, 6), (1, 2)) if x * a + y * b <= 5
    }
    assert splits == brute and len(splits) == sum(1 for c in got if c.kind == "disaggregated")


def test_attainment_counts_requests():
    df = pd.DataFrame(
        {
            "finish_s": [1.0, 1.0, 1.0, np.nan],
            "ttft_s": [0.1, 0.5, 0.1, np.nan],
            "tpot_s": [0.01, 0.01, 0.05, np.nan],
            "max_itl_s": [0.02, 0.02, 0.05, np.nan],
        }
    )
    assert attainment(df, 200, 30) == {"ttft": 0.5, "itl": 0.5, "both": 0.25}
    assert attainment(df, 200, 15, "max") == {"ttft": 0.5, "itl": 0.0, "both": 0.0}  # max gaps 20, 20, 50 ms
    assert attainment(df, 600, 60, "max")["both"] == 0.75  # the unfinished request meets nothing


def test_goodput_is_bracketed_within_tolerance():
    spec = _spec(2000, 100)
    spec = StudySpec(**{**spec.__dict__, "start_rate": 8.0})
    c = Candidate("colocated", tp=1, budget=1024)
    rec = goodput(spec, c)
    assert rec["failing_rate"] / rec["goodput"] <= 1 + spec.rel_tol
    assert _probe(spec, c, rec["goodput"])["meets"] and not _probe(spec, c, rec["failing_rate"])["meets"]
    assert rec["goodput_per_gpu"] == rec["goodput"] / c.gpus


@pytest.mark.parametrize(
    "c", [Candidate("colocated", tp=1, budget=1024), Candidate("disaggregated", 0, None, 1, 1, 1, 1)]
)
def test_goodput_never_falls_as_an_slo_loosens(c):
    """One start and one rate lattice for every SLO, and the same simulation at each rate: a looser
    SLO meets wherever a tighter one does, so its search can only end higher."""
    g = {
        (t, i): goodput(StudySpec(**{**_spec(t, i).__dict__, "start_rate": 8.0}), c)["goodput"]
        for t, i in [(500, 30), (500, 60), (2000, 30), (2000, 60)]
    }
    assert g[(500, 30)] <= g[(500, 60)] <= g[(2000, 60)]
    assert g[(500, 30)] <= g[(2000, 30)] <= g[(2000, 60)]


def _gain(rec: dict) -> float:
    return rec["disaggregated"]["goodput_per_gpu"] / rec["colocated"]["goodput_per_gpu"]


def test_tighter_itl_shrinks_the_budget_then_disaggregates():
    """A colocated decoder waits out each prefill chunk beside it, so a tighter worst-gap SLO forces a
    smaller budget, costs colocation goodput, and at last binds it; a decode pool has no chunks to
    wait out, so disaggregation's goodput does not move and the answer flips to it."""
    loose_df, loose = _study(2000, 200)
    mid_df, mid = _study(2000, 40)
    _, tight = _study(2000, 20)
    budget = lambda rec, df: df.set_index("candidate").loc[rec["colocated"]["candidate"], "budget"]  # noqa: E731
    assert budget(mid, mid_df) < budget(loose, loose_df)
    assert "larger_budget" in mid["colocated"] and mid["colocated"]["larger_budget"]["binds"] == "ITL"
    assert (
        tight["colocated"]["goodput_per_gpu"]
        < mid["colocated"]["goodput_per_gpu"]
        <= loose["colocated"]["goodput_per_gpu"]
    )
    assert _gain(loose) <= _gain(mid) < _gain(tight)
    assert loose["kind"] == "colocated" and tight["kind"] == "disaggregated"
    assert tight["colocated"]["binds"] == "ITL"


def test_tighter_ttft_binds_colocation_on_ttft_and_narrows_its_lead():
    """Colocated prefills share each step with decodes (DistServe §2.2's interference); a prefill pool
    runs prompts alone. Tightening TTFT (ITL loose) binds colocation on TTFT and moves the answer
    toward disaggregation."""
    _, loose = _study(2000, 200)
    _, mid = _study(600, 200)
    _, tight = _study(300, 200)
    assert loose["colocated"]["binds"] == mid["colocated"]["binds"] == tight["colocated"]["binds"] == "TTFT"
    assert _gain(loose) < _gain(mid) < _gain(tight)


def test_cli_json_and_bad_input(capsys):
    args = ["disagg", "--gpus", "2", "--ttft-slo-ms", "2000", "--itl-slo-ms", "100", "--budgets", "1024"]
    args += [
        "--num-prompts",
        "60",
        "--random-input-len",
        "512",
        "--random-output-len",
        "32",
        "--dataset-name",
        "random",
    ]
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {r["candidate"] for r in out["candidates"]} == {"colocated tp1 budget 1024", "1P1D tp1"}
    assert out["recommendation"]["choice"] in {"colocated tp1 budget 1024", "1P1D tp1"}
    for bad, field in (
        (["--attainment", "150"], "--attainment"),
        (["--tp", "4"], "--tp"),
        (["--colocated-policy", "nochunk"], "--budgets"),
        (["--model", "no-such-model"], "model"),
    ):
        assert main([*args, *bad]) == 2
        err = capsys.readouterr().err.strip()
        assert field in err and len(err.splitlines()) == 1


def test_sglang_candidates_run_sglang():
    """--engine sglang: the colocated budget is chunked_prefill_size and the split runs SGLang's PD
    servers; each candidate's probe differs from vLLM's at the same rate (another scheduler), and a
    colocated policy of the other engine is refused."""
    from costmodel.errors import InputError
    from experiments.disagg_study import _run

    kw = dict(gpus=2, ttft_slo_ms=2000, itl_slo_ms=100, workload=W, budgets=(512,), min_duration_s=0)
    sgl, vll = StudySpec(engine="sglang", **kw), StudySpec(**kw)
    assert sgl.colocated_policy == "sglang" and vll.colocated_policy == "vllm"
    for c in candidates(sgl):
        df_s, s_s = _run(sgl, c, 6.0)
        df_v, s_v = _run(vll, c, 6.0)
        assert df_s.finish_s.notna().all() and len(df_s) == len(df_v)
        assert not np.allclose(df_s.ttft_s, df_v.ttft_s)
        if c.kind == "disaggregated":  # SGLang's servers push KV (simcore/disagg_sglang.py); vLLM's decode side reads
            assert s_s["kv_transfer"]["transfers"] == len(df_s)
            assert s_s["kv_transfer"]["pushes_per_request"] >= 1 and "pushes_per_request" not in s_v["kv_transfer"]
    # the budget is SGLang's chunk: at 512 against its default (8,192 on an H100) each 8,192-token
    # prompt takes 16 prefill passes instead of one (without --enable-mixed-chunk SGLang runs the
    # chunks back to back, so the decodes' longest gap does not shrink)
    df, dflt = _run(sgl, Candidate("colocated", tp=1, budget=None), 6.0)
    small = _run(sgl, Candidate("colocated", tp=1, budget=512), 6.0)[1]
    assert small["num_iterations"] - dflt["num_iterations"] >= 15 * int((df.prompt_len == 8192).sum()) > 0
    with pytest.raises(InputError, match="colocated-policy"):
        StudySpec(engine="sglang", colocated_policy="vllm", **kw)
    with pytest.raises(InputError, match="--engine"):
        StudySpec(engine="trtllm", **kw)
