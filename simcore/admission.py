"""What happens to a request when it arrives, for both engines (stepping and fast-forward): it is
made from its workload row, and refused outright, with the reason recorded, when its prompt plus
output exceeds max_model_len, could never fit in the replica's KV pool, or its policy says so."""

from __future__ import annotations

from .request import Request


def new_request(workload, i: int, arrival_s: float) -> Request:
    """Row i of the workload as a request stamped `arrival_s` (its block hashes and ignore_eos,
    where the workload has them)."""
    hashes = getattr(workload, "block_hashes", None)
    if hashes is None:
        req = Request(i, arrival_s, int(workload.prompt_len[i]), int(workload.output_len[i]))
    else:
        req = Request(
            i,
            arrival_s,
            int(workload.prompt_len[i]),
            int(workload.output_len[i]),
            tuple(hashes[i]) if hashes[i] is not None else (),
        )
    eos = getattr(workload, "ignore_eos", None)
    if eos is not None:
        req.ignore_eos = bool(eos[i])
    return req


def reject_reason(req: Request, replica, max_model_len: int) -> str | None:
    total = req.prompt_len + req.output_len
    if max_model_len and total > max_model_len:
        return f"prompt_len+output_len={total} exceeds max_model_len={max_model_len}"
    pool = replica.state.pool
    if -(-total // pool.block_size) > pool.total:  # pool.blocks_for(total)
        return f"needs {pool.blocks_for(total)} KV blocks, the whole pool has {pool.total}"
    return replica.policy.reject_reason(req, pool)
