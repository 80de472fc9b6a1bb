"""The seed scene run through each policy: the decoders' worst inter-token gap, simulated.

The scene starts at decode steady state. The decoders all arrive at t = 0 with prompts of
``decode_context − WARM_STEPS`` tokens. A first run without the long prompt finds when the last
decoder has its first token (``t_ready``, which depends on the policy). The long prompt then
arrives ``WARM_STEPS − ½`` decode steps later, when every decoder holds about
``decode_context`` tokens and the steps before it are pure decode steps. The long prompt must
fit the model's ``max_model_len``, as ``simulate`` requires. A policy whose KV pool cannot hold
the scene gets a row that says which part does not fit.
"""

from __future__ import annotations

import numpy as np

from costmodel import CostModel, Hardware, ModelSpec
from costmodel.errors import InputError, require

from .engines import build_engine
from .stall import StallScene

WARM_STEPS = 8  # pure decode steps between the last decoder's first token and the long prompt
LONG_OUTPUT = 16  # the long prompt's output tokens
DECODE_OUTPUT = 1024  # each decoder's output tokens (they are still decoding when the prompt ends)
GIB = 2**30


def check_context(model: ModelSpec, sc: StallScene) -> None:
    """The long prompt and the decoders must fit the model's context, as `simulate` requires."""
    limit = model.max_model_len
    if not limit:
        return
    require(
        sc.prompt_len + LONG_OUTPUT <= limit,
        "prompt-len",
        sc.prompt_len,
        f"with its {LONG_OUTPUT} output tokens exceeds {model.name}'s max_model_len {limit:,} "
        f"(simulate rejects such a request); give --prompt-len <= {limit - LONG_OUTPUT:,}",
    )
    require(
        sc.decode_context + DECODE_OUTPUT <= limit,
        "decode-context",
        sc.decode_context,
        f"with {DECODE_OUTPUT} output tokens exceeds {model.name}'s max_model_len {limit:,}",
    )
    require(sc.decode_context > WARM_STEPS, "decode-context", sc.decode_context, f"must exceed {WARM_STEPS}")


def decoders(sc: StallScene, long_arrival_s: float | None = None):
    """The decoders at t = 0; with ``long_arrival_s``, the long prompt too (last request)."""
    from simcore.simulation import fixed_workload

    D, p = sc.num_decodes, sc.decode_context - WARM_STEPS
    if long_arrival_s is None:
        return fixed_workload(np.zeros(D), np.full(D, p), np.full(D, DECODE_OUTPUT))
    return fixed_workload(
        np.r_[np.zeros(D), long_arrival_s],
        np.r_[np.full(D, p), sc.prompt_len],
        np.r_[np.full(D, DECODE_OUTPUT), LONG_OUTPUT],
    )


def no_room(model: ModelSpec, hw: Hardware, tp: int, budget_tokens: int) -> str:
    """Why an engine's KV pool came out empty: the weights, or one forward pass's activations."""
    from simcore.kv import activation_peak_bytes

    cm = CostModel(model, hw, tp)
    usable = hw.memory_bytes * 0.9
    if cm.weight_bytes_per_gpu >= usable:
        return (
            f"the weights do not fit: {cm.weight_bytes_per_gpu / GIB:.1f} GiB per GPU, "
            f"{usable / GIB:.1f} GiB usable at tp={tp}"
        )
    act = activation_peak_bytes(cm, budget_tokens)
    return (
        f"the activations of a {budget_tokens:,}-token forward pass ({act / GIB:.1f} GiB) leave no KV room "
        f"beside the weights ({cm.weight_bytes_per_gpu / GIB:.1f} GiB of {usable / GIB:.1f} GiB usable per GPU)"
    )


def scene_fits(pool, cm: CostModel, sc: StallScene) -> str | None:
    """None, or which KV does not fit the pool: the long prompt's, or the decoders' beside it."""
    bs = pool.block_size
    prompt = -(-(sc.prompt_len + LONG_OUTPUT) // bs)
    decode = sc.num_decodes * -(-(sc.decode_context + DECODE_OUTPUT) // bs)
    per_block = bs * cm.kv_coef
    if prompt > pool.total:
        return (
            f"the long prompt's KV does not fit: {sc.prompt_len:,} tokens need {prompt * per_block / GIB:.1f} GiB, "
            f"the KV pool holds {pool.total * per_block / GIB:.1f} GiB"
        )
    if prompt + decode > pool.total:
        return (
            f"the long prompt's KV ({prompt * per_block / GIB:.1f} GiB) and the decoders' "
            f"({decode * per_block / GIB:.1f} GiB) do not fit the KV pool together "
            f"({pool.total * per_block / GIB:.1f} GiB); the prompt would wait for decoders to finish"
        )
    return None


def run_scene(
    model: ModelSpec, hw: Hardware, sc: StallScene, tp: int, policy: str, flags: dict, record_iterations: bool = False
):
    """(result, t_ready, long_arrival_s), or raises InputError naming what does not fit."""
    from simcore.simulation import Simulation

    check_context(model, sc)
    try:
        sched, pool, cm, max_len = build_engine(policy, model, hw, tp, flags)
    except InputError as e:
        if e.field != "kv_cache_blocks":
            raise
        budget = flags.get("max_num_batched_tokens") or flags.get("chunked_prefill_size") or model.max_model_len
        raise InputError("scene", policy, no_room(model, hw, tp, budget)) from None
    why = scene_fits(pool, cm, sc)
    if why:
        raise InputError("scene", policy, why)
    warm = Simulation([(sched, pool, cm)], decoders(sc), max_model_len=max_len).run()
    t_ready = float(warm.requests.first_token_s.max())
    step = cm.time(cm.shape([1] * sc.num_decodes, [sc.decode_context] * sc.num_decodes))
    arrival = t_ready + (WARM_STEPS - 0.5) * step
    sched, pool, cm, max_len = build_engine(policy, model, hw, tp, flags)
    res = Simulation(
        [(sched, pool, cm)], decoders(sc, arrival), max_model_len=max_len, record_iterations=record_iterations
    ).run()
    return res, t_ready, arrival


def token_times(res, rids) -> dict:
    """rid -> the ends of the steps that gave it a token (a logged run of k steps: k even ends)."""
    out = {r: [] for r in rids}
    for _, start, end, steps, plan in res.iterations:
        for req, _ in plan.items:
            if req.rid in out:
                out[req.rid].extend(np.linspace(start, end, steps + 1)[1:].tolist())
    return out


def max_gap_after(res, rids, t0: float) -> float:
    """The decoders' longest inter-token gap among the gaps that end after ``t0``."""
    worst = 0.0
    for times in token_times(res, rids).values():
        t = np.asarray(times)
        gaps = np.diff(t)
        if len(gaps):
            late = gaps[t[1:] > t0]
            worst = max(worst, float(late.max()) if len(late) else 0.0)
    return worst


def simulated_stalls(model: ModelSpec, hw: Hardware, sc: StallScene, tp: int = 1) -> list[dict]:
    runs = [
        ("nochunk", {}, "no chunking"),
        ("vllm", {"max_num_batched_tokens": sc.budget}, f"vLLM V1, max_num_batched_tokens={sc.budget}"),
        ("sglang", {"chunked_prefill_size": sc.budget}, f"SGLang, chunked_prefill_size={sc.budget}"),
        (
            "sglang",
            {"chunked_prefill_size": sc.budget, "enable_mixed_chunk": True},
            f"SGLang, chunked_prefill_size={sc.budget}, enable_mixed_chunk",
        ),
    ]
    check_context(model, sc)
    rows = []
    for policy, flags, label in runs:
        try:
            res, _, arrival = run_scene(model, hw, sc, tp, policy, flags, record_iterations=True)
        except InputError as e:
            if e.field != "scene":
                raise
            rows.append({"policy": label, "does not fit": e.reason})
            continue
        df = res.requests
        rows.append(
            {
                "policy": label,
                "decoders' max ITL s": max_gap_after(res, range(sc.num_decodes), arrival),
                "long prompt TTFT s": float(df.ttft_s.iloc[-1]),
                "long prompt arrives s": arrival,
                "iterations": res.summary["num_iterations"],
            }
        )
    return rows
