"""Calibration against synthetic truth, the shipped Vidur fixture, and bad input."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from costmodel import CostModel, InputError, ShapeStats, load_hardware, load_model
from costmodel.calibration import fit, profile_from_fit, sample_hardware
from costmodel.calibration.fit import H100, fit_class
from costmodel.calibration.microbench import build_plan, cpu_plan, model_plan, plan_table, split_holdout
from costmodel.calibration.timings import (
    gemm_row,
    layer_gemm_shapes,
    load_timings,
    read_timings_csv,
    validate,
    write_timings_csv,
)
from experiments.cli import main

DATA = Path(__file__).resolve().parents[1] / "costmodel" / "calibration_data"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "kernels" / "vidur" / "compute" / "h100"


def synthetic_gemms(pi, beta, floor, noise, rng, form="smooth"):
    """GEMMs over decode-to-prefill token counts and several weight shapes; lognormal noise."""
    rows = [
        gemm_row("g", m, k, n, 2, 0.0)
        for m in np.unique(np.geomspace(1, 8192, 40).astype(int))
        for k, n in ((4096, 4096), (4096, 22016), (11008, 4096), (1024, 1024), (512, 2048))
    ]
    df = pd.DataFrame(rows)
    if form == "smooth":  # rows padded to the 128-row tile, compute and memory in quadrature
        a = df["flops"] * np.ceil(df["m"] / 128) * 128 / df["m"] / pi
        t = np.hypot(a, df["bytes"] / beta) + floor
    else:
        roof = np.maximum(df["flops"] / pi, df["bytes"] / beta)
        t = roof + floor if form == "offset" else np.maximum(roof, floor)
    return df.assign(time_s=t * np.exp(noise * rng.standard_normal(len(df))))


TRUTH = {"pi": 7e14, "beta": 3e12, "floor": 6e-6}


@pytest.mark.parametrize("form", ["smooth", "offset", "max"])
def test_recovers_known_parameters_within_3_percent(form):
    df = synthetic_gemms(*TRUTH.values(), 0.03, np.random.default_rng(1), form)
    c = fit_class(df, "gemm", form)
    for j, p in enumerate(c.params):
        assert c.values[j] == pytest.approx(TRUTH[p], rel=0.03), p
    assert not c.warnings


def test_one_sigma_covers_truth_at_the_expected_rate():
    """Over repeated seeds each |ln p̂ − ln p| ≤ 1σ about 68 % of the time (binomial slack at n = 60)."""
    hits = np.zeros(3)
    n = 60
    for seed in range(n):
        c = fit_class(synthetic_gemms(*TRUTH.values(), 0.03, np.random.default_rng(100 + seed)), "gemm")
        truth = np.array([TRUTH[p] for p in c.params])
        hits += np.abs(np.log(c.values / truth)) <= c.rel_sigma
    assert np.all((hits / n > 0.5) & (hits / n < 0.85)), hits / n


def test_memory_bound_data_cannot_identify_pi():
    df = synthetic_gemms(*TRUTH.values(), 0.01, np.random.default_rng(2))
    df = df[df["flops"] / TRUTH["pi"] < 0.3 * df["bytes"] / TRUTH["beta"]]
    c = fit_class(df, "gemm")
    assert any("gemm.pi not identified" in w for w in c.warnings)
    assert not np.isfinite(c.rel_sigma[c.params.index("pi")])


NORM_TRUTH = {"floor": 1.0e-6, "beta_l2": 2.2e12, "beta": 1.5e12}


def synthetic_norms(noise, rng, hidden=(4096, 8192), device=H100):
    """RMSNorm rows under the wave/L2 model: waves of R rows, each paying the floor, bytes at the
    L2 rate while the working set fits, the HBM rate beyond."""
    T = np.repeat(np.unique(np.geomspace(1, 4096, 120).astype(int)), len(hidden)).astype(float)
    h = np.tile(np.array(hidden, float), T.size // len(hidden))
    df = pd.DataFrame(dict(op_class="norm", m=T, tokens=T, n=h, flops=0.0, bytes=2 * (2 * T * h + h)))
    R = device.rows_per_wave(h)
    w = np.ceil(T / R)
    Bw = df["bytes"] * w * R / T
    beta = np.where(df["bytes"] <= device.l2_bytes, NORM_TRUTH["beta_l2"], NORM_TRUTH["beta"])
    t = NORM_TRUTH["floor"] * (1 + w) + Bw / beta
    return df.assign(time_s=t * np.exp(noise * rng.standard_normal(T.size)))


def test_norm_wave_l2_model_recovers_known_parameters():
    df = synthetic_norms(0.03, np.random.default_rng(4))
    c = fit_class(df, "norm")
    assert c.params == ("floor", "beta_l2", "beta") and not c.warnings
    for j, p in enumerate(c.params):
        assert c.values[j] == pytest.approx(NORM_TRUTH[p], rel=0.03), p
        assert abs(np.log(c.values[j] / NORM_TRUTH[p])) < 4 * c.rel_sigma[j], p


def test_norm_one_sigma_covers_truth_at_the_expected_rate():
    hits, n = np.zeros(3), 40
    for seed in range(n):
        c = fit_class(synthetic_norms(0.03, np.random.default_rng(200 + seed)), "norm")
        hits += np.abs(np.log(c.values / np.array([NORM_TRUTH[p] for p in c.params]))) <= c.rel_sigma
    assert np.all((hits / n > 0.45) & (hits / n < 0.9)), hits / n


def test_norm_rows_per_wave_follow_block_size():
    assert H100.rows_per_wave(4096) == 264 and H100.rows_per_wave(0) == 264  # 2 blocks of 1024 threads
    assert H100.rows_per_wave(512) == 132 * 4 and H100.rows_per_wave(8) == 132 * 32


def test_norm_inside_l2_only_cannot_identify_hbm_bandwidth():
    df = synthetic_norms(0.01, np.random.default_rng(5))
    c = fit_class(df[df["bytes"] <= H100.l2_bytes], "norm")
    assert any("norm.beta not identified" in w for w in c.warnings)
    assert not np.isfinite(c.rel_sigma[c.params.index("beta")])


def test_allreduce_ring_bandwidth_and_latency():
    rng = np.random.default_rng(3)
    size = np.repeat(np.geomspace(2048, 64 << 20, 30), 3)
    n = np.tile([2.0, 4.0, 8.0], 30)
    B = 2 * (n - 1) / n * size
    t = (B / 3e11 + 2 * (n - 1) * 4e-6) * np.exp(0.02 * rng.standard_normal(size.size))
    df = pd.DataFrame(dict(op_class="allreduce", flops=0.0, bytes=B, workers=n, time_s=t))
    r = fit(df)
    assert r.value("allreduce.bandwidth") == pytest.approx(3e11, rel=0.03)
    assert r.value("allreduce.latency") == pytest.approx(4e-6, rel=0.05)


@pytest.fixture(scope="module")
def llama_fit():
    df = pd.concat([load_timings(DATA / "h100_llama-2-7b_mlp.csv"), load_timings(DATA / "h100_dgx_all_reduce.csv")])
    return fit(df), df


def test_vidur_fixture_fits_h100_in_a_plausible_range(llama_fit):
    r, _ = llama_fit
    assert 0.4 < r.value("gemm.pi") / 989e12 < 1.0  # below the spec sheet's dense fp16 peak
    assert 0.5 < r.value("gemm.beta") / 3.35e12 < 1.2  # near HBM3 (activations make it look a bit faster)
    assert r.seconds < 10


def test_llama_fit_predicts_internlm_gemms(llama_fit):
    r, _ = llama_fit
    err = r.errors(load_timings(DATA / "h100_internlm-20b_mlp.csv")).set_index("op_class")["mape"]
    assert err["gemm"] < 15 and err["embedding"] < 10 and err["norm"] < 10


@pytest.mark.skipif(not SHARED.is_dir(), reason="developer kernel set ../shared/data/kernels absent")
@pytest.mark.parametrize("model", ["internlm/internlm-20b", "Qwen/Qwen-72B"])
def test_full_llama_fit_predicts_other_models(model):
    r = fit(load_timings(SHARED / "meta-llama/Llama-2-7b-hf/mlp.csv"))
    err = r.errors(load_timings(SHARED / model / "mlp.csv")).set_index("op_class")["mape"]
    assert err["gemm"] < 10 and err["activation"] < 10 and err["rope"] < 10 and err["residual_add"] < 10
    assert err["embedding"] < 10 and err["norm"] < 10


def test_profile_loads_and_prices(llama_fit, tmp_path):
    r, _ = llama_fit
    hw = profile_from_fit(r, load_hardware("h100"), "fixture")
    path = tmp_path / "fitted.yaml"
    path.write_text(hw.to_yaml())
    back = load_hardware(str(path))
    assert back.pi_eff == pytest.approx(r.value("gemm.pi")) and back.counting == "faithful"
    assert back.interconnect_bandwidth == pytest.approx(r.value("allreduce.bandwidth"))
    assert (back.gemm_tile_rows, back.roofline_combine) == (128, "quadrature")
    assert back.kernel_overhead_s == pytest.approx(r.value("gemm.floor")) and back.kernel_floor_s == 0
    norm = back.calibration["row_kernel_model"]
    assert norm["classes"] == ["norm"] and norm["device"]["l2_bytes"] == 50e6 and norm["device"]["sms"] == 132
    assert back.calibration["parameters"]["norm.beta_l2"]["rel_sigma"] > 0
    m = load_model("llama-2-7b")
    cm = CostModel(m, back)
    t = cm.time(cm.shape([1] * 8, [1000] * 8))
    assert t > (m.weight_bytes + 8 * 1001 * m.kv_bytes_per_token) / back.beta_eff
    # the roofline's linear operator is the fit's four GEMM kernels per layer, priced the same way
    shapes = layer_gemm_shapes(m.H, m.h, m.h_kv, m.ffn, True, 1)
    for rows in (8, 200, 3000):
        kernels = validate(pd.DataFrame([gemm_row(op, rows, k, n, 2, 1.0) for op, (k, n) in shapes.items()]))
        fit_s = m.L * r.classes["gemm"].predict(kernels).sum()
        assert cm.breakdown(cm.shape([rows], [0])).op("linear").time_s == pytest.approx(fit_s, rel=0.03)
    run = cm.decode_run(7, 7 * 3001, 40)
    assert list(run) == [cm.time(ShapeStats(7, 7, 0.0, 0.0, 7 * 3001 + 7 * j)) for j in range(40)]


def test_sampled_hardware_spreads_by_the_fitted_sigma(llama_fit):
    r, _ = llama_fit
    hw = profile_from_fit(r, load_hardware("h100"), "fixture")
    draws = sample_hardware(hw, 2000, np.random.default_rng(0))
    pis = np.log([d.pi_eff for d in draws])
    assert np.std(pis) == pytest.approx(r.rel_sigma("gemm.pi"), rel=0.1)
    assert np.mean(pis) == pytest.approx(np.log(hw.pi_eff), abs=3 * r.rel_sigma("gemm.pi") / np.sqrt(2000) + 1e-12)
    with pytest.raises(InputError):
        sample_hardware(load_hardware("h100"), 3, np.random.default_rng(0))


def test_plan_prices_shapes_like_the_importer():
    plan = build_plan(4096, 32, 32, 11008, [1, 512], [(128, 0)], [1024], [1 << 20], "float16", tp=2)
    t = plan_table(plan)
    up = t[(t["op"] == "mlp_up_proj") & (t["m"] == 512)].iloc[0]
    assert (up["k"], up["n"]) == (4096, 11008) and up["flops"] == 2 * 512 * 4096 * 11008
    dec = t[t["op"] == "attention_decode"].iloc[0]  # one fitted attention class; op names the kernel
    assert dec["flops"] == 4 * 16 * 128 * 1025 and dec["bytes"] == 2 * 128 * (2 * 16 * 1025 + 2 * 16)
    assert len(model_plan(load_model("llama-3.1-8b")).kernels) > 100
    fit_part, held = split_holdout(plan_table(cpu_plan()))
    assert len(held) and set(held["op_class"]) <= set(fit_part["op_class"])


def test_timings_csv_round_trip_and_units(tmp_path):
    df = validate(pd.DataFrame([gemm_row("g", 8, 64, 64, 2, 1e-5)]))
    write_timings_csv(df, tmp_path / "t.csv")
    assert read_timings_csv(tmp_path / "t.csv")["time_s"].iloc[0] == pytest.approx(1e-5)
    raw = pd.read_csv(tmp_path / "t.csv").assign(time=10.0, time_unit="us")
    raw.to_csv(tmp_path / "us.csv", index=False)
    assert read_timings_csv(tmp_path / "us.csv")["time_s"].iloc[0] == pytest.approx(1e-5)


@pytest.mark.parametrize(
    "mutate,match",
    [
        (lambda d: d.drop(columns="time_unit"), "time_unit"),
        (lambda d: d.assign(time_unit="fortnights"), "unknown time unit"),
        (lambda d: d.assign(time=-1.0), "positive"),
        (lambda d: d.iloc[:2], "cannot fit"),
    ],
)
def test_bad_timings_are_one_clear_error(tmp_path, mutate, match, capsys):
    df = synthetic_gemms(*TRUTH.values(), 0.0, np.random.default_rng(0)).iloc[:20]
    write_timings_csv(validate(df), tmp_path / "ok.csv")
    mutate(pd.read_csv(tmp_path / "ok.csv")).to_csv(tmp_path / "bad.csv", index=False)
    assert main(["calibrate", "--from", "timings", str(tmp_path / "bad.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and match in err[0]


def test_missing_vidur_columns_exit_2(tmp_path, capsys):
    pd.read_csv(DATA / "h100_llama-2-7b_mlp.csv").drop(columns="n_embd").to_csv(tmp_path / "mlp.csv", index=False)
    assert main(["calibrate", "--from", "vidur", str(tmp_path / "mlp.csv")]) == 2
    assert "n_embd" in capsys.readouterr().err


def test_cli_writes_profile_plot_and_interval(tmp_path, capsys):
    out = tmp_path / "cal"
    assert (
        main(
            [
                "calibrate",
                "--from",
                "vidur",
                str(DATA / "h100_llama-2-7b_mlp.csv"),
                "--from",
                "vidur",
                str(DATA / "h100_dgx_all_reduce.csv"),
                "--holdout",
                str(DATA / "h100_internlm-20b_mlp.csv"),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert {p.name for p in out.iterdir()} >= {"fitted.yaml", "residuals.png", "timings.csv", "report.json"}
    assert "held-out" in capsys.readouterr().out
    assert (
        main(["cost", "--hardware", str(out / "fitted.yaml"), "--q-lens", "512,1", "--kv-lens", "0,2048", "--interval"])
        == 0
    )
    assert "interval" in capsys.readouterr().out


def test_cli_json_report_of_a_kernel_fit(tmp_path, capsys):
    """`calibrate --json` prints the report as JSON: the same points, parameters and warnings the
    report.json of --out holds."""
    import json

    args = ["calibrate", "--from", "vidur", str(DATA / "h100_llama-2-7b_mlp.csv"), "--json"]
    assert main(args + ["--out", str(tmp_path / "cal")]) == 0
    printed = json.loads(capsys.readouterr().out)
    written = json.loads((tmp_path / "cal" / "report.json").read_text())
    assert printed["points"] == written["points"] > 0
    assert printed["parameters"] == written["parameters"] and printed["warnings"] == written["warnings"]


def test_fit_runs_on_one_blas_thread_and_restores_the_count(monkeypatch):
    """Inside a fit every BLAS this process loaded runs one thread; afterwards each has its own
    count back."""
    import importlib

    from threadpoolctl import threadpool_info

    fit_module = importlib.import_module("costmodel.calibration.fit")
    blas = lambda: [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]  # noqa: E731
    before, seen = blas(), []
    if not before:
        pytest.skip("no BLAS loaded")
    real = fit_module._fit_classes
    monkeypatch.setattr(fit_module, "_fit_classes", lambda *a: seen.append(blas()) or real(*a))
    rng = np.random.default_rng(3)
    m = rng.integers(1, 4096, 60)
    df = pd.DataFrame(
        {
            "op_class": "gemm",
            "m": m,
            "n": 4096,
            "k": 4096,
            "flops": 2.0 * m * 4096 * 4096,
            "bytes": 2.0 * (2 * m * 4096 + 4096 * 4096),
            "source": "synthetic",
        }
    )
    df["time_s"] = df["flops"] / 5e14 + 5e-6
    fit_module.fit(df, form="physical")
    assert seen == [[1] * len(before)]
    assert blas() == before
