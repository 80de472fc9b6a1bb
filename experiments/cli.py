"""``chunksim VERB``: each verb is a study in its own module exposing ``add_parser`` and ``run``."""
from __future__ import annotations

import argparse
import sys

from costmodel.errors import InputError

from . import calibrate_cmd, cost_cmd, simulate_cmd, stall_cmd, sweep_cmd, validate_cmd

VERBS = {"stall": stall_cmd, "cost": cost_cmd, "simulate": simulate_cmd, "sweep": sweep_cmd, "calibrate": calibrate_cmd,
         "validate": validate_cmd}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="chunksim", description="Discrete-event simulator of LLM inference scheduling.")
    sub = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    for name, mod in VERBS.items():
        mod.add_parser(sub.add_parser(name, help=mod.__doc__.strip().splitlines()[0], description=mod.__doc__))
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return VERBS[args.verb].run(args) or 0
    except InputError as e:
        print(f"chunksim {args.verb}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
