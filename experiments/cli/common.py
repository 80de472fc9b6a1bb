"""Flags several verbs share, their value types, and the one place where names become objects."""
from __future__ import annotations

import argparse
import math
from pathlib import Path

from costmodel import load_hardware, load_model
from costmodel.errors import InputError, require

from .. import datasets


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


def chunk_size(text: str) -> int:
    """SGLang's --chunked-prefill-size: a positive size, or -1 for chunking off."""
    v = int(text) if text.lstrip("-").isdigit() else None
    if v is None or not (v > 0 or v == -1):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive integer, or -1 to turn chunking off")
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
    p.add_argument("--model", default="llama-3.1-8b",
                   help="short name from costmodel/models/, or a Hugging Face config.json (or its folder)")
    p.add_argument("--hardware", default="h100", help="GPU profile name or a YAML path (e.g. from `calibrate`)")
    p.add_argument("--tp", "--tensor-parallel-size", dest="tp", type=positive_int, default=1,
                   help="tensor-parallel degree")
    if json_flag:
        p.add_argument("--json", action="store_true", help="print a machine-readable result")


ENGINE_INTS = {  # flag: (type, help)
    "max-num-batched-tokens": (positive_int, "vLLM token budget per step (default by GPU: 8192 on an H100)"),
    "long-prefill-token-threshold": (nonneg_int, "vLLM: cap a prefill's tokens per step (0 = no cap, vLLM's default)"),
    "max-num-seqs": (positive_int, "vLLM: most sequences per step (default by GPU)"),
    "chunked-prefill-size": (chunk_size, "SGLang chunk size (default by GPU memory; -1 = chunking off)"),
    "max-prefill-tokens": (positive_int, "SGLang prefill token budget per step (default 16384)"),
    "page-size": (positive_int, "SGLang KV page size in tokens (default 1)"),
    "max-model-len": (positive_int, "longest prompt + output (default: the model's max_position_embeddings)"),
    "num-gpu-blocks-override": (positive_int, "vLLM: KV pool size in blocks instead of the memory estimate"),
    "max-total-tokens": (positive_int, "SGLang: cap the KV pool at this many tokens"),
    "max-running-requests": (positive_int, "SGLang: most running requests"),
    "block-size": (positive_int, "vLLM KV block size in tokens (default 16)"),
}


def add_engine_flags(p: argparse.ArgumentParser) -> None:
    """The engine flags `simulate` takes, spelled as `vllm serve` and `sglang.launch_server` spell them."""
    g = p.add_argument_group("engine flags (as vllm serve / sglang.launch_server spell them)")
    g.add_argument("--engine-cmd", metavar='"CMD"',
                   help="paste a `vllm serve ...` or `python -m sglang.launch_server ...` command line: sets the "
                        "policy, its flags, the model and --tp; explicit flags here override it")
    for flag, (kind, text) in ENGINE_INTS.items():
        g.add_argument(f"--{flag}", type=kind, help=text)
    g.add_argument("--context-length", dest="max_model_len", type=positive_int,
                   help="SGLang's spelling of --max-model-len")
    g.add_argument("--gpu-memory-utilization", type=fraction, help="vLLM memory fraction for weights + KV (0.9)")
    g.add_argument("--mem-fraction-static", type=fraction, help="SGLang memory fraction (default by GPU memory)")
    g.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=None,
                   help="vLLM chunked prefill (on by default in V1)")
    g.add_argument("--enable-mixed-chunk", action="store_true", default=None,
                   help="SGLang: run decodes in the same batch as a prefill chunk")
    g.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None,
                   help="vLLM prefix caching (on by default; acts when requests carry block hashes)")
    g.add_argument("--disable-radix-cache", action="store_true", default=None, help="SGLang: no prefix (radix) cache")
    g.add_argument("--disable-overlap-schedule", action="store_true", default=None,
                   help="SGLang: no overlap scheduler (on by default on CUDA): results processed in the step they finish")
    g.add_argument("--async-scheduling", action=argparse.BooleanOptionalAction, default=None,
                   help="vLLM (default on, as vLLM 0.33): a finished request holds its slot and KV through the next step")
    g.add_argument("--scheduler-reserve-full-isl", action=argparse.BooleanOptionalAction, default=None,
                   help="vLLM (default on): admit a request only when its whole current length fits in free KV")



def add_dataset_flags(w) -> None:
    """vllm bench serve's dataset flags (vllm/benchmarks/datasets.py: add_dataset_parser), on simulate and sweep."""
    w.add_argument("--dataset-name", choices=datasets.VLLM_DATASETS,
                   help="random (default), sharegpt (first-turn ShareGPT lengths as vLLM samples them: the "
                        "shipped Llama 3 table, or --dataset-path), "
                        "prefix_repetition")
    w.add_argument("--dataset-path", help="sharegpt: a CSV length table of first turns (prompt_len,output_len); "
                                             "vLLM's filter applies (prompt 4..1024, prompt+output <= 2048)")
    w.add_argument("--random-input-len", type=positive_int, help="random dataset: input tokens (vLLM default 1024)")
    w.add_argument("--random-output-len", type=positive_int, help="random dataset: output tokens (vLLM default 128)")
    w.add_argument("--random-range-ratio", type=unit_ratio,
                   help="random dataset: lengths uniform in [len(1-r), len(1+r)], r in [0, 1)")
    w.add_argument("--random-prefix-len", type=nonneg_int, help="random dataset: shared prefix tokens (default 0)")
    w.add_argument("--prefix-repetition-prefix-len", type=nonneg_int, help="prefix_repetition: prefix tokens (256)")
    w.add_argument("--prefix-repetition-suffix-len", type=nonneg_int, help="prefix_repetition: suffix tokens (256)")
    w.add_argument("--prefix-repetition-num-prefixes", type=positive_int, help="prefix_repetition: prefixes (10)")
    w.add_argument("--prefix-repetition-output-len", type=positive_int, help="prefix_repetition: output tokens (128)")
    w.add_argument("--sharegpt-output-len", type=positive_int, help="sharegpt: replace every output length")

def model_and_hardware(args):
    check_hardware_file(args.hardware)
    return load_model(args.model), load_hardware(args.hardware)


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
