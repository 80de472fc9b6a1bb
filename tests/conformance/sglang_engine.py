"""SGLang's own scheduler, driven on CPU one step at a time (needs `pip install chunksim[conformance]`).

Unmodified SGLang objects do the deciding: `Req`, `PrefillAdder` (with its `PrefillBudget`),
`SchedulePolicy`, `RadixCache`, the `PagedTokenToKVPoolAllocator` and `ReqToTokenPool` (torch
tensors on CPU), and the KV bookkeeping of sglang/srt/mem_cache/common.py (`checkpoint_kv_cache`,
`release_kv_cache`, `evict_from_tree_cache`) and schedule_batch.py (`release_req`). What this file
writes itself is the glue that SGLang keeps on `Scheduler` and `ScheduleBatch`, whose constructors
need a model and a GPU; each method names the function it follows. The model forward is a stub:
every request whose prefill completes, and every decode, samples a token of its own (one id per
request, above every prompt token), and a request finishes by length at max_new_tokens, which is
what chunksim's fixed output lengths are.

The loop is SGLang's too, in either form: event_loop_normal (Knobs.disable_overlap_schedule) or
event_loop_overlap, SGLang's default, whose ordering (batch n+1 formed before batch n's result is
processed; Scheduler._reqs_finishing_inflight; update_running_batch returning None while a
finishing request's KV is still held; results of retracted requests dropped) is reproduced here
function by function (``_step_overlap``): the real loop needs a model worker, CUDA streams and the
future map of sampled tokens, none of which scheduling reads. Own tokens, because chunksim's prefix cache names a
request's generated blocks after the request alone: with a shared token, a cached output could
match another request's prompt or output, which no real workload's block hashes say.

Importing SGLang on CPU: sglang/srt/configs/__init__.py imports every model's config eagerly (and
through them torchvision, whose PyPI wheels need CUDA), so the package is entered without that
file (`_light_import`); the configs that scheduling reads are plain imports of their own modules.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import types
from array import array
from dataclasses import dataclass, field

SGLANG_VERSION = "0.5.23"
OUTPUT_TOKEN_BASE = 1 << 16  # sampled tokens: OUTPUT_TOKEN_BASE + the request's index (prompts stay below)


def _light_import() -> None:
    """Enter sglang.srt.configs without its eager registry, and torchvision as an empty stand-in
    (only image preprocessing uses it). transformers is imported first, so it sees no torchvision."""
    if "sglang.srt.configs" in sys.modules:
        return
    import transformers  # noqa: F401
    from transformers import AutoImageProcessor, AutoProcessor  # noqa: F401

    spec = importlib.util.find_spec("sglang")
    if spec is None:
        raise ImportError("sglang is not installed (pip install 'chunksim[conformance]')")
    d = os.path.join(spec.submodule_search_locations[0], "srt", "configs")
    m = types.ModuleType("sglang.srt.configs")
    m.__path__, m.__file__ = [d], os.path.join(d, "__init__.py")
    m.__spec__ = importlib.machinery.ModuleSpec("sglang.srt.configs", None, is_package=True)
    m.__spec__.submodule_search_locations = [d]
    absent: dict = {}

    def config_class(name):
        if name.startswith("__"):
            raise AttributeError(name)
        return absent.setdefault(name, type(name, (), {"model_type": "absent-" + name}))

    m.__getattr__ = config_class
    sys.modules["sglang.srt.configs"] = m
    try:
        import torchvision  # noqa: F401
    except Exception:
        _stub_module_tree(("torchvision", "torchvision.transforms", "torchvision.transforms.functional"))


def _stub_module_tree(names) -> None:
    class _Meta(type):
        def __getattr__(cls, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return cls

    class _Any(metaclass=_Meta):
        def __init__(self, *a, **k):
            pass

    def anything(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Any

    for name in names:
        m = types.ModuleType(name)
        m.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
        m.__path__, m.__file__ = [], "/nonexistent/" + name.replace(".", "/") + ".py"
        m.__getattr__ = anything
        sys.modules[name] = m


_SG = None


def _sglang():
    """SGLang's modules, imported once, with a ServerArgs published (the config bags PrefillAdder reads)."""
    global _SG
    if _SG is not None:
        return _SG
    import warnings

    warnings.filterwarnings("ignore")
    _light_import()
    import sglang
    import torch
    from sglang.srt import runtime_context
    from sglang.srt.environ import envs
    from sglang.srt.managers import schedule_batch, schedule_policy
    from sglang.srt.managers.scheduler_components.new_token_ratio_tracker import NewTokenRatioTracker
    from sglang.srt.mem_cache import common
    from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
    from sglang.srt.mem_cache.radix_cache import RadixCache
    from sglang.srt.sampling.sampling_params import SamplingParams
    from sglang.srt.server_args import ServerArgs

    if sglang.__version__ != SGLANG_VERSION:
        warnings.warn(
            f"driving SGLang {sglang.__version__}; the policy was checked against {SGLANG_VERSION}", stacklevel=2
        )
    runtime_context.publish(ServerArgs(model_path="dummy", device="cpu", skip_tokenizer_init=True), role="scheduler")
    _SG = types.SimpleNamespace(
        torch=torch,
        envs=envs,
        sb=schedule_batch,
        sp=schedule_policy,
        common=common,
        Paged=PagedTokenToKVPoolAllocator,
        CacheInitParams=CacheInitParams,
        ReqToTokenPool=ReqToTokenPool,
        RadixCache=RadixCache,
        SamplingParams=SamplingParams,
        Tracker=NewTokenRatioTracker,
        version=sglang.__version__,
    )
    return _SG


@dataclass
class Knobs:
    """The engine flags a scenario sets (SGLang's server-argument names)."""

    pool_tokens: int  # max_total_num_tokens
    page_size: int = 1
    chunked_prefill_size: int | None = 8192  # None: chunking off
    max_prefill_tokens: int = 16384
    max_running_requests: int = 4096
    enable_mixed_chunk: bool = False
    disable_radix_cache: bool = True
    disable_overlap_schedule: bool = True  # False: event_loop_overlap (SGLang's default on CUDA)
    schedule_conservativeness: float = 1.0  # 0.3 under DP attention


@dataclass
class Step:
    """What one engine step did: tokens per request (extend or decode), retractions, finishes."""

    time: int
    tokens: dict = field(default_factory=dict)
    retracted: list = field(default_factory=list)
    finished: list = field(default_factory=list)

    def key(self):
        return (
            self.time,
            tuple(sorted(self.tokens.items())),
            tuple(sorted(self.retracted)),
            tuple(sorted(self.finished)),
        )


class _Batch:
    """The part of ScheduleBatch that scheduling reads: its requests and batch_is_full."""

    def __init__(self, reqs=None, extend=False):
        self.reqs, self.batch_is_full, self.extend = list(reqs or []), False, extend
        self.decoding_reqs = None
        self.return_logprob = False
        self.is_prefill_only = False

    def batch_size(self):
        return len(self.reqs)

    def is_empty(self):
        return not self.reqs

    def filter_batch(self, reqs_to_exclude=None, keep_indices=None):
        """ScheduleBatch.filter_batch: keep the unfinished requests not excluded."""
        if keep_indices is None:
            ex = reqs_to_exclude or []
            self.reqs = [r for r in self.reqs if not r.finished() and r not in ex]
        else:
            self.reqs = [self.reqs[i] for i in keep_indices]


class SGLangEngine:
    """Scheduler.event_loop_normal or event_loop_overlap around SGLang's own admission, radix cache
    and allocator."""

    def __init__(self, knobs: Knobs, max_context_len: int = 1 << 16):
        sg = self.sg = _sglang()
        self.k = knobs
        ps = knobs.page_size
        self.alloc = sg.Paged(knobs.pool_tokens, ps, sg.torch.int64, "cpu", None, False)
        self.r2t = sg.ReqToTokenPool(knobs.max_running_requests, max_context_len, "cpu", False)
        self.tree = sg.RadixCache(
            sg.CacheInitParams(
                disable=knobs.disable_radix_cache,
                req_to_token_pool=self.r2t,
                token_to_kv_pool_allocator=self.alloc,
                page_size=ps,
            )
        )
        self.policy = sg.sp.SchedulePolicy("fcfs", self.tree, False, False, False)
        init = min(sg.envs.SGLANG_INIT_NEW_TOKEN_RATIO.get() * knobs.schedule_conservativeness, 1.0)
        low = min(init * sg.envs.SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR.get(), 1.0)
        self.ratio = sg.Tracker(
            init=init, min=low, decay=(init - low) / sg.envs.SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS.get(), current=init
        )
        self.waiting: list = []
        self.running = _Batch()
        self.last_batch = None
        self.chunked_req = None
        self.time = 0
        self._sampled: dict = {}  # rid → the token its fake forward samples
        self.overlap = not knobs.disable_overlap_schedule
        self.result_queue: list = []  # event_loop_overlap: (batch, its requests, its decodes, its Step), unprocessed
        self.progressed = False  # the last step() processed a result without running a batch

    def add(self, rid: str, tokens, max_new_tokens: int, ignore_eos: bool) -> None:
        """Scheduler._add_request_to_queue: to the back of the waiting queue."""
        sp = self.sg.SamplingParams(max_new_tokens=max_new_tokens, ignore_eos=ignore_eos)
        sp.normalize(None)
        req = self.sg.sb.Req(rid, "", array("q", tokens), sp, vocab_size=1 << 20)
        self._sampled[rid] = OUTPUT_TOKEN_BASE + len(self._sampled)
        self.waiting.append(req)

    @property
    def busy(self) -> bool:
        return bool(
            self.waiting
            or self.running.reqs
            or self.chunked_req
            or (self.last_batch and self.last_batch.reqs)
            or self.result_queue
        )

    # --- Scheduler.get_next_batch_to_run ---------------------------------------------------------
    def get_next_batch_to_run(self):
        """Scheduler.get_next_batch_to_run: stash the chunked request (checkpoint_kv_cache), merge
        the last prefill batch into the running batch, then a prefill batch if one forms, else the
        running batch's decode (update_running_batch)."""
        running, last = self.running, self.last_batch
        exclude = []
        if self.chunked_req is not None:
            exclude.append(self.chunked_req)
            if self.chunked_req.extend_end > self.chunked_req.prefix_len:
                self.sg.common.checkpoint_kv_cache(self.chunked_req, self.tree)
        if last is not None and last.extend:
            bs = last.batch_size()
            last.filter_batch(reqs_to_exclude=exclude)
            if last.batch_size() < bs:
                running.batch_is_full = False
            if not last.is_empty() and last is not running:
                if running.is_empty():
                    running = last
                    running.extend = False
                else:
                    running.reqs += last.reqs
        bs = running.batch_size()
        running.filter_batch()
        if running.batch_size() < bs:
            running.batch_is_full = False
        new_batch, running = self._get_new_batch_prefill_raw(running)
        self.running = running
        if new_batch is not None:
            return new_batch
        if not running.is_empty():
            return self.update_running_batch(running)
        return None

    def _allocatable(self, running_bs: int, held: int = 0) -> int:
        """Scheduler.get_num_allocatable_reqs: pp_max_micro_batch_size (max_running_requests) less
        the running batch, and the free req_to_token rows plus those the counted requests hold."""
        return min(self.k.max_running_requests - running_bs, max(self.r2t.available_size() + held, 0))

    def _get_new_batch_prefill_raw(self, running):
        """Scheduler._get_new_batch_prefill_raw, for one GPU with no LoRA, HiCache, grammar or priority."""
        sg, k = self.sg, self.k
        if running.is_empty():
            running.batch_is_full = False
        if (running.batch_is_full or not self.waiting) and self.chunked_req is None:
            return None, running
        running_bs = len(running.reqs)
        if self._allocatable(running_bs) <= 0 and self.chunked_req is None:
            running.batch_is_full = True
            return None, running
        self.policy.calc_priority(self.waiting, running)
        adder = sg.sp.PrefillAdder(
            k.page_size,
            self.tree,
            self.alloc,
            running,
            self.ratio.current,
            k.max_prefill_tokens,
            k.chunked_prefill_size,
            running_bs if self.mixed else 0,
            0,
            max_running_requests=k.max_running_requests,
            waiting_queue_len=len(self.waiting),
        )
        if self.chunked_req is not None:
            self.chunked_req.init_next_round_input()
            adder.chunked_req_limit = self.policy.shortest_prefill_chunk_limit(
                self.chunked_req, self.waiting, adder.rem_chunk_tokens or 0, k.page_size
            )
            self.chunked_req = adder.add_chunked_req(self.chunked_req)
        for req in self.waiting:
            if adder.budget_state() == sg.sp.AddReqResult.OTHER:
                break
            held = sum(r.kv.holds_kv for r in adder.can_run_list)
            if len(adder.can_run_list) >= self._allocatable(len(running.reqs), held):
                running.batch_is_full = True
            if running.batch_is_full:
                break
            req.init_next_round_input(self.tree)
            res = adder.add_one_req(req, has_chunked_req=self.chunked_req is not None, truncation_align_size=None)
            if res != sg.sp.AddReqResult.CONTINUE:
                if res == sg.sp.AddReqResult.NO_TOKEN:
                    running.batch_is_full = len(adder.can_run_list) > 0 or not running.is_empty()
                break
        can_run = adder.can_run_list
        if not can_run:
            return None, running
        chosen = set(map(id, can_run))
        self.waiting = [r for r in self.waiting if id(r) not in chosen]
        if adder.new_chunked_req is not None:
            assert self.chunked_req is None
            self.chunked_req = adder.new_chunked_req
        if self.chunked_req is not None:
            self.chunked_req.inflight_middle_chunks += 1
        batch = _Batch(can_run, extend=True)
        self._prepare_for_extend(batch)
        if self.mixed and not running.is_empty():
            finishing = self._reqs_finishing_inflight(running)
            running.filter_batch(reqs_to_exclude=finishing)
            if finishing:
                running.batch_is_full = False
            if not running.is_empty() and self.check_decode_mem(running.reqs):
                self._prepare_for_decode(running)
                for r in running.reqs:  # ScheduleBatch.mix_with_running: a tail's extend ends at its row length
                    r.extend_end = r.kv.kv_allocated_len
                batch.decoding_reqs = running.reqs
                batch.reqs = batch.reqs + running.reqs
                full = running.batch_is_full
                running = _Batch()
                running.batch_is_full = full
        return batch, running

    @property
    def mixed(self) -> bool:
        return self.k.enable_mixed_chunk and self.k.chunked_prefill_size is not None

    # --- KV allocation (mem_cache/allocation.py) -------------------------------------------------
    def _take(self, req, new_len: int) -> None:
        """Positions [kv_allocated_len, new_len) of req's row get KV slots: the rest of its last
        page, then whole new pages (PagedTokenToKVPoolAllocator.alloc_extend / alloc_decode)."""
        torch, ps = self.sg.torch, self.k.page_size
        row = self.r2t.req_to_token[req.kv.req_pool_idx]
        have = req.kv.kv_allocated_len
        pages = -(-new_len // ps) - -(-have // ps)
        fresh = self.alloc.alloc(pages * ps) if pages else torch.empty(0, dtype=torch.int64)
        assert fresh is not None, "allocation failed: admission let through more than the pool holds"
        if have % ps:
            base = int(row[have - 1]) + 1
            tail = torch.arange(base, base + min(ps - have % ps, new_len - have), dtype=torch.int64)
            fresh = torch.cat((tail, fresh))
        row[have:new_len] = fresh[: new_len - have].to(torch.int32)
        req.kv.kv_allocated_len = req.kv.kv_committed_len = new_len

    def _prepare_for_extend(self, batch) -> None:
        """ScheduleBatch.prepare_for_extend → alloc_for_extend: evict for the extend tokens (plus a
        page per request when paged), a req_to_token row for each new request, its matched prefix
        written into the row, then the extend's slots; a retracted request is running again."""
        sg, ps = self.sg, self.k.page_size
        extend_tokens = sum(r.extend_len for r in batch.reqs)
        need = extend_tokens + (len(batch.reqs) * ps if ps > 1 else 0)
        prefixes = [
            None if r.kv.holds_kv or not r.prefix_len else self.tree.prefix_device_indices(r) for r in batch.reqs
        ]
        sg.common.evict_from_tree_cache(self.tree, need)
        self.r2t.alloc(batch.reqs)
        for r, prefix in zip(batch.reqs, prefixes):
            if prefix is not None:
                self.r2t.req_to_token[r.kv.req_pool_idx, : r.prefix_len] = prefix.to(sg.torch.int32)
                r.kv.kv_allocated_len = r.kv.kv_committed_len = r.prefix_len
            self._take(r, r.extend_end)
            r.is_retracted = False

    def _prepare_for_decode(self, batch) -> None:
        """ScheduleBatch.prepare_for_decode → alloc_for_decode: evict one page per request (one token
        unpaged), then one slot each."""
        ps = self.k.page_size
        self.sg.common.evict_from_tree_cache(self.tree, len(batch.reqs) * ps)
        for r in batch.reqs:
            self._take(r, r.kv.kv_allocated_len + 1)

    def check_decode_mem(self, reqs) -> bool:
        """ScheduleBatch.check_decode_mem / new_tokens_required_next_decode: a page for each request
        whose committed length is page-aligned, checked by the allocator after evicting."""
        ps = self.k.page_size
        need = sum(1 for r in reqs if r.kv.kv_committed_len % ps == 0) * ps
        return self.alloc.check_decode_capacity(num_tokens=need, tree_cache=self.tree, requests=reqs)

    # --- Scheduler.update_running_batch ----------------------------------------------------------
    def update_running_batch(self, batch):
        """Scheduler.update_running_batch: retract (ScheduleBatch.retract_decode) when the next decode
        does not fit, else decay the new-token ratio; then the decode."""
        initial = batch.batch_size()
        self._retracted = []
        finishing = self._reqs_finishing_inflight(batch)
        batch.filter_batch(reqs_to_exclude=finishing)
        if batch.is_empty():
            batch.batch_is_full = False
            return None
        fits = self.check_decode_mem(batch.reqs)
        if not fits and finishing:  # the queued result frees the finishing requests' KV: decode next step
            batch.batch_is_full = False
            return None
        if not fits:
            self._retracted, self.ratio.current = self.retract_decode(batch)
            for req in self._retracted:
                self.waiting.append(req)
        else:
            self.ratio.decay_step()
        if batch.batch_size() < initial:
            batch.batch_is_full = False
        if batch.is_empty():
            return None
        self._prepare_for_decode(batch)
        return batch

    def _reqs_finishing_inflight(self, batch) -> list:
        """Scheduler._reqs_finishing_inflight (overlap only: enable_skip_finishing_decode): the
        requests of the queued (unprocessed) batch whose result commits their last output by
        length (Req.next_output_finishes_by_length: len(output_ids) + 1 >= max_new_tokens)."""
        if not self.overlap or not self.result_queue:
            return []
        assert len(self.result_queue) == 1
        queued = set(map(id, self.result_queue[0][1]))
        return [r for r in batch.reqs if id(r) in queued and len(r.output_ids) + 1 >= r.sampling_params.max_new_tokens]

    def retract_decode(self, batch):
        """ScheduleBatch.retract_decode: most output tokens kept first, then shortest prompt
        (_get_decode_retraction_order); pop from the end until the rest's next decode fits
        (check_decode_mem), keeping at least one; each goes through release_req."""
        sg = self.sg
        reqs = batch.reqs
        order = sorted(
            range(len(reqs)), key=lambda i: (len(reqs[i].output_ids), -len(reqs[i].origin_input_ids)), reverse=True
        )
        out, first = [], True
        while first or not self.check_decode_mem([reqs[i] for i in order]):
            if len(order) == 1:
                break
            first = False
            i = order.pop()
            sg.sb.release_req(
                req=reqs[i],
                remaing_req_count=len(order),
                req_to_token_pool=self.r2t,
                token_to_kv_pool_allocator=self.alloc,
                tree_cache=self.tree,
                hisparse_coordinator=None,
            )
            out.append(reqs[i])
        assert self.check_decode_mem([reqs[i] for i in order]), "even one request cannot decode"
        batch.filter_batch(keep_indices=order)
        ratio = sg.Tracker.estimate_new_token_ratio_after_retract(batch.reqs)
        return out, ratio

    # --- the loop --------------------------------------------------------------------------------
    def step(self) -> Step | None:
        """One pass of Scheduler.event_loop_normal, or of event_loop_overlap; None when the engine
        ran nothing and had no result to process."""
        return self.launch(*self.form())

    def form(self):
        """The loop's first half: get_next_batch_to_run, and the step's record so far."""
        self._retracted = []
        self.progressed = False
        batch = self.get_next_batch_to_run()
        rec = Step(self.time, retracted=[r.rid for r in self._retracted])
        self._retracted = []
        return batch, rec

    def launch(self, batch, rec) -> Step | None:
        """The loop's second half: run the batch (an empty one is DP attention's idle batch: it runs,
        computes nothing, and keeps the rank out of on_idle) and process a result."""
        if self.overlap:
            return self._step_overlap(batch, rec)
        if batch is None:
            if not self.busy:
                self.ratio.reset()  # Scheduler.on_idle
            self.last_batch = None
            return rec if rec.retracted else None
        self._record(batch, rec)
        self._process(batch.extend, batch.reqs, batch.decoding_reqs, rec)
        self.last_batch = batch
        self.time += 1
        return rec

    def _step_overlap(self, batch, rec) -> Step | None:
        """Scheduler.event_loop_overlap: batch n+1 was formed above before batch n's result is
        processed (so n's tokens are not in output_ids yet, its finished requests still hold
        their KV and req_to_token rows, and its completed prefills are not checkpointed); then
        n+1 is launched (run_batch; result_queue.append), then n's result is processed
        (pop_and_process). is_disable_overlap_for_batch is False here: it needs
        SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP (default off) or a speculative grammar."""
        if batch is not None:
            self._record(batch, rec)
            self.result_queue.append((batch.extend, list(batch.reqs), batch.decoding_reqs, rec))
            self.time += 1
        if self.last_batch is not None:
            extend, reqs, decoding, done = self.result_queue.pop(0)
            self._process(extend, reqs, decoding, done)
            self.progressed = batch is None
        elif batch is None and not self.busy:
            self.ratio.reset()  # Scheduler.on_idle
        self.last_batch = batch
        if batch is None:
            return rec if rec.retracted else None
        return rec

    def _record(self, batch, rec) -> None:
        """The tokens each request computes in the batch, as it is launched."""
        decoding = set(map(id, batch.decoding_reqs or ()))
        for req in batch.reqs:
            rec.tokens[req.rid] = 1 if not batch.extend or id(req) in decoding else req.extend_len

    def _process(self, extend, reqs, decoding, rec) -> None:
        if extend:
            self._process_prefill(reqs, decoding, rec)
        else:
            self._process_decode(reqs, rec)

    def _process_prefill(self, reqs, decoding_reqs, rec) -> None:
        """BatchResultProcessor.process_batch_result_prefill: a request whose prefill completed
        samples a token; finished → release_kv_cache(checkpoint=True), else, if not a mixed decode,
        checkpoint_kv_cache (its prompt enters the radix tree while it runs); a chunk that does not
        complete the prompt only counts down inflight_middle_chunks. A finished or retracted
        request's result is dropped (overlap: retracted after the batch was launched)."""
        sg = self.sg
        decoding = set(map(id, decoding_reqs or ()))
        for req in reqs:
            if req.finished() or req.is_retracted:
                continue
            if req.inflight_middle_chunks <= 0:
                req.output_ids.append(self._sampled[req.rid])
                req.update_finish_state()
                if req.finished():
                    sg.common.release_kv_cache(req, self.tree, checkpoint=True)
                    rec.finished.append(req.rid)
                elif id(req) not in decoding:
                    sg.common.checkpoint_kv_cache(req, self.tree)
            else:
                req.inflight_middle_chunks -= 1
        for req in decoding_reqs or ():
            req.refresh_fill_ids()

    def _process_decode(self, reqs, rec) -> None:
        """BatchResultProcessor.process_batch_result_decode: one token each; finished → release_kv_cache.
        Under overlap a request retracted after the batch was launched drops its token."""
        sg = self.sg
        for req in reqs:
            if self.overlap and (req.finished() or req.is_retracted):
                continue
            req.output_ids.append(self._sampled[req.rid])
            req.update_finish_state()
            if req.finished():
                sg.common.release_kv_cache(req, self.tree, checkpoint=True)
                rec.finished.append(req.rid)
            else:
                req.refresh_fill_ids()


def run_engine(scenario, max_steps: int = 100_000) -> list:
    """The engine's steps for a scenario: requests join the waiting queue at their arrival step;
    an idle engine jumps to the next arrival."""
    eng = SGLangEngine(
        scenario.knobs, max_context_len=max(len(r.tokens) + r.max_new_tokens for r in scenario.requests) + 8
    )
    pending = sorted(scenario.requests, key=lambda r: (r.arrival, r.rid))
    i, steps = 0, []
    while True:
        while i < len(pending) and pending[i].arrival <= eng.time:
            r = pending[i]
            eng.add(r.rid, r.tokens, r.max_new_tokens, r.ignore_eos)
            i += 1
        rec = eng.step()
        if eng.progressed:  # overlap: a result processed, nothing launched; form the next batch now
            if rec is not None:
                steps.append(rec)
            continue
        if rec is not None:
            steps.append(rec)
            if rec.tokens:
                if len(steps) > max_steps:
                    raise RuntimeError("too many steps")
                continue
        if i < len(pending):
            eng.time = max(eng.time, pending[i].arrival)
            continue
        if eng.busy:
            raise RuntimeError("engine stuck: requests wait and nothing runs")
        return steps
