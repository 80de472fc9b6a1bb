"""Each run's largest step gap, found for many runs at once.

A lone request's run records its largest inner gap in ``max_itl_s``. For a run of a few hundred
steps, numpy's per-call overhead is most of one ``maximum.reduce``; and ``max_itl_s`` only ever
takes a max of what it holds and a new gap (order-free, exact), so the gaps can wait: they are
kept (the run's own array of gaps, not copied) and reduced together, one ``reduceat`` over their
concatenation, when as many wait as the ITL histogram buffers (a few hundred runs) or the run
ends (``Replica.finish_run``).
"""

from __future__ import annotations

import numpy as np

PENDING = 65536  # gaps kept before they are reduced (their arrays are held until then: 512 KiB)


class DeferredTops:
    __slots__ = ("reqs", "gaps", "pending")

    def __init__(self) -> None:
        self.reqs: list = []
        self.gaps: list = []
        self.pending = 0

    def add(self, req, gaps: np.ndarray) -> None:
        """``req`` sampled through a run whose inner gaps are ``gaps`` (non-empty)."""
        self.reqs.append(req)
        self.gaps.append(gaps)
        self.pending += len(gaps)
        if self.pending >= PENDING:
            self.settle()

    def settle(self) -> None:
        """Fold each waiting run's largest gap into its request's ``max_itl_s``."""
        reqs, gaps = self.reqs, self.gaps
        if not reqs:
            return
        self.reqs, self.gaps, self.pending = [], [], 0
        starts = np.cumsum([0] + [len(g) for g in gaps[:-1]])
        tops = np.maximum.reduceat(np.concatenate(gaps), starts).tolist()
        for req, top in zip(reqs, tops):
            if top > req.max_itl_s:
                req.max_itl_s = top
