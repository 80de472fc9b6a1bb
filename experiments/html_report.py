"""One self-contained HTML report of a run, a sweep or a validation: the configuration in force and
where each value came from, the summary, and interactive plotly figures (CDFs, timelines,
per-replica load, the sweep's Pareto front). plotly.js is inlined once: the file opens offline.

Everything is drawn from the results frames (no iteration log): curves go through at most
``MAX_POINTS`` quantiles or time bins, scatter plots through at most ``MAX_SCATTER`` requests
(evenly spaced in rid, said in the figure's title), so a million-request run reports in seconds.
``experiments/report.py`` is the terminal's plain-text tables; this is the browser's page.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from .run_plots import CDF_COLUMNS, cdf_points

MAX_POINTS = 2000
MAX_SCATTER = 4000
BINS = 600
ENGINES = {"vllm": "vLLM V1", "sglang": "SGLang", "nochunk": "no chunked prefill (vLLM V1 scheduler)"}
SUMMARY_KEYS = [
    "completed",
    "num_rejected",
    "duration",
    "request_throughput",
    "output_throughput",
    "mean_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "p99_tpot_ms",
    "p99_itl_ms",
    "max_itl_ms",
    "mean_e2el_ms",
    "p99_e2el_ms",
    "num_iterations",
    "num_preemptions",
    "prefix_cache_hit_rate",
]

STYLE = """body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1200px;
color:#222;padding:0 16px}h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:13px;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 8px;
text-align:left;vertical-align:top}th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
.sub{color:#666;font-size:.9em}.plot{margin:12px 0}details{margin:8px 0}"""
ERROR_HOOK = (
    "<script>window.__chunksimErrors=[];window.addEventListener('error',function(e){"
    "window.__chunksimErrors.push(String(e.message||e))});</script>"
)
DONE_HOOK = (
    "<script>document.body.setAttribute('data-plots',String(document.querySelectorAll('.js-plotly-plot')"
    ".length));document.body.setAttribute('data-errors',String(window.__chunksimErrors.length));</script>"
)


def engine_title(
    policy: str, model: str, hardware: str, tp: int = 1, replicas: int = 1, router: str | None = None
) -> str:
    where = f"{replicas} replicas, router {router}" if replicas > 1 else "1 replica"
    return f"{model} on {hardware} (tp={tp}) · engine {ENGINES.get(policy, policy)} · policy {policy} · {where}"


# ---- page --------------------------------------------------------------------------------------


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    if isinstance(v, (float, np.floating)):
        a = abs(float(v))
        return f"{v:.4g}" if a and (a < 1e-3 or a >= 1e7) else f"{v:,.4f}" if a < 1 else f"{v:,.2f}"
    if isinstance(v, (dict, list, tuple)):
        return json.dumps(v, default=str)
    return str(v)


def table(rows: list[dict], columns: list[str] | None = None) -> str:
    if not rows:
        return "<p class=sub>(none)</p>"
    columns = columns or list(rows[0])
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    body = []
    for r in rows:
        cells = []
        for c in columns:
            v = r.get(c)
            num = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
            cells.append(f"<td{' class=num' if num else ''}>{html.escape(_fmt(v))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _figure(fig) -> str:
    return (
        "<div class=plot>"
        + fig.to_html(full_html=False, include_plotlyjs=False, config={"displaylogo": False, "responsive": True})
        + "</div>"
    )


def page(title: str, subtitle: str, sections: list[tuple[str, str]]) -> str:
    from plotly.offline import get_plotlyjs

    body = "".join(f"<h2>{html.escape(h)}</h2>{content}" for h, content in sections)
    return (
        f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{html.escape(title)}</title>"
        f"<style>{STYLE}</style>{ERROR_HOOK}<script>{get_plotlyjs()}</script></head><body>"
        f"<h1>{html.escape(title)}</h1><p class=sub>{html.escape(subtitle)}</p>{body}{DONE_HOOK}</body></html>"
    )


def write(path, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# ---- a run's figures -----------------------------------------------------------------------------


def cdf_figure(runs: list[tuple[str, pd.DataFrame]], title: str):
    """TTFT, TPOT, E2EL, worst ITL: one CDF per (label, requests frame)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(1, 4, subplot_titles=[f"{n} (ms)" for _, n in CDF_COLUMNS])
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]
    for i, (label, df) in enumerate(runs):
        done = df[df.finish_s.notna()] if "finish_s" in df else df
        for j, (col, _name) in enumerate(CDF_COLUMNS):
            if col not in done:
                continue
            x, y = cdf_points(done[col].to_numpy() * 1e3, MAX_POINTS)
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=y,
                    mode="lines",
                    line={"shape": "hv", "color": colors[i % 6]},
                    name=label,
                    legendgroup=label,
                    showlegend=j == 0,
                ),
                1,
                j + 1,
            )
    for j in range(4):
        fig.update_xaxes(type="log", row=1, col=j + 1)
    fig.update_yaxes(title_text="fraction of requests", row=1, col=1)
    fig.update_layout(title=title, height=380, margin={"t": 80})
    return fig


def _sample(df: pd.DataFrame, n: int = MAX_SCATTER) -> tuple[pd.DataFrame, str]:
    if len(df) <= n:
        return df, ""
    idx = np.linspace(0, len(df) - 1, n).astype(np.int64)
    return df.iloc[idx], f" ({n:,} of {len(df):,} requests, evenly spaced)"


def _spread(t: np.ndarray, a: np.ndarray, b: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Σ_r n_r · clip((t − a_r) / (b_r − a_r), 0, 1) at each t: tokens delivered by time t when each
    request's n_r tokens come evenly over [a_r, b_r]; O((R + T) log R)."""
    ok = np.isfinite(a) & np.isfinite(b) & (b > a)
    a, b, n = a[ok], b[ok], n[ok].astype(float)
    rate = n / (b - a)
    out = np.zeros(len(t))
    for edge, sign in ((a, 1.0), (b, -1.0)):
        order = np.argsort(edge)
        e, r = edge[order], rate[order]
        cr, cre = np.r_[0.0, np.cumsum(r)], np.r_[0.0, np.cumsum(r * e)]
        k = np.searchsorted(e, t, side="right")
        out += sign * (t * cr[k] - cre[k])
    return out


def timeline_figure(df: pd.DataFrame, title: str):
    """Over the run: each request's TTFT and worst gap at its arrival (scatter), and the output
    token rate (decode tokens spread evenly between first token and finish, time bins)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    done = df[df.finish_s.notna()]
    s, note = _sample(done)
    fig = make_subplots(
        3,
        1,
        shared_xaxes=True,
        vertical_spacing=0.06,
        subplot_titles=[
            "TTFT at arrival (s)" + note,
            "worst inter-token gap of the request (ms)",
            "output tokens/s (all replicas)",
        ],
    )
    text = [f"rid {r} · replica {p} · prompt {n:,}" for r, p, n in zip(s.rid, s.replica, s.prompt_len)]
    fig.add_trace(
        go.Scatter(
            x=s.arrival_s,
            y=s.ttft_s,
            mode="markers",
            marker={"size": 4, "color": s.replica, "colorscale": "Viridis"},
            text=text,
            name="TTFT",
            showlegend=False,
        ),
        1,
        1,
    )
    fig.add_trace(
        go.Scatter(
            x=s.arrival_s,
            y=s.max_itl_s * 1e3,
            mode="markers",
            marker={"size": 4, "color": s.replica, "colorscale": "Viridis"},
            text=text,
            name="worst gap",
            showlegend=False,
        ),
        2,
        1,
    )
    if len(done):
        t0, t1 = float(df.arrival_s.min()), float(done.finish_s.max())
        edges = np.linspace(t0, t1, BINS + 1)
        tok = _spread(
            edges, done.first_token_s.to_numpy(), done.finish_s.to_numpy(), (done.num_output_tokens - 1).to_numpy()
        )
        fig.add_trace(
            go.Scatter(
                x=edges[:-1],
                y=np.diff(tok) / np.diff(edges),
                mode="lines",
                line={"shape": "hv"},
                name="output tokens/s",
                showlegend=False,
            ),
            3,
            1,
        )
    fig.update_yaxes(type="log", row=1, col=1)
    fig.update_yaxes(type="log", row=2, col=1)
    fig.update_xaxes(title_text="time (s)", row=3, col=1)
    fig.update_layout(title=title, height=760, margin={"t": 90})
    return fig


def replica_figure(df: pd.DataFrame, title: str):
    """Per replica: requests in flight over time (arrived − finished or rejected), and totals."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    reps = sorted(set(df.replica.tolist()))
    fig = make_subplots(
        1,
        2,
        column_widths=[0.72, 0.28],
        subplot_titles=[
            "requests in flight per replica (routed, not yet finished)",
            "requests and output tokens per replica",
        ],
    )
    if len(df):
        end = df.finish_s.where(df.finish_s.notna(), df.arrival_s)  # a rejected request leaves at once
        t = np.linspace(float(df.arrival_s.min()), float(end.max()), BINS + 1)
        for rep in reps:
            m = (df.replica == rep).to_numpy()
            a, f = np.sort(df.arrival_s.to_numpy()[m]), np.sort(end.to_numpy()[m])
            fig.add_trace(
                go.Scatter(
                    x=t,
                    y=np.searchsorted(a, t, "right") - np.searchsorted(f, t, "right"),
                    mode="lines",
                    line={"shape": "hv", "width": 1},
                    name=f"replica {rep}",
                ),
                1,
                1,
            )
        g = df.groupby("replica").agg(requests=("rid", "size"), tokens=("num_output_tokens", "sum"))
        fig.add_trace(
            go.Bar(x=[f"replica {r}" for r in g.index], y=g.requests, name="requests", showlegend=False), 1, 2
        )
        fig.add_trace(
            go.Bar(
                x=[f"replica {r}" for r in g.index],
                y=g.tokens / max(g.tokens.max(), 1) * max(g.requests.max(), 1),
                name="output tokens (scaled)",
                showlegend=False,
                text=[f"{v:,} tokens" for v in g.tokens],
                opacity=0.5,
            ),
            1,
            2,
        )
    fig.update_xaxes(title_text="time (s)", row=1, col=1)
    fig.update_layout(title=title, height=420, margin={"t": 90}, barmode="group")
    return fig


def run_sections(requests: pd.DataFrame, summary: dict, config: list[dict], title: str) -> list[tuple[str, str]]:
    sub = f" · {title}"
    rows = [{"metric": k, "value": summary[k]} for k in SUMMARY_KEYS if k in summary]
    per = summary.get("replicas") or []
    out = [
        (
            "Configuration in force",
            "<p class=sub>each value with where it came from</p>" + table(config, ["setting", "value", "source"]),
        ),
        (
            "Summary",
            table(rows)
            + (
                table(
                    [
                        {
                            "replica": i,
                            **{
                                k: r.get(k)
                                for k in (
                                    "completed",
                                    "output_throughput",
                                    "p99_ttft_ms",
                                    "p99_itl_ms",
                                    "num_iterations",
                                )
                            },
                        }
                        for i, r in enumerate(per)
                    ]
                )
                if per
                else ""
            ),
        ),
        ("Latency CDFs", _figure(cdf_figure([("simulated", requests)], "latency CDFs" + sub))),
        ("Timelines", _figure(timeline_figure(requests, "requests over the run" + sub))),
        ("Per-replica load", _figure(replica_figure(requests, "load per replica" + sub))),
    ]
    return out


def simulate_report(result, path, title: str, config: list[dict], summary: dict | None = None) -> Path:
    sections = run_sections(result.requests, summary or result.summary, config, title)
    return write(path, page(f"chunksim simulate · {title}", f"{len(result.requests):,} requests", sections))


# ---- sweep -------------------------------------------------------------------------------------


def pareto_figure(
    df: pd.DataFrame, rec: pd.DataFrame | None, itl_slo_ms: float | None, percentile: int, x: str, title: str
):
    """p-th percentile ITL against ``x``, one panel per engine: every point (hover: its knobs and
    rate), the Pareto front joined, the recommendation ringed by a star drawn under its point."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from .plots import knob_label
    from .sweep import pareto_mask

    y = f"p{percentile}_itl_ms"
    ok = df[df.error.isna()] if "error" in df else df
    engines = list(dict.fromkeys(ok.engine))
    fig = make_subplots(1, max(len(engines), 1), subplot_titles=engines or [""], shared_yaxes=True)
    for j, engine in enumerate(engines):
        g = ok[ok.engine == engine]
        labels = [knob_label(r) for _, r in g.iterrows()]
        if rec is not None and "point_id" in rec:
            r = rec[(rec.engine == engine) & rec.point_id.notna()]
            best = g[g.point_id == r.point_id.iloc[0]] if len(r) else g.iloc[:0]
            fig.add_trace(
                go.Scatter(
                    x=best[x],
                    y=best[y],
                    mode="markers",
                    name="recommended",
                    marker={"symbol": "star-open", "size": 26, "color": "goldenrod", "line": {"width": 2}},
                    showlegend=j == 0,
                    legendgroup="rec",
                ),
                1,
                j + 1,
            )
        for label in dict.fromkeys(labels):
            m = np.array([lab == label for lab in labels])
            line = g[m].sort_values(x)
            fig.add_trace(
                go.Scatter(
                    x=line[x],
                    y=line[y],
                    mode="lines+markers",
                    name=f"{engine}: {label}",
                    text=[f"rate {v:g} req/s" for v in line.request_rate.fillna(np.nan)]
                    if "request_rate" in line
                    else None,
                    marker={"size": 7},
                ),
                1,
                j + 1,
            )
        front = g[pareto_mask(g, x, y)].sort_values(x)
        fig.add_trace(
            go.Scatter(
                x=front[x],
                y=front[y],
                mode="lines+markers",
                name="Pareto front",
                line={"color": "crimson", "dash": "dot"},
                marker={"symbol": "circle-open", "size": 14, "color": "crimson"},
                showlegend=j == 0,
                legendgroup="front",
            ),
            1,
            j + 1,
        )
        if itl_slo_ms:
            fig.add_hline(
                y=itl_slo_ms,
                line_dash="dash",
                line_color="crimson",
                row=1,
                col=j + 1,
                annotation_text=f"SLO {itl_slo_ms:g} ms",
            )
        fig.update_xaxes(title_text=x.replace("_", " "), row=1, col=j + 1)
    fig.update_yaxes(type="log", title_text=f"p{percentile} ITL (ms)", row=1, col=1)
    fig.update_layout(title=title, height=480, margin={"t": 90})
    return fig


def sweep_report(df: pd.DataFrame, rec: pd.DataFrame, path, slos: dict, settings: dict) -> Path:
    model, hw, tp = settings.get("model"), settings.get("hardware"), settings.get("tp", 1)
    engines = sorted(set(df.engine)) if "engine" in df else []
    title = (
        f"{model} on {hw} (tp={tp}) · engines {', '.join(ENGINES.get(e, e) for e in engines)} · "
        f"policies {', '.join(engines)}"
    )
    pct = slos.get("percentile") or 99
    x = slos.get("objective") or "output_throughput"
    x = x if x in df else "output_throughput"
    shown = rec.drop(columns=["point_id"], errors="ignore").dropna(axis=1, how="all")
    cols = [c for c in ("engine", "policy", "request_rate", x, f"p{pct}_itl_ms", f"p{pct}_ttft_ms", "error") if c in df]
    sections = [
        (
            "Configuration in force",
            table(
                [{"setting": k, "value": v, "source": "sweep settings"} for k, v in settings.items()]
                + [{"setting": f"slo.{k}", "value": v, "source": "sweep SLOs"} for k, v in slos.items()]
            ),
        ),
        ("Recommendation", table(shown.astype(object).to_dict("records"))),
        (
            "Pareto front",
            _figure(
                pareto_figure(df, rec, slos.get("itl_slo_ms"), pct, x, f"p{pct} ITL vs {x.replace('_', ' ')} · {title}")
            ),
        ),
        (
            "All points",
            f"<details><summary>{len(df)} points</summary>"
            f"{table(df[cols].astype(object).to_dict('records'))}</details>",
        ),
    ]
    return write(path, page(f"chunksim sweep · {title}", f"{len(df)} points", sections))


# ---- validate ----------------------------------------------------------------------------------


def validate_report(measured, result, figures: pd.DataFrame, path, title: str, config: list[dict]) -> Path:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    metrics = [(c, n) for c, n in CDF_COLUMNS[:3]]
    fig = make_subplots(1, 3, subplot_titles=[f"{n} (ms)" for _, n in metrics])
    for label, frame, dash, color in (
        ("measured", measured.requests, "solid", "#1f77b4"),
        ("simulated", result.requests, "dash", "#ff7f0e"),
    ):
        for j, (col, _) in enumerate(metrics):
            if col not in frame:
                continue
            x, y = cdf_points(frame[col].to_numpy() * 1e3, MAX_POINTS)
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=y,
                    mode="lines",
                    name=label,
                    legendgroup=label,
                    showlegend=j == 0,
                    line={"dash": dash, "shape": "hv", "color": color},
                ),
                1,
                j + 1,
            )
    fig.update_yaxes(title_text="fraction of requests", row=1, col=1)
    fig.update_layout(title=f"measured vs simulated · {title}", height=400, margin={"t": 90})
    sections = [
        ("Configuration in force", table(config, ["setting", "value", "source"])),
        ("Measured vs simulated", table(figures.astype(object).to_dict("records"))),
        ("Latency CDFs", _figure(fig)),
        ("Timelines (simulated)", _figure(timeline_figure(result.requests, f"simulated run · {title}"))),
        ("Per-replica load (simulated)", _figure(replica_figure(result.requests, f"load · {title}"))),
    ]
    return write(path, page(f"chunksim validate · {title}", f"{len(measured.requests):,} measured requests", sections))


# ---- a results folder (`chunksim report DIR`) ----------------------------------------------------


def folder_report(folder, path=None) -> Path:
    """A simulate --out folder (summary.json, requests.parquet) or a sweep --out folder (sweep.parquet)."""
    from costmodel.errors import require

    d = Path(folder)
    require(d.is_dir(), "DIR", str(folder), "is not a folder")
    path = Path(path) if path else d / "report.html"
    if (d / "sweep.parquet").is_file():
        df = pd.read_parquet(d / "sweep.parquet")
        rec = pd.read_csv(d / "recommendation.csv") if (d / "recommendation.csv").is_file() else None
        first = df.iloc[0] if len(df) else {}
        settings = {k: first[k] for k in ("model", "hardware", "tp") if k in df}
        return sweep_report(df, rec if rec is not None else df.iloc[:0], path, {}, settings)
    require(
        (d / "summary.json").is_file() and (d / "requests.parquet").is_file(),
        "DIR",
        str(folder),
        "holds neither a simulate --out run (summary.json, requests.parquet) nor a sweep --out (sweep.parquet)",
    )
    summary = json.loads((d / "summary.json").read_text())
    cfg = summary.get("config", {})
    config = [
        {"setting": k, "value": cfg[k], "source": "config.yaml (sources not recorded)"}
        for k in ("model", "hardware", "tp", "policy", "replicas", "router", "seed")
        if k in cfg
    ]
    config += [
        {"setting": f"workload.{k}", "value": v, "source": "config.yaml (sources not recorded)"}
        for k, v in (cfg.get("workload") or {}).items()
    ]
    config += [
        {"setting": f"engine.{k}", "value": v.get("value"), "source": v.get("why")}
        for k, v in (summary.get("engine_config") or {}).items()
    ]
    title = engine_title(
        cfg.get("policy", "?"),
        cfg.get("model", "?"),
        cfg.get("hardware", "?"),
        cfg.get("tp", 1),
        cfg.get("replicas", 1),
        cfg.get("router"),
    )
    requests = pd.read_parquet(d / "requests.parquet")
    return write(
        path,
        page(
            f"chunksim simulate · {title}",
            f"{len(requests):,} requests · from {d}",
            run_sections(requests, summary, config, title),
        ),
    )
