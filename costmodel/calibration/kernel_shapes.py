"""How kernels map onto the GPU: row-tile padding of GEMMs and waves of one-block-per-row kernels."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Device:
    """The GPU constants the row-kernel (norm) model needs; documented, not fitted.
    Default: H100 SXM5 (NVIDIA H100 Tensor Core GPU Architecture whitepaper: 132 SMs, 50 MB L2;
    CUDA C Programming Guide, compute capability 9.0: 2048 resident threads and 32 blocks per SM,
    1024 threads per block)."""

    name: str = "h100-sxm"
    sms: int = 132
    threads_per_sm: int = 2048
    max_blocks_per_sm: int = 32
    max_block_threads: int = 1024
    l2_bytes: float = 50e6

    def rows_per_wave(self, width) -> np.ndarray:
        """Rows (one block each, min(width, 1024) threads) the GPU runs at once; width ≤ 0
        (unknown) is taken as a full 1024-thread block."""
        w = np.asarray(width, float)
        threads = np.where(w > 0, np.minimum(w, self.max_block_threads), self.max_block_threads)
        per_sm = np.clip(np.floor(self.threads_per_sm / threads), 1, self.max_blocks_per_sm)
        return self.sms * per_sm

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "sms": self.sms,
            "threads_per_sm": self.threads_per_sm,
            "max_blocks_per_sm": self.max_blocks_per_sm,
            "max_block_threads": self.max_block_threads,
            "l2_bytes": self.l2_bytes,
        }


H100 = Device()


def padded_flops(F: np.ndarray, m: np.ndarray, tile) -> np.ndarray:
    """F scaled from m rows to ⌈m/tile⌉·tile rows (rows m ≤ 0 are left as they are); tile may be
    an array (one per row)."""
    if np.all(np.asarray(tile) <= 1):
        return F
    m = np.asarray(m, float)
    return np.where(m > 0, F * np.ceil(m / tile) * tile / np.where(m > 0, m, 1.0), F)


def row_waves(df: pd.DataFrame, device: Device = H100) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(waves w, wave-padded bytes B_w, L2-resident?) of one-block-per-row kernels: rows m, row
    width n (elements), working set = bytes."""
    m, B = df["m"].to_numpy(float), df["bytes"].to_numpy(float)
    R = device.rows_per_wave(df["n"].to_numpy(float) if "n" in df.columns else np.zeros_like(m))
    w = np.ceil(np.maximum(m, 1.0) / R)
    return w, padded_flops(B, m, R), B <= device.l2_bytes
