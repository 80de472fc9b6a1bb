"""A disaggregated SGLang run: prefill servers and decode servers (``--disaggregation-mode``), KV pushed.

Follow a request, as SGLang's PD router runs it (sgl-model-gateway's PD mode, like the older
``sglang.srt.disaggregation.mini_lb``): it is sent at once to a prefill server and a decode server,
with the same bootstrap room. The decode server preallocates its KV when its budget allows
(policies/sglang_pd.py, ``pop_preallocated``; the plan's ``loads``) and so tells the prefill
server where to write: only then does the prefill server take it from its bootstrap queue
(policies/sglang_pd_prefill.py). The prefill server computes the prompt and one token, pushing
each chunk's whole pages as they are done and the rest at the end; each push is a transfer
(simcore/kv_transfer.py: latency + bytes through the decode replica's shared link). When the last
push is through, the decode server's transfer queue sees Success (its next iteration puts the
request in its batch, the prefill's token as its first output, streamed to the user then) and the
prefill server's inflight queue releases the KV. The bootstrap handshake itself (a message to the
prefill server's bootstrap thread) is taken as instant. The router picks the prefill server with
the fewest outstanding requests and the decode server by ``decode_router``.
"""

from __future__ import annotations

import numpy as np

from .disagg import DisaggSimulation
from .router import least_outstanding


class SGLangDisaggSimulation(DisaggSimulation):
    """prefill: (SGLangPDPrefill, BlockPool, CostModel) per replica; decode: (SGLangPDDecode, ...)."""

    def __init__(self, prefill, decode, workload, link=None, **kw):
        super().__init__(prefill, decode, workload, link, **kw)
        self._prefill_ids = {id(r) for r in self.prefill}
        self.pushes = np.zeros(len(workload), dtype=np.int64)  # sends per request (chunks + the last)
        self._open: dict = {}  # rid -> sends still on the wire
        self._last_sent: set = set()  # rids whose last send has gone

    def _route(self, d, p) -> None:
        """SGLang's PD router: both sides at once, with one bootstrap room."""
        d.remote_prefill = True
        p.peer, d.peer = d, p
        self.prefill[least_outstanding(p, self.prefill)].submit(p)
        self.decode[self.route_decode(d, self.decode)].submit(d)

    # transfers: the replicas call these (simcore/stepping.py, simcore/connector_events.py)
    def loads_started(self, replica, items, now: float) -> None:
        """A decode server preallocated `items` (the prefill side is bootstrapped), or a prefill
        server pushed chunks: (request, first token, end)."""
        if id(replica) in self._prefill_ids:
            for p, start, end in items:
                self._push(replica, p, start, end)
            return
        for d in items:
            p = d.peer
            prefill = self.prefill[p.replica]
            prefill.state.connector.ready.add(p)
            prefill.notify()

    def prefill_finished(self, replica, p, end: float) -> None:
        """The prefill completed: the rest of the prompt's KV goes (send_kv_chunk, last_chunk)."""
        _, start, stop = replica.policy.final_send(replica.state.connector, p)
        self._last_sent.add(p.rid)
        self._push(replica, p, start, stop)

    def _push(self, replica, p, start: int, stop: int) -> None:
        d = p.peer
        nbytes = (stop - start) * self.kv_bytes_per_token
        if np.isnan(self.transfer_start[p.rid]):
            self.transfer_start[p.rid] = self.env.now
        self.kv_bytes[p.rid] += nbytes
        self.pushes[p.rid] += 1
        self._open[p.rid] = self._open.get(p.rid, 0) + 1
        self.links.transfer(p.replica, d.replica, nbytes, lambda: self._arrived(replica, p))

    def _arrived(self, replica, p) -> None:
        self._open[p.rid] -= 1
        if self._open[p.rid] or p.rid not in self._last_sent:
            return
        del self._open[p.rid]
        self._last_sent.discard(p.rid)
        d = p.peer
        self.transfer_end[p.rid] = self.env.now
        self.decode[d.replica].kv.received(d)
        replica.kv.sent(p)

    def _results(self):
        res = super()._results()
        done = res.requests.rid.to_numpy()[res.requests.transfer_end_s.notna().to_numpy()]
        res.summary["kv_transfer"]["pushes_per_request"] = float(self.pushes[done].mean()) if len(done) else 0.0
        return res
