"""The seed scene run through each policy: the decoders' worst inter-token gap, simulated."""
from __future__ import annotations

from costmodel import Hardware, ModelSpec

from .engines import build_engine
from .scenarios import stall_scene
from .stall import StallScene


def simulated_stalls(model: ModelSpec, hw: Hardware, sc: StallScene, tp: int = 1) -> list[dict]:
    from simcore.simulation import Simulation
    runs = [("nochunk", {}, "no chunking"),
            ("vllm", {"max_num_batched_tokens": sc.budget}, f"vLLM V1, max_num_batched_tokens={sc.budget}"),
            ("sglang", {"chunked_prefill_size": sc.budget}, f"SGLang, chunked_prefill_size={sc.budget}"),
            ("sglang", {"chunked_prefill_size": sc.budget, "enable_mixed_chunk": True},
             f"SGLang, chunked_prefill_size={sc.budget}, enable_mixed_chunk")]
    rows = []
    wl = stall_scene(sc.prompt_len, sc.num_decodes, sc.decode_context)
    for policy, flags, label in runs:
        max_model_len = max(sc.prompt_len + 64, model.max_model_len)
        sched, pool, cm, max_len = build_engine(policy, model, hw, tp, {**flags, "max_model_len": max_model_len})
        res = Simulation([(sched, pool, cm)], wl, max_model_len=max_len).run()
        df = res.requests
        decoders = df.iloc[: sc.num_decodes]
        rows.append({"policy": label, "decoders' max ITL s": float(decoders.max_itl_s.max()),
                     "long prompt TTFT s": float(df.ttft_s.iloc[-1]), "iterations": res.summary["num_iterations"]})
    return rows
