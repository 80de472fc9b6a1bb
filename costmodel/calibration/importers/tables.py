"""Reading other projects' CSV tables with errors that name the file, the line and the field."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ...errors import InputError, require


def read_table(path: Path, required: list[str], numeric: list[str]) -> pd.DataFrame:
    """The CSV with every required column present and every numeric one a finite number; the
    first fault raises ``InputError('<file>:<line>:<field>', value, reason)`` (line 1 is the header)."""
    src = str(path)
    require(path.is_file(), src, None, "no such file")
    try:
        raw = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise InputError(src, None, f"not a readable CSV ({str(e).splitlines()[0]})") from None
    missing = [c for c in required if c not in raw.columns]
    require(
        not missing,
        f"{src}:1:{missing[0] if missing else ''}",
        list(raw.columns),
        f"missing column {missing[0] if missing else ''!r}",
    )
    for col in required:
        empty = (raw[col].str.strip() == "").to_numpy()
        if empty.any():
            i = int(np.argmax(empty))
            raise InputError(f"{src}:{i + 2}:{col}", "", "empty field (truncated row?)")
    out = raw.copy()
    for col in numeric:
        v = pd.to_numeric(raw[col], errors="coerce").to_numpy(dtype=float)
        bad = ~np.isfinite(v)
        if bad.any():
            i = int(np.argmax(bad))
            raise InputError(f"{src}:{i + 2}:{col}", raw[col].iloc[i], "must be a number")
        out[col] = v
    return out


def keep_dtype(raw: pd.DataFrame, cols: list[str], want: set[str], src: str, notes: list[str]) -> pd.DataFrame:
    """Rows whose dtype columns all name a dtype in ``want``; the others are counted in ``notes``.
    None left: an InputError naming the dtypes the table does hold."""
    ok = np.ones(len(raw), bool)
    for c in cols:
        ok &= raw[c].str.strip().str.lower().isin(want).to_numpy()
    label = raw[cols[0]].astype(str)
    for c in cols[1:]:
        label = label + "/" + raw[c].astype(str)
    if (~ok).any():
        kinds = label[~ok].value_counts()
        notes.append(
            f"{src}: skipped {int((~ok).sum())} rows of other dtypes "
            f"({', '.join(f'{k}: {v}' for k, v in kinds.items())})"
        )
    have = sorted(set(label))
    require(bool(ok.any()), f"{src}:{cols[0]}", have, f"no rows of the modelled dtype ({'/'.join(sorted(want))})")
    return raw[ok].reset_index(drop=True)


def drop_failed(
    df: pd.DataFrame, keys: list[str], size: str, src: str, notes: list[str], factor: float = 0.5
) -> pd.DataFrame:
    """Drop measurements faster than ``factor`` × a smaller problem of the same configuration
    (``keys``, ordered by ``size``): a kernel cannot get much faster when given more work, so these
    are failed runs (AIConfigurator's H100 context table has rows of ~3 µs at 2k-token prompts)."""
    d = df.sort_values(keys + [size]).copy()
    prev = d.groupby(keys)["time_s"].cummax().groupby([d[k] for k in keys]).shift(1)
    bad = (d["time_s"] < factor * prev).to_numpy()
    if bad.any():
        notes.append(
            f"{src}: skipped {int(bad.sum())} rows faster than {factor:g}× a smaller problem of the "
            f"same shape (failed measurements)"
        )
    return d[~bad].sort_index().reset_index(drop=True)


def drop_floor(
    df: pd.DataFrame, keys: list[str], sizes: list[str], src: str, notes: list[str], factor: float = 2.0
) -> pd.DataFrame:
    """Drop a table's failed runs of the kind AIConfigurator's H100 SGLang attention tables hold:
    rows at the table's timing floor (within 20 % of its fastest row: an empty launch, whatever the
    problem), then rows slower than twice a larger problem of the same configuration (``keys``;
    larger in every one of ``sizes``): a kernel cannot get faster when given more work."""
    floor = (df["time_s"] <= 1.2 * df["time_s"].min()).to_numpy()
    d = df[~floor]
    bad = np.zeros(len(d), bool)
    for _, g in d.groupby(keys):
        v, t = g[sizes].to_numpy(float), g["time_s"].to_numpy(float)
        larger = (v[None, :, :] >= v[:, None, :]).all(2) & ~np.eye(len(g), dtype=bool)
        fastest = np.where(larger, t[None, :], np.inf).min(1)
        bad[d.index.get_indexer(g.index)] = t > factor * fastest
    if floor.any() or bad.any():
        notes.append(
            f"{src}: skipped {int(floor.sum())} rows at the table's timing floor "
            f"({1e6 * df['time_s'].min():.2g} µs) and {int(bad.sum())} slower than {factor:g}× a larger problem "
            f"of the same shape (failed measurements)"
        )
    return d[~bad].reset_index(drop=True)
