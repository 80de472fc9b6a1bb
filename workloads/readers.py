"""CSV and JSONL files read into named columns; a bad value is reported as ``file:line:column``.

A mapping ``{our_name: column_in_file}`` selects the columns. JSONL goes through pyarrow first;
if that fails, or a value does not validate, the file is re-read one line at a time so the error
can name the exact line. CSV is read with pandas keeping blank lines, so row i is line i + 2.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel.errors import InputError, require

TIME_UNITS = {"s": 1.0, "ms": 1e3, "us": 1e6, "datetime": None}  # units per second


@dataclass(frozen=True)
class Columns:
    path: Path
    mapping: dict  # our name -> name in the file
    values: dict  # our name -> np.ndarray (numeric or object) or list (for list columns)
    lines: np.ndarray  # 1-based line number of each row
    text: bool  # CSV: every value was text, so "12" is a number; JSON: it is a string

    def __len__(self) -> int:
        return len(self.lines)

    def where(self, i: int, name: str) -> str:
        return f"{self.path}:{int(self.lines[i])}:{self.mapping[name]}"


def read_csv(path, mapping: dict) -> Columns:
    path = Path(path)
    require(path.is_file(), "trace:path", str(path), "no such file")
    try:
        header = list(pd.read_csv(path, nrows=0).columns)
        missing = [c for c in mapping.values() if c not in header]
        require(not missing, f"{path}:1", missing, f"missing columns; the header has {header}")
        df = pd.read_csv(path, skip_blank_lines=False)
        missing = [c for c in mapping.values() if c not in df.columns]  # a stray quote can change what the header is
        require(not missing, f"{path}:1", missing, f"missing columns; the header reads as {list(df.columns)}")
    except pd.errors.EmptyDataError:
        raise InputError(str(path), 0, "empty file (no header, no rows)") from None
    except pd.errors.ParserError as e:
        raise InputError(str(path), "parse", str(e).replace("Error tokenizing data. C error: ", "")) from None
    except UnicodeDecodeError as e:
        raise InputError(str(path), f"byte {e.start}", "not UTF-8 text") from None
    values = {name: df[col].to_numpy() for name, col in mapping.items()}
    return _nonempty(Columns(path, dict(mapping), values, np.arange(2, len(df) + 2), True))


def read_jsonl(path, mapping: dict, convert: Callable[[Columns], object]):
    """``convert(read columns)``, with exact line numbers in any error it raises."""
    path = Path(path)
    require(path.is_file(), "trace:path", str(path), "no such file")
    fast = _jsonl_arrow(path, mapping)
    if fast is not None:
        try:
            return convert(fast)
        except InputError:
            pass
    return convert(_jsonl_lines(path, mapping))


def _nonempty(cols: Columns) -> Columns:
    require(len(cols) > 0, str(cols.path), 0, "empty trace: no requests")
    return cols


def _jsonl_arrow(path: Path, mapping: dict) -> Columns | None:
    import pyarrow as pa
    import pyarrow.json as pj

    try:
        table = pj.read_json(path)
    except (pa.ArrowInvalid, OSError):
        return None
    if table.num_rows == 0 or any(c not in table.column_names for c in mapping.values()):
        return None
    values = {}
    for name, col in mapping.items():
        arr = table.column(col).combine_chunks()
        if pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type):
            if arr.null_count:
                return None
            offsets, flat = arr.offsets.to_numpy().tolist(), arr.values.to_numpy(zero_copy_only=False).tolist()
            values[name] = [tuple(flat[a:b]) for a, b in zip(offsets[:-1], offsets[1:])]
        else:
            values[name] = arr.to_numpy(zero_copy_only=False)
    return Columns(path, dict(mapping), values, np.arange(1, table.num_rows + 1), False)


def _jsonl_lines(path: Path, mapping: dict) -> Columns:
    rows, lines = {name: [] for name in mapping}, []
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(str(path), f"byte {e.start}", "not UTF-8 text") from None
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"{path}:{lineno}", line.strip()[:60], f"not valid JSON ({e.msg})") from None
        require(isinstance(obj, dict), f"{path}:{lineno}", line.strip()[:60], "not a JSON object")
        for name, key in mapping.items():
            require(key in obj, f"{path}:{lineno}:{key}", None, f"missing field; the line has {sorted(obj)}")
            rows[name].append(obj[key])
        lines.append(lineno)
    values = {name: np.array(v + [None], dtype=object)[:-1] for name, v in rows.items()}
    return _nonempty(Columns(path, dict(mapping), values, np.array(lines, dtype=np.int64), False))


def positive_ints(cols: Columns, name: str) -> np.ndarray:
    """Integer token counts > 0 (a float column must hold whole numbers)."""
    v = cols.values[name]
    if not (isinstance(v, np.ndarray) and v.dtype.kind in "iu"):
        num = _numeric(cols, v)
        f = num.to_numpy(dtype=np.float64, na_value=np.nan)
        bad = np.flatnonzero(~np.isfinite(f) | (f != np.round(f)))
        if len(bad):
            i = bad[0]
            raise InputError(cols.where(i, name), _py(v[i]), "not an integer token count")
        v = f.astype(np.int64)
    bad = np.flatnonzero(v <= 0)
    if len(bad):
        raise InputError(cols.where(bad[0], name), int(v[bad[0]]), "token counts must be > 0")
    return v.astype(np.int64)


def seconds(cols: Columns, name: str, unit: str) -> np.ndarray:
    """Timestamps as float seconds since the earliest one."""
    require(unit in TIME_UNITS, "trace:time_unit", unit, f"must be one of {list(TIME_UNITS)}")
    v = cols.values[name]
    if unit == "datetime":
        ts = pd.to_datetime(pd.Series(v, dtype=object), format="ISO8601", errors="coerce")
        bad = np.flatnonzero(ts.isna().to_numpy())
        if len(bad):
            raise InputError(cols.where(bad[0], name), _py(v[bad[0]]), "not a date-time (YYYY-MM-DD HH:MM:SS.f)")
        ns = ts.to_numpy().astype("datetime64[ns]").astype(np.int64)
        return (ns - ns.min()) / 1e9
    f = _numeric(cols, v).to_numpy(dtype=np.float64, na_value=np.nan)
    bad = np.flatnonzero(~np.isfinite(f))
    if len(bad):
        raise InputError(cols.where(bad[0], name), _py(v[bad[0]]), f"not a number ({unit})")
    f = f - f.min()
    return f if unit == "s" else f / TIME_UNITS[unit]


def int_tuples(cols: Columns, name: str) -> list:
    """A list-of-integers column (Mooncake ``hash_ids``) as one tuple per row."""
    out = cols.values[name]
    for i, h in enumerate(out):
        if isinstance(h, tuple) and (not h or type(h[0]) is int):
            continue
        ok = isinstance(h, (list, tuple)) and all(type(x) is int for x in h)
        require(ok, cols.where(i, name), _py(h), "must be a list of integers")
    return [tuple(h) for h in out]


def _numeric(cols: Columns, v: np.ndarray) -> pd.Series:
    """Numbers as floats, NaN where a value is not a number (bools never are; strings only in CSV)."""
    if v.dtype.kind in "iuf":
        return pd.Series(v, dtype=np.float64)
    objs = pd.Series(v, dtype=object)
    ok = objs.map(lambda x: not isinstance(x, bool) and (cols.text or not isinstance(x, str)))
    return pd.to_numeric(objs.where(ok), errors="coerce")


def _py(x):
    return x.item() if isinstance(x, np.generic) else x
