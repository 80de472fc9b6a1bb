"""PCIe all-reduce / all-gather from NCCL's tuning model (costmodel/pcie.py), checked against the
formula computed here from the constants NVIDIA/nccl's src/graph/tuning.cc states."""

from __future__ import annotations

import pytest

from costmodel import load_hardware, load_model
from costmodel.errors import InputError
from costmodel.pcie import PcieNccl, link_gbps, ring_graph, uses_pcie
from costmodel.roofline import CostModel

# tuning.cc ncclTunerConstantsDefaults, µs: baseLat Ring (LL, Simple), hwLat[PCI][Ring] (LL, Simple)
RING_BASE = {"LL": 6.6, "Simple": 8.4}
RING_PCI = {"LL": 1.0, "Simple": 5.7}


def ring_allreduce_us(nbytes, n, bus_simple, ll_max):
    """NCCL's Ring all-reduce time, LL and Simple, the smaller (tree is slower at these sizes)."""
    nsteps = 2 * (n - 1)
    out = []
    for p, bus in (("LL", min(ll_max, bus_simple * 0.5)), ("Simple", bus_simple)):
        lat = RING_BASE[p] + nsteps * RING_PCI[p]
        out.append(lat + nbytes / (1e3 * bus * n / nsteps))
    return min(out)


def test_link_and_graph_from_nccl_topology():
    assert link_gbps(32, 16) == 48.0 and link_gbps(16, 16) == 24.0  # kvDictPciGen: 240, 120 x 16 / 80
    # Blackwell, Gen5: 45 (one channel), duplicated to 2 x 22.5, pass 2 raises to 2 x 24
    assert ring_graph(48.0, 12.0) == (2, 24.0)
    # Ada, Gen4: 20 (speedArrayIntra), under 25 so not duplicated
    assert ring_graph(24.0, 8.9) == (1, 20.0)
    # through an Intel root complex (PATH_PHB, 6/5 overhead): 40 -> 2 x 20, 24 no longer fits twice
    assert ring_graph(48.0, 12.0, 1.2) == (2, 20.0)


@pytest.mark.parametrize("nbytes", [10240, 1310720, 8 << 20])
def test_allreduce_equals_nccl_formula(nbytes):
    hw = load_hardware("rtx-pro-6000-server")
    p = PcieNccl.from_hardware(hw.replace(pcie_channel_bw=0.0), 2)  # NCCL's search speed alone
    want = ring_allreduce_us(nbytes, 2, 2 * 24.0, 282.0)  # llMaxBws Blackwell N1 = 2 x 141
    assert p.allreduce_us(nbytes)[0] == pytest.approx(want, rel=1e-12)
    # the shipped profile: each of the 2 channels at the measured 11.1 GB/s (pcie_channel_bw)
    c = PcieNccl.from_hardware(hw, 2)
    assert c.allreduce_us(nbytes)[0] == pytest.approx(ring_allreduce_us(nbytes, 2, 2 * 11.1, 282.0), rel=1e-12)
    q = PcieNccl.from_hardware(load_hardware("rtx4090"), 2)
    assert q.allreduce_us(nbytes)[0] == pytest.approx(ring_allreduce_us(nbytes, 2, 20.0, 87.7), rel=1e-12)


def test_four_gpus_and_allgather():
    p = PcieNccl.from_hardware(load_hardware("rtx-pro-6000"), 4)
    b = 1 << 20
    assert p.allreduce_us(b)[0] == pytest.approx(ring_allreduce_us(b, 4, 22.2, 282.0), rel=1e-12)
    # all-gather: nsteps = n - 1, algBw = busBw n / (n - 1), output bytes
    lat = RING_BASE["Simple"] + 3 * RING_PCI["Simple"]
    assert p.allgather_us(8 << 20)[0] == pytest.approx(lat + (8 << 20) / (1e3 * 22.2 * 4 / 3), rel=1e-12)


def test_measured_channel_rate_caps_the_search_speed():
    """``pcie_channel_bw`` lowers a channel's rate to the measured one, never raises it; the
    channel count stays the search's, and validate's line says where the rate came from."""
    hw = load_hardware("rtx-pro-6000-server")
    free = PcieNccl.from_hardware(hw.replace(pcie_channel_bw=0.0), 2)
    for cap, want in ((11.1e9, 11.1), (30e9, 24.0), (24e9, 24.0)):
        p = PcieNccl.from_hardware(hw.replace(pcie_channel_bw=cap), 2)
        assert (p.channels, p.bw_intra) == (free.channels, want)
        assert ("measured NCCL rate" in p.describe()) == (want < 24.0)
    big, small = 8 << 20, 64  # bandwidth-bound: slower by the ratio; latency-bound: nearly the same
    capped = PcieNccl.from_hardware(hw, 2)
    assert capped.allreduce_us(big)[0] > 2.0 * free.allreduce_us(big)[0] - 30.0
    assert capped.allreduce_us(small)[0] == pytest.approx(free.allreduce_us(small)[0], rel=1e-3)
    # the 4090 (no measured rate) keeps NCCL's search speed
    assert PcieNccl.from_hardware(load_hardware("rtx4090"), 2).bw_intra == 20.0


def test_p2p_and_shm_paths():
    hw = load_hardware("rtx-pro-6000-server").replace(pcie_channel_bw=0.0)  # NCCL's search speeds
    # behind a switch with P2P: PATH_PXB, P2P; the driver refusing P2P: SHM through the CPU
    p2p = PcieNccl.from_hardware(hw.replace(pcie_switch=True, host_cpu="intel"), 2)
    shm = PcieNccl.from_hardware(hw.replace(pcie_switch=True, host_cpu="intel", pcie_p2p=False), 2)
    assert (p2p.transport, shm.transport) == ("p2p", "shm")
    # NCCL's tables give both the same PCI latencies; SHM through an Intel CPU pays INTEL_P2P_OVERHEAD
    assert (p2p.channels * p2p.bw_intra, shm.channels * shm.bw_intra) == (48.0, 40.0)
    assert shm.allreduce_us(8 << 20)[0] > p2p.allreduce_us(8 << 20)[0]
    assert shm.allreduce_us(64)[0] == pytest.approx(p2p.allreduce_us(64)[0], rel=1e-3)
    # AMD with two GPUs: P2P up to PATH_SYS; Intel root ports: P2P only up to PXB, so SHM
    assert PcieNccl.from_hardware(hw.replace(host_cpu="amd"), 2).transport == "p2p"
    assert PcieNccl.from_hardware(hw.replace(host_cpu="intel"), 2).transport == "shm"
    assert PcieNccl.from_hardware(hw.replace(host_cpu="amd"), 4).transport == "shm"
    assert PcieNccl.from_hardware(load_hardware("rtx4090"), 2).transport == "shm"


def test_decode_step_grows_by_the_allreduce():
    m, hw = load_model("qwen3-32b"), load_hardware("rtx-pro-6000-server")
    one, two = CostModel(m, hw, 2), CostModel(m, hw.replace(pcie_gts=0.0), 2)
    q, kv = [1] * 64, [1000] * 64
    p = PcieNccl.from_hardware(hw, 2)
    assert p.bw_intra == 11.1  # the measured channel rate
    ar = 2 * m.L * p.allreduce_us(64 * m.H * m.b)[0] * 1e-6  # seed counting: 2L all-reduces
    assert one.allreduce_s(64) == pytest.approx(ar, rel=1e-12)
    grow = one.step_time(q, kv) - two.step_time(q, kv)
    assert grow == pytest.approx(ar - two.allreduce_s(64), rel=1e-9)
    f = CostModel(m, hw, 2, "faithful")
    assert f.gather_s(64) == pytest.approx(p.allgather_us(64 * m.vocab * m.b)[0] * 1e-6, rel=1e-12)


def test_measured_regimes_and_tp1_win():
    hw = load_hardware("rtx-pro-6000")
    assert not uses_pcie(hw, 1) and uses_pcie(hw, 2)
    assert not uses_pcie(hw.replace(allreduce_regimes={2: [1e-5, 5e10]}), 2)
    for name in ("h100", "h100-sxm", "a100-sxm", "b200"):
        assert not uses_pcie(load_hardware(name), 4)


def test_nvlink_profiles_unchanged_at_tp4():
    """h100 / h100-sxm keep the interconnect formula: bytes / bw + 2(tp-1) latency per call."""
    m = load_model("llama-3.1-70b")
    for name in ("h100", "h100-sxm"):
        hw = load_hardware(name)
        cm = CostModel(m, hw, 4)
        assert cm.pcie is None
        if not cm.ar_regimes:
            want = cm.ar_bytes_per_row * 64 / hw.interconnect_bandwidth + cm.ar_latency
            assert cm.allreduce_s(64) == want


def test_fields_validated():
    import dataclasses

    from costmodel.hardware import hardware_from_dict

    d = dataclasses.asdict(load_hardware("rtx4090"))
    assert hardware_from_dict(dict(d)).pcie_gts == 16
    for bad in (
        {"pcie_gts": 20.0},
        {"compute_capability": 0.0},
        {"host_cpu": "arm"},
        {"pcie_p2p": 1},
        {"pcie_channel_bw": -1.0},
    ):
        with pytest.raises(InputError):
            hardware_from_dict({**d, **bad})
