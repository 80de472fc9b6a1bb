"""KV transfers between a prefill and a decode replica: links, placement, and how transfers share.

A transfer of B bytes takes ``latency_s`` (posting the reads, the completion notification) and
then B bytes through the decode replica's link of the transfer's medium: NVLink when both
replicas sit in one node, the RDMA NICs otherwise. A link is a processor-sharing server: the n
transfers on it at a time each get 1/n of its bandwidth (RDMA reads of several requests on one
NIC interleave their work requests; no priority), so alone a transfer takes exactly
latency + B / bandwidth, and two of B bytes that start together both end at latency + 2B /
bandwidth. The prefill side's send link is not a second bottleneck here (one read per transfer,
paced by the reader).

Bandwidths are per GPU and a replica's link is min(tp_prefill, tp_decode) GPUs wide (each TP
rank reads its KV shard, NIXL's per-rank transfers). Placement: replicas fill nodes of
``gpus_per_node`` GPUs in order, prefill pool first; a replica never straddles two nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.errors import require

RDMA_BYTES_PER_S = 400e9 / 8  # one 400 Gb/s NIC per GPU (ConnectX-7, as in DGX/HGX H100 nodes)
LATENCY_S = 100e-6  # chunksim's assumption for posting a transfer and its completion notice


@dataclass(frozen=True)
class LinkConfig:
    """The transfer path's data: per-GPU bandwidths (bytes/s), per-transfer latency (s)."""

    rdma_bandwidth: float = RDMA_BYTES_PER_S
    nvlink_bandwidth: float = 0.0  # 0: the hardware profile's interconnect_bandwidth
    latency_s: float = LATENCY_S
    gpus_per_node: int = 8
    medium: str = "auto"  # auto (by placement), rdma, nvlink

    def __post_init__(self):
        require(self.rdma_bandwidth > 0, "--kv-link-bandwidth", self.rdma_bandwidth, "must be positive (bytes/s)")
        require(self.nvlink_bandwidth >= 0, "nvlink_bandwidth", self.nvlink_bandwidth, "must be >= 0 (bytes/s)")
        require(self.latency_s >= 0, "--kv-link-latency", self.latency_s, "must be >= 0 (s)")
        require(self.gpus_per_node > 0, "--gpus-per-node", self.gpus_per_node, "must be positive")
        require(self.medium in ("auto", "rdma", "nvlink"), "--kv-link", self.medium, "must be auto, rdma or nvlink")


def node_of(tps: list[int], gpus_per_node: int) -> list[int]:
    """The node of each replica (tp GPUs each, in order), none straddling two nodes."""
    out, gpu = [], 0
    for tp in tps:
        require(tp <= gpus_per_node, "tp", tp, f"exceeds --gpus-per-node ({gpus_per_node}): a replica spans nodes")
        if gpu % gpus_per_node + tp > gpus_per_node:
            gpu += gpus_per_node - gpu % gpus_per_node
        out.append(gpu // gpus_per_node)
        gpu += tp
    return out


class SharedLink:
    """One processor-sharing link. Virtual time V (bytes served to each active transfer so far)
    grows at bandwidth / n; a transfer that joined at V0 with B bytes ends when V = V0 + B."""

    def __init__(self, env, bandwidth: float):
        self.env, self.bandwidth = env, float(bandwidth)
        self.v, self.t = 0.0, 0.0
        self.active: dict = {}  # transfer id -> (finish tag, callback), in joining order
        self._gen = 0
        self._next = 0

    def start(self, nbytes: float, done) -> None:
        """Join now with `nbytes`; `done()` is called when they are through."""
        self._advance()
        self._next += 1
        self.active[self._next] = (self.v + float(nbytes), done)
        self._reschedule()

    def _advance(self) -> None:
        now = self.env.now
        if self.active:
            self.v += (now - self.t) * self.bandwidth / len(self.active)
        self.t = now

    def _reschedule(self) -> None:
        self._gen += 1
        if not self.active:
            return
        tag = min(f for f, _ in self.active.values())
        at = self.t + max(tag - self.v, 0.0) * len(self.active) / self.bandwidth
        gen = self._gen
        self.env.at(at).callbacks.append(lambda _e: self._fire(gen, tag))

    def _fire(self, gen: int, tag: float) -> None:
        if gen != self._gen:  # a join since then moved the next completion
            return
        self.t, self.v = self.env.now, tag  # exact: no drift from adding shares
        done = [k for k, (f, _) in self.active.items() if f <= tag]
        callbacks = [self.active.pop(k)[1] for k in done]
        self._reschedule()
        for cb in callbacks:
            cb()


class Links:
    """Every decode replica's links, one per medium, created on first use."""

    def __init__(self, env, cfg: LinkConfig, nvlink_per_gpu: float, prefill_tps, decode_tps):
        self.env, self.cfg = env, cfg
        self.nvlink = cfg.nvlink_bandwidth or nvlink_per_gpu
        nodes = node_of(list(prefill_tps) + list(decode_tps), cfg.gpus_per_node)
        self.prefill_node, self.decode_node = nodes[: len(prefill_tps)], nodes[len(prefill_tps) :]
        self.prefill_tps, self.decode_tps = list(prefill_tps), list(decode_tps)
        self.links: dict = {}

    def medium(self, p: int, d: int) -> str:
        if self.cfg.medium != "auto":
            return self.cfg.medium
        return "nvlink" if self.prefill_node[p] == self.decode_node[d] else "rdma"

    def bandwidth(self, p: int, d: int) -> float:
        per_gpu = self.nvlink if self.medium(p, d) == "nvlink" else self.cfg.rdma_bandwidth
        require(
            per_gpu > 0, "nvlink_bandwidth", per_gpu, "the hardware profile has no interconnect_bandwidth; give one"
        )
        return per_gpu * min(self.prefill_tps[p], self.decode_tps[d])

    def transfer(self, p: int, d: int, nbytes: float, done) -> None:
        """From prefill replica p to decode replica d: latency, then the shared link."""
        key = (d, self.medium(p, d))
        link = self.links.get(key)
        if link is None:
            link = self.links[key] = SharedLink(self.env, self.bandwidth(p, d))
        if self.cfg.latency_s > 0:
            self.env.at(self.env.now + self.cfg.latency_s).callbacks.append(lambda _e: link.start(nbytes, done))
        else:
            link.start(nbytes, done)
