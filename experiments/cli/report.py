"""Write one self-contained HTML report (plotly inline, opens offline) of a results folder: a
`chunksim simulate --out DIR` run or a `chunksim sweep --out DIR` sweep."""

from __future__ import annotations

import sys


def add_parser(p):
    p.add_argument("dir", metavar="DIR", help="a simulate --out or sweep --out folder")
    p.add_argument("--out", metavar="FILE.html", help="the report (default DIR/report.html)")


def run(args) -> int:
    from pathlib import Path

    from ..bench_result import writable_file
    from ..html_report import folder_report

    if args.out:
        writable_file(Path(args.out), "--out")
    path = folder_report(args.dir, args.out)
    print(f"wrote report: {path}", file=sys.stderr)
    return 0
