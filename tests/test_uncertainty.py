"""`simulate --uncertainty N`: the run repeated at draws of the profile's expected error (a factor on
every step's time) and, for a calibrated profile, of parameter sets from its covariance."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from costmodel import load_hardware
from costmodel.calibration import fit, load_timings, profile_from_fit
from experiments.cli import main

DATA = Path(__file__).resolve().parents[1] / "costmodel" / "calibration_data"
WORKLOAD = ["--request-rate", "20", "--num-prompts", "80", "--input-len", "600", "--output-len", "40"]
METRICS = ("p99_itl_ms", "p99_ttft_ms", "output_throughput")


@pytest.fixture(scope="module")
def fitted(tmp_path_factory) -> Path:
    hw = profile_from_fit(fit(load_timings(DATA / "h100_llama-2-7b_mlp.csv")), load_hardware("h100"), "fixture")
    path = tmp_path_factory.mktemp("cal") / "fitted.yaml"
    path.write_text(hw.to_yaml())
    return path


def run(argv, capsys) -> dict:
    assert main(["simulate", *WORKLOAD, *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_bands_are_ordered_and_spread(fitted, tmp_path, capsys):
    s = run(["--hardware", str(fitted), "--uncertainty", "12", "--out", str(tmp_path)], capsys)
    u = s["uncertainty"]
    assert u["draws"] == 12 and set(u["metrics"]) == set(METRICS)
    for m in METRICS:
        b = u["metrics"][m]
        assert b["point"] == s[m] and b["p5"] <= b["p50"] <= b["p95"]
    assert u["metrics"]["p99_ttft_ms"]["p5"] < u["metrics"]["p99_ttft_ms"]["p95"]
    rows = pd.read_csv(tmp_path / "uncertainty.csv")
    assert len(rows) == 12 and rows.pi_eff.nunique() == 12
    assert json.loads((tmp_path / "summary.json").read_text())["uncertainty"] == u


def test_faster_draws_give_shorter_latency(fitted, tmp_path, capsys, monkeypatch):
    """The covariance's draws alone (model error held at 0, so no time factor): faster parameter
    sets give shorter p99 TTFT and more output throughput."""
    from costmodel import expected_error as ee
    from experiments.cli import simulate_run

    monkeypatch.setattr(simulate_run, "expected_error", lambda hw: ee.ExpectedError("kernel-calibrated", 0, 0, 1, "t"))
    run(["--hardware", str(fitted), "--uncertainty", "12", "--out", str(tmp_path)], capsys)
    rows = pd.read_csv(tmp_path / "uncertainty.csv")
    assert (rows.time_scale == 1.0).all() and rows.pi_eff.nunique() == 12
    speed = np.log(rows.pi_eff) + np.log(rows.beta_eff)
    assert np.corrcoef(speed, rows.p99_ttft_ms)[0, 1] < 0
    assert np.corrcoef(speed, rows.output_throughput)[0, 1] > 0.5


def test_zero_covariance_and_no_model_error_collapse_bands_to_the_point(fitted, tmp_path, capsys, monkeypatch):
    from costmodel import expected_error as ee
    from experiments.cli import simulate_run

    d = yaml.safe_load(fitted.read_text())
    cov = d["calibration"]["log_covariance"]
    cov["matrix"] = np.zeros_like(np.array(cov["matrix"])).tolist()
    path = tmp_path / "certain.yaml"
    path.write_text(yaml.safe_dump(d))
    exact = ee.ExpectedError("kernel-calibrated", 0.0, 0.0, 1, "test")
    monkeypatch.setattr(simulate_run, "expected_error", lambda hw: exact)
    u = run(["--hardware", str(path), "--uncertainty", "4"], capsys)["uncertainty"]["metrics"]
    for m in METRICS:
        assert u[m]["p5"] == pytest.approx(u[m]["point"], rel=1e-9) == u[m]["p95"]


def test_the_time_factor_alone_moves_latency_its_way(tmp_path, capsys):
    """A spec-sheet profile has no covariance: only the expected error is drawn."""
    s = run(["--hardware", "h100", "--uncertainty", "8", "--out", str(tmp_path)], capsys)
    assert s["uncertainty"]["drawn_fields"] == [] and s["expected_error"]["kind"] == "spec-sheet"
    rows = pd.read_csv(tmp_path / "uncertainty.csv").sort_values("time_scale")
    assert rows.time_scale.nunique() == 8
    # slower draws, longer p99 TTFT: not strictly (where arrivals fall between step ends moves with
    # the factor), but in rank and from end to end
    assert rows.time_scale.corr(rows.p99_ttft_ms, method="spearman") > 0.9
    assert rows.p99_ttft_ms.iloc[0] < rows.p99_ttft_ms.iloc[-1]


def test_same_seed_same_bands(fitted, capsys):
    a, b, c = (run(["--hardware", str(fitted), "--uncertainty", "5", "--seed", s], capsys) for s in ("1", "1", "2"))
    assert json.dumps(a) == json.dumps(b)
    assert a["uncertainty"] != c["uncertainty"]


def test_table_in_the_terminal(fitted, capsys):
    assert main(["simulate", *WORKLOAD, "--hardware", str(fitted), "--uncertainty", "3"]) == 0
    out = capsys.readouterr().out
    assert "3 draws of" in out and "expected error" in out and "p95" in out and "p99_ttft_ms" in out


def test_every_profile_prints_its_expected_error(capsys):
    assert main(["simulate", *WORKLOAD, "--hardware", "h100"]) == 0
    assert "h100: spec-sheet profile, expected error" in capsys.readouterr().out
