"""``chunksim VERB``: each verb's argument handling is a module here exposing ``add_parser`` and ``run``.

Every failure a user can cause ends in one stderr line and exit 2: argparse's (with a pointer to
``chunksim VERB --help``), an ``InputError``, a file that cannot be read. A closed stdout pipe
(``chunksim stall | head -1``) ends quietly.
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib.metadata import PackageNotFoundError, version

from costmodel.errors import InputError

from . import calibrate, cost, disagg, listing, report, simulate, stall, sweep, validate

VERBS = {
    "stall": stall,
    "cost": cost,
    "simulate": simulate,
    "sweep": sweep,
    "disagg": disagg,
    "calibrate": calibrate,
    "validate": validate,
    "list": listing,
    "report": report,
}


class UsageError(Exception):
    def __init__(self, prog: str, message: str):
        self.prog, self.message = prog, message
        super().__init__(message)


class Parser(argparse.ArgumentParser):
    """argparse without abbreviations, whose errors are raised (one line, printed by ``main``)."""

    def __init__(self, *a, **kw):
        kw.setdefault("allow_abbrev", False)
        kw.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*a, **kw)

    def error(self, message: str):
        raise UsageError(self.prog, message)


def package_version() -> str:
    try:
        return version("chunksim")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="chunksim", description="Discrete-event simulator of LLM inference scheduling.")
    p.add_argument("--version", action="version", version=f"chunksim {package_version()}")
    sub = p.add_subparsers(dest="verb", required=True, metavar="VERB", parser_class=Parser)
    for name, mod in VERBS.items():
        doc = mod.__doc__.strip()
        mod.add_parser(sub.add_parser(name, help=doc.split("\n\n")[0].replace("\n", " "), description=doc))
    return p


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def _quiet_stdout() -> None:
    """After a closed pipe: point stdout at /dev/null so the interpreter's final flush is silent."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    verb = next((a for a in argv if a in VERBS), None)
    try:
        args = build_parser().parse_args(argv)
    except UsageError as e:
        prog = f"chunksim {verb}" if verb else "chunksim"
        print(f"{prog}: error: {one_line(e.message)} (see `{prog} --help`)", file=sys.stderr)
        return 2
    except SystemExit as e:
        return int(e.code or 0)
    try:
        return VERBS[args.verb].run(args) or 0
    except InputError as e:
        print(f"chunksim {args.verb}: error: {one_line(e)}", file=sys.stderr)
    except BrokenPipeError:
        _quiet_stdout()
        return 0
    except UnicodeDecodeError as e:
        print(
            f"chunksim {args.verb}: error: a file is not UTF-8 text (byte {e.start}): {one_line(e.reason)}",
            file=sys.stderr,
        )
    except OSError as e:
        print(f"chunksim {args.verb}: error: {e.filename or ''}: {one_line(e.strerror or e)}", file=sys.stderr)
    except MemoryError:
        print(f"chunksim {args.verb}: error: out of memory; use fewer requests or a shorter trace", file=sys.stderr)
    except KeyboardInterrupt:
        print(f"chunksim {args.verb}: interrupted", file=sys.stderr)
        return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())
