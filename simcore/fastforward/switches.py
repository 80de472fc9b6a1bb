"""Which fast paths a replica takes over plain stepping (simcore/stepping.py, the reference).

Each switch turns one optimisation off alone, so a divergence from the reference can be bisected
(tests/test_fast_forward_oracle.py runs the oracle comparison with each off in turn). With all of
them off a replica still advances runs of identical decode-only steps in one event.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FastForward:
    cohort: bool = True  # plain decodes advanced as a group (simcore/cohort.py), folded runs through their finishes
    chunked_runs: bool = True  # a prompt's chunks beside decodes in one run (simcore/fastforward/chunked.py)
    arrival_folds: bool = (
        True  # a sole replica's run goes on past an arrival the policy can plan (simcore/fastforward/arrival_folds.py)
    )
    deferred_finish: bool = True  # a run that ends with all of its requests finished takes no event at its end


def switches(fast_forward) -> FastForward | None:
    """``Simulation(fast_forward=…)``: True (every fast path), False (None: the reference loop), or
    a FastForward naming the switches."""
    if isinstance(fast_forward, FastForward):
        return fast_forward
    return FastForward() if fast_forward else None
