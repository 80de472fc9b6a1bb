"""Scenarios for the PD conformance check (no vLLM needed to build them): the random vLLM scenarios
(Scheduler or AsyncScheduler, no prefix caching) with each request given a role and a transfer time.

Roles: "L" a plain local request; "D" decode side (``do_remote_prefill``: its prompt's KV is
loaded, finished_recving ``delay`` steps after the schedule() that started the load); "P"
prefill side (``do_remote_decode``, max_tokens 1: its blocks are freed by finished_sending
``delay`` steps after the step that finished it). Delays are whole steps, at least 1.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from vllm_scenarios import VllmScenario, random_scenario

CONFIGS = {
    # name: (async scheduling, KV pool, role mix: probabilities of L, D, P, longest transfer in steps)
    "pd-decode-ample": (False, "ample", (0.3, 0.7, 0.0), 12),
    "pd-decode-tight": (False, "tight", (0.3, 0.7, 0.0), 12),
    "pd-prefill-tight": (False, "tight", (0.3, 0.0, 0.7), 12),
    "pd-mixed-tight": (False, "tight", (0.3, 0.4, 0.3), 30),
    "pd-mixed-mixed": (False, "mixed", (0.2, 0.4, 0.4), 6),
    "pd-async-decode-tight": (True, "tight", (0.3, 0.7, 0.0), 12),
    "pd-async-mixed-tight": (True, "tight", (0.3, 0.4, 0.3), 30),
    "pd-async-mixed-mixed": (True, "mixed", (0.2, 0.4, 0.4), 6),
}


@dataclass(frozen=True)
class PDScenario:
    base: VllmScenario
    roles: tuple  # per request: "L" | "D" | "P"
    delays: tuple  # per request: transfer steps (D: load start -> finished_recving; P: finish -> finished_sending)

    @property
    def label(self) -> str:
        return f"{self.base.label} roles={''.join(self.roles)} delays={list(self.delays)}"


def random_pd_scenario(rng: np.random.Generator, index: int, async_: bool, pool: str, mix, longest: int) -> PDScenario:
    sc = random_scenario(rng, index, async_, pool, False)
    n = len(sc.requests)
    roles = tuple(str(r) for r in rng.choice(["L", "D", "P"], size=n, p=list(mix)))
    delays = tuple(int(d) for d in rng.integers(1, longest + 1, size=n))
    reqs = tuple((a, p, 1 if role == "P" else m) for (a, p, m), role in zip(sc.requests, roles))
    return PDScenario(replace(sc, requests=reqs), roles, delays)


def random_pd_scenarios(config: str, count: int, seed: int = 0) -> list[PDScenario]:
    async_, pool, mix, longest = CONFIGS[config]
    rng = np.random.default_rng([seed, 200 + list(CONFIGS).index(config)])
    return [random_pd_scenario(rng, i, async_, pool, mix, longest) for i in range(count)]
