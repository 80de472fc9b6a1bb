"""A scheduler-side stand-in for vLLM 0.33's NixlConnector (NixlPullConnector), registered in the
PD conformance harness through ``kv_connector_module_path``. It answers the Scheduler as
nixl/pull_scheduler.py does for a dense model (no prefill back-off) with prefix caching off:

* ``get_num_new_matched_tokens``: a request with ``do_remote_prefill`` gets every prompt token
  beyond its local hit as external, loaded asynchronously; otherwise (0, False).
* ``update_state_after_alloc``: clears ``do_remote_prefill`` (one transfer per request), and
  records the request whose load starts now (the harness then picks when it finishes).
* ``request_finished``: a ``do_remote_decode`` request that finished normally (length capped or
  stopped) with blocks delays their free (finished_sending frees them); otherwise frees now.

No worker side: the harness feeds finished_recving / finished_sending through the model
runner's KVConnectorOutput itself; the worker methods are never called and say so."""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
)


class FakeNixlConnector(KVConnectorBase_V1):
    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config, role, kv_cache_config)
        self.loads_started: list[str] = []  # request ids whose async load began, in order

    # scheduler side
    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        params = request.kv_transfer_params
        if params and params.get("do_remote_prefill"):
            count = len(request.prompt_token_ids or []) - num_computed_tokens
            if count > 0:
                return count, True
        return 0, False

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        params = request.kv_transfer_params
        if params and params.get("do_remote_prefill"):
            if num_external_tokens > 0:
                self.loads_started.append(request.request_id)
            params["do_remote_prefill"] = False

    def build_connector_meta(self, scheduler_output):
        return KVConnectorMetadata()

    def request_finished(self, request, block_ids):
        from vllm.v1.request import RequestStatus

        params = request.kv_transfer_params
        if not params or not params.get("do_remote_decode"):
            return False, None
        if request.status not in (RequestStatus.FINISHED_LENGTH_CAPPED, RequestStatus.FINISHED_STOPPED):
            return False, None
        return len(block_ids) > 0, None

    # worker side: not run by the harness
    def start_load_kv(self, forward_context, **kwargs):
        raise NotImplementedError("scheduler-side stand-in")

    def wait_for_layer_load(self, layer_name):
        raise NotImplementedError("scheduler-side stand-in")

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        raise NotImplementedError("scheduler-side stand-in")

    def wait_for_save(self):
        raise NotImplementedError("scheduler-side stand-in")
