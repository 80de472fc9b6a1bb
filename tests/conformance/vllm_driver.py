"""Drive vLLM's own scheduler and chunksim's vLLM policy with one scenario and compare them step by step.

vLLM side (needs the engine, see ``vllm_available``): ``Scheduler`` or ``AsyncScheduler`` built on
CPU as vLLM's tests/v1/core build one (a local config.json, ``skip_tokenizer_init``, an explicit
``KVCacheConfig`` of N blocks), advanced with ``update_from_output`` and a fake
``ModelRunnerOutput``: one sampled token for every scheduled request that is no longer a prefill
chunk, a token of the request's own (two requests with one prompt do not generate one text); requests carry ``max_tokens`` with ``ignore_eos``. Sync runs ``EngineCore.step``
(schedule, execute, update); async runs ``EngineCore.step_with_batch_queue`` with two batches in
flight: schedule n+1 happens before the output of step n is processed.

chunksim side: ``Simulation`` over a cost model in which every step lasts exactly 1 s, so a step's
start time is its index; ``mode`` "step" (``--no-fast-forward``), "fast" (fast-forward, iteration
log) or "cohort" (fast-forward with the decode cohort, compared per request).

A record is, per step start time: {rid: tokens scheduled}, the rids preempted by that step's
schedule(), and the rids that finished with that step's output.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import deque

from unit_cost import UnitCost
from vllm_scenarios import VllmScenario

VLLM_VERSION = "0.33.0"
_OUTPUT_TOKEN = 30_001  # + rid: every request generates its own token, outside the prompts' 1..29999, so
# generated blocks are the request's own, as chunksim names them (simcore/apc.py)
_DRAFT_TOKEN = 29_999  # a draft's token id (its value does not matter: acceptance is drawn)
_MODEL_DIR = None
for _k, _v in (("VLLM_TARGET_DEVICE", "cpu"), ("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1")):
    os.environ.setdefault(_k, _v)


def vllm_available() -> str | None:
    """None when vLLM's scheduler imports, else why not."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed; see docs/conformance.md"
    try:
        import vllm
        from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # noqa: F401
    except Exception as e:  # any import failure means: not installed here
        return f"vLLM's scheduler is not importable ({type(e).__name__}: {e}); pip install -e '.[conformance]'"
    if vllm.__version__ != VLLM_VERSION:
        return f"vLLM {vllm.__version__} installed; the policy is checked against {VLLM_VERSION}"
    return None


def _model_dir() -> str:
    global _MODEL_DIR
    if _MODEL_DIR is None:
        _MODEL_DIR = tempfile.mkdtemp(prefix="chunksim-vllm-model-")
        cfg = {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "num_hidden_layers": 2,
            "vocab_size": 32000,
            "max_position_embeddings": 65536,
            "torch_dtype": "float32",
            "rms_norm_eps": 1e-5,
            "eos_token_id": 2,
            "bos_token_id": 1,
        }
        with open(os.path.join(_MODEL_DIR, "config.json"), "w") as f:
            json.dump(cfg, f)
    return _MODEL_DIR


def _build_scheduler(sc: VllmScenario, kv_transfer_config=None):
    import torch
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    model = ModelConfig(
        model=_model_dir(), skip_tokenizer_init=True, max_model_len=sc.max_model_len, dtype="float32", seed=0
    )
    sched = SchedulerConfig(
        max_num_seqs=sc.max_num_seqs,
        max_num_batched_tokens=sc.max_num_batched_tokens,
        max_model_len=sc.max_model_len,
        is_encoder_decoder=False,
        long_prefill_token_threshold=sc.long_prefill_token_threshold,
        enable_chunked_prefill=sc.enable_chunked_prefill,
        scheduler_reserve_full_isl=sc.scheduler_reserve_full_isl,
        # ngram stands in for EAGLE below; the V1 model runner (CPU) refuses it with async scheduling,
        # so the config says sync and the driver builds the AsyncScheduler itself
        async_scheduling=sc.async_scheduling and not sc.spec_method,
    )
    cache = CacheConfig(block_size=sc.block_size, enable_prefix_caching=sc.enable_prefix_caching)
    spec = None
    if sc.spec_method:
        from vllm.config import ParallelConfig, SpeculativeConfig

        # An EAGLE drafter's config needs its weights; the scheduler reads of it only
        # num_lookahead_tokens (k, set below) and use_eagle (prefix caching, off here): ngram stands in.
        spec = SpeculativeConfig(
            method="ngram",
            num_speculative_tokens=sc.num_spec_tokens,
            prompt_lookup_max=3,
            prompt_lookup_min=1,
            target_model_config=model,
            target_parallel_config=ParallelConfig(),
        )
    cfg = VllmConfig(
        model_config=model,
        scheduler_config=sched,
        cache_config=cache,
        speculative_config=spec,
        kv_transfer_config=kv_transfer_config,  # PD: vllm_pd_driver.py
    )
    cfg.cache_config.num_gpu_blocks = sc.num_blocks
    if kv_transfer_config is not None and sc.async_scheduling:
        # VllmConfig turns async off on this CPU build; on a GPU (mp executor) it stays on, so
        # max_concurrent_batches is 2 and a consumer connector defers block frees (PD driver only)
        cfg.scheduler_config.async_scheduling = True
    kv = KVCacheConfig(
        num_blocks=sc.num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(
                ["layer"], FullAttentionSpec(block_size=sc.block_size, num_kv_heads=1, head_size=1, dtype=torch.float32)
            )
        ],
    )
    cls = AsyncScheduler if sc.async_scheduling else Scheduler
    out = cls(
        vllm_config=cfg,
        kv_cache_config=kv,
        structured_output_manager=StructuredOutputManager(cfg),
        block_size=sc.block_size,
        log_stats=False,
    )
    if sc.spec_method == "eagle":
        out.num_lookahead_tokens = sc.num_spec_tokens  # VllmConfig.num_lookahead_tokens for EAGLE
    return out


def _make_requests(sc: VllmScenario):
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.request import Request

    hasher = None
    if sc.enable_prefix_caching:
        init_none_hash(sha256)
        hasher = get_request_block_hasher(sc.block_size, sha256)
    return [
        Request(
            str(i),
            list(prompt),
            SamplingParams(max_tokens=m, ignore_eos=True),
            None,
            arrival_time=float(a),
            block_hasher=hasher,
        )
        for i, (a, prompt, m) in enumerate(sc.requests)
    ]


def run_vllm(sc: VllmScenario, max_calls: int = 200_000, first_token: dict | None = None) -> dict:
    """{start_step: (tokens {rid: n}, preempted (rids), finished (rids))} from vLLM's scheduler;
    `first_token`, if given, gets rid -> the step whose output was the request's first token."""
    from vllm.v1.outputs import ModelRunnerOutput

    scheduler = _build_scheduler(sc)
    pending = deque(sorted(zip([a for a, _, _ in sc.requests], _make_requests(sc)), key=lambda x: x[0]))
    records, queue, clock = {}, deque(), 0
    depth = 2 if sc.async_scheduling else 1

    spec = _spec(sc)
    draws: dict = {}

    def fake_output(out, running):
        """One token per sampling request plus its accepted drafts; a request admitted from the
        waiting queue (not in `running` before schedule()) has padding drafts, never accepted."""
        ids = list(out.num_scheduled_tokens)
        sampled = []
        for r in ids:
            if scheduler.requests[r].is_prefill_chunk:
                sampled.append([])
                continue
            drafts = out.scheduled_spec_decode_tokens.get(r) or []
            accepted = 0
            if spec is not None and drafts and r in running:
                accepted = spec.accepted(int(r), draws.get(r, 0), len(drafts))
                draws[r] = draws.get(r, 0) + 1
            sampled.append([_OUTPUT_TOKEN + int(r)] * (1 + accepted))
        return ModelRunnerOutput(
            req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)}, sampled_token_ids=sampled
        )

    def propose(out):
        """The drafter after a step (EngineCore.post_step): k drafts for every scheduled request;
        the scheduler drops those of prefill chunks and finished requests."""
        from vllm.v1.outputs import DraftTokenIds

        ids = list(out.num_scheduled_tokens)
        if spec is not None and ids and not sc.async_scheduling:  # async: placeholders (EngineCore.post_step)
            scheduler.update_draft_token_ids(DraftTokenIds(ids, [[_DRAFT_TOKEN] * spec.k for _ in ids]))

    def update(start, out, mro):
        outs = scheduler.update_from_output(out, mro)
        propose(out)
        if first_token is not None:
            for eco in outs.values():
                for o in eco.outputs:
                    if o.new_token_ids:
                        first_token.setdefault(int(o.request_id), start)
        done = sorted(int(o.request_id) for eco in outs.values() for o in eco.outputs if o.finish_reason is not None)
        if start is not None and done:
            records[start][2].extend(done)

    for _ in range(max_calls):
        while pending and pending[0][0] <= clock:
            scheduler.add_request(pending.popleft()[1])
        if scheduler.has_requests():
            running = {r.request_id for r in scheduler.running}
            out = scheduler.schedule()
            start = None
            if out.total_num_scheduled_tokens > 0 or out.preempted_req_ids:
                start = clock
                rec = records.setdefault(clock, ({}, [], []))
                rec[0].update({int(r): n for r, n in out.num_scheduled_tokens.items()})
                rec[1].extend(sorted(int(r) for r in out.preempted_req_ids))
            executed = out.total_num_scheduled_tokens > 0
            queue.appendleft((start, out, fake_output(out, running)))
            if executed:
                clock += 1
            if len(queue) < depth and (executed or scheduler.has_requests()):
                continue
        elif not queue:
            if not pending:
                break
            clock = max(clock, pending[0][0])
            continue
        update(*queue.pop())
    else:
        raise RuntimeError(f"{sc.name}: vLLM did not drain in {max_calls} scheduler calls")
    return {t: (tok, sorted(p), sorted(f)) for t, (tok, p, f) in records.items()}


class _Recorder:
    """Wraps a policy: keeps (time, {rid: n}, preempted rids) of every plan it makes."""

    def __init__(self, policy, env):
        self._policy, self._env, self.plans = policy, env, []

    def __getattr__(self, name):
        return getattr(self._policy, name)

    def schedule(self, state):
        plan = self._policy.schedule(state)
        self.plans.append((self._env.now, {r.rid: n for r, n in plan.items}, [r.rid for r in plan.preempted]))
        return plan


def run_chunksim(sc: VllmScenario, mode: str = "step"):
    """Records as ``run_vllm`` gives them ("step", "fast"), or per-request outcomes ("cohort")."""
    from costmodel import load_hardware, load_model
    from experiments.engines import build_engine
    from simcore.simulation import Simulation
    from workloads.workload import Workload

    flags = sc.engine_flags()
    flags.update(_new_rule_flags(sc))
    if sc.spec_method:
        flags.update(
            speculative_config=sc.speculative_config,
            spec_acceptance=sc.spec_acceptance,
            spec_seed=sc.spec_seed,
        )
    policy, pool, _, max_len = build_engine("vllm", load_model("llama-3.1-8b"), load_hardware("h100"), flags=flags)
    wl = Workload(
        [float(a) for a, _, _ in sc.requests],
        [len(p) for _, p, _ in sc.requests],
        [m for _, _, m in sc.requests],
        block_hashes=[sc.block_hashes(p) for _, p, _ in sc.requests] if sc.enable_prefix_caching else None,
        block_tokens=sc.block_size,
    )
    sim = Simulation(
        [(policy, pool, UnitCost())],
        wl,
        fast_forward=mode != "step",
        check=True,
        max_model_len=max_len,
        record_iterations=mode != "cohort",
    )
    rec = _Recorder(policy, sim.env)
    sim.replicas[0].policy = rec
    res = sim.run()
    reqs = sorted(sim.requests, key=lambda r: r.rid)
    bad = [(r.rid, r.rejected) for r in reqs if r.rejected]
    if bad:
        raise AssertionError(f"chunksim rejected {bad}")
    if mode == "cohort":
        return _outcomes(reqs)
    records = {}
    for t, _, pre in rec.plans:
        if pre:
            records.setdefault(int(t), ({}, [], []))[1].extend(pre)
    for _, start, _end, steps, plan in res.iterations or []:
        for j in range(steps):
            tok = records.setdefault(int(start) + j, ({}, [], []))[0]
            tok.update({r.rid: (n if j == 0 else 1) for r, n in plan.items})
    for r in reqs:
        records.setdefault(int(r.finish_s) - 1, ({}, [], []))[2].append(r.rid)
    return {t: (tok, sorted(p), sorted(f)) for t, (tok, p, f) in records.items()}


def _spec(sc: VllmScenario):
    """The acceptance model both sides draw from (policies/vllm_spec.py), or None."""
    if not sc.spec_method:
        return None
    from policies.vllm_spec import SpecDecode

    return SpecDecode(sc.spec_method, sc.num_spec_tokens, sc.spec_acceptance, sc.spec_seed)


def _new_rule_flags(sc: VllmScenario) -> dict:
    """The engine flags chunksim's vLLM policy takes for rules that vLLM makes configurable."""
    from policies.vllm import VLLMConfig

    names = VLLMConfig.__dataclass_fields__
    return {k: getattr(sc, k) for k in ("async_scheduling", "scheduler_reserve_full_isl") if k in names}


def _outcomes(reqs) -> dict:
    """rid -> (first step scheduled, step whose output is the first token, finish step, preemptions)."""
    return {
        r.rid: (int(r.first_scheduled_s), int(r.first_token_s) - 1, int(r.finish_s) - 1, r.num_preemptions)
        for r in reqs
    }


def outcomes_from_records(records: dict, sc: VllmScenario, first_tok: dict) -> dict:
    first, fin, pre = {}, {}, {}
    for t in sorted(records):
        tok, preempted, finished = records[t]
        for rid in preempted:
            pre[rid] = pre.get(rid, 0) + 1
        for rid in tok:
            first.setdefault(rid, t)
        for rid in finished:
            fin[rid] = t
    return {rid: (first.get(rid), first_tok.get(rid), fin.get(rid), pre.get(rid, 0)) for rid in range(len(sc.requests))}


def first_divergence(a: dict, b: dict) -> str | None:
    """None when the two record sets agree at every step, else the first step that differs."""
    if a == b:
        return None
    for t in sorted(set(a) | set(b)):
        if a.get(t) != b.get(t):
            return f"step {t}: vllm {_show(a.get(t))} / chunksim {_show(b.get(t))}"
    return "differ"


def _show(rec) -> str:
    if rec is None:
        return "nothing"
    if isinstance(rec[0], dict):
        tok, pre, fin = rec
        return f"tokens={dict(sorted(tok.items()))} preempted={pre} finished={fin}"
    return str(rec)


def compare(sc: VllmScenario, modes=("step", "fast", "cohort")) -> dict:
    """{'vllm': records, mode: divergence or None, ...}."""
    first_tok = {}
    ref = run_vllm(sc, first_token=first_tok)
    out = {"vllm": ref}
    for mode in modes:
        got = run_chunksim(sc, mode)
        if mode == "cohort":
            want = outcomes_from_records(ref, sc, first_tok)
            out[mode] = (
                None
                if got == want
                else next(
                    f"request {rid}: vllm (first step, first-token step, finish step, preemptions)={want[rid]} / "
                    f"chunksim {got.get(rid)}"
                    for rid in sorted(want)
                    if want[rid] != got.get(rid)
                )
            )
        else:
            out[mode] = first_divergence(ref, got)
    return out
