"""SGLang 0.5.23's prefill server under PD disaggregation (``--disaggregation-mode prefill``), driven
on CPU one loop iteration at a time, against chunksim's model of it (policies/sglang_pd_prefill.py)
in the reference loop.

SGLang side, unmodified (sglang/srt/disaggregation/prefill.py): ``PrefillBootstrapQueue`` (its
``add`` / ``create_sender`` / ``_process_req``, ``pop_bootstrapped`` with ``ensure_metadata_buffer``
and ``finalize_bootstrap`` over a ``ReqToMetadataIdxAllocator`` of 2 × max_running_requests), and
the methods of ``SchedulerDisaggregationPrefillMixin``, called on the engine below (which inherits
the mixin): ``get_next_disagg_prefill_batch_to_run`` (with ``resolve_waiting_queue_bootstrap`` and
``process_prefill_chunk``), ``process_batch_result_disagg_prefill``, ``send_kv_chunk`` /
``_send_kv_chunk``, ``process_disagg_prefill_inflight_queue`` (release_kv_cache, the metadata
buffer freed by ``maybe_release_metadata_buffer``), ``checkpoint_disagg_prefill``,
``check_bootstrap``. The prefill batch itself is SGLangEngine's glue over SGLang's own PrefillAdder,
RadixCache and allocator (sglang_engine.py: ``_get_new_batch_prefill_raw``, ``_prepare_for_extend``),
over the running batch a prefill server keeps empty.

What is written here, and why: the two loops' bodies (``event_loop_normal_disagg_prefill``,
``event_loop_overlap_disagg_prefill``: one iteration each, in their order; the real loops never
return and ingest over ZMQ), ``run_batch`` (a stub forward whose result carries one sampled token
per request), ``get_new_batch_prefill`` (SGLangEngine's), and the Scheduler attributes the mixin
reads (stubs for metrics, streaming, hicache, DP attention; the attention-TP gloo group is a
one-process group, as sglang_pd_queues.py builds it). The KV sender is ``FakeKVSender`` with its
``poll`` scripted (``ScriptedSender``): ``Bootstrapping`` until the scenario's preallocation step
(the decode server has reserved the KV), then ``WaitingForInput``, then ``Success`` ``delay``
steps after the send of the last chunk; every ``send`` is recorded as a (first token, end) range.

chunksim side: one ``SteppingReplica`` over UnitCost (a step lasts 1 s) running SGLangPDPrefill
(built by experiments/engines.py build_engine from the same flags), with ``StubTransfers`` in the
place of simcore/disagg_sglang.py: a decode side that preallocates at the scenario's step
(``connector.ready``), records the plan's chunk pushes and the final push, and completes each
transfer ``delay`` steps after the final push (``replica.kv.sent``).

A record, per step t: ({rid: tokens} of the batch formed at t, the queues (bootstrap, waiting,
inflight) as they stand when it is formed, the sends made at t (rid, start, end, last), the rids
whose transfer was seen complete at t).
"""

from __future__ import annotations

import types
from array import array
from dataclasses import dataclass

import numpy as np

from .sglang_engine import OUTPUT_TOKEN_BASE, Knobs, SGLangEngine, _Batch, _sglang
from .sglang_pd_queues import publish_scheduler_args


@dataclass
class PrefillScenario:
    """One prefill server and its requests: (arrival step, prompt tokens), the step at which each
    one's decode server preallocates (>= arrival), and each transfer's length in steps after the
    final send (>= 1)."""

    name: str
    pool_tokens: int
    page_size: int
    max_running: int
    chunk: int | None
    radix: bool
    overlap: bool
    requests: list  # (arrival, tokens)
    ready: list
    delays: list
    max_prefill_tokens: int = 16384


CONFIGS = {  # name: (page size, radix cache, pool, chunked_prefill_size, max_running_requests, overlap)
    "p1-ample": (1, False, "ample", 512, 8, False),
    "p1-tight": (1, False, "tight", 256, 8, False),
    "p16-ample": (16, False, "ample", 512, 8, False),
    "p16-tight": (16, False, "tight", 256, 8, False),
    "p1-radix-tight": (1, True, "tight", 256, 8, False),
    "p16-radix-ample": (16, True, "ample", 1024, 8, False),
    "p16-radix-tight": (16, True, "tight", 128, 8, False),
    "p1-small-batch": (1, False, "ample", 4096, 2, False),
    "p16-radix-small-batch": (16, True, "tight", 128, 2, False),
    "overlap-p1-tight": (1, False, "tight", 256, 8, True),
    "overlap-p16-ample": (16, False, "ample", 512, 8, True),
    "overlap-p1-radix-tight": (1, True, "tight", 256, 8, True),
    "overlap-p16-radix-tight": (16, True, "tight", 128, 8, True),
    "overlap-p1-small-batch": (1, False, "ample", 4096, 2, True),
    "overlap-p16-radix-small-batch": (16, True, "tight", 128, 2, True),
}

_FAMILY = 8000  # shared-prefix tokens: family f's i-th token is f * _FAMILY + i (3 families)
_UNIQUE = 30000  # a request's own tokens count up from here (all below OUTPUT_TOKEN_BASE)


def random_scenario(config: str, seed: int) -> PrefillScenario:
    page, radix, size, chunk, running, overlap = CONFIGS[config]
    rng = np.random.default_rng([seed, sum(map(ord, config))])
    n = int(rng.integers(3, 25))
    span = int(rng.integers(1, 60))
    families = [int(rng.integers(1, 700)) for _ in range(3)]
    unique = _UNIQUE
    reqs = []
    for _ in range(n):
        length = int(rng.integers(1, 1200)) if rng.random() < 0.8 else int(rng.integers(1, 40))
        shared = 0
        toks: list = []
        if radix and rng.random() < 0.7:
            f = int(rng.integers(0, 3))
            shared = min(length, int(rng.integers(0, families[f] + 1)))
            toks = [f * _FAMILY + i for i in range(shared)]
        toks += list(range(unique, unique + length - shared))
        unique += length - shared
        reqs.append((int(rng.integers(0, span)), toks))
    longest = max(len(t) for _, t in reqs)
    if size == "ample":
        tokens = sum(len(t) for _, t in reqs) + page * (n + 2)
    else:
        # a margin over the longest prompt: one within a page or two of the pool is never admitted
        # (PrefillAdder wants its pages, its token and a spare; SGLang then waits forever, as chunksim)
        tokens = longest + 2 * page + 8 + int(rng.integers(0, longest + 1))
    tokens = -(-tokens // page) * page
    ready = [a + (0 if rng.random() < 0.3 else int(rng.integers(0, 25))) for a, _ in reqs]
    delays = [int(rng.integers(1, 21)) for _ in reqs]
    return PrefillScenario(f"{config}/{seed}", tokens, page, running, chunk, radix, overlap, reqs, ready, delays)


# --- SGLang ---------------------------------------------------------------------------------------


def _scripted_sender_class():
    from sglang.srt.disaggregation.base.conn import KVPoll
    from sglang.srt.disaggregation.fake.conn import FakeKVSender

    class ScriptedSender(FakeKVSender):
        """FakeKVSender whose handshake and transfer end when the scenario says: Bootstrapping until
        the decode side has preallocated (``ready`` step), WaitingForInput until ``delay`` steps
        after the send of the last chunk, then Success. Every send is logged."""

        def script(self, engine, req, ready: int, delay: int):
            self.engine, self.req, self.ready, self.delay, self.done_at = engine, req, ready, delay, None

        def poll(self):
            now = self.engine.now
            if now < self.ready:
                return KVPoll.Bootstrapping
            if self.done_at is None or now < self.done_at:
                return KVPoll.WaitingForInput
            return KVPoll.Success

        def send(self, kv_indices, state_indices=None, num_kv_tokens=None):
            super().send(kv_indices, state_indices, num_kv_tokens)
            last = state_indices is not None  # _send_kv_chunk passes state indices with the last segment only
            start = self.req.start_send_idx  # updated to the end after the sends (_send_kv_chunk)
            self.engine.log_send(self.req, start, start + num_kv_tokens, last)
            if last:
                self.done_at = self.engine.now + self.delay

    return ScriptedSender


class _PBatch(_Batch):
    """_Batch with the ScheduleBatch fields the prefill mixin reads."""

    def __init__(self, reqs=None, extend=True):
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        super().__init__(reqs, extend)
        self.forward_mode = ForwardMode.EXTEND
        self.chunked_req = None
        self.prefill_chunk_processed = False
        self.spec_info = None
        self.prefill_stats = None
        self.dp_cooperation_info = None

    def copy(self):
        b = _PBatch(self.reqs[:])
        b.chunked_req = self.chunked_req
        return b


def _nothing(*args, **kwargs):
    return None


def _mixin():
    from sglang.srt.disaggregation.prefill import SchedulerDisaggregationPrefillMixin

    return SchedulerDisaggregationPrefillMixin


_ENGINE_CLASS = None


def _engine_class():
    """PDPrefillEngine, built once SGLang is importable (the mixin is SGLang's)."""
    global _ENGINE_CLASS
    if _ENGINE_CLASS is None:
        _sglang()
        _ENGINE_CLASS = type("PDPrefillEngine", (_PDPrefillEngine, _mixin()), {})
    return _ENGINE_CLASS


class _PDPrefillEngine(SGLangEngine):
    """SGLang's prefill server: SGLangEngine's prefill batches under the Scheduler names the
    disaggregation mixin reads; the mixin's own methods do the rest (see the module)."""

    def __init__(self, sc: PrefillScenario):
        knobs = Knobs(
            sc.pool_tokens,
            page_size=sc.page_size,
            chunked_prefill_size=sc.chunk,
            max_prefill_tokens=sc.max_prefill_tokens,
            max_running_requests=sc.max_running,
            disable_radix_cache=not sc.radix,
            disable_overlap_schedule=not sc.overlap,
        )
        longest = max(len(t) for _, t in sc.requests)
        sg = _sglang()
        self._publish(sc)
        super().__init__(knobs, max_context_len=longest + 2 * sc.page_size + 8)
        import torch
        from sglang.srt.disaggregation.prefill import PrefillBootstrapQueue
        from sglang.srt.disaggregation.utils import MetadataBuffers, ReqToMetadataIdxAllocator, TransferBackend
        from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

        self.sc = sc
        self.enable_overlap = self.overlap
        self.now = 0
        self.sends: list = []  # (time, rid, start, end, last)
        self.released: list = []  # (time, rid)
        n_meta = 2 * sc.max_running  # Scheduler.init_disaggregation: max_running_requests * 2
        self.req_to_metadata_buffer_idx_allocator = ReqToMetadataIdxAllocator(n_meta)
        self.disagg_metadata_buffers = MetadataBuffers(n_meta, 16, torch.float32, 0)
        self.disagg_prefill_inflight_queue: list = []
        self.disagg_prefill_pending_chunk_rids: set = set()
        self.enable_staging = False
        self.kv_checksum_computer = None
        self.scheduler_stage_metrics = None
        self.processed_tokens_counter = 0
        # the Scheduler attributes PrefillBootstrapQueue and the mixin read, nothing else
        import torch.distributed as dist

        group = dist.group.WORLD
        self.attn_cp_cpu_group = self.attn_tp_cpu_group = group
        self.kv_shard_widening = 1
        self.rust_server = None
        self.server_args = self._args
        self.tp_worker = types.SimpleNamespace(
            model_runner=types.SimpleNamespace(
                kv_cache_dtype_str="bfloat16", effective_logical_max_total_num_tokens=sc.pool_tokens
            )
        )
        self.model_config = types.SimpleNamespace(
            num_hidden_layers=1, hf_text_config=None, get_total_num_kv_heads=lambda: 1
        )
        self.output_streamer = types.SimpleNamespace(stream_output=_nothing)
        self.batch_result_processor = types.SimpleNamespace(
            snapshot_auxiliary_output_starts=_nothing, move_logprobs_to_cpu=_nothing
        )
        self.metrics_reporter = types.SimpleNamespace(report_prefill_stats=_nothing, enable_metrics=False)
        self.spec_algorithm = types.SimpleNamespace(is_eagle=lambda: False, is_none=lambda: True)
        self.dp_attn_adapter = types.SimpleNamespace(maybe_prepare_mlp_sync_batch=lambda b: b)
        self.process_pending_chunked_abort = _nothing
        self._process_hicache_events = _nothing
        self.maybe_send_health_check_signal = _nothing
        self.retire_unadmitted_request = _nothing
        kv = MHATokenToKVPool(
            sc.pool_tokens, sc.page_size, torch.bfloat16, 1, 8, 1, "cpu", False, enable_alt_stream=False
        )
        self.q = PrefillBootstrapQueue(
            kv,
            None,
            self.req_to_metadata_buffer_idx_allocator,
            self.disagg_metadata_buffers,
            0,
            8998,
            sc.pool_tokens,
            self,
            None,
            TransferBackend.FAKE,
        )
        self.disagg_prefill_bootstrap_queue = self.q
        self._sender = _scripted_sender_class()
        self._room = 0
        self.result_queue_pd: list = []  # overlap: (batch copy, result), unprocessed
        self.sg = sg
        self.stats = {"chunked": False, "meta_blocked": False, "cache_hit": False}
        self._seen: set = set()

    def _publish(self, sc) -> None:
        """ServerArgs of a prefill server (the disaggregation and schedule bags the mixin reads) and
        the ranks get_parallel() reports, over a one-process gloo group."""
        from sglang.srt.server_args import ServerArgs

        self._args = ServerArgs(
            model_path="dummy",
            device="cpu",
            skip_tokenizer_init=True,
            disaggregation_mode="prefill",
            disaggregation_transfer_backend="mooncake",
            page_size=sc.page_size,
            chunked_prefill_size=sc.chunk or -1,
            max_running_requests=sc.max_running,
            disable_radix_cache=not sc.radix,
            disable_overlap_schedule=not sc.overlap,
        )
        publish_scheduler_args(self._args)

    # the Scheduler's names for SGLangEngine's state
    waiting_queue = property(lambda self: self.waiting, lambda self, v: setattr(self, "waiting", v))
    running_batch = property(lambda self: self.running, lambda self, v: setattr(self, "running", v))
    tree_cache = property(lambda self: self.tree)
    token_to_kv_pool_allocator = property(lambda self: self.alloc)
    req_to_token_pool = property(lambda self: self.r2t)

    def add_pd(self, rid: int, tokens, ready: int, delay: int) -> None:
        """Scheduler._add_request_to_queue (prefill mode): PrefillBootstrapQueue.add, which makes the
        sender and sets max_new_tokens = 1 (_process_req); the sender is then scripted."""
        from sglang.srt.disaggregation.utils import FAKE_BOOTSTRAP_HOST

        sp = self.sg.SamplingParams(max_new_tokens=1 << 14, ignore_eos=True)
        sp.normalize(None)
        req = self.sg.sb.Req(str(rid), "", array("q", tokens), sp, vocab_size=1 << 20)
        req.bootstrap_host, req.bootstrap_port, req.bootstrap_room = FAKE_BOOTSTRAP_HOST, 8998, self._room
        self._room += 1
        self._sampled[req.rid] = OUTPUT_TOKEN_BASE + len(self._sampled)
        self.q.add(req, 1)
        assert self.q.queue and self.q.queue[-1] is req, "the bootstrap queue refused a request"
        assert req.sampling_params.max_new_tokens == 1
        sender = self._sender(mgr=self.q.kv_manager, bootstrap_addr="fake:8998", bootstrap_room=req.bootstrap_room)
        sender.script(self, req, ready, delay)
        req.disagg_kv_sender = sender

    def log_send(self, req, start: int, end: int, last: bool) -> None:
        self.sends.append((self.now, int(req.rid), start, end, last))
        self.stats["chunked"] |= not last

    def get_new_batch_prefill(self, running_batch):
        """Scheduler.get_new_batch_prefill (no prefill delayer): _get_new_batch_prefill_raw, SGLangEngine's."""
        batch, running = self._get_new_batch_prefill_raw(running_batch)
        if batch is not None:
            pb = _PBatch(batch.reqs)
            pb.chunked_req = self.chunked_req  # ScheduleBatch.init_new(chunked_req=self.chunked_req)
            batch = pb
        return types.SimpleNamespace(batch_to_run=batch, running_batch=running)

    def run_batch(self, batch):
        """The forward: one sampled token per request (the scheduler's record of it)."""
        import torch

        return types.SimpleNamespace(
            logits_output=None,
            next_token_ids=torch.tensor([self._sampled[r.rid] for r in batch.reqs], dtype=torch.int64),
            extend_input_len_per_req=None,
            extend_logprob_start_len_per_req=None,
            copy_done=None,
            auxiliary_host_output=None,
            routed_experts_output=None,
            indexer_topk_output=None,
            next_draft_input=None,
            can_run_cuda_graph=False,
        )

    def on_idle(self) -> None:
        """Scheduler.on_idle: the new-token ratio back to its initial value when nothing is queued."""
        if not self.busy_pd:
            self.ratio.reset()

    def _form(self):
        """Both loops' first half: pop_bootstrapped into the waiting queue, then
        get_next_disagg_prefill_batch_to_run; the record of the batch and the queues."""
        self.waiting_queue.extend(self.q.pop_bootstrapped())
        if any(r.disagg_kv_sender.ready <= self.now for r in self.q.queue):
            self.stats["meta_blocked"] = True  # bootstrapped, but no metadata buffer free
        plan = self.get_next_disagg_prefill_batch_to_run(running_batch=self.running_batch, last_batch=self.last_batch)
        self.running_batch = plan.running_batch
        batch = plan.batch_to_run
        assert self.running_batch.is_empty(), "a prefill server's running batch stays empty"
        if batch is None:
            return None, None
        for r in batch.reqs:
            if r.rid not in self._seen:
                self._seen.add(r.rid)
                self.stats["cache_hit"] |= r.prefix_len > 0
        queues = (
            tuple(int(r.rid) for r in self.q.queue),
            tuple(int(r.rid) for r in self.waiting_queue),
            tuple(int(r.rid) for r in self.disagg_prefill_inflight_queue),
        )
        return batch, ({int(r.rid): r.extend_len for r in batch.reqs}, queues)

    def poll_inflight(self) -> int:
        done = self.process_disagg_prefill_inflight_queue()
        self.released += [(self.now, int(r.rid)) for r in done]
        return len(done)

    def iterate(self, clock: int):
        """One iteration of event_loop_normal_disagg_prefill or event_loop_overlap_disagg_prefill at
        step `clock`: (record or None, whether it changed anything a next iteration at once would see)."""
        self.now = clock
        batch, rec = self._form()
        if not self.overlap:
            if batch is not None:
                result = self.run_batch(batch)
                self.now = clock + 1  # the forward ran: its result is processed at the step's end
                self.process_batch_result_disagg_prefill(batch, result)
            else:
                self.on_idle()
            released = self.poll_inflight()
            self.last_batch = batch
            return rec, bool(released)
        # event_loop_overlap_disagg_prefill (no continuous input polling: its default): launch, then
        # process the oldest result, then poll the inflight queue
        processed = False
        if batch is not None:
            self.result_queue_pd.append((batch.copy(), self.run_batch(batch)))
        if self.last_batch is not None:
            oldest, result = self.result_queue_pd.pop(0)
            self.process_batch_result_disagg_prefill(oldest, result)
            processed = batch is None
        elif batch is None:
            self.on_idle()
        released = self.poll_inflight()
        self.last_batch = batch
        return rec, processed or bool(released)

    @property
    def busy_pd(self) -> bool:
        return bool(
            self.q.queue
            or self.waiting
            or self.chunked_req
            or self.disagg_prefill_inflight_queue
            or self.result_queue_pd
        )


def _put(records: dict, t: int, batch=None, queues=None, sends=(), released=()) -> None:
    rec = records.setdefault(t, [{}, None, [], []])
    if batch is not None:
        rec[0] = batch
    if queues is not None:
        rec[1] = queues
    rec[2].extend(sends)
    rec[3].extend(released)


def _frozen(records: dict) -> dict:
    return {t: (dict(sorted(a.items())), b, sorted(c), sorted(d)) for t, (a, b, c, d) in sorted(records.items())}


def run_sglang_prefill(sc: PrefillScenario, max_iterations: int = 100_000, stats: dict | None = None) -> dict:
    """SGLang's records: arrivals join the bootstrap queue at their step; an iteration with a batch
    lasts a step; one without that changed something is followed by another at once (the loop
    spins); else time jumps to the next arrival, preallocation or transfer end, where the idle loop's
    poll of the inflight queue comes first. `stats` gets what the run exercised (a chunked prompt, a
    bootstrapped request kept waiting for a metadata buffer, a radix-cache hit)."""
    eng = _engine_class()(sc)
    pending = sorted(((a, i) for i, (a, _) in enumerate(sc.requests)), reverse=True)
    records: dict = {}
    clock = 0
    for _ in range(max_iterations):
        while pending and pending[-1][0] <= clock:
            _, i = pending.pop()
            eng.add_pd(i, sc.requests[i][1], sc.ready[i], sc.delays[i])
        rec, changed = eng.iterate(clock)
        if rec is not None:
            _put(records, clock, *rec)
            clock += 1
            continue
        if changed:
            continue
        later = [pending[-1][0]] if pending else []
        for r in eng.q.queue:
            later.append(r.disagg_kv_sender.ready)
        for r in eng.disagg_prefill_inflight_queue:
            if r.disagg_kv_sender.done_at is not None:
                later.append(r.disagg_kv_sender.done_at)
        later = [t for t in later if t > clock]
        if not later:
            if eng.busy_pd:
                raise RuntimeError(f"{sc.name}: SGLang runs nothing and nothing is due (stuck)")
            break
        clock = min(later)
        eng.now = clock
        eng.poll_inflight()  # the spinning idle loop's poll at this instant, before it forms a batch
    else:
        raise RuntimeError(f"{sc.name}: SGLang did not drain in {max_iterations} iterations")
    for t, rid, start, end, last in eng.sends:
        _put(records, t, sends=[(rid, start, end, last)])
    for t, rid in eng.released:
        _put(records, t, released=[rid])
    assert eng.req_to_metadata_buffer_idx_allocator.available_size() == 2 * sc.max_running, "metadata buffers leaked"
    if stats is not None:
        stats.update(eng.stats)
    return _frozen(records)


# --- chunksim -------------------------------------------------------------------------------------


class _Recorder:
    """Wraps the policy: every plan's time, batch and queues (the inflight queue as SGLang's stands
    when the batch is formed: under the overlap, before the last step's completions join it)."""

    def __init__(self, policy, env, records):
        self._policy, self._env, self.records = policy, env, records

    def __getattr__(self, name):
        return getattr(self._policy, name)

    def schedule(self, s):
        q = s.connector
        before = tuple(r.rid for r in q.sending)
        plan = self._policy.schedule(s)
        if plan.items:
            inflight = before if q.lag else tuple(r.rid for r in q.sending)
            queues = (tuple(r.rid for r in q.bootstrap), tuple(r.rid for r in s.waiting), inflight)
            _put(self.records, int(self._env.now), {r.rid: n for r, n in plan.items}, queues)
        return plan


class StubTransfers:
    """The decode side and the link, for one prefill replica: preallocation at the scenario's step,
    pushes recorded, a transfer done `delay` steps after the final push."""

    def __init__(self, env, sc: PrefillScenario, records: dict):
        self.env, self.sc, self.records = env, sc, records

    def prealloc(self, replica, p) -> None:
        def ready(_e):
            replica.state.connector.ready.add(p)
            replica.notify()

        self.env.at(float(self.sc.ready[p.rid])).callbacks.append(ready)

    def loads_started(self, replica, items, now: float) -> None:
        _put(self.records, int(now), sends=[(p.rid, start, end, False) for p, start, end in items])

    def prefill_finished(self, replica, p, end: float) -> None:
        _, start, stop = replica.policy.final_send(replica.state.connector, p)
        _put(self.records, int(end), sends=[(p.rid, start, stop, True)])
        self.env.at(end + self.sc.delays[p.rid]).callbacks.append(lambda _e: replica.kv.sent(p))


def sglang_prefill_flags(sc: PrefillScenario) -> dict:
    """The scenario as SGLang's server args (engine flags), for build_engine."""
    return dict(
        disaggregation_mode="prefill",
        disaggregation_transfer_backend="mooncake",
        disable_overlap_schedule=not sc.overlap,
        disable_radix_cache=not sc.radix,
        page_size=sc.page_size,
        max_total_tokens=sc.pool_tokens,
        max_running_requests=sc.max_running,
        chunked_prefill_size=sc.chunk or -1,
        max_prefill_tokens=sc.max_prefill_tokens,
    )


def run_chunksim_prefill(sc: PrefillScenario, ablation=None) -> dict:
    """chunksim's records; `ablation`: a subclass of the policy with one rule broken."""
    from costmodel import load_hardware, load_model
    from experiments.engines import build_engine
    from policies.base import SchedulerState
    from simcore.clock import LATE, ExactEnvironment
    from simcore.connector_events import ConnectorEvents
    from simcore.request import Request
    from simcore.stepping import SteppingReplica

    from .sglang_driver import page_hashes
    from .unit_cost import UnitCost

    built, pool, _, _ = build_engine(
        "sglang", load_model("llama-3.1-8b"), load_hardware("h100"), flags=sglang_prefill_flags(sc)
    )
    assert pool.total * pool.block_size == sc.pool_tokens, "the pool is not the scenario's"
    policy = ablation(built.cfg, built.pd) if ablation else built
    if sc.radix:
        pool.cache = policy.new_prefix_cache(sc.page_size, sc.page_size)
    env = ExactEnvironment()
    records: dict = {}
    finished: list = []
    rep = SteppingReplica(
        env, 0, _Recorder(policy, env, records), SchedulerState(pool), UnitCost(), finished.append, True, True
    )
    rep.transfers = transfers = StubTransfers(env, sc, records)

    class Events(ConnectorEvents):
        def _release_sent(self, req):
            _put(records, int(env.now), released=[req.rid])
            super()._release_sent(req)

    rep.kv = Events(rep)
    reqs = []
    for i, (a, toks) in enumerate(sc.requests):
        r = Request(i, float(a), len(toks), 1, page_hashes(toks, sc.page_size) if sc.radix else ())
        r.remote_decode = True
        reqs.append(r)

    def arrivals():
        for r in sorted(reqs, key=lambda r: (r.arrival_s, r.rid)):
            if r.arrival_s > env.now:
                yield env.at(r.arrival_s, LATE)
            transfers.prealloc(rep, r)
            rep.submit(r)

    env.process(arrivals())
    env.run()
    assert len(finished) == len(reqs), f"{len(reqs) - len(finished)} requests never finished"
    q = rep.state.connector
    assert not q.sending and not q.bootstrap and not q.popped, "requests left in the connector's queues"
    if pool.cache is None:
        assert pool.used == 0, "KV pages not returned"
    return _frozen(records)


def first_divergence(a: dict, b: dict) -> str | None:
    if a == b:
        return None
    for t in sorted(set(a) | set(b)):
        if a.get(t) != b.get(t):
            return f"step {t}: sglang {a.get(t)} / chunksim {b.get(t)}"
    return "differ"


def compare_prefill(sc: PrefillScenario, ablation=None, stats: dict | None = None) -> tuple[str | None, dict]:
    """(first divergence or None, SGLang's records)."""
    ref = run_sglang_prefill(sc, stats=stats)
    return first_divergence(ref, run_chunksim_prefill(sc, ablation)), ref


def ablations() -> dict:
    """chunksim's policy with one rule broken each, to show the harness catches it."""
    from policies.sglang_pd_prefill import SGLangPDPrefill

    class NoMetadataLimit(SGLangPDPrefill):
        """Bootstrapped requests leave the bootstrap queue whatever the metadata buffers held."""

        def __init__(self, cfg, pd):
            super().__init__(cfg, pd)
            self.meta = 1 << 30

    class NotGatedOnReady(SGLangPDPrefill):
        """Arrivals leave the bootstrap queue before their decode side has preallocated."""

        def _pop_bootstrapped(self, s, q):
            new = []
            while s.waiting and id(s.waiting[-1]) not in q.popped:
                new.append(s.waiting.pop())
            q.bootstrap.extend(reversed(new))
            q.ready.update(q.bootstrap)
            super()._pop_bootstrapped(s, q)

    class RowsNotHeld(SGLangPDPrefill):
        """Requests whose KV is being sent hold no req_to_token row."""

        def _rows_held(self, s):
            return 0

    class SendsAhead(SGLangPDPrefill):
        """A chunk's pages are sent when it is scheduled, not once it is computed."""

        def _chunk_sends(self, q):
            return []

        def schedule(self, s):
            plan = super().schedule(s)
            page, q = self.cfg.page_size, s.connector
            for r, n in plan.items:
                end = r.num_computed_tokens + n
                if end < r.prompt_len and end - end % page > q.sent_to.get(r, 0):
                    plan.loads = (plan.loads or []) + [(r, q.sent_to.get(r, 0), end - end % page)]
                    q.sent_to[r] = end - end % page
            return plan

    class KVFreedAtFinish(SGLangPDPrefill):
        """Without the radix cache, a request's KV is freed once its prefill completes (at the next
        schedule()), not when its transfer does."""

        def schedule(self, s):
            if s.pool.cache is None:
                for r in s.connector.sending:
                    s.pool.release(r)
            return super().schedule(s)

    class SendAtEnd(SGLangPDPrefill):
        """Nothing is sent until the prefill completes."""

        def _chunk_sends(self, q):
            return []

    class NoOverlapLag(SGLangPDPrefill):
        """Under the overlap loop, completed transfers are processed before the next batch is formed."""

        def new_connector(self):
            q = super().new_connector()
            q.lag = False
            return q

    return {
        "no-metadata-limit": NoMetadataLimit,
        "not-gated-on-ready": NotGatedOnReady,
        "rows-not-held": RowsNotHeld,
        "sends-ahead": SendsAhead,
        "kv-freed-at-finish": KVFreedAtFinish,
        "send-at-end": SendAtEnd,
        "no-overlap-lag": NoOverlapLag,
    }
