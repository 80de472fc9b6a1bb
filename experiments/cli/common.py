"""Flags several verbs share, their value types, and the one place where names become objects."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from costmodel import load_hardware, load_model
from costmodel.errors import InputError, require

from .. import datasets, engine_flags


def _parse(text: str, cast, what: str):
    try:
        return cast(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None


def _integer(text: str) -> int:
    return _parse(text, int, "an integer")


def positive_int(text: str) -> int:
    v = _integer(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive integer")
    return v


def nonneg_int(text: str) -> int:
    v = _integer(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 0")
    return v


def _number(text: str, hint: str = "") -> float:
    return _parse(text, float, "a number" + hint)


def positive_float(text: str) -> float:
    v = _number(text)
    if not v > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0 (inf allowed)")
    return v


def fraction(text: str) -> float:
    v = _number(text)
    if not 0 < v <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be in (0, 1]")
    return v


def unit_ratio(text: str) -> float:
    v = _number(text, " (a JSON dict per input/output is not simulated; give one ratio)")
    if not 0 <= v < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be in [0, 1)")
    return v


def finite_float(text: str) -> float:
    v = _number(text)
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number > 0")
    return v


def add_model_hardware(p: argparse.ArgumentParser, json_flag: bool = True) -> None:
    p.add_argument(
        "--model",
        default="llama-3.1-8b",
        help="short name from costmodel/models/, or a Hugging Face config.json (or its folder)",
    )
    p.add_argument("--hardware", default="h100", help="GPU profile name or a YAML path (e.g. from `calibrate`)")
    p.add_argument(
        "--tp", "--tensor-parallel-size", dest="tp", type=positive_int, default=1, help="tensor-parallel degree"
    )
    if json_flag:
        p.add_argument("--json", action="store_true", help="print a machine-readable result")


def engine_type(name: str):
    """argparse type of engine flag ``name``: typed and range-checked as engine_flags declares it."""

    def parse(text: str):
        try:
            return engine_flags.convert(name, text, name)
        except InputError as e:
            raise argparse.ArgumentTypeError(f"{text!r}: {e.reason}") from None

    parse.__name__ = name
    return parse


def add_engine_flags(p: argparse.ArgumentParser) -> None:
    """The engine flags `simulate` takes, spelled as `vllm serve` and `sglang.launch_server` spell them
    (one argument per field of engine_flags.EngineFlags)."""
    g = p.add_argument_group("engine flags (as vllm serve / sglang.launch_server spell them)")
    g.add_argument(
        "--engine-cmd",
        metavar='"CMD"',
        help="paste a `vllm serve ...` or `python -m sglang.launch_server ...` command line: sets the "
        "policy, its flags, the model, --tp and (-dp) --replicas; explicit flags here override it",
    )
    g.add_argument(
        "--allow-unmodeled",
        action="store_true",
        default=None,
        help="run an --engine-cmd whose answer-changing flags chunksim does not model (each listed as "
        "'not modelled (allowed by --allow-unmodeled)'); without it such a flag is an error",
    )
    for name, spec in engine_flags.FLAGS.items():
        if not spec.cli:
            continue
        if spec.kind == engine_flags.BOOL:
            action = argparse.BooleanOptionalAction if spec.negatable else "store_true"
            g.add_argument(*spec.spellings, dest=name, action=action, default=None, help=spec.help)
        else:
            g.add_argument(*spec.spellings, dest=name, type=engine_type(name), help=spec.help)


def add_dataset_flags(w) -> None:
    """vllm bench serve's dataset flags (vllm/benchmarks/datasets.py: add_dataset_parser), on simulate and sweep."""
    w.add_argument(
        "--dataset-name",
        choices=datasets.VLLM_DATASETS,
        help="random (default), sharegpt (first-turn ShareGPT lengths as vLLM samples them: the "
        "shipped Llama 3 table, or --dataset-path), "
        "prefix_repetition",
    )
    w.add_argument(
        "--dataset-path",
        help="sharegpt: a CSV length table of first turns (prompt_len,output_len); "
        "vLLM's filter applies (prompt 4..1024, prompt+output <= 2048)",
    )
    w.add_argument("--random-input-len", type=positive_int, help="random dataset: input tokens (vLLM default 1024)")
    w.add_argument("--random-output-len", type=positive_int, help="random dataset: output tokens (vLLM default 128)")
    w.add_argument(
        "--random-range-ratio",
        type=unit_ratio,
        help="random dataset: lengths uniform in [len(1-r), len(1+r)], r in [0, 1)",
    )
    w.add_argument("--random-prefix-len", type=nonneg_int, help="random dataset: shared prefix tokens (default 0)")
    w.add_argument("--prefix-repetition-prefix-len", type=nonneg_int, help="prefix_repetition: prefix tokens (256)")
    w.add_argument("--prefix-repetition-suffix-len", type=nonneg_int, help="prefix_repetition: suffix tokens (256)")
    w.add_argument("--prefix-repetition-num-prefixes", type=positive_int, help="prefix_repetition: prefixes (10)")
    w.add_argument("--prefix-repetition-output-len", type=positive_int, help="prefix_repetition: output tokens (128)")
    w.add_argument("--sharegpt-output-len", type=positive_int, help="sharegpt: replace every output length")


def model_and_hardware(args):
    check_hardware_file(args.hardware)
    model = load_model(args.model)
    if "/" in str(args.model) and model.name != str(args.model):  # a Hugging Face id read as a shipped config
        print(f"note: --model {args.model} is the shipped config {model.name}", file=sys.stderr)
    return model, load_hardware(args.hardware)


def read_text(path, field: str) -> str:
    """A user's text file, or an InputError naming it: missing, a folder, unreadable, not UTF-8."""
    p = Path(path)
    require(p.exists(), field, str(p), "no such file")
    require(p.is_file(), field, str(p), "is not a file")
    try:
        return p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(field, str(p), f"not UTF-8 text (byte {e.start})") from None
    except OSError as e:
        raise InputError(field, str(p), f"cannot read ({e.strerror})") from None


def check_hardware_file(name: str | None, field: str = "--hardware") -> None:
    """A hardware path given (not a shipped name) must be UTF-8 YAML; load_hardware checks the rest."""
    if name and Path(name).is_file():
        import yaml

        text = read_text(name, field)
        try:
            d = yaml.safe_load(text)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f"{name}:{mark.line + 1}" if mark else name
            raise InputError(field, where, f"not valid YAML ({getattr(e, 'problem', None) or 'parse error'})") from None
        require(isinstance(d, dict), field, name, "must be a YAML mapping of profile fields")
        ref = load_hardware("h100")
        for key, v in d.items():
            want = getattr(ref, str(key), None)
            if isinstance(want, (int, float)) and not isinstance(want, bool):
                require(isinstance(v, (int, float)) and not isinstance(v, bool), f"{name}:{key}", v, "must be a number")
            elif isinstance(want, str):
                require(isinstance(v, str), f"{name}:{key}", v, "must be a string")
