"""Conservation invariants of a replica, asserted after every plan when a Simulation runs with
check=True (the tests do): KV blocks, queue membership, token counts, the cohort's sums."""

from __future__ import annotations


def check_replica(replica, plan) -> None:
    s = replica.state
    pool, c = s.pool, s.cohort
    cohort_held = 0
    if c is not None and c.members:
        assert plan.cohort in (0, c.n), "a step left part of the cohort out"
        assert plan.cohort or plan.items, "the cohort sat out an empty step"
        assert c.kv == sum(c.current(r) for r in c.members)
        assert c.outputs_left() == sum(r.output_len - r.num_output_tokens - c.tick + r.cohort_tick for r in c.members)
        ahead = 1 if plan.cohort else 0  # the blocks of the planned step are held
        cohort_held = sum(pool.blocks_held(r, c.current(r) + ahead) for r in c.members)
        assert all(c.current(r) + 1 == r.prompt_len + r.num_output_tokens + c.tick - r.cohort_tick for r in c.members)
    cached = pool.cache.cached_blocks if pool.cache else 0
    assert 0 <= pool.used <= pool.total
    held = sum(r.num_blocks for r in s.running) + sum(r.num_blocks for r in s.finished)
    conn, holding = s.connector, 0
    if conn is not None:  # PD: blocks of loading and sending requests (policies/vllm_pd.py)
        held += conn.held_blocks()
        holding = len(conn.holding)
        assert all(r.kv_loading for r in conn.recv_done)
    assert pool.used == held + cohort_held + cached, "KV blocks leaked"
    assert all(r.num_blocks == 0 for r in s.waiting)
    assert replica._outstanding == len(replica.inbox) + len(s.waiting) + s.num_running + holding
    assert len({id(r) for r in s.running}) == len(s.running)
    assert not ({id(r) for r in s.running} & {id(r) for r in s.waiting})
    spec = plan.spec or {}
    for r, n in plan.items:
        if r.finish_s is not None:  # SGLang PD decode under overlap: a redundant decode, applied as nothing
            continue
        assert n > 0 and r.num_computed_tokens + n <= r.num_tokens + r.spec_placeholders + abs(spec.get(r, 0))
        assert (r.num_blocks + s.pool.shared(r)) * s.pool.block_size >= r.num_computed_tokens + n
    for r in s.running:
        r.check()
    if hasattr(replica.policy, "check"):
        replica.policy.check(plan, s)
