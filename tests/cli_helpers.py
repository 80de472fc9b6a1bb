"""Run `chunksim` in-process: main(argv) with stdout and stderr captured, no subprocess."""

from __future__ import annotations

import contextlib
import io

from experiments.cli import main


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


def assert_one_line_error(argv, field: str) -> str:
    rc, out, err = run_cli(argv)
    lines = [l for l in err.splitlines() if l.strip()]
    assert rc == 2, (argv, rc, err[-2000:])
    assert "Traceback" not in err, err
    assert len(lines) == 1, (argv, lines)
    assert field.lower() in lines[0].lower(), (argv, field, lines[0])
    return lines[0]
