"""vLLM 0.33's data-parallel rules run as vLLM's own code on stand-in objects, against chunksim's.

- The front end's choice of rank: ``DPLBAsyncMPClient.get_core_engine_for_request``
  (vllm/v1/engine/core_client.py) against ``simcore.router.VllmDPBalancer.pick``, fed the same
  coordinator snapshots, finishes and requests.
- The lockstep wave: ``DPEngineCoreProc._has_global_unfinished_reqs`` (vllm/v1/engine/core.py)
  against ``simcore.data_parallel.LockstepGroup.after_step``, fed the same all-reduced
  "unfinished" flags, step by step.
Each scenario is drawn from its own seed; a divergence names the scenario, the event and both sides.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np


def choice_scenario(seed: int) -> str | None:
    from vllm.v1.engine.core_client import DPLBAsyncMPClient

    from simcore.router import VllmDPBalancer

    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 9))
    engines = [f"e{i}".encode() for i in range(n)]
    client = object.__new__(DPLBAsyncMPClient)
    client.core_engines, client.client_count, client.eng_start_index = engines, 1, 0
    client.engine_inflight = {e: 0 for e in engines}
    client.reqs_in_flight, client.streaming_reqs = {}, set()
    ours = VllmDPBalancer()
    in_flight: dict[str, int] = {}
    for event in range(int(rng.integers(20, 200))):
        if rng.random() < 0.25 or not ours.counts:  # a coordinator snapshot
            counts = [
                [int(rng.integers(0, 6)) * int(rng.random() < 0.6), int(rng.integers(0, 40)), float(rng.random())]
                for _ in range(n)
            ]
            client.lb_engines = [list(c) for c in counts]
            ours.counts = [list(c) for c in counts]
        if in_flight and rng.random() < 0.3:  # a request finishes (process_engine_outputs)
            rid = sorted(in_flight)[int(rng.integers(0, len(in_flight)))]
            client.engine_inflight[client.reqs_in_flight.pop(rid)] -= 1
            del in_flight[rid]
        rid = f"r{event}"
        req = SimpleNamespace(request_id=rid, resumable=False, data_parallel_rank=None, pooling_params=None)
        inflight = [client.engine_inflight[e] for e in engines]  # before vLLM's choice counts itself
        theirs = engines.index(client.get_core_engine_for_request(req))
        mine = ours.pick(inflight)
        if theirs != mine:
            return f"choice seed {seed}, event {event}: vLLM rank {theirs}, chunksim rank {mine}"
        in_flight[rid] = mine
    return None


def wave_scenario(seed: int) -> str | None:
    from vllm.v1.engine.core import DPEngineCoreProc

    from simcore.data_parallel import LockstepGroup

    rng = np.random.default_rng(seed)
    interval = int(rng.choice([1, 2, 3, 16, 32]))
    flag = {"any": False}
    core = object.__new__(DPEngineCoreProc)
    core.step_counter, core.dp_sync_interval, core.pending_pause, core.dp_group = 0, interval, False, None
    core.vllm_config = SimpleNamespace(
        parallel_config=SimpleNamespace(sync_dp_state=lambda group, has_unfinished, pending_pause: (flag["any"], False))
    )
    group = object.__new__(LockstepGroup)
    group.step_counter, group.sync_interval, group.engines_running = 0, interval, True
    for step in range(int(rng.integers(10, 300))):
        flag["any"] = bool(rng.random() < 0.7)
        theirs = core._has_global_unfinished_reqs(flag["any"])
        if not theirs:  # run_busy_loop: the wave ends, the counter resets
            core.step_counter = 0
        group.after_step(flag["any"])
        if (theirs, core.step_counter) != (group.engines_running, group.step_counter):
            return (
                f"wave seed {seed}, step {step}: vLLM running={theirs} counter={core.step_counter}, "
                f"chunksim running={group.engines_running} counter={group.step_counter}"
            )
        group.engines_running = True  # a new request starts the next wave, on both sides
    return None
