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


def model_and_hardware(args):
    return load_model(args.model), load_hardware(args.hardware)
