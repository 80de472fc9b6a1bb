"""``chunksim calibrate --from steps|splitwise|vllm-log PATH``: the step-level fit
(costmodel/calibration/steps.py) on top of the base profile, or of the profile the kernel
sources of the same command just fitted, and its report."""

from __future__ import annotations

import pandas as pd

from costmodel import Hardware, load_model
from costmodel.calibration.step_timings import STEP_FORMATS, load_steps
from costmodel.calibration.steps import StepFit, errors_by_kind, fit_steps, predict_steps


def add_arguments(p) -> None:
    g = p.add_argument_group("step timings (--from steps|splitwise|vllm-log)")
    g.add_argument("--gpu", help="the GPU to fit when a step table holds several (Splitwise's hardware column)")
    g.add_argument(
        "--kv-cache-tokens",
        type=int,
        help="KV pool size for --from vllm-log when the log lacks vLLM's 'GPU KV cache size: N tokens' line",
    )
    g.add_argument(
        "--overlap-host",
        action="store_true",
        help="the engine overlapped host and GPU work (vLLM --async-scheduling, SGLang's overlap "
        "scheduler): fit wall = max(GPU, host) instead of GPU + host",
    )


def split_sources(sources) -> tuple[list, list]:
    """(kernel sources, step sources) of the repeated --from FORMAT PATH."""
    sources = sources or []
    return [s for s in sources if s[0] not in STEP_FORMATS], [s for s in sources if s[0] in STEP_FORMATS]


def load_all(sources, args, skipped: dict) -> pd.DataFrame:
    return pd.concat(
        [load_steps(path, fmt, args.gpu, args.kv_cache_tokens, args.tp, skipped) for fmt, path in sources],
        ignore_index=True,
    )


def fit_from_args(sources, args, base: Hardware) -> tuple[StepFit, dict]:
    skipped: dict = {}
    steps = load_all(sources, args, skipped)
    model = load_model(args.model or "llama-3.1-8b")
    result = fit_steps(steps, model, base, overlap=args.overlap_host)
    report = {
        "source": ", ".join(p for _, p in sources),
        "points": result.points,
        "fit_seconds": result.seconds,
        "parameters": result.table().to_dict("records"),
        "errors_fit": result.errors.to_dict("records"),
        "errors_held_out": [],
        "warnings": list(result.warnings),
        "skipped": skipped,
        "model": model.name,
        "tp": result.tp,
        "base": {"name": base.name, "pi_eff": base.pi_eff, "beta_eff": base.beta_eff},
    }
    if args.holdout_steps:
        held = load_all(args.holdout_steps, args, {})
        hw = result.hardware()
        report["errors_held_out"] = errors_by_kind(
            predict_steps(held, model, hw, result.tp, args.overlap_host), held
        ).to_dict("records")
    return result, report
