"""Routers in front of the replicas: `router(request, replicas) -> replica index`.

round_robin        cycles through replicas
least_outstanding  fewest requests queued or running (vLLM production-stack / SGLang router "load")
least_kv           lowest KV-pool usage (used blocks / total, as of now)
prefix_affinity    requests sharing their first `affinity_blocks` block hashes go to the replica
                   that served that prefix last, unless it has `imbalance` more outstanding requests
                   than the least loaded one, then to the least loaded (SGLang cache-aware router)
vllm_dp            vLLM's own data-parallel front end (VllmDPBalancer); with a MoE model the
                   replicas are one engine's DP ranks, stepped in lockstep (simcore/data_parallel.py)
"""

from __future__ import annotations

from costmodel.errors import require

ROUTERS = ("round_robin", "least_outstanding", "least_kv", "prefix_affinity", "vllm_dp")


def _least(replicas, key) -> int:
    return min(range(len(replicas)), key=lambda i: (key(replicas[i]), i))


class RoundRobin:
    def __init__(self):
        self.next = 0

    def __call__(self, req, replicas) -> int:
        i = self.next % len(replicas)
        self.next += 1
        return i


def least_outstanding(req, replicas) -> int:
    """The first replica with the fewest outstanding (``outstanding``: requests routed there and
    not finished by now): the first with none ends the search, as nobody has fewer (most replicas
    of a lightly loaded cluster are idle)."""
    best, pick = 1 << 62, 0
    for i, r in enumerate(replicas):
        n = r.outstanding
        if n < best:
            if not n:
                return i
            best, pick = n, i
    return pick


def least_kv(req, replicas) -> int:
    return _least(replicas, lambda r: (r.kv_usage(), r.outstanding))


least_kv.reads_kv_usage = True  # type: ignore[attr-defined]  # a replica then applies every finish when it happens


class PrefixAffinity:
    def __init__(self, affinity_blocks: int = 4, imbalance: int = 32):
        self.affinity_blocks, self.imbalance = affinity_blocks, imbalance
        self.owner: dict = {}

    def __call__(self, req, replicas) -> int:
        least = least_outstanding(req, replicas)
        if not req.block_hashes:
            return least
        key = tuple(req.block_hashes[: self.affinity_blocks])
        i = self.owner.get(key)
        if i is None or replicas[i].outstanding - replicas[least].outstanding > self.imbalance:
            i = least
        self.owner[key] = i
        return i


class VllmDPBalancer:
    """vLLM 0.33's choice of data-parallel rank, ``DPLBAsyncMPClient.get_core_engine_for_request``
    (vllm/v1/engine/core_client.py), for one API-server client: the lowest
    score = max(in flight, waiting + running) + waiting · 6 · max(0, kv usage − 0.5), scanning from a
    start index that rotates by one per request (ties go to the first in scan order). waiting,
    running and kv usage are the coordinator's snapshot, published at most every 100 ms
    (``DPCoordinatorProc``'s ``min_stats_update_interval_ms``, vllm/v1/engine/coordinator.py); here
    a snapshot is taken at the first routing decision 100 ms or more after the last one, and the
    front end adds one to the chosen rank's waiting count until the next (as vLLM does). In flight:
    requests sent to the rank and not finished (exact, ``engine_inflight``)."""

    reads_kv_usage = True  # it reads queue lengths and KV usage as of the arrival
    needs_stepping = True  # the reference loop's queues are exact at every instant

    def __init__(self, interval_s: float = 0.1):
        self.interval_s, self.start, self.taken_s = interval_s, 0, -float("inf")
        self.lockstep = None  # the group step's price when the replicas are a MoE engine's DP ranks
        self.counts: list[list[float]] = []

    def __call__(self, req, replicas) -> int:
        now = req.arrival_s
        if now - self.taken_s >= self.interval_s or len(self.counts) != len(replicas):
            # waiting: the scheduler's queue and the arrivals not yet moved into it
            # running: with requests finished in the step just run, held until the next schedule()
            # under async scheduling (SchedulerState.finished), as Scheduler.running still holds them
            self.counts = [
                [len(r.state.waiting) + len(r.inbox), len(r.state.running) + len(r.state.finished), _usage(r)]
                for r in replicas
            ]
            self.taken_s = now
        # in flight: the front end hears of a finish when its output is processed (after that schedule())
        return self.pick([r.outstanding + len(r.state.finished) for r in replicas])

    def pick(self, inflight: list[int]) -> int:
        """The rank for the next request given the snapshot ``counts`` ([waiting, running, kv usage]
        per rank) and each rank's requests in flight (tests/conformance: against vLLM's own code)."""
        n, best, pick = len(inflight), float("inf"), 0
        for i in range(n):
            idx = (self.start + i) % n
            waiting, running, kv = self.counts[idx]
            score = max(inflight[idx], waiting + running)
            if waiting:
                score += waiting * 6.0 * max(0.0, kv - 0.5)
            if score < best:
                best, pick = score, idx
        self.counts[pick][0] += 1
        self.start = (self.start + 1) % n
        return pick


def _usage(replica) -> float:
    """vLLM's ``BlockPool.get_usage`` to the bit: 1 − free / (blocks less the null block); the
    balancer's ties (a score of 2 + 1.0 against 3.0) turn on its rounding."""
    pool = replica.state.pool
    return 1.0 - pool.available / pool.total


def make_router(name: str):
    require(name in ROUTERS, "router", name, f"must be one of {', '.join(ROUTERS)}")
    factories = {
        "round_robin": RoundRobin,
        "least_outstanding": lambda: least_outstanding,
        "least_kv": lambda: least_kv,
        "prefix_affinity": PrefixAffinity,
        "vllm_dp": VllmDPBalancer,
    }
    return factories[name]()
