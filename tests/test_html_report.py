"""The HTML report: one self-contained file (no network), and in a real headless Chromium it loads
with no console error, every plotly figure renders, and a screenshot shows drawn traces.
The browser checks skip when no Chromium is installed; .ci/run installs one."""

import re
import shutil
import subprocess

import numpy as np
import pytest
from test_sweep import small_spec

from experiments.cli import main
from experiments.html_report import sweep_report
from experiments.sweep import recommend, run_sweep

BROWSER = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
needs_browser = pytest.mark.skipif(BROWSER is None, reason="no chromium installed (apt-get install chromium)")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--virtual-time-budget=20000",
    "--enable-logging=stderr",
    "--v=0",
]
PLOT_BG = np.array([229, 236, 246])  # plotly's default plot-area colour, #E5ECF6


def self_contained(path) -> str:
    text = path.read_text()
    assert not re.search(r"<(script|link|img)[^>]*(src|href)=[\"']?(https?:)?//", text), "loads something online"
    assert "Plotly.newPlot" in text and len(text) > 1_000_000  # plotly.js inline
    return text


def chromium(url: str, *extra: str, timeout: int = 60) -> subprocess.CompletedProcess:
    return subprocess.run([BROWSER, *FLAGS, *extra, url], capture_output=True, text=True, timeout=timeout)


def browser_check(path, tmp_path, figures: int) -> None:
    url = path.resolve().as_uri()
    dom = chromium(url, "--dump-dom")
    body = re.search(r"<body[^>]*>", dom.stdout)
    assert body, dom.stderr[-2000:]
    assert 'data-errors="0"' in body.group(0), body.group(0)
    assert f'data-plots="{figures}"' in body.group(0), body.group(0)
    console = [
        line for line in dom.stderr.splitlines() if "CONSOLE" in line and re.search(r"error|uncaught", line, re.I)
    ]
    assert not console, console
    shot = tmp_path / "shot.png"
    chromium(url, f"--screenshot={shot}", "--window-size=1280,3000")
    from matplotlib.image import imread

    img = (imread(shot)[..., :3] * 255).round().astype(int)
    bg = np.abs(img - PLOT_BG).max(axis=-1) <= 2
    assert bg.sum() > 50_000, "no plot area on the screenshot"
    rows, cols = np.flatnonzero(bg.any(axis=1)), np.flatnonzero(bg.any(axis=0))
    region = img[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1]
    colored = (region.max(axis=-1) - region.min(axis=-1)) > 60  # saturated: traces, not grid or text
    assert colored.sum() > 2_000, f"plot area blank ({colored.sum()} drawn pixels)"


@pytest.fixture(scope="module")
def run_report(tmp_path_factory):
    d = tmp_path_factory.mktemp("report")
    assert (
        main(
            [
                "simulate",
                "--scenario",
                "stall",
                "--max-num-batched-tokens",
                "2048",
                "--replicas",
                "2",
                "--quiet",
                "--out",
                str(d / "run"),
                "--report",
                str(d / "run.html"),
            ]
        )
        == 0
    )
    return d


def test_simulate_report_is_self_contained_and_titled(run_report):
    text = self_contained(run_report / "run.html")
    for needed in (
        "llama-3.1-8b",
        "h100",
        "engine vLLM V1",
        "policy vllm",
        "Configuration in force",
        "max_num_batched_tokens",
        "given",
        "Latency CDFs",
        "Timelines",
        "Per-replica load",
    ):
        assert needed in text, needed


def test_report_verb_reads_an_out_folder(run_report, capsys):
    assert main(["report", str(run_report / "run")]) == 0
    assert "wrote report" in capsys.readouterr().err
    text = self_contained(run_report / "run" / "report.html")
    assert "policy vllm" in text and "max_num_batched_tokens" in text
    assert main(["report", str(run_report / "nothing-here")]) == 2


@needs_browser
def test_simulate_report_renders_in_chromium(run_report, tmp_path):
    browser_check(run_report / "run.html", tmp_path, figures=3)


@needs_browser
def test_sweep_report_renders_in_chromium(tmp_path):
    spec = small_spec(grid={"vllm": {"max_num_batched_tokens": [256, 2048]}}, request_rates=(4, 16))
    df = run_sweep(spec)
    rec = recommend(df, 40.0, 3000.0)
    path = sweep_report(
        df,
        rec,
        tmp_path / "sweep.html",
        {"itl_slo_ms": 40.0, "ttft_slo_ms": 3000.0, "percentile": 99},
        {"model": spec.model, "hardware": spec.hardware, "tp": spec.tp},
    )
    text = self_contained(path)
    assert "Pareto front" in text and "recommended" in text
    browser_check(path, tmp_path, figures=1)


def test_validate_report(tmp_path, capsys):
    from test_validate import simulated, write_llmservingsim

    df, clock = simulated(n=20, seed=2)
    write_llmservingsim(tmp_path / "run", df, clock)
    assert main(["validate", str(tmp_path / "run"), "--report", str(tmp_path / "v.html")]) == 0
    text = self_contained(tmp_path / "v.html")
    assert "measured vs simulated" in text and "Configuration in force" in text
    if BROWSER:
        browser_check(tmp_path / "v.html", tmp_path, figures=3)
