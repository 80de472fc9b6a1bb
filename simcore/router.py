"""Routers in front of the replicas: `router(request, replicas) -> replica index`.

round_robin        cycles through replicas
least_outstanding  fewest requests queued or running (vLLM production-stack / SGLang router "load")
least_kv           lowest KV-pool usage (used blocks / total, as of now)
prefix_affinity    requests sharing their first `affinity_blocks` block hashes go to the replica
                   that served that prefix last, unless it has `imbalance` more outstanding requests
                   than the least loaded one, then to the least loaded (SGLang cache-aware router)
"""

from __future__ import annotations

from costmodel.errors import require

ROUTERS = ("round_robin", "least_outstanding", "least_kv", "prefix_affinity")


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


def make_router(name: str):
    require(name in ROUTERS, "router", name, f"must be one of {', '.join(ROUTERS)}")
    factories = {
        "round_robin": RoundRobin,
        "least_outstanding": lambda: least_outstanding,
        "least_kv": lambda: least_kv,
        "prefix_affinity": PrefixAffinity,
    }
    return factories[name]()
