"""Where a sweep's points run: inline, local processes (``--jobs N``) or a Dask cluster.

All three are ``concurrent.futures`` executors (Dask through ``Client.get_executor``), so the
sweep sees one interface and hands each finished point to ``on_result`` as it completes: that
callback appends it to the results file at once, which is what makes ``--resume`` cheap.
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager

from costmodel.errors import require

EXECUTORS = ("local", "dask")


@contextmanager
def executor_for(kind: str = "local", jobs: int = 1, scheduler_address: str | None = None):
    """None (run inline) for one local job; a process pool for more; a Dask client's executor,
    on the cluster at ``scheduler_address`` or on a LocalCluster of ``jobs`` single-threaded workers."""
    require(kind in EXECUTORS, "executor", kind, f"must be one of {', '.join(EXECUTORS)}")
    require(jobs >= 1, "jobs", jobs, "must be >= 1")
    require(
        scheduler_address is None or kind == "dask", "scheduler-address", scheduler_address, "only with --executor dask"
    )
    if kind == "local":
        if jobs == 1:
            yield None
            return
        with ProcessPoolExecutor(max_workers=jobs) as ex:
            yield ex
        return
    from distributed import Client, LocalCluster

    cluster = None
    if scheduler_address:
        client = Client(scheduler_address)
    else:
        cluster = LocalCluster(n_workers=jobs, threads_per_worker=1, processes=True, dashboard_address=None)
        client = Client(cluster)
    try:
        yield client.get_executor(pure=False)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def map_points(fn, items: list, on_result, executor=None, progress: bool = False) -> None:
    """Run ``fn`` on every item; ``on_result`` gets each result as it finishes. A failure of the
    executor itself (a worker lost) becomes the item's record with an ``error``."""
    from tqdm import tqdm

    with tqdm(total=len(items), disable=not progress, unit="point", desc="sweep") as bar:
        if executor is None:
            for item in items:
                on_result(fn(item))
                bar.update()
            return
        futures = {executor.submit(fn, item): item for item in items}
        try:
            for fut in as_completed(futures):
                try:
                    rec = fut.result()
                except Exception as e:  # noqa: BLE001 -- recorded as the point's error
                    rec = {**futures[fut], "error": f"executor: {type(e).__name__}: {e}"}
                on_result(rec)
                bar.update()
        finally:
            for fut in futures:
                fut.cancel()
