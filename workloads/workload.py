"""A workload: who arrives when with how many tokens. Flat arrays, one entry per request."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from costmodel.errors import require


def _frozen(a, dtype) -> np.ndarray:
    a = np.array(a, dtype=dtype)
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class Workload:
    """Requests in arrival order.

    ``arrival_s[i]`` is when request i is sent (seconds from 0). With ``closed_loop_concurrency``
    set (vLLM ``--max-concurrency``) it is the earliest send time: the simulator holds at most
    that many requests in flight and sends the next one when one finishes.
    ``block_hashes[i]`` names the ``block_tokens``-sized blocks of prompt i, first block first:
    equal ids mean equal token prefixes up to and including that block (Mooncake ``hash_ids``).
    """

    arrival_s: np.ndarray
    prompt_len: np.ndarray
    output_len: np.ndarray
    block_hashes: list | None = None
    block_tokens: int = 16
    closed_loop_concurrency: int | None = None
    notes: tuple[str, ...] = field(default=())
    ignore_eos: np.ndarray | None = (
        None  # per request; None: all True (fixed output lengths are max_tokens with ignore_eos)
    )

    def __post_init__(self):
        set_ = object.__setattr__
        set_(self, "arrival_s", _frozen(self.arrival_s, np.float64))
        set_(self, "prompt_len", _frozen(self.prompt_len, np.int64))
        set_(self, "output_len", _frozen(self.output_len, np.int64))
        set_(self, "notes", tuple(self.notes))
        n = len(self.arrival_s)
        for name in ("arrival_s", "prompt_len", "output_len"):
            a = getattr(self, name)
            require(a.ndim == 1 and len(a) == n, f"workload:{name}", a.shape, f"must be 1-D of length {n}")
        require(n > 0, "workload", n, "no requests")
        a = self.arrival_s
        require(bool(np.all(np.isfinite(a))) and a[0] >= 0, "workload:arrival_s", a[:3], "must be finite and >= 0")
        require(bool(np.all(np.diff(a) >= 0)), "workload:arrival_s", a[:3], "must be sorted ascending")
        for name in ("prompt_len", "output_len"):
            a = getattr(self, name)
            bad = np.flatnonzero(a <= 0)
            require(
                len(bad) == 0,
                f"workload:{name}[{bad[0] if len(bad) else 0}]",
                int(a[bad[0]]) if len(bad) else 0,
                "lengths must be > 0",
            )
        if self.block_hashes is not None:
            set_(self, "block_hashes", [tuple(h) for h in self.block_hashes])
            require(
                len(self.block_hashes) == n,
                "workload:block_hashes",
                len(self.block_hashes),
                f"must have one entry per request ({n})",
            )
        require(int(self.block_tokens) > 0, "workload:block_tokens", self.block_tokens, "must be > 0")
        if self.ignore_eos is not None:
            set_(self, "ignore_eos", _frozen(self.ignore_eos, np.bool_))
            require(
                self.ignore_eos.shape == (n,),
                "workload:ignore_eos",
                self.ignore_eos.shape,
                f"must be 1-D of length {n}",
            )
        c = self.closed_loop_concurrency
        require(c is None or int(c) >= 1, "workload:closed_loop_concurrency", c, "must be >= 1 or None")

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def duration_s(self) -> float:
        return float(self.arrival_s[-1] - self.arrival_s[0])

    def to_frame(self) -> pd.DataFrame:
        """One row per request; ``block_hashes`` as tuples when present."""
        df = pd.DataFrame({"arrival_s": self.arrival_s, "prompt_len": self.prompt_len, "output_len": self.output_len})
        if self.block_hashes is not None:
            df["block_hashes"] = pd.Series(self.block_hashes, dtype=object)
        return df
