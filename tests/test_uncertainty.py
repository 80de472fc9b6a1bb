"""`simulate --uncertainty N`: the run repeated at parameter sets drawn from a calibrated profile's covariance."""

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


def test_faster_draws_give_shorter_latency(fitted, tmp_path, capsys):
    run(["--hardware", str(fitted), "--uncertainty", "12", "--out", str(tmp_path)], capsys)
    rows = pd.read_csv(tmp_path / "uncertainty.csv")
    speed = np.log(rows.pi_eff) + np.log(rows.beta_eff)
    assert np.corrcoef(speed, rows.p99_itl_ms)[0, 1] < 0


def test_zero_covariance_collapses_bands_to_the_point(fitted, tmp_path, capsys):
    d = yaml.safe_load(fitted.read_text())
    cov = d["calibration"]["log_covariance"]
    cov["matrix"] = np.zeros_like(np.array(cov["matrix"])).tolist()
    path = tmp_path / "certain.yaml"
    path.write_text(yaml.safe_dump(d))
    u = run(["--hardware", str(path), "--uncertainty", "4"], capsys)["uncertainty"]["metrics"]
    for m in METRICS:
        assert u[m]["p5"] == pytest.approx(u[m]["point"], rel=1e-9) == u[m]["p95"]


def test_same_seed_same_bands(fitted, capsys):
    a, b, c = (run(["--hardware", str(fitted), "--uncertainty", "5", "--seed", s], capsys) for s in ("1", "1", "2"))
    assert json.dumps(a) == json.dumps(b)
    assert a["uncertainty"] != c["uncertainty"]


def test_table_in_the_terminal(fitted, capsys):
    assert main(["simulate", *WORKLOAD, "--hardware", str(fitted), "--uncertainty", "3"]) == 0
    out = capsys.readouterr().out
    assert "3 parameter sets" in out and "p95" in out and "p99_ttft_ms" in out


def test_uncalibrated_profile_is_one_clear_error(capsys):
    assert main(["simulate", *WORKLOAD, "--hardware", "h100", "--uncertainty", "3"]) == 2
    err = capsys.readouterr().err
    assert "uncertainty" in err and "calibrate" in err and "Traceback" not in err
