"""``chunksim calibrate --from steps|splitwise|vllm-log PATH``: the step-level fit
(costmodel/calibration/steps.py) on top of the base profile, or of the profile the kernel
sources of the same command just fitted, and its report. Repeat ``--from`` to fit several
models' and tensor-parallel sizes' step tables jointly (each step's model from its table's
``model`` column, Splitwise's, unless --model names one for all): the per-layer terms are then
shared by every model, and the report holds each model's error when the others are fitted without
it (leave one model out)."""

from __future__ import annotations

import re

import pandas as pd

from costmodel import Hardware, load_model
from costmodel.calibration.step_timings import STEP_FORMATS, load_steps
from costmodel.calibration.steps import PER_LAYER, StepFit, errors_by_kind, fit_steps, predict_steps
from costmodel.errors import InputError


def add_arguments(p) -> None:
    g = p.add_argument_group("step timings (--from steps|splitwise|vllm-log)")
    g.add_argument("--gpu", help="the GPU to fit when a step table holds several (Splitwise's hardware column)")
    g.add_argument(
        "--kv-cache-tokens",
        type=int,
        help="KV pool size for --from vllm-log when the log lacks vLLM's 'GPU KV cache size: N tokens' line",
    )
    g.add_argument(
        "--per-layer",
        choices=PER_LAYER,
        default="layer",
        help="where fixed time goes that one model's steps cannot place per layer or per step: 'layer' "
        "(default: kernel_launch_s, which carries to models of other depths), 'step' (host_step_s) or "
        "'launch' (host_per_launch_s: host time per kernel an eager pass launches, hidden under the GPU's)",
    )
    g.add_argument(
        "--overlap-host",
        action="store_true",
        help="the engine overlapped host and GPU work (vLLM --async-scheduling, SGLang's overlap "
        "scheduler): fit wall = max(GPU, host) instead of GPU + host",
    )
    g.add_argument(
        "--hold-beta",
        action="store_true",
        help="keep the base profile's HBM rates (s_beta 1): for a kernel-calibrated base, whose β the "
        "kernels measured, where the steps cannot tell a launch-bound decode from a slow one",
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


def model_name(name: str) -> str:
    """A step table's model name as a shipped config's: itself, or with a hyphen between a
    family's letters and its version (Splitwise's ``llama2-70b`` is ``llama-2-70b``)."""
    try:
        return load_model(name).name
    except InputError:
        return re.sub(r"^([a-z]+)(\d)", r"\1-\2", name.lower())


def step_models(steps: pd.DataFrame, model: str | None) -> dict | object:
    """The ModelSpec of the steps: ``model`` (--model) for every step where given, else one per
    name in the table's ``model`` column (Splitwise's), else the default (llama-3.1-8b)."""
    if model or "model" not in steps.columns:
        return load_model(model or "llama-3.1-8b")
    return {name: load_model(model_name(name)) for name in sorted(steps["model"].astype(str).unique())}


def fit_from_args(sources, args, base: Hardware) -> tuple[StepFit, dict]:
    skipped: dict = {}
    steps = load_all(sources, args, skipped)
    model = step_models(steps, args.model)
    per_layer = getattr(args, "per_layer", "layer")
    fixed = {"s_beta": 1.0} if getattr(args, "hold_beta", False) else None
    result = fit_steps(steps, model, base, overlap=args.overlap_host, fixed=fixed, per_layer=per_layer)
    names = sorted({m for m, _ in result.groups})
    report = {
        "source": ", ".join(p for _, p in sources),
        "points": result.points,
        "fit_seconds": result.seconds,
        "parameters": result.table().to_dict("records"),
        "errors_fit": result.errors.to_dict("records"),
        "errors_held_out": [],
        "warnings": list(result.warnings),
        "skipped": skipped,
        "model": ", ".join(names),
        "tp": result.tp or ", ".join(str(t) for t in sorted({t for _, t in result.groups})),
        "errors_by_group": result.group_errors.to_dict("records") if result.group_errors is not None else [],
        "errors_leave_one_model_out": leave_one_model_out(steps, model, base, args.overlap_host, per_layer, fixed)
        if len(names) > 1
        else [],
        "base": {"name": base.name, "pi_eff": base.pi_eff, "beta_eff": base.beta_eff},
    }
    if args.holdout_steps:
        held = load_all(args.holdout_steps, args, {})
        hw = result.hardware()
        report["errors_held_out"] = errors_by_kind(
            predict_steps(held, step_models(held, args.model), hw, None, args.overlap_host), held
        ).to_dict("records")
    return result, report


def leave_one_model_out(
    steps: pd.DataFrame, models: dict, base: Hardware, overlap: bool, per_layer: str, fixed: dict | None = None
) -> list:
    """Per model of a joint table: the fit of the other models' steps (``fixed`` held), its error on
    this model's (per tp and kind)."""
    out = []
    for name in sorted(models):
        mine = (steps["model"].astype(str) == name).to_numpy()
        rest = steps[~mine].reset_index(drop=True)
        fit = fit_steps(rest, models, base, overlap=overlap, fixed=dict(fixed or {}), per_layer=per_layer)
        held = steps[mine].reset_index(drop=True)
        pred = predict_steps(held, models, fit.hardware(), None, overlap)
        for tp, pos in held.groupby("tp").indices.items():
            e = errors_by_kind(pred[pos], held.iloc[pos])
            out += [{"model": name, "tp": int(tp), **r} for r in e.to_dict("records")]
    return out
