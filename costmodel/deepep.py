"""The MoE all-to-all of expert parallelism: DeepEP's dispatch and combine, and NCCL's all-to-all.

Each of T tokens on a rank goes to its k experts (E/ep per rank, R GPUs a node, N = ep/R nodes).
What crosses the slowest link per token (DeepEP, ``deep_ep/buffer.py``; its README's figures):
  normal mode (prefill)  one copy per distinct remote *node* (RDMA, then NVLink forwarding inside
                         it), or, inside one node, one per distinct remote GPU:
                           copies = (G-1)·(1 - C(E - E/G, k)/C(E, k)), G = N (or R when N = 1)
  low-latency (decode)   one copy per routed expert off this GPU (no de-duplication):
                           copies = k·(G-1)/G, the same-node ones over NVLink (DeepEP PR #173,
                           May 2025; ``allow_nvlink_for_low_latency_mode``, on in the tables the
                           constants were fitted to: their one-node rows run at NVLink rates).
                           Before it, every copy went over RDMA, same-node ones included (DeepEP
                           issues #22, #164): copies = k·(ep-1)/ep (``ll_nvlink=False``)
Dispatch sends fp8 activations with one fp32 scale per 128 (H + 4H/128 bytes), combine sends
bf16 (2H bytes). A direction takes
  t = t0 + hop·log2 N + T·copies·bytes/bw,   bw = 1/(1/(c·sms) + 1/B)   (normal mode over RDMA)
the RDMA rate limited by the SMs DeepEP gives it (``sms``; each SM pair drives one channel) and
by the NIC; inside one node the NVLink rate ``bw_intra``. ``t0`` is the kernel's launch and
notify round. Fitted per mode and direction in ``calibration/wideep_fit.py``; figures in
docs/kernel-notes.md.

Without DeepEP (``nccl``): ncclAllToAll of the routed copies, (ep-1)/ep of them off the GPU at the
profile's interconnect bandwidth plus one latency per peer.
"""

from __future__ import annotations

from math import comb

import numpy as np

from .wideep import constants

PARAMS = ("t0_intra", "bw_intra", "t0", "hop", "c_sm", "q", "bw", "gamma")
UNITS = {"t0_intra": "s", "bw_intra": "B/s", "t0": "s", "hop": "s", "c_sm": "B/s", "q": "1", "bw": "B/s", "gamma": "1"}
SHARPNESS = 4.0  # the SM-bound and link-bound rates meet in a p-norm this sharp (measured: a near-hard knee)
MODES = ("normal", "low_latency")
DEFAULT_SMS = 20  # deep_ep.Buffer.num_sms, what SGLang runs normal mode with
SCALE_BLOCK = 128  # fp8 dispatch: one fp32 scale per 128 activations


def dispatch_bytes(hidden: int) -> float:
    """Bytes of one token's dispatch copy: fp8 activations and their per-128 fp32 scales."""
    return hidden + 4.0 * hidden / SCALE_BLOCK


def combine_bytes(hidden: int) -> float:
    """Bytes of one token's combine copy: bf16 activations."""
    return 2.0 * hidden


def distinct_remote(groups: int, k: int, experts: int) -> float:
    """Expected distinct groups other than one's own that a token's k experts (drawn without
    replacement from E, E/G per group) fall in: (G-1)·(1 - C(E - E/G, k)/C(E, k))."""
    if groups <= 1:
        return 0.0
    per = experts // groups
    miss = comb(experts - per, k) / comb(experts, k) if experts - per >= k else 0.0
    return (groups - 1) * (1.0 - miss)


def copies(mode: str, nodes: int, gpus_per_node: int, k: int, experts: int, ep: int = 0) -> float:
    """Per token, the copies that cross the slowest link (module docstring). ``ep`` > 0: low-latency
    mode without NVLink, every copy bound for another of the ``ep`` GPUs over RDMA."""
    g = nodes if nodes > 1 else gpus_per_node
    if mode == "normal":
        return distinct_remote(g, k, experts)
    if ep:
        return k * (ep - 1) / ep
    return k * (g - 1) / g


def a2a_time(tokens, nodes, sms, copies, nbytes, params: dict):
    """Seconds of one DeepEP direction (arrays or floats): ``tokens`` per rank, ``copies`` per token
    across the slowest link, ``nbytes`` per copy; ``sms`` matters to normal mode across nodes only
    (c_sm > 0), where the SMs' work grows as copies^q and the link's as copies."""
    p = params
    nodes, tokens, copies = (np.asarray(x, float) for x in (nodes, tokens, copies))
    inter = nodes > 1
    link = tokens * copies * nbytes / (p["bw"] * (2.0 / np.maximum(nodes, 2.0)) ** p.get("gamma", 0.0))
    if p.get("c_sm", 0.0) > 0:
        sm = tokens * np.maximum(copies, 1.0) ** p["q"] * nbytes / (p["c_sm"] * np.maximum(np.asarray(sms, float), 1.0))
        link = (sm**SHARPNESS + link**SHARPNESS) ** (1.0 / SHARPNESS)
    t_inter = p["t0"] + p["hop"] * np.log2(np.maximum(nodes, 1.0)) + link
    return np.where(inter, t_inter, p["t0_intra"] + tokens * copies * nbytes / p["bw_intra"])


def nccl_alltoall_time(
    tokens: float, k: int, ep: int, bytes_per_copy: float, bandwidth: float, latency: float
) -> float:
    """ncclAllToAll of T·k routed copies: (ep-1)/ep of them leave the GPU, one latency per peer."""
    if ep <= 1:
        return 0.0
    return tokens * k * (ep - 1) / ep * bytes_per_copy / bandwidth + (ep - 1) * latency


def layer_a2a_s(
    rows_per_gpu, peers: int, k: int, E: int, H: int, hw, nodes: int, mode: str | None, ll_nvlink: bool = True
):
    """(dispatch, combine) seconds of one MoE layer moving ``rows_per_gpu`` tokens per GPU: DeepEP's
    fitted kernels in ``mode`` ("normal" or "low_latency"), or NCCL's all-to-all over ``peers`` GPUs
    when ``mode`` is None; ``ll_nvlink`` as in ``copies``."""
    if mode is None:
        bw, lat = hw.interconnect_bandwidth, hw.interconnect_latency_s
        return tuple(
            nccl_alltoall_time(rows_per_gpu, k, peers, nb, bw, lat) for nb in (dispatch_bytes(H), combine_bytes(H))
        )
    c = copies(mode, nodes, hw.gpus_per_node, k, E, 0 if ll_nvlink else peers)
    return tuple(
        float(a2a_time(rows_per_gpu, nodes, DEFAULT_SMS, c, nb, constants()[f"deepep_{mode}_{way}"]))
        for way, nb in (("dispatch", dispatch_bytes(H)), ("combine", combine_bytes(H)))
    )
