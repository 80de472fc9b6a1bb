"""SGLang's speculative decoding (EAGLE, spec v2) driven on CPU, step for step against chunksim's
policy (policies/sglang_spec.py). Needs SGLang (`pip install 'chunksim[conformance]'`).

SGLang's own functions decide: get_alloc_len_per_decode / get_alloc_reserve_per_decode (the bags
overridden to the scenario's --speculative-* and page size), ScheduleBatch.
_new_tokens_required_next_decode_spec_v2 and the allocator's check_decode_capacity (check_decode_mem),
eagle_utils.eagle_prepare_for_decode → alloc_for_spec_decode (the 2L over-allocation),
Req.update_finish_state(n), Req.owned_kv_len and release_kv_cache (the tree keeps min(C, prompt +
max_new); the slots past it are freed: _release_overallocated_kv_indices), RadixCache(is_eagle=True)
(bigram keys). The glue is sglang_engine.SGLangEngine's, with these changes: a decode is a verify of
num_draft_tokens that commits a + 1 (kv_committed_len, output_ids), a mixed step's running
requests commit one. The draft model is fake: the accepted count of a request's j-th verify is
chunksim's own draw (vllm_spec.SpecDecode.accepted with the scenario's seed, request index, j),
fed to both sides; a verify whose result is dropped (overlap: a retracted request's) still takes
its draw, as chunksim draws when it applies the step. CPU patches: allocation._is_cpu (the CPU
branch of alloc_for_spec_decode), a torch stand-in for sgl_kernel's assign_req_to_token_pool_cpu,
get_last_loc_torch for paged pools.

Known divergences (tight pools, about 0.2 % of scenarios): SGLang retracting a request that rides
a dropped verify (chunksim has finished it and never retracts one); see docs/conformance.md.
"""

from __future__ import annotations

import contextlib
import random
import types
from dataclasses import dataclass, replace

from policies.sglang_spec import SGLangSpec
from policies.vllm_spec import SpecDecode

from .sglang_driver import Verdict, page_hashes, policy_for
from .sglang_engine import SGLangEngine, Step, _sglang
from .sglang_scenarios import Req, Scenario, random_scenario as base_scenario

ACCEPTANCE = 0.6

CONFIGS = {}  # name: (overlap, page, (steps, topk, draft), tight)
for _ov in (False, True):
    for _ps in (1, 16):
        for _p in ((3, 1, 4), (5, 4, 8)):
            for _tight in (False, True):
                CONFIGS[
                    f"{'overlap' if _ov else 'sync'}/page{_ps}/{'-'.join(map(str, _p))}/{'tight' if _tight else 'ample'}"
                ] = (_ov, _ps, _p, _tight)
# topk > 1 with page > 1 needs one of SGLang's _PAGE_TREE_SPEC_BACKENDS (flashinfer, fa3, triton):
# allowed on CUDA, so these stay.

_PATCHED = False


def _patch():
    """The CPU stand-ins eagle_prepare_for_decode needs."""
    global _PATCHED
    if _PATCHED:
        return
    import sglang.srt.mem_cache.allocation as A

    def assign(idx, r2t, start, end, loc, width):
        off = 0
        for i in range(len(idx)):
            s, e = int(start[i]), int(end[i])
            r2t[int(idx[i]), s:e] = loc[off : off + e - s].to(r2t.dtype)
            off += e - s

    A._is_cpu = True
    A.assign_req_to_token_pool_cpu = assign
    A.get_last_loc = A.get_last_loc_torch
    _PATCHED = True


@dataclass
class SpecScenario:
    name: str
    base: Scenario
    params: tuple  # (steps, topk, draft)
    seed: int
    acceptance: float = ACCEPTANCE

    @property
    def knobs(self):
        return self.base.knobs

    @property
    def requests(self):
        return self.base.requests


class SpecEngine(SGLangEngine):
    """SGLangEngine whose decodes are EAGLE verifies (see the module docstring)."""

    def __init__(self, sc: SpecScenario, max_context_len: int):
        sg = _sglang()
        _patch()
        from sglang.srt import runtime_context as rc
        from sglang.srt.managers.schedule_batch import ScheduleBatch
        from sglang.srt.speculative.eagle_utils import eagle_prepare_for_decode
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        self._stack = contextlib.ExitStack()
        steps, topk, draft = sc.params
        self._stack.enter_context(
            rc.get_spec().override(
                speculative_algorithm="EAGLE",
                speculative_num_steps=steps,
                speculative_eagle_topk=topk,
                speculative_num_draft_tokens=draft,
            )
        )
        self._stack.enter_context(rc.get_schedule().override(page_size=sc.knobs.page_size))
        from sglang.srt.mem_cache.allocation_sizing import get_alloc_reserve_per_decode

        reserve = get_alloc_reserve_per_decode()
        super().__init__(sc.knobs, max_context_len + reserve + 2 * sc.knobs.page_size)
        self.tree = sg.RadixCache(
            sg.CacheInitParams(
                disable=sc.knobs.disable_radix_cache,
                req_to_token_pool=self.r2t,
                token_to_kv_pool_allocator=self.alloc,
                page_size=sc.knobs.page_size,
                is_eagle=True,
            )
        )
        self.policy = sg.sp.SchedulePolicy("fcfs", self.tree, False, False, False)
        self.draft = draft
        self.steps = steps
        self._ScheduleBatch, self._prepare, self._algo = ScheduleBatch, eagle_prepare_for_decode, SpeculativeAlgorithm
        self._draws = SpecDecode("eagle", steps, sc.acceptance, sc.seed)
        self._index: dict = {}  # rid -> chunksim's request index
        self._verifies: dict = {}  # rid -> verifies drawn so far

    def close(self):
        self._stack.close()

    def _stub(self, reqs):
        torch = self.sg.torch
        return types.SimpleNamespace(
            reqs=reqs,
            maybe_evict_swa=lambda: None,
            sampling_info=types.SimpleNamespace(penalizer_orchestrator=types.SimpleNamespace(is_required=False)),
            token_to_kv_pool_allocator=self.alloc,
            seq_lens_cpu=torch.tensor([r.kv.kv_committed_len for r in reqs]),
            req_to_token_pool=self.r2t,
            req_pool_indices=torch.tensor([r.kv.req_pool_idx for r in reqs]),
            device="cpu",
            tree_cache=self.tree,
            hisparse_coordinator=None,
            spec_algorithm=self._algo.EAGLE,
        )

    def check_decode_mem(self, reqs) -> bool:
        need = self._ScheduleBatch._new_tokens_required_next_decode_spec_v2(
            self._stub(reqs), list(reqs), self.k.page_size
        )
        return self.alloc.check_decode_capacity(num_tokens=need, tree_cache=self.tree, requests=reqs)

    def _prepare_for_decode(self, batch) -> None:
        self._prepare(self._stub(batch.reqs))

    def _record(self, batch, rec) -> None:
        decoding = set(map(id, batch.decoding_reqs or ()))
        for req in batch.reqs:
            if batch.extend:
                rec.tokens[req.rid] = 1 if id(req) in decoding else req.extend_len
            else:
                rec.tokens[req.rid] = self.draft

    def _accepted(self, req) -> int:
        j = self._verifies.get(req.rid, 0)
        self._verifies[req.rid] = j + 1
        return self._draws.accepted(self._index[req.rid], j, self.steps)

    def _process_prefill(self, reqs, decoding_reqs, rec) -> None:
        """A mixed step's running requests commit one token each (C += 1) before their result."""
        for req in decoding_reqs or ():
            if not (req.finished() or req.is_retracted):
                req.kv.kv_committed_len += 1
        super()._process_prefill(reqs, decoding_reqs, rec)

    def _process_decode(self, reqs, rec) -> None:
        """A verify: a + 1 tokens committed (kv_committed_len, output_ids), update_finish_state(a + 1);
        finished → release_kv_cache (owned_kv_len: the tree keeps min(C, prompt + max_new))."""
        sg = self.sg
        for req in reqs:
            if req.finished():
                continue  # overlap: a request finished in flight rode this verify; its result is dropped
            a = self._accepted(req)
            if req.is_retracted:
                continue
            n = a + 1
            req.output_ids.extend([self._sampled[req.rid]] * n)
            req.kv.kv_committed_len += n
            req.update_finish_state(n)
            if req.finished():
                sg.common.release_kv_cache(req, self.tree, checkpoint=True)
                rec.finished.append(req.rid)
            else:
                req.refresh_fill_ids()


def run_spec_engine(sc: SpecScenario, max_steps: int = 100_000) -> list:
    reqs = sorted(sc.requests, key=lambda r: (r.arrival, r.rid))
    eng = SpecEngine(sc, max(len(r.tokens) + r.max_new_tokens for r in reqs) + 8)
    eng._index = {r.rid: i for i, r in enumerate(reqs)}
    try:
        i, steps = 0, []
        while True:
            while i < len(reqs) and reqs[i].arrival <= eng.time:
                r = reqs[i]
                eng.add(r.rid, r.tokens, r.max_new_tokens, r.ignore_eos)
                i += 1
            rec = eng.step()
            if eng.progressed:
                if rec is not None:
                    steps.append(rec)
                continue
            if rec is not None:
                steps.append(rec)
                if rec.tokens:
                    if len(steps) > max_steps:
                        raise RuntimeError("too many steps")
                    continue
            if i < len(reqs):
                eng.time = max(eng.time, reqs[i].arrival)
                continue
            if eng.busy:
                raise RuntimeError("engine stuck: requests wait and nothing runs")
            return steps
    finally:
        eng.close()


def bigram_hashes(tokens, page: int, rid: str) -> tuple:
    """The radix tree's pages under is_eagle: page j's key is the bigrams of positions j·ps ..
    j·ps + ps − 1, so it reads one token past the page (the first output past the prompt's end:
    the request's own)."""
    n = len(tokens)
    return tuple(
        tuple(tokens[i : i + page + 1]) if i + page < n else tuple(tokens[i : i + page]) + (("own", rid),)
        for i in range(0, n // page * page, page)
    )


def chunksim_spec_steps(sc: SpecScenario, ablate: str | None = None) -> list:
    import numpy as np

    from simcore.kv import BlockPool
    from simcore.simulation import Simulation
    from workloads.workload import Workload

    from .unit_cost import UnitCost

    k = sc.knobs
    reqs = sorted(sc.requests, key=lambda r: (r.arrival, r.rid))
    names = [r.rid for r in reqs]
    hashes = None
    if not k.disable_radix_cache:
        hashes = [
            page_hashes(r.tokens, k.page_size) if ablate == "no-bigram" else bigram_hashes(r.tokens, k.page_size, r.rid)
            for r in reqs
        ]
    wl = Workload(
        np.array([r.arrival for r in reqs], float),
        np.array([len(r.tokens) for r in reqs]),
        np.array([r.max_new_tokens for r in reqs]),
        block_hashes=hashes,
        block_tokens=k.page_size,
        ignore_eos=np.array([r.ignore_eos for r in reqs]),
    )
    steps_, topk, draft = sc.params
    pol = policy_for(
        k,
        speculative_algorithm="EAGLE",
        speculative_num_steps=steps_,
        speculative_eagle_topk=topk,
        speculative_num_draft_tokens=draft,
        spec_acceptance=sc.acceptance,
        spec_seed=sc.seed,
    )
    ablations.apply(pol, ablate)
    pool = BlockPool(k.pool_tokens // k.page_size, k.page_size)
    sim = Simulation([(pol, pool, UnitCost())], wl, record_iterations=True, max_model_len=1 << 30, check=True)
    res = sim.run()
    out = []
    for _, start, end, _n, plan in res.iterations or ():
        rec = Step(int(start))
        for req, q in plan.items:
            rec.tokens[names[req.rid]] = q
            if req.finish_s is not None and req.finish_s == end:
                rec.finished.append(names[req.rid])
        rec.retracted = [names[r.rid] for r in plan.preempted]
        out.append(rec)
    return out


class ablations:
    """Rules broken in chunksim's policy, each of which the comparison must catch."""

    NAMES = ("no-2L-reserve", "free-rejected", "no-bigram", "no-overlap-finishing-rule")

    @staticmethod
    def apply(pol, name):
        if name is None:
            return
        if name == "no-bigram":  # plain page hashes (chunksim_spec_steps) and a plain tree
            pol.new_prefix_cache = types.MethodType(_plain_cache, pol)
            return
        if name == "no-2L-reserve":  # one verify's width only (L, not 2L)
            pol._reserve = pol.spec.alloc_len(pol.cfg.page_size)
        elif name == "free-rejected":  # A − C freed after each verify: allocate from C only (no held excess)
            orig = pol.spec_decode_need

            def need(pool, decoding, _orig=orig):
                bs = pool.block_size
                return (
                    sum(
                        max(0, -(-(r.num_computed_tokens + pol._reserve) // bs) - -(-r.num_computed_tokens // bs))
                        for r in decoding
                    )
                    * bs
                )

            pol.spec_decode_need = need
        elif name == "no-overlap-finishing-rule":  # every request finished in flight is left out
            pol.split_riders = lambda finishing: finishing
        else:
            raise ValueError(name)


def _plain_cache(pol, bt, eb):
    from simcore.radix_cache import RadixCache

    pol._cache = RadixCache(bt, eb)
    return pol._cache


def compare_spec(sc: SpecScenario, engine_steps: list, ablate: str | None = None) -> Verdict:
    mine = chunksim_spec_steps(sc, ablate)
    retr = sum(len(s.retracted) for s in engine_steps)
    for i, (a, b) in enumerate(zip(engine_steps, mine)):
        if a.key() != b.key():
            return Verdict(
                sc.name,
                False,
                len(engine_steps),
                retr,
                f"step {i} (t={a.time}): sglang {a.tokens} retract={a.retracted} fin={a.finished} | "
                f"chunksim t={b.time} {b.tokens} retract={b.retracted} fin={b.finished}",
            )
    if len(engine_steps) != len(mine):
        return Verdict(
            sc.name, False, len(engine_steps), retr, f"sglang ran {len(engine_steps)} steps, chunksim {len(mine)}"
        )
    return Verdict(sc.name, True, len(engine_steps), retr)


def random_spec_scenario(config: str, seed: int) -> SpecScenario:
    """A base scenario (sglang_scenarios.random_scenario's generator, radix and mixed drawn) with the
    configuration's page size, overlap, spec parameters and pool: ample, or tight enough to retract
    under the 2L reserve."""
    overlap, page, params, tight = CONFIGS[config]
    rng = random.Random(f"spec/{config}/{seed}")
    mixed = rng.random() < 0.3
    radix = rng.random() < 0.5
    base_name = f"{'overlap/' if overlap else ''}mixed-{'on' if mixed else 'off'}/radix-{'on' if radix else 'off'}/{'tight' if tight else 'ample'}"
    b = base_scenario(base_name, seed)
    steps, topk, draft = params
    spec = SGLangSpec("EAGLE", steps, topk, draft)
    reserve = spec.reserve(page)
    k = b.knobs
    chunk = k.chunked_prefill_size
    if chunk is not None:
        chunk = max(chunk, page)
    # sglang_scenarios keeps one ignore_eos setting when page > 1 and the radix cache is off (an
    # SGLang 0.5.23 quirk chunks two requests in one batch otherwise); the page is set here
    uniform = page > 1 and k.disable_radix_cache
    eos = b.requests[0].ignore_eos
    reqs = [Req(r.rid, r.arrival, r.tokens, r.max_new_tokens, eos if uniform else r.ignore_eos) for r in b.requests]
    longest = max(len(r.tokens) + r.max_new_tokens for r in reqs)
    per_req = [-(-(len(r.tokens) + r.max_new_tokens + reserve) // page) * page + page for r in reqs]
    if tight:
        pool = max(max(per_req) + 2 * page + reserve, int(sum(per_req) * rng.uniform(0.25, 0.6)))
    else:
        pool = sum(per_req) * 2 + 64 * page + longest
    pool = -(-pool // page) * page + page
    knobs = replace(
        k,
        pool_tokens=pool,
        page_size=page,
        chunked_prefill_size=chunk,
        disable_overlap_schedule=not overlap,
        schedule_conservativeness=1.0,
    )
    return SpecScenario(f"{config}#{seed}", Scenario(b.name, knobs, reqs), params, seed)
