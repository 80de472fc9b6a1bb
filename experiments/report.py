"""Plain-text tables for the terminal."""

from __future__ import annotations


def fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) < 1e7):
        return f"{int(v):,}"
    a = abs(v)
    if a != 0 and (a < 1e-3 or a >= 1e7):
        return f"{v:.4g}"
    return f"{v:.4f}" if a < 1 else f"{v:,.2f}"


def table(rows: list[dict], columns: list[str] | None = None) -> str:
    columns = columns or list(rows[0])
    cells = [[fmt(r.get(c)) for c in columns] for r in rows]
    width = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    line = lambda vals: "  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(vals, width)))  # noqa: E731
    return "\n".join([line(columns), line(["-" * w for w in width])] + [line(r) for r in cells])
