"""SGLang's decode-side PD queues, built and driven on CPU: the groundwork of a step-for-step
harness for SGLang's disaggregated decode (not yet modelled by chunksim; docs/conformance.md).

Unmodified SGLang 0.5.23 objects do the deciding: ``DecodePreallocQueue`` (the prealloc rule that
reserves a request's KV on the decode side before the prefill sends it, ``pop_preallocated``) and
``DecodeTransferQueue`` (polling the receivers, ``pop_transferred``), over a paged allocator and a
``DecodeReqToTokenPool`` on CPU, with the ``fake`` transfer backend's ``FakeKVManager``
(sglang/srt/disaggregation/fake/conn.py). What needs a stand-in, and why:

- the attention-TP gloo group the queues all-reduce their polls over (``poll_and_all_reduce``): a
  one-process gloo group (``torch.distributed`` with a file store, no network);
- the ranks ``get_parallel()`` reads (tp, pp, attention-tp, dp rank 0), written with
  ``override_permanently`` as SGLang's launcher would publish them;
- the ``Scheduler`` the queues read (running batch, waiting queue, last batch, output streamer,
  feature switches off): ``_SchedulerView``, whose constructor in SGLang needs a model and a GPU;
- the KV receiver: ``FakeKVReceiver`` concludes the moment the decode side sends its metadata;
  ``HeldReceiver`` holds ``WaitingForInput`` until the harness releases it, so a transfer takes
  as many steps as the scenario says.
The KV pool is SGLang's ``MHATokenToKVPool`` on CPU, one layer of one 8-wide head (only its
buffers' addresses and sizes are read, by the fake manager's KV args).
"""

from __future__ import annotations

import os
import tempfile
import types
from array import array

from .sglang_engine import _sglang


class _SchedulerView(types.SimpleNamespace):
    """The attributes of ``Scheduler`` the decode queues read, each set here; nothing else."""


def _held_receiver_class():
    from sglang.srt.disaggregation.base.conn import KVPoll
    from sglang.srt.disaggregation.fake.conn import FakeKVReceiver

    class HeldReceiver(FakeKVReceiver):
        """FakeKVReceiver whose transfer finishes when the harness says (``release``)."""

        released = False

        def poll(self):
            state = super().poll()
            if state == KVPoll.Success and not self.released:
                self.conclude_state = None
                return KVPoll.WaitingForInput
            return state

    return HeldReceiver


class DecodeQueues:
    """One decode rank's prealloc and transfer queues over a ``pool_tokens``-token KV pool of
    ``page_size``-token pages: ``max_requests`` running (max_running_requests), ``extra_slots``
    more req_to_token rows for requests in transfer (None: as many), metadata slots for twice the
    running (Scheduler.init_disaggregation), retracted KV backed up as ``cpu_tensor``."""

    def __init__(
        self,
        pool_tokens: int,
        max_requests: int = 64,
        reserved_decode_tokens: int = 1,
        page_size: int = 1,
        extra_slots: int | None = None,
        max_context_len: int = 1 << 16,
    ):
        sg = _sglang()
        import torch
        from sglang.srt.disaggregation.decode import (
            DecodePreallocQueue,
            DecodeReqToTokenPool,
            DecodeTransferQueue,
        )
        from sglang.srt.disaggregation.utils import MetadataBuffers, ReqToMetadataIdxAllocator, TransferBackend
        from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
        from sglang.srt.server_args import ServerArgs

        self.sg = sg
        args = ServerArgs(
            model_path="dummy",
            device="cpu",
            skip_tokenizer_init=True,
            disaggregation_mode="decode",
            disaggregation_transfer_backend="fake",
            disaggregation_decode_retraction_backup="cpu_tensor",  # resolve_decode_retraction_backup's other
            page_size=page_size,
        )
        publish_scheduler_args(args)
        kv = MHATokenToKVPool(pool_tokens, page_size, torch.bfloat16, 1, 8, 1, "cpu", False, enable_alt_stream=False)
        self.alloc = sg.Paged(pool_tokens, page_size, torch.int64, "cpu", kv, False)
        extra = max_requests if extra_slots is None else extra_slots
        self.r2t = r2t = DecodeReqToTokenPool(max_requests, max_context_len, "cpu", False, extra)
        self.tree = tree = sg.RadixCache(
            sg.CacheInitParams(
                disable=True, req_to_token_pool=r2t, token_to_kv_pool_allocator=self.alloc, page_size=page_size
            )
        )
        n_meta = 2 * max_requests  # buffer_size: req_to_token_pool.size * 2
        buffers, slots = MetadataBuffers(n_meta, 16, torch.bfloat16, 0), ReqToMetadataIdxAllocator(n_meta)
        self.scheduler = _SchedulerView(
            server_args=args,
            spec_algorithm=types.SimpleNamespace(is_none=lambda: True),
            tp_worker=types.SimpleNamespace(
                is_hybrid_swa=False, model_runner=types.SimpleNamespace(kv_cache_dtype_str="bfloat16")
            ),
            model_config=types.SimpleNamespace(num_hidden_layers=1),
            random_seed=0,
            enable_overlap=False,
            running_batch=types.SimpleNamespace(reqs=[]),
            waiting_queue=[],
            last_batch=None,
            tree_cache=tree,
            enable_hisparse=False,
            enable_lora=False,
            enable_priority_scheduling=False,
            enable_decode_hicache=False,
            output_streamer=types.SimpleNamespace(stream_output=lambda *a, **k: None),
            batch_result_processor=types.SimpleNamespace(_maybe_update_reasoning_tokens=lambda *a, **k: None),
            retire_unadmitted_request=lambda req: None,
        )
        self.transfer = DecodeTransferQueue(slots, buffers, self.scheduler, tree)
        self.prealloc = DecodePreallocQueue(
            r2t,
            self.alloc,
            None,
            slots,
            buffers,
            self.scheduler,
            self.transfer,
            tree,
            0,
            8998,
            pool_tokens,
            reserved_decode_tokens,
            TransferBackend.FAKE,
        )
        self.scheduler.disagg_decode_prealloc_queue = self.prealloc
        self.scheduler.disagg_decode_transfer_queue = self.transfer
        self._held = _held_receiver_class()
        self._room = 0

    def add(self, rid: str, prompt_len: int, max_new_tokens: int, hold: bool = True):
        """A request the router sent to this decode rank (its prefill peer is the fake one); with
        ``hold`` its KV arrives when ``release`` says, else with the metadata (FakeKVReceiver)."""
        sp = self.sg.SamplingParams(max_new_tokens=max_new_tokens, ignore_eos=True)
        sp.normalize(None)
        req = self.sg.sb.Req(rid, "", array("q", range(prompt_len)), sp, vocab_size=1 << 20)
        req.bootstrap_host, req.bootstrap_port, req.bootstrap_room = "2.2.2.2", 8998, self._room
        self._room += 1
        self.prealloc.add(req)
        if not hold:
            return req
        decode_req = self.prealloc.queue[-1]
        held = self._held(
            mgr=self.prealloc.kv_manager, bootstrap_addr="2.2.2.2:8998", bootstrap_room=req.bootstrap_room
        )
        held.init(0)
        decode_req.kv_receiver = held
        return req

    def step(self) -> tuple[list[str], list[str]]:
        """``Scheduler.process_decode_queue``'s two moves: (rids preallocated, rids transferred)."""
        pre, _failed = self.prealloc.pop_preallocated()
        self.transfer.extend(pre)
        done = self.transfer.pop_transferred()
        self.scheduler.waiting_queue.extend(done)
        return [d.req.rid for d in pre], [r.rid for r in done]

    def release(self, rid: str) -> None:
        """The prefill side's KV for ``rid`` has arrived."""
        for d in self.transfer.queue:
            if d.req.rid == rid:
                d.kv_receiver.released = True
                return
        raise KeyError(rid)

    def used_tokens(self) -> int:
        return self.alloc.size - self.alloc.available_size()


def publish_scheduler_args(args) -> None:
    """Publish ServerArgs as a scheduler process's and make get_parallel() report rank 0 of a
    one-process gloo group (what SGLang's disaggregation queues read on CPU)."""
    import torch.distributed as dist
    from sglang.srt import runtime_context

    runtime_context.publish(args, role="scheduler")
    if not dist.is_initialized():
        store = os.path.join(tempfile.mkdtemp(prefix="chunksim-gloo-"), "store")
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    group = types.SimpleNamespace(cpu_group=dist.group.WORLD)
    runtime_context.get_parallel().override_permanently(
        tp_rank=0, pp_rank=0, attn_tp_rank=0, dp_rank=0, attn_tp_group=group
    )
