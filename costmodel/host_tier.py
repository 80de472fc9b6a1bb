"""A KV host tier's copies in a step's price: SGLang HiCache's load-back, device ← host over PCIe.

A request whose cached prefix was found on the host has it copied back before the step that
extends it; SGLang overlaps the copy with the forward layer by layer (cache_controller.py:
``start_loading`` records one event per layer on the host-to-device stream, and each layer's
attention waits for its own, ``LayerDoneCounter.wait_until``). With the copy of L layers taking
``load`` and the forward ``compute``, layer i runs once its copy is in and layer i−1 is done, so
the step lasts max(compute, load + compute / L): a copy shorter than the forward costs only when
its first layer is late, and a longer one sets the pace.

Bytes per GPU: the KV of the loaded tokens (each GPU holds its heads' share, ``kv_coef``) and, for
a hybrid model, one linear-attention state per loaded request (its recurrent state in fp32, as
SGLang keeps mamba states, and its conv state at the activation width), over the GPU's own host
link (``host_link_bandwidth``, one direction). Write-backups (device → host) run on their own
stream in the other direction and are not on the forward's path (``start_writing``); they are
counted, not priced.
"""

from __future__ import annotations

from .errors import require

STATE_BYTES = 4  # SGLang's mamba ssm state dtype for Qwen3-Next / Qwen3.5 (float32)


def host_link_bandwidth(hw) -> float:
    """Bytes/s one way between a GPU and host memory: the profile's ``host_link_bandwidth``, else
    its PCIe link (GT/s × lanes, 128b/130b coding)."""
    bw = float(hw.host_link_bandwidth or 0.0)
    if bw <= 0 and hw.pcie_gts:
        bw = hw.pcie_gts * 1e9 * hw.pcie_lanes * 128 / 130 / 8
    require(
        bw > 0,
        f"{hw.name}:host_link_bandwidth",
        bw,
        "a host KV tier needs the GPU's host link bandwidth in its hardware profile",
    )
    return bw


class WithHostLoads:
    """A cost model whose ``step_time`` waits for the step's load-backs (``pending()``: pool blocks
    loaded for this step, one entry per request); everything else is the base's."""

    def __init__(self, base, pending, block_tokens: int):
        self.base, self.pending = base, pending
        m, tp = base.model, max(1, base.tp)
        self.bw = host_link_bandwidth(base.hw)
        self.block_bytes = base.kv_coef * block_tokens
        self.state_bytes = (
            m.linear_layers * (m.linear_state_elems * STATE_BYTES + m.linear_conv_state_elems * m.b) / tp
            if m.linear_layers
            else 0.0
        )
        self.layers = m.L
        self.load_s_total = 0.0  # copy seconds priced so far
        self.exposed_s_total = 0.0  # what they added to steps

    def __getattr__(self, name):
        return getattr(self.base, name)

    def load_s(self, blocks: list[int]) -> float:
        return (sum(blocks) * self.block_bytes + len(blocks) * self.state_bytes) / self.bw

    def step_time(self, q_lens, kv_lens, *args, **kwargs) -> float:
        t = self.base.step_time(q_lens, kv_lens, *args, **kwargs)
        loads = self.pending()
        if not loads:
            return t
        load = self.load_s(loads)
        out = max(t, load + t / self.layers)
        self.load_s_total += load
        self.exposed_s_total += out - t
        return out
