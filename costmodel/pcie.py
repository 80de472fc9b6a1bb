"""NCCL collectives between GPUs on PCIe (no NVLink), priced from NCCL's own tuning model and the
machine's PCIe topology: no run-tuned constant.

Facts read from NVIDIA/nccl (master, 2026-06; facts only, no code):

- ``src/graph/tuning.cc``, ``ncclTunerConstantsDefaults`` and ``ncclTopoTuneModel``: a collective's
  time is ``latency + nBytes / algBw`` (``ncclTopoGetAlgoTime``), per (algorithm, protocol). Ring:
  latency = baseLat[Ring][p] + nsteps · hwLat[PCI][Ring][p] (nsteps = 2(n-1) for an all-reduce,
  n-1 for an all-gather); Tree all-reduce: baseLat[Tree][p] + 2 (n-1) · hwLat[PCI][Tree][p]. busBw =
  nChannels · bwIntra; Ring/LL: min(llMaxBw, busBw / 2); Tree all-reduce: min(0.92 busBw,
  nChannels · perChMaxTreeBw), and for LL min(that / 3.8, llMaxBw); algBw = busBw · n / nsteps for
  Ring, busBw / 2 for Tree, which ``ncclTopoGetAlgoTime`` scales by ``treeCorrectionFactor`` by size.
  LL128 is enabled only where the ring's path type is at most PATH_NVB (NVLink): never on PCIe.
  ``hwLat`` is indexed by NVLINK / PCI / NET only: NCCL's tables give P2P and SHM (host-staged)
  transports the same latencies; they differ through the graph below.
- ``src/graph/topo.cc``, ``ncclTopoAddPci`` / ``kvDictPciGen``: a PCIe link's bandwidth is
  width · rate / 80 GB/s, rate in 100 Mb/s per lane (16 GT/s -> 120, 32 GT/s -> 240): Gen4 x16 =
  24 GB/s, Gen5 x16 = 48 GB/s.
- ``src/graph/paths.cc``, ``ncclTopoCheckP2p``: P2P is used only up to PATH_PXB (GPUs behind a
  PCIe switch), or up to PATH_SYS on AMD x86 with at most two GPUs; and only where NVML reports P2P
  read and write OK (``p2pStatusRead/Write``). Otherwise ``ncclTopoComputePaths`` diverts the
  traffic through the CPU (``addInterStep``): the SHM transport, path type PATH_PHB.
- ``src/graph/search.cc``, ``followPath``: a PATH_PHB path through an Intel x86 CPU consumes
  ``INTEL_P2P_OVERHEAD`` = 6/5 of its bandwidth on the PCIe links (topo.h). ``ncclTopoCompute``:
  the ring search starts at the largest entry of the speed array (``speedArrayIntra``,
  ``sm90SpeedArrayIntra``, ``sm100SpeedArrayIntra`` by compute capability) not above the path
  bandwidth, lowers it until a channel fits, ``ncclTopoDupChannels`` doubles the channels at half
  the speed where bwIntra >= 25, and pass 2 raises the speed while the same channels still fit.

What a channel carries on a real machine: a channel is one thread block copying over PCIe, so
its rate is bounded by the loads it keeps in flight, not only by the search's speed. Where a
profile has a measured NCCL bus bandwidth per channel (``pcie_channel_bw``: an ``all_reduce_perf``
busbw at a large size divided by the default channel count), each channel carries at most that.
RTX PRO 6000 Server cards direct-attached to dual AMD Turin: 22.2 GB/s busbw at 32 MB with NCCL's
default channels, 37.6 GB/s with ``NCCL_MIN_NCHANNELS=8`` (voipmonitor/rtx6kpro
``hardware/pcie-bandwidth.md``, "NCCL AllReduce Bus Bandwidth"; ``optimization/nccl-tuning.md``: the
default is 2 channels there, as ``ring_graph`` finds for a Gen5 x16 link): more channels on the same links
run faster, so the default's two channels, not the links, set the 22.2, 11.1 GB/s each, against
the 24 GB/s NCCL's search assumes.

Engine side (vllm/distributed/device_communicators/custom_all_reduce.py, ``CustomAllreduce``):
the custom all-reduce is refused for more than two GPUs that are not fully NVLink-connected, and
for any group where the P2P test (``_can_p2p``, ``gpu_p2p_access_check``) fails, as it does on
GeForce cards, whose driver disables P2P; there vLLM runs NCCL (PyNCCL), which this module prices.
At two GPUs with working P2P (RTX PRO 6000 Blackwell) vLLM runs its own one-shot kernel for
messages under 8 MiB, which NCCL's tables do not describe: this module still prices NCCL there
(``PcieNccl.describe`` says so)."""

from __future__ import annotations

import math
from dataclasses import dataclass

# tuning.cc, ncclTunerConstantsDefaults: µs, per protocol (LL, LL128, Simple)
BASE_LAT = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4)}
HW_LAT_PCI = {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7)}
LL, LL128, SIMPLE = 0, 1, 2
# llMaxBws[compcap index][0] and perChMaxTreeBws[compcap index][0] (one node), GB/s
LL_MAX_BW = {"volta": 39.0, "ampere": 87.7, "hopper": 141.0, "blackwell": 282.0}
PER_CH_MAX_TREE_BW = {"volta": 26.5, "ampere": 24.0, "hopper": 38.7, "blackwell": 70.0}
# tuning.cc, treeCorrectionFactor[protocol][log2(nBytes / 64)]
# fmt: off
TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.6, 0.5, 0.4, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.8, 0.9, 0.9, 0.9, 0.9, 1.0, 1.0, 1.0),
    (0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5, 0.5, 0.5, 0.5, 0.6, 0.7, 0.8, 0.7, 0.7, 0.8, 0.9, 0.9, 0.9),
)
# fmt: on
# search.cc: the ring search's speeds (GB/s per channel) by compute capability
SPEEDS = {
    "sm100": (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0),
    "sm90": (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
    "default": (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
}
PCI_GEN_RATE = {2.5: 15, 5.0: 30, 8.0: 60, 16.0: 120, 32.0: 240, 64.0: 480}  # topo.cc kvDictPciGen
INTEL_P2P_OVERHEAD = 6.0 / 5.0  # topo.h
MAX_RING_CHANNELS = 16  # init.cc: the ring graph's maxChannels, MAXCHANNELS / 2
CUSTOM_AR_MAX_BYTES = 8 * 1024 * 1024  # vLLM CustomAllreduce max_size (8192 * 1024)


def link_gbps(gts: float, lanes: int) -> float:
    """NCCL's PCIe link bandwidth, GB/s (topo.cc ``ncclTopoAddPci``)."""
    return lanes * PCI_GEN_RATE[float(gts)] / 80.0


def compcap_index(cc: float) -> str:
    """tuning.cc's compcap index (minCompCap >= 100 Blackwell, >= 90 Hopper, >= 80 Ampere)."""
    c = round(cc * 10)
    return "blackwell" if c >= 100 else "hopper" if c >= 90 else "ampere" if c >= 80 else "volta"


def ring_graph(link: float, cc: float, overhead: float = 1.0) -> tuple[int, float]:
    """(nChannels, bwIntra GB/s) the ring search settles on for GPUs that each reach the others
    over one PCIe link of ``link`` GB/s (search.cc ``ncclTopoCompute``, ``ncclTopoDupChannels``),
    each channel consuming ``overhead`` x its speed on the links (``followPath``)."""
    c = round(cc * 10)
    speeds = SPEEDS["sm100" if c >= 100 else "sm90" if c >= 90 else "default"]

    def fits(s: float) -> int:  # channels at speed s on one link each way (SUB_ROUND: to 1e-3)
        return min(MAX_RING_CHANNELS, int(math.floor(round(link / (s * overhead), 3) + 1e-9)))

    i = next((k for k, s in enumerate(speeds) if s <= link), len(speeds) - 1)
    while i < len(speeds) - 1 and fits(speeds[i]) == 0:
        i += 1
    s, n = speeds[i], max(1, fits(speeds[i]))
    if s >= 25.0 and not (c > 80 and s < 50.0 and n > 4):  # ncclTopoDupChannels
        n2 = min(2 * n, MAX_RING_CHANNELS)
        s, n = s / math.ceil(n2 / n), n2
    i = next((k for k, v in enumerate(speeds) if v <= s), len(speeds) - 1)  # pass 2: raise the speed
    while i > 0 and fits(speeds[i - 1]) >= n:
        i -= 1
    if speeds[i] > s:
        s = speeds[i]
    return n, s


@dataclass(frozen=True)
class PcieNccl:
    """NCCL on ``n`` GPUs of one PCIe fabric: ``transport`` "p2p" or "shm", the ring graph
    (``channels`` x ``bw_intra`` GB/s) and the GPUs' compcap index."""

    n: int
    transport: str
    channels: int
    bw_intra: float
    arch: str
    link: float
    driver_p2p: bool = False
    channel_cap: float = 0.0  # GB/s: the measured rate that capped bw_intra (0: none)

    @classmethod
    def from_hardware(cls, hw, n: int) -> PcieNccl:
        """From a profile's PCIe fields (``pcie_gts``, ``pcie_lanes``, ``pcie_p2p``,
        ``pcie_switch``, ``host_cpu``, ``compute_capability``)."""
        link = link_gbps(hw.pcie_gts, hw.pcie_lanes)
        # paths.cc ncclTopoCheckP2p: P2P up to PXB (a switch), or SYS on AMD with <= 2 GPUs; NVML must allow it
        p2p = bool(hw.pcie_p2p) and (bool(hw.pcie_switch) or (hw.host_cpu == "amd" and n <= 2))
        phb = not (p2p and hw.pcie_switch)  # through the CPU root complex (P2P there, or SHM)
        over = INTEL_P2P_OVERHEAD if (phb and hw.host_cpu == "intel") else 1.0
        ch, bw = ring_graph(link, hw.compute_capability, over)
        cap = hw.pcie_channel_bw / 1e9 if hw.pcie_channel_bw and hw.pcie_channel_bw / 1e9 < bw else 0.0
        arch = compcap_index(hw.compute_capability)
        return cls(n, "p2p" if p2p else "shm", ch, cap or bw, arch, link, bool(hw.pcie_p2p), cap)

    def _ring(self, p: int, nsteps: int) -> tuple[float, float]:
        """(latency µs, algBw GB/s) of a ring collective with ``nsteps`` steps, protocol p."""
        bus = self.channels * self.bw_intra
        if p == LL:
            bus = min(LL_MAX_BW[self.arch], bus * 0.5)
        return BASE_LAT["ring"][p] + nsteps * HW_LAT_PCI["ring"][p], bus * self.n / nsteps

    def _tree(self, p: int) -> tuple[float, float]:
        """(latency µs, algBw GB/s before the size correction) of a Tree all-reduce."""
        bus = min(self.channels * self.bw_intra * 0.92, self.channels * PER_CH_MAX_TREE_BW[self.arch])
        if p == LL:
            bus = min(bus / 3.8, LL_MAX_BW[self.arch])
        return BASE_LAT["tree"][p] + 2 * (self.n - 1) * HW_LAT_PCI["tree"][p], bus * 0.5

    def allreduce_us(self, nbytes: float) -> tuple[float, str]:
        """(µs, "algorithm/protocol") of the fastest all-reduce of ``nbytes`` by NCCL's model."""
        best = (math.inf, "")
        for p, name in ((LL, "LL"), (SIMPLE, "Simple")):  # LL128: off on PCIe
            lat, bw = self._ring(p, 2 * (self.n - 1))
            best = min(best, (lat + nbytes / (1e3 * bw), f"Ring/{name}"))
            lat, bw = self._tree(p)
            log = int(nbytes) >> 6
            k = log.bit_length() - 1 if log > 0 else -1
            if 0 <= k < 23:
                bw *= TREE_CORRECTION[p][k]
            best = min(best, (lat + nbytes / (1e3 * bw), f"Tree/{name}"))
        return best

    def allgather_us(self, nbytes: float) -> tuple[float, str]:
        """(µs, protocol) of a ring all-gather whose output is ``nbytes`` (enqueue.h
        ``ncclFuncMaxSendRecvCount``: nRanks x the per-rank count); PAT needs one GPU per node."""
        return min(
            (lat + nbytes / (1e3 * bw), f"Ring/{name}")
            for p, name in ((LL, "LL"), (SIMPLE, "Simple"))
            for lat, bw in [self._ring(p, self.n - 1)]
        )

    def describe(self) -> str:
        """One line for validate: the model and what it leaves out."""
        note = ""
        if self.driver_p2p and self.n == 2:
            note = "; vLLM's custom all-reduce (P2P, tp 2) would take messages under 8 MiB, priced here as NCCL"
        return (
            f"PCIe all-reduce from NCCL's tuning model: {self.n} GPUs over {self.transport.upper()}, "
            f"ring {self.channels} x {self.bw_intra:g} GB/s"
            + (" (the profile's measured NCCL rate a channel)" if self.channel_cap else "")
            + f" (link {self.link:g} GB/s), "
            f"PCI hwLat Ring/Simple {HW_LAT_PCI['ring'][SIMPLE]} µs{note}"
        )


def uses_pcie(hw, tp: int) -> bool:
    """Whether ``CostModel`` prices this profile's tp with ``PcieNccl`` (a PCIe profile, tp > 1,
    and no measured all-reduce regimes for that tp)."""
    return tp > 1 and hw.pcie_gts > 0 and not (hw.allreduce_regimes or {}).get(tp)
