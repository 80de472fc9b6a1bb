"""Step-level timings: one row per measured forward pass (engine step) with its batch shape.

Kernel tables see only the GPU; a step's time also holds the engine's host work, which is what
``calibration/steps.py`` fits. Every importer returns the same tidy table, one row per step:

  step            the step's id in its source
  kind            prefill (only sequences with q > 1), decode (only q = 1) or mixed
  rows            T = Σ q
  seqs            B sequences; prefill_seqs of them with q > 1
  prefill_pairs   Σ over q > 1 sequences of q·kv + q(q+1)/2 (query-key pairs), prefill_kv Σ kv + q
  decode_pairs    the same sums over q = 1 sequences (decode_kv = decode_pairs = Σ kv + 1)
  prefill_groups  the q > 1 sequences themselves, ((count, q, kv), ...): what the simulator's
                  per-sequence attention pricing needs (calibration/step_pricing.py)
  time_s          measured seconds;  source  "file:line" of the row it came from;  tp

Formats (``load_steps(path, fmt)``):
  steps      our CSV, one row per sequence of a step: ``step, q_len, kv_len`` and ``time_s`` or
             ``time_ms`` (the step's time, repeated on each of its rows); optional ``dtype``
             (rows of another dtype than the 16-bit one modelled are skipped and counted),
             ``hardware`` (several GPUs in one file: pick one with ``gpu``) and ``tp``.
  splitwise  Splitwise's ``perf_model.csv`` (Mutinifni/splitwise-sim ``data/perf_model.csv``):
             ``prompt_size, batch_size, token_size, prompt_time, token_time`` in ms. Each row
             is two steps: the batch's prefill (batch_size prompts of prompt_size, all in one
             pass) and its mean decode iteration. Decode iteration j = 1 .. token_size − 1 of a
             sequence has prompt_size + j − 1 tokens cached; decode time is linear in kv, so the
             mean iteration is priced at the mean kv, prompt_size + (token_size − 2)/2 (rounded).
             Where the file has power columns, each step also gets a ``session``: "power" where
             the row's peak_power or average_power was recorded (> 0), else "no-power" (the
             measurements came from recording runs with and without power logging:
             fit_steps(sessions=True)). A ``tensor_parallel`` column gives each row its tp (a
             table may hold several: fit_steps fits them jointly), a ``model`` column its model
             (the steps' ``model``). Rows that fail a check against their neighbours are skipped
             and counted (``splitwise_screen``), both of their steps.
  vllm-log   the lines vLLM prints with ``--enable-logging-iteration-details``
             (vllm/v1/metrics/loggers.py, ``LoggingStatLogger._log_iteration_details``):
             ``Iteration(N): C context requests, c context tokens, G generation requests,
             g generation tokens, iteration elapsed time: X ms, GPU KV cache usage: Y%``.
             Context requests are those with no output token yet (vllm/v1/utils.py,
             ``compute_iteration_details``). The elapsed time is how long the engine core
             waited on the step's model output (vllm/v1/engine/core.py,
             ``capture_iteration_details``): the GPU's time plus the host work inside
             ``execute_model``, not the scheduling before it. The line gives totals only, so
             the shape is reconstructed: context tokens split evenly over the context requests
             with no cached prefix; the KV in use (Y % of the pool, whose size vLLM logs at start
             as ``GPU KV cache size: N tokens``, or ``kv_cache_tokens``) less the context tokens
             split evenly over the generation requests. Dummy iterations (data parallel) and
             empty ones are skipped, and so are steps under 0.1 ms: under async scheduling
             (``EngineCore.step_with_batch_queue``) the engine often waits on a step that has
             already finished, and the elapsed time is then no step's duration (for step timings,
             log with ``--no-async-scheduling``).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputError, require

STEP_COLUMNS = (
    "step",
    "kind",
    "rows",
    "seqs",
    "prefill_seqs",
    "prefill_pairs",
    "prefill_kv",
    "decode_pairs",
    "decode_kv",
    "prefill_groups",
    "time_s",
    "source",
    "tp",
)
STEP_FORMATS = ("steps", "splitwise", "vllm-log")
MODELLED_DTYPES = ("bf16", "bfloat16", "fp16", "float16", "half")
SPLITWISE_COLUMNS = ("prompt_size", "batch_size", "token_size", "prompt_time", "token_time")
MS = 1e-3
ASYNC_FLOOR_MS = 0.1

ITERATION = re.compile(
    r"Iteration\((?P<iteration>\d+)\): (?P<ctx_req>\d+) context requests, (?P<ctx_tok>\d+) context tokens, "
    r"(?P<gen_req>\d+) generation requests, (?P<gen_tok>\d+) generation tokens, "
    r"iteration elapsed time: (?P<elapsed>\d+(?:\.\d+)?) ms(?P<dummy> \(dummy\))?, "
    r"(?P<device>\S+) KV cache usage: (?P<usage>\d+(?:\.\d+)?)%"
)
FIELDS = (
    "context requests",
    "context tokens",
    "generation requests",
    "generation tokens",
    "iteration elapsed time",
    "KV cache usage",
)
KV_SIZE = re.compile(r"KV cache size: (?P<tokens>[\d,]+) tokens")


def _kind(prefill_seqs: np.ndarray, seqs: np.ndarray) -> np.ndarray:
    return np.where(prefill_seqs == seqs, "prefill", np.where(prefill_seqs == 0, "decode", "mixed"))


def uniform_steps(
    n_prefill, q_prefill, kv_prefill, n_decode, kv_decode, time_s, source, tp: int = 1, step=None
) -> pd.DataFrame:
    """Steps of n_prefill sequences of q_prefill new tokens over kv_prefill cached ones, plus n_decode
    decodes with kv_decode cached (arrays, one entry per step; exact integer sums)."""
    npf, qp, kvp = (np.asarray(a, dtype=np.int64) for a in (n_prefill, q_prefill, kv_prefill))
    nd, kvd = np.asarray(n_decode, dtype=np.int64), np.asarray(kv_decode, dtype=np.int64)
    seqs = npf + nd
    df = pd.DataFrame(
        {
            "step": np.arange(len(seqs)) if step is None else np.asarray(step),
            "kind": _kind(npf, seqs),
            "rows": npf * qp + nd,
            "seqs": seqs,
            "prefill_seqs": npf,
            "prefill_pairs": (npf * (qp * kvp + qp * (qp + 1) // 2)).astype(float),
            "prefill_kv": (npf * (kvp + qp)).astype(float),
            "decode_pairs": (nd * (kvd + 1)).astype(float),
            "decode_kv": (nd * (kvd + 1)).astype(float),
            "prefill_groups": [((int(n), int(a), int(k)),) if n else () for n, a, k in zip(npf, qp, kvp)],
            "time_s": np.asarray(time_s, dtype=float),
            "source": source,
            "tp": tp,
        }
    )
    return df


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path)
    except FileNotFoundError:
        raise InputError("from", str(path), "no such file") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise InputError("from", str(path), f"not a readable CSV ({e})") from None


def _numeric(raw: pd.DataFrame, path: Path, col: str, positive: bool = False, integer: bool = False) -> np.ndarray:
    """The column as numbers; the first bad cell is named by file, line and field."""
    v = pd.to_numeric(raw[col], errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(v) | ((v <= 0) if positive else (v < 0)) | ((v != np.round(v)) if integer else False)
    if bad.any():
        i = int(np.argmax(bad))
        need = "a positive number" if positive else "a number >= 0"
        raise InputError(
            f"{path}:{raw.index[i] + 2}:{col}",
            raw[col].iloc[i],
            f"must be {need}" + (", an integer" if integer else ""),
        )
    return v


def _missing(raw: pd.DataFrame, path: Path, cols) -> None:
    missing = [c for c in cols if c not in raw.columns]
    require(
        not missing,
        f"{path}:1:{missing[0] if missing else ''}",
        list(raw.columns),
        f"missing column {missing[0] if missing else ''!r}; need {', '.join(cols)}",
    )


def _pick(raw: pd.DataFrame, path: Path, gpu: str | None, col: str = "hardware") -> pd.DataFrame:
    if col not in raw.columns:
        return raw
    have = sorted(raw[col].astype(str).unique())
    if gpu is None:
        require(len(have) == 1, f"{path}:{col}", have, "the table holds several GPUs; choose one with --gpu")
        return raw
    require(gpu in have, f"{path}:{col}", gpu, f"no rows for this GPU; the table has {', '.join(have)}")
    return raw[raw[col].astype(str) == gpu]


def _dtype_filter(raw: pd.DataFrame, path: Path, skipped: dict) -> pd.DataFrame:
    if "dtype" not in raw.columns:
        return raw
    keep = raw["dtype"].astype(str).str.lower().isin(MODELLED_DTYPES)
    if not keep.any():
        raise InputError(
            f"{path}:{raw.index[0] + 2}:dtype",
            str(raw["dtype"].iloc[0]),
            f"no rows of the 16-bit dtype modelled ({', '.join(MODELLED_DTYPES)})",
        )
    if (~keep).any():
        skipped["dtype"] = skipped.get("dtype", 0) + int((~keep).sum())
    return raw[keep]


def read_steps_csv(path, gpu: str | None = None, skipped: dict | None = None, tp: int = 1) -> pd.DataFrame:
    """Our per-sequence layout (see the module docstring), or Splitwise's, told apart by columns."""
    path, skipped = Path(path), skipped if skipped is not None else {}
    raw = _read_csv(path)
    if all(c in raw.columns for c in SPLITWISE_COLUMNS):
        return read_splitwise(path, gpu, skipped, raw)
    _missing(raw, path, ("step", "q_len", "kv_len"))
    require(
        "time_s" in raw.columns or "time_ms" in raw.columns,
        f"{path}:1:time_s",
        list(raw.columns),
        "missing column 'time_s' (or 'time_ms')",
    )
    raw = _dtype_filter(_pick(raw, path, gpu), path, skipped)
    q = _numeric(raw, path, "q_len", positive=True, integer=True).astype(np.int64)
    kv = _numeric(raw, path, "kv_len", integer=True).astype(np.int64)
    t = (
        _numeric(raw, path, "time_s", positive=True)
        if "time_s" in raw.columns
        else _numeric(raw, path, "time_ms", positive=True) * MS
    )
    tp = (
        _numeric(raw, path, "tp", positive=True, integer=True).astype(int)  # type: ignore[assignment]
        if "tp" in raw.columns
        else np.full(len(q), tp)
    )
    pre = q > 1
    pairs = q * kv + q * (q + 1) // 2
    per = pd.DataFrame(
        {
            "step": raw["step"].to_numpy(),
            "rows": q,
            "seqs": 1,
            "prefill_seqs": pre.astype(np.int64),
            "prefill_pairs": np.where(pre, pairs, 0).astype(float),
            "prefill_kv": np.where(pre, kv + q, 0).astype(float),
            "decode_pairs": np.where(pre, 0, pairs).astype(float),
            "decode_kv": np.where(pre, 0, kv + q).astype(float),
            "time_s": t,
            "tp": tp,
            "line": raw.index.to_numpy() + 2,
        }
    )
    g = per.groupby("step", sort=False)
    spread = g["time_s"].agg(["min", "max"])
    bad = spread.index[spread["max"] > spread["min"] * (1 + 1e-9)]
    if len(bad):
        line = int(per.loc[per["step"] == bad[0], "line"].iloc[0])
        raise InputError(f"{path}:{line}:time_s", bad[0], "the rows of one step must carry the same time")
    out = g.agg(
        {c: "sum" for c in ("rows", "seqs", "prefill_seqs", "prefill_pairs", "prefill_kv", "decode_pairs", "decode_kv")}
        | {"time_s": "first", "tp": "first", "line": "first"}
    ).reset_index()
    out["kind"] = _kind(out["prefill_seqs"].to_numpy(), out["seqs"].to_numpy())
    pq = per[pre].assign(kv0=kv[pre]).groupby(["step", "rows", "kv0"], sort=True).size()
    groups = {}  # type: ignore[var-annotated]
    for (st, a, k), n in pq.items():
        groups.setdefault(st, []).append((int(n), int(a), int(k)))
    out["prefill_groups"] = [tuple(groups.get(st, ())) for st in out["step"]]
    out["source"] = [f"{path}:{n}" for n in out.pop("line")]
    return out[list(STEP_COLUMNS)]


def read_splitwise(path, gpu: str | None = None, skipped: dict | None = None, raw: pd.DataFrame | None = None):
    """Splitwise's perf_model.csv (see the module docstring); ``gpu`` picks a ``hardware`` value."""
    path = Path(path)
    raw = _read_csv(path) if raw is None else raw
    _missing(raw, path, SPLITWISE_COLUMNS)
    raw = _dtype_filter(_pick(raw, path, gpu), path, skipped if skipped is not None else {})
    p = _numeric(raw, path, "prompt_size", positive=True, integer=True).astype(np.int64)
    b = _numeric(raw, path, "batch_size", positive=True, integer=True).astype(np.int64)
    n = _numeric(raw, path, "token_size", positive=True, integer=True).astype(np.int64)
    tpre, tdec = _numeric(raw, path, "prompt_time", positive=True), _numeric(raw, path, "token_time", positive=True)
    tp = (
        _numeric(raw, path, "tensor_parallel", positive=True, integer=True).astype(int)
        if "tensor_parallel" in raw.columns
        else np.ones(len(p), int)
    )
    keep = splitwise_screen(raw, p, b, n, tpre, tdec, tp, skipped if skipped is not None else {})
    raw, p, b, n, tpre, tdec, tp = raw[keep], p[keep], b[keep], n[keep], tpre[keep], tdec[keep], tp[keep]
    src = [f"{path}:{i + 2}" for i in raw.index]
    zero = np.zeros_like(p)
    pre = uniform_steps(b, p, zero, zero, zero, tpre * MS, src, tp, step=2 * raw.index)
    dec = uniform_steps(zero, zero, zero, b, p + np.maximum(n - 2, 0) // 2, tdec * MS, src, tp, step=2 * raw.index + 1)
    out = pd.concat([pre, dec], ignore_index=True)[list(STEP_COLUMNS)]
    power = [c for c in ("peak_power", "average_power") if c in raw.columns]
    if power:
        logged = (raw[power].apply(pd.to_numeric, errors="coerce").fillna(0.0) > 0).any(axis=1).to_numpy()
        out["session"] = np.tile(np.where(logged, "power", "no-power"), 2)
    if "model" in raw.columns:
        out["model"] = np.tile(raw["model"].astype(str).to_numpy(), 2)
    return out


MONOTONE_SLACK = 0.05  # a configuration this much faster than one of less work is broken
E2E_SLACK = 0.10  # e2e_time this much above prompt_time + (token_size - 1)·token_time: the run stalled


def splitwise_screen(raw, p, b, n, tpre, tdec, tp, skipped: dict) -> np.ndarray:
    """Which Splitwise rows to keep. Two stated checks, each on a configuration's median over its
    repeats, skip every row of the configuration (both steps: the run is not trusted):

      less work, less time: within one GPU, model, tp and token_size, a configuration's
        prompt_time more than MONOTONE_SLACK below that of one with the same prompt_size and
        fewer requests, or the same requests and a shorter prompt; or its token_time more than
        MONOTONE_SLACK below that of one with the same prompt_size and fewer requests (a batch of
        more sequences cannot run faster; PROVENANCE's tp 2 batch-64 rows are such)
      the times add up: e2e_time (where the table has it) more than E2E_SLACK above
        prompt_time + (token_size − 1)·token_time: the generation spent time that neither step
        time shows (pre-emption, a stall), so neither is the time of the step it names (below,
        fewer tokens were generated than asked for, which changes neither step's time)
    """
    cols = {"p": p, "b": b, "n": n, "tpre": tpre, "tdec": tdec, "tp": tp}
    for c in ("hardware", "model"):
        cols[c] = raw[c].astype(str).to_numpy() if c in raw.columns else np.full(len(p), "")
    df = pd.DataFrame(cols)
    key = ["hardware", "model", "tp", "n", "p", "b"]
    med = df.groupby(key)[["tpre", "tdec"]].median().reset_index()
    bad = set()
    for _, g in med.groupby(["hardware", "model", "tp", "n"]):
        rows = g.to_dict("records")
        for r in rows:
            for o in rows:
                fewer = o["p"] == r["p"] and o["b"] < r["b"]
                shorter = o["b"] == r["b"] and o["p"] < r["p"]
                if (fewer or shorter) and r["tpre"] < (1 - MONOTONE_SLACK) * o["tpre"]:
                    bad.add(tuple(r[k] for k in key))
                if fewer and r["tdec"] < (1 - MONOTONE_SLACK) * o["tdec"]:
                    bad.add(tuple(r[k] for k in key))
    keys = list(zip(*(df[k].to_numpy() for k in key)))
    mono = np.array([k in bad for k in keys], dtype=bool)
    e2e = np.zeros(len(p), bool)
    if "e2e_time" in raw.columns:
        total = pd.to_numeric(raw["e2e_time"], errors="coerce").to_numpy(float)
        over = total > (1 + E2E_SLACK) * (tpre + (n - 1) * tdec)
        df["over"] = over
        stalled = df.groupby(key)["over"].transform("median").to_numpy() >= 0.5
        e2e = stalled & ~mono
    if mono.any():
        skipped["rows faster than a configuration of less work (splitwise_screen)"] = int(mono.sum())
    if e2e.any():
        skipped["rows whose e2e_time exceeds their step times by 10 % (splitwise_screen)"] = int(e2e.sum())
    return ~(mono | e2e)


def _iteration_error(path: Path, lineno: int, line: str) -> InputError:
    """Name the first field of an Iteration line that is missing or malformed."""
    rest = line[line.index("Iteration(") :]
    head = re.match(r"Iteration\(\d+\): ", rest)
    if not head:
        return InputError(f"{path}:{lineno}:iteration", rest[:40], "malformed 'Iteration(N): ' prefix")
    parts = re.split(r",\s*", rest[head.end() :])
    for i, field in enumerate(FIELDS):
        if i >= len(parts) or field not in parts[i]:
            got = parts[i] if i < len(parts) else ""
            return InputError(
                f"{path}:{lineno}:{field}", got.strip()[:40] or None, "missing or malformed (truncated line?)"
            )
    return InputError(f"{path}:{lineno}:iteration", rest[:60], "does not match vLLM's iteration-details format")


def read_vllm_log(path, kv_cache_tokens: int | None = None, tp: int = 1, skipped: dict | None = None) -> pd.DataFrame:
    path, skipped = Path(path), skipped if skipped is not None else {}
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        raise InputError("from", str(path), "no such file") from None
    except IsADirectoryError:
        raise InputError("from", str(path), "is a folder; give the log file") from None
    rows, kv_total, dummy = [], kv_cache_tokens, 0
    for lineno, line in enumerate(text.splitlines(), start=1):
        if kv_total is None and "KV cache size:" in line:
            m = KV_SIZE.search(line)
            if m:
                kv_total = int(m["tokens"].replace(",", ""))
        if "Iteration(" not in line:
            continue
        m = ITERATION.search(line)
        if m is None:
            raise _iteration_error(path, lineno, line)
        if m["dummy"] or int(m["ctx_tok"]) + int(m["gen_tok"]) == 0:
            dummy += 1
            continue
        rows.append(
            (
                lineno,
                int(m["ctx_req"]),
                int(m["ctx_tok"]),
                int(m["gen_req"]),
                int(m["gen_tok"]),
                float(m["elapsed"]),
                float(m["usage"]),
            )
        )
    require(bool(rows), "from", str(path), "no 'Iteration(N): ...' lines (vLLM --enable-logging-iteration-details)")
    quick = [r for r in rows if r[5] < ASYNC_FLOOR_MS]
    if quick:
        skipped["steps under 0.1 ms (async scheduling: already done when waited on)"] = len(quick)
        rows = [r for r in rows if r[5] >= ASYNC_FLOOR_MS]
        require(
            bool(rows),
            "from",
            str(path),
            "every step logged under 0.1 ms: the log is from async scheduling, "
            "whose elapsed times are not step times; log with --no-async-scheduling",
        )
    require(
        kv_total is not None,
        f"{path}:KV cache size",
        None,
        "no 'GPU KV cache size: N tokens' line in the log; give the pool size (--kv-cache-tokens)",
    )
    if dummy:
        skipped["dummy or empty iterations"] = dummy
    a = np.array(rows, dtype=float)
    line, cr, ct, gr, gt, ms, usage = (a[:, j] for j in range(7))
    bad = (cr > 0) & (ct < cr) | (gr > 0) & (gt != gr) | (ms <= 0)
    if bad.any():
        i = int(np.argmax(bad))
        field = (
            "iteration elapsed time"
            if ms[i] <= 0
            else ("generation tokens" if gr[i] and gt[i] != gr[i] else "context tokens")
        )
        raise InputError(
            f"{path}:{int(line[i])}:{field}",
            None,
            "positive time, >= 1 token per context request and 1 per generation request needed "
            "(speculative decoding is not modelled)",
        )
    cr_i, gr_i = cr.astype(np.int64), gr.astype(np.int64)
    q = np.where(cr_i > 0, np.round(ct / np.maximum(cr, 1)), 0).astype(np.int64)
    used = np.round(usage / 100.0 * kv_total)  # type: ignore[operator]
    kv_dec = np.where(gr_i > 0, np.maximum(used - ct - gr, 0) // np.maximum(gr, 1), 0).astype(np.int64)
    src = [f"{path}:{int(n)}" for n in line]
    return uniform_steps(cr_i, q, np.zeros_like(q), gr_i, kv_dec, ms * MS, src, tp, step=line.astype(np.int64))


def load_steps(
    path,
    fmt: str = "steps",
    gpu: str | None = None,
    kv_cache_tokens: int | None = None,
    tp: int = 1,
    skipped: dict | None = None,
) -> pd.DataFrame:
    """The tidy step table of a file in one of STEP_FORMATS; ``skipped`` collects what was left out."""
    require(fmt in STEP_FORMATS, "from", fmt, f"not a step format; known: {', '.join(STEP_FORMATS)}")
    if fmt == "vllm-log":
        return read_vllm_log(path, kv_cache_tokens, tp, skipped)
    if fmt == "splitwise":
        return read_splitwise(path, gpu, skipped)
    return read_steps_csv(path, gpu, skipped, tp)
