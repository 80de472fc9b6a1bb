"""Prompt and output lengths: fixed, vLLM's ``random``, ``sharegpt`` and prefix-repetition datasets,
length tables."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from costmodel.errors import InputError, require

from . import readers

TABLE_COLUMNS = (  # (prompt, output) column pairs recognised without a mapping
    ("num_prefill_tokens", "num_decode_tokens"),  # ShareGPT / arXiv / BWB stats (Vidur, Etalon)
    ("ContextTokens", "GeneratedTokens"),  # Azure LLM inference 2023
    ("input_length", "output_length"),  # Mooncake
    ("prompt_len", "output_len"),
)
SHAREGPT_FIRST_TURNS = Path(__file__).resolve().parent / "fixtures" / "sharegpt_first_turns_llama3.csv"


@dataclass(frozen=True, eq=False)
class Lengths:
    prompt_len: np.ndarray
    output_len: np.ndarray
    block_hashes: list | None = None
    block_tokens: int = 16
    notes: tuple[str, ...] = field(default=())

    def __len__(self) -> int:
        return len(self.prompt_len)


def _int(name: str, v, low: int) -> int:
    ok = isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= low
    require(ok, name, v, f"must be an integer >= {low}")
    return int(v)


def _count(n) -> int:
    return _int("num_prompts", n, 1)


def fixed(n: int, input_len: int, output_len: int) -> Lengths:
    n = _count(n)
    input_len, output_len = _int("input_len", input_len, 1), _int("output_len", output_len, 1)
    return Lengths(np.full(n, input_len, np.int64), np.full(n, output_len, np.int64))


def random_bounds(input_len: int, output_len: int, range_ratio: float) -> tuple[tuple[int, int], tuple[int, int]]:
    """Inclusive ``[low, high]`` for input and output, as vLLM's ``RandomDataset`` computes them:
    floor(x(1-r)) and ceil(x(1+r)); the output range is clamped to >= 1. No special tokens."""
    require(0.0 <= range_ratio < 1.0, "range_ratio", range_ratio, "must be in [0, 1)")
    input_len, output_len = _int("input_len", input_len, 0), _int("output_len", output_len, 0)
    inp = (math.floor(input_len * (1 - range_ratio)), math.ceil(input_len * (1 + range_ratio)))
    out = (max(math.floor(output_len * (1 - range_ratio)), 1), max(math.ceil(output_len * (1 + range_ratio)), 1))
    return inp, out


def random(
    n: int,
    rng: np.random.Generator,
    input_len: int = 1024,
    output_len: int = 128,
    range_ratio: float = 0.0,
    prefix_len: int = 0,
    block_tokens: int = 16,
) -> Lengths:
    """vLLM ``--dataset-name random``: prompt = ``prefix_len`` tokens shared by every request +
    U{low..high} own tokens; output U{low..high}. With a prefix, the prefix's full blocks share
    hash ids across requests."""
    n = _count(n)
    prefix_len, block_tokens = _int("prefix_len", prefix_len, 0), _int("block_tokens", block_tokens, 1)
    (ilo, ihi), (olo, ohi) = random_bounds(input_len, output_len, range_ratio)
    require(prefix_len + ilo >= 1, "input_len", input_len, "prompts could be empty (prefix_len + low < 1)")
    prompt = prefix_len + rng.integers(ilo, ihi + 1, size=n)
    output = rng.integers(olo, ohi + 1, size=n)
    hashes = None
    if prefix_len >= block_tokens:
        hashes = _prefix_hashes(np.zeros(n, np.int64), 1, prefix_len, prompt, block_tokens)
    return Lengths(prompt, output, hashes, block_tokens)


def shared_prefix(
    n: int,
    rng: np.random.Generator,
    num_prefixes: int = 10,
    prefix_len: int = 256,
    suffix_len: int = 256,
    output_len: int = 128,
    block_tokens: int = 16,
) -> Lengths:
    """vLLM ``--dataset-name prefix_repetition``: ``n // num_prefixes`` prompts per prefix, each
    prefix + own suffix, shuffled. Block j of prefix p has the same hash id in every request
    using p when it lies wholly inside the prefix; every other block is unique."""
    n = _count(n)
    require(
        _int("num_prefixes", num_prefixes, 1) <= n,
        "num_prefixes",
        num_prefixes,
        f"must be <= num_prompts ({n}), as in vLLM",
    )
    prefix_len, suffix_len = _int("prefix_len", prefix_len, 0), _int("suffix_len", suffix_len, 0)
    require(prefix_len + suffix_len >= 1, "suffix_len", suffix_len, "prefix_len + suffix_len must be >= 1")
    output_len, block_tokens = _int("output_len", output_len, 1), _int("block_tokens", block_tokens, 1)
    per = n // num_prefixes
    m = per * num_prefixes
    prefix_of = rng.permutation(np.repeat(np.arange(num_prefixes, dtype=np.int64), per))
    prompt = np.full(m, prefix_len + suffix_len, np.int64)
    hashes = _prefix_hashes(prefix_of, num_prefixes, prefix_len, prompt, block_tokens)
    notes = (
        ()
        if m == n
        else (
            f"shared_prefix: {n} prompts rounded down to {m} "
            f"({per} per prefix x {num_prefixes} prefixes, as vLLM does)",
        )
    )
    return Lengths(prompt, np.full(m, output_len, np.int64), hashes, block_tokens, notes)


def _prefix_hashes(
    prefix_of: np.ndarray, num_prefixes: int, prefix_len: int, prompt_len: np.ndarray, block_tokens: int
) -> list:
    """ceil(prompt/block_tokens) ids per request (Mooncake's convention): ids [0, P*F) are the
    F = prefix_len // block_tokens shared prefix blocks of the P prefixes, later ids are unique."""
    shared = prefix_len // block_tokens
    blocks = -(-prompt_len // block_tokens)
    next_id = num_prefixes * shared
    out = []
    for p, b in zip(prefix_of.tolist(), blocks.tolist()):
        own = b - shared
        out.append(tuple(range(p * shared, (p + 1) * shared)) + tuple(range(next_id, next_id + own)))
        next_id += own
    return out


def table(
    path, n: int, rng: np.random.Generator, columns: dict | None = None, output_len: int | None = None
) -> Lengths:
    """Rows drawn uniformly with replacement from a CSV length table; ``output_len`` replaces every
    row's output (vLLM's ``--sharegpt-output-len``).

    ``columns`` maps ``prompt_len`` and ``output_len`` to the file's names; without it the
    column pairs in ``TABLE_COLUMNS`` are recognised."""
    n = _count(n)
    if columns is None:
        columns = _detect_columns(path)
    unknown = sorted(set(columns) - {"prompt_len", "output_len"})
    require(not unknown, "lengths:columns", unknown, "unknown keys; allowed: prompt_len, output_len")
    require(len(columns) == 2, "lengths:columns", sorted(columns), "needs prompt_len and output_len")
    cols = readers.read_csv(path, columns)
    prompt, output = readers.positive_ints(cols, "prompt_len"), readers.positive_ints(cols, "output_len")
    rows = rng.integers(0, len(prompt), size=n)
    out = output[rows] if output_len is None else np.full(n, _int("output_len", output_len, 1), np.int64)
    return Lengths(prompt[rows], out)


def vllm_valid(prompt_len: np.ndarray, output_len: np.ndarray, output_given: bool) -> np.ndarray:
    """vLLM's ``is_valid_sequence`` defaults (vllm/benchmarks/datasets.py), row by row: prompt and
    output >= 4 tokens (the output check skipped when ``--sharegpt-output-len`` sets it), prompt
    <= 1,024 and prompt + output <= 2,048."""
    ok = (prompt_len >= 4) & (prompt_len <= 1024) & (prompt_len + output_len <= 2048)
    return ok if output_given else ok & (output_len >= 4)


def sharegpt(
    n: int, rng: np.random.Generator, path=None, columns: dict | None = None, output_len: int | None = None
) -> Lengths:
    """``vllm bench serve --dataset-name sharegpt``: first-turn (prompt, completion) token counts,
    rows vLLM's filter would drop left out, drawn uniformly with replacement (vLLM shuffles and
    takes the first ``num_prompts`` valid rows). ``path`` is a length table of first turns; the
    default is the shipped one (Llama 3 tokenizer; workloads/fixtures/README.md says how it was
    made). ``output_len`` replaces every output before the filter, as vLLM does."""
    n = _count(n)
    path = SHAREGPT_FIRST_TURNS if path is None else path
    cols = readers.read_csv(path, columns or _detect_columns(path))
    prompt, output = readers.positive_ints(cols, "prompt_len"), readers.positive_ints(cols, "output_len")
    if output_len is not None:
        output = np.full(len(prompt), _int("output_len", output_len, 1), np.int64)
    keep = vllm_valid(prompt, output, output_len is not None)
    require(
        keep.any(),
        "lengths:path",
        str(path),
        "no row passes vLLM's ShareGPT filter (prompt 4..1024 tokens, prompt + output <= 2048)",
    )
    prompt, output = prompt[keep], output[keep]
    rows = rng.integers(0, len(prompt), size=n)
    return Lengths(prompt[rows], output[rows])


def _detect_columns(path) -> dict:
    import pandas as pd

    try:
        header = set(pd.read_csv(path, nrows=0).columns)
    except (OSError, pd.errors.EmptyDataError) as e:
        raise InputError("lengths:path", str(path), f"cannot read a CSV header ({e})") from None
    for p, o in TABLE_COLUMNS:
        if p in header and o in header:
            return {"prompt_len": p, "output_len": o}
    raise InputError(
        f"{path}:1", sorted(header), "no known length columns; give lengths.columns {prompt_len: ..., output_len: ...}"
    )
