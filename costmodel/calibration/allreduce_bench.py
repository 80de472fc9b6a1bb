"""Measure all-reduce across GPUs with torch.distributed: one process per GPU (NCCL), or per CPU
worker (gloo, so the same code runs and is tested without GPUs).

Every rank all-reduces a float16 tensor (float32 on gloo) of each size; after a barrier the
slowest rank's median over repeats is the collective's time (an all-reduce ends when the last rank
does). Sizes are bytes; rows are the tidy table's all-reduce rows (bytes = 2(n-1)/n · size).
"""

from __future__ import annotations

import os
import socket
import time

import numpy as np
import pandas as pd

SIZES = tuple(1 << e for e in range(10, 29, 2))  # 1 KiB .. 256 MiB


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, device: str, sizes, warmup: int, repeats: int, out):
    import torch
    import torch.distributed as dist

    backend = "nccl" if device == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    dev = torch.device("cuda", rank) if device == "cuda" else torch.device("cpu")
    if device == "cuda":
        torch.cuda.set_device(dev)
    dtype = torch.float16 if device == "cuda" else torch.float32
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    medians = []
    for size in sizes:
        x = torch.ones(max(1, size // torch.tensor([], dtype=dtype).element_size()), dtype=dtype, device=dev)
        for _ in range(warmup):
            dist.all_reduce(x)
        ts = []
        for _ in range(repeats):
            dist.barrier()
            sync()
            t0 = time.perf_counter()
            dist.all_reduce(x)
            sync()
            ts.append(time.perf_counter() - t0)
        medians.append(float(np.median(ts)))
    gathered = [None] * world
    dist.all_gather_object(gathered, medians)
    if rank == 0:
        out.put(np.max(np.array(gathered), axis=0).tolist())
    dist.destroy_process_group()


def measure_allreduce(
    world: int, device: str = "cuda", sizes=SIZES, warmup: int = 3, repeats: int = 10
) -> pd.DataFrame:
    """All-reduce rows for ``world`` ranks (cuda: one GPU each, NCCL; cpu: gloo)."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = _free_port()
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    procs = [
        ctx.Process(target=_worker, args=(r, world, port, device, list(sizes), warmup, repeats, q))
        for r in range(world)
    ]
    for p in procs:
        p.start()
    times = q.get(timeout=600)
    for p in procs:
        p.join()
    size = np.array(sizes, float)
    return pd.DataFrame(
        dict(
            op_class="allreduce",
            op=f"torch_all_reduce_{'nccl' if device == 'cuda' else 'gloo'}",
            tokens=0,
            m=size,
            k=0,
            n=0,
            tp=world,
            workers=world,
            dtype="float16" if device == "cuda" else "float32",
            flops=0.0,
            bytes=2 * (world - 1) / world * size,
            time_s=times,
            source=f"microbench:{device}",
        )
    )
