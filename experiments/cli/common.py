"""Flags several verbs share, and the one place where names become objects."""
from __future__ import annotations

import argparse

from costmodel import load_hardware, load_model


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return v


def add_model_hardware(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="llama-3.1-8b", help="short name or path to a Hugging Face config.json")
    p.add_argument("--hardware", default="h100", help="GPU profile name or a YAML path (e.g. from `calibrate`)")
    p.add_argument("--tp", type=positive_int, default=1, help="tensor-parallel degree")
    p.add_argument("--json", action="store_true", help="print a machine-readable result")


def add_engine_flags(p: argparse.ArgumentParser) -> None:
    """The engine flags `simulate` takes, spelled as `vllm serve` and `sglang.launch_server` spell them."""
    g = p.add_argument_group("engine flags (as vllm serve / sglang.launch_server spell them)")
    for flag in ("max-num-batched-tokens", "long-prefill-token-threshold", "max-num-seqs", "chunked-prefill-size",
                 "max-prefill-tokens", "page-size", "max-model-len", "num-gpu-blocks-override", "max-total-tokens",
                 "max-running-requests", "block-size"):
        g.add_argument(f"--{flag}", type=int)
    g.add_argument("--gpu-memory-utilization", type=float)
    g.add_argument("--mem-fraction-static", type=float)
    g.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=None)
    g.add_argument("--enable-mixed-chunk", action="store_true", default=None)
    g.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None)
    g.add_argument("--disable-radix-cache", action="store_true", default=None)


def model_and_hardware(args):
    return load_model(args.model), load_hardware(args.hardware)
