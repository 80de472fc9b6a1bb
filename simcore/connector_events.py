"""PD disaggregation as the reference replica hears it: the KV connector's completions.

vLLM's worker reports finished_recving (decode side: the prompt's blocks have arrived) and
finished_sending (prefill side: the decode side has read them, so they go) with a step's output.
Under async scheduling (``connector.lag``) a completion reported while a step is in flight is
processed with that step's output, after the next schedule(); an idle replica processes it at
once (policies/vllm_pd.py, ``lag``).
"""

from __future__ import annotations


class ConnectorEvents:
    """The completions of one replica's connector (``state.connector``), queued or applied."""

    def __init__(self, replica):
        self.replica = replica
        self.connector = replica.state.connector

    def received(self, req) -> None:
        """Decode side: finished_recving for `req`; its next schedule() sees it."""
        self._event(self.connector.recv_done.add, req)

    def sent(self, req) -> None:
        """Prefill side: finished_sending; `req`'s blocks are freed."""
        self._event(self._release_sent, req)

    def prefill_finished(self, req, end: float) -> None:
        """Prefill side: `req` sampled its token; request_finished delays the free of its blocks
        until finished_sending (async: held through the next schedule(), then sending)."""
        self.replica.transfers.prefill_finished(self.replica, req, end)
        if self.replica.state.hold_finished:
            self.replica.state.retire(req)
        else:
            self.connector.sending.append(req)

    def landed(self, reqs, now: float) -> None:
        """SGLang decode side: `reqs` joined the running batch with the prefill's token, streamed now
        (process_batch_result_prebuilt); one that wanted only that token has finished."""
        for req in reqs:
            if req.first_token_s is None:
                req.first_token_s = req.last_token_s = now
            if req.num_output_tokens >= req.output_len:
                req.finish_s = now
                self.replica.finished(req)

    def finishing_now(self, finished: list) -> list:
        """The requests a step finished that finish now: none under SGLang's overlapped decode server,
        whose next schedule() processes them (``defers_finish``; policies/sglang_pd.py)."""
        if not finished or not getattr(self.connector, "defers_finish", False):
            return finished
        self.connector.finishing.extend(finished)
        return []

    def _release_sent(self, req) -> None:
        self.connector.sending.remove(req)
        self.replica.state.pool.release(req)
        popped = getattr(self.connector, "popped", None)  # SGLang's prefill server: its metadata buffer frees
        if popped is not None:
            popped.discard(id(req))

    def _event(self, apply, req) -> None:
        if self.connector.lag and not self.replica.idle:  # processed with the in-flight step's output
            self.connector.pending.append((apply, req))
            return
        apply(req)
        self.replica.notify()

    def after_schedule(self, plan) -> bool:
        """Async, after a schedule(): the completions reported meanwhile are processed and the plan's
        requests are in flight. True when some were processed, or when a step was in flight and this
        plan runs none (that step's output comes next: its requests may be preempted then). SGLang's
        decode server: the plan's landed requests stream their first token or finish (``landed``)."""
        if plan.landed:
            self.landed(plan.landed, self.replica.env.now)
        c = self.connector
        if not c.lag:
            return False
        was = bool(c.in_flight)
        c.in_flight = {r for r, _ in plan.items}
        return bool(self._drain()) or (was and not plan.items)

    def on_idle(self) -> None:
        """No step in flight: what was reported is processed now. SGLang's prefill server first
        checkpoints the prefills the replica let go on going idle (policies/sglang_pd_prefill.py)."""
        settle = getattr(self.replica.policy, "settle_idle", None)
        if settle is not None:
            settle(self.replica.state)
        if self.connector.lag:
            self.connector.in_flight = set()
            self._drain()

    def _drain(self) -> int:
        done, self.connector.pending = self.connector.pending, []
        for apply, req in done:
            apply(req)
        return len(done)
