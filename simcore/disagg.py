"""A disaggregated run: a prefill pool and a decode pool of vLLM replicas, KV moved between them.

Follow a request, as vLLM's disaggregated-serving proxy runs it (vLLM's
tests/v1/kv_connector/nixl_integration/toy_proxy_server.py, send_request_to_service and
stream_service_response): it is sent to a prefill replica with max_tokens 1, stream off and
``do_remote_decode``; it computes its prompt and samples one token there (``prefill_token_s``;
the proxy reads that response only for its kv_transfer_params), and its blocks stay held
(policies/vllm_pd.py). The proxy then sends it, with its original max_tokens and
``do_remote_prefill``, to a decode replica and streams that replica's response. The toy proxy
alternates replicas round robin; production routers pick by load (llm-d's inference scheduler
scores queue depth and KV-cache utilisation; Dynamo's KV router, kv_router/scheduler.rs, a
worker's potential load), so chunksim takes the prefill replica with the fewest outstanding
requests and the decode replica with the fewest outstanding (or the lowest KV usage). The
decode replica's scheduler allocates blocks for the prompt and starts the read; the transfer
(simcore/kv_transfer.py: latency + bytes through a shared link) carries the prompt's KV,
``prompt_len · kv_bytes_per_token`` bytes of the model's KV dtype. When it is through, the decode
replica sees finished_recving and the prefill replica finished_sending (its blocks go); the
decode replica recomputes the last prompt token and streams every output token. The user's
TTFT is the decode replica's first token (the proxy streams the decode response), so it
includes the prefill, the proxy hop (not modelled: 0) and the transfer.

Only the reference loop (simcore/stepping.py) runs PD: the fast paths do not know loads or held
sends. Open loop only (closed loop is refused).
"""

from __future__ import annotations

import gc
import math

import numpy as np

from costmodel.errors import require
from policies.base import SchedulerState

from .admission import new_request, reject_reason
from .clock import LATE, ExactEnvironment
from .histogram import LogHistogram
from .kv_transfer import LinkConfig, Links
from .metrics import requests_frame, summarize
from .router import least_kv, least_outstanding
from .simulation import Result
from .stepping import SteppingReplica

DECODE_ROUTERS = {"least_outstanding": least_outstanding, "least_kv": least_kv}


class DisaggSimulation:
    """prefill / decode: lists of (policy, BlockPool, CostModel), one per replica; the policies
    must carry a KV connector (VLLMConfig.kv_transfer_config)."""

    def __init__(
        self,
        prefill,
        decode,
        workload,
        link: LinkConfig | None = None,
        *,
        max_model_len: int = 0,
        decode_router: str = "least_outstanding",
        check: bool = False,
        record_iterations: bool = False,
    ):
        require(len(prefill) > 0, "--prefill-replicas", len(prefill), "must be at least 1")
        require(len(decode) > 0, "--decode-replicas", len(decode), "must be at least 1")
        require(
            not getattr(workload, "closed_loop_concurrency", None),
            "--max-concurrency",
            getattr(workload, "closed_loop_concurrency", None),
            "closed loop is not modelled with PD disaggregation; use an open-loop --request-rate",
        )
        require(
            decode_router in DECODE_ROUTERS,
            "--decode-router",
            decode_router,
            f"must be one of {', '.join(DECODE_ROUTERS)}",
        )
        for pol, pool, _ in list(prefill) + list(decode):
            require(
                getattr(pol, "new_connector", lambda: None)() is not None,
                "--kv-transfer-config",
                None,
                "PD disaggregation needs vLLM with a KV connector (NixlConnector)",
            )
            if getattr(workload, "block_hashes", None) is not None and getattr(pol, "prefix_caching", False):
                pool.cache = pol.new_prefix_cache(workload.block_tokens, pool.block_size)  # refuses: not modelled
        self.env = env = ExactEnvironment()
        self.workload, self.max_model_len = workload, max_model_len
        self.route_decode = DECODE_ROUTERS[decode_router]
        self.prefill = [
            SteppingReplica(env, i, pol, SchedulerState(pool), cm, _nothing, check, record_iterations)
            for i, (pol, pool, cm) in enumerate(prefill)
        ]
        self.decode = [
            SteppingReplica(env, i, pol, SchedulerState(pool), cm, self._decoded, check, record_iterations)
            for i, (pol, pool, cm) in enumerate(decode)
        ]
        for r in self.prefill + self.decode:
            r.transfers = self
        cm = prefill[0][2]
        self.kv_bytes_per_token = float(cm.model.kv_bytes_per_token)
        self.links = Links(
            env,
            link or LinkConfig(),
            float(getattr(cm.hw, "interconnect_bandwidth", 0.0)),
            [c.tp for _, _, c in prefill],
            [c.tp for _, _, c in decode],
        )
        n = len(workload)
        self.users: list = [None] * n  # rid -> the decode-side request (or the prefill side until then)
        self.prefill_reqs: list = []
        self.transfer_start = np.full(n, np.nan)
        self.transfer_end = np.full(n, np.nan)
        self.kv_bytes = np.zeros(n)
        self._ran = False
        env.process(self._arrivals())

    def _arrivals(self):
        env, wl = self.env, self.workload
        arrival_s = wl.arrival_s.tolist()
        for i in range(len(wl)):
            if arrival_s[i] > env.now:
                yield env.at(arrival_s[i], LATE)
            pair = self._pair(i, arrival_s[i])
            if pair is not None:
                self._route(*pair)

    def _pair(self, i: int, t: float):
        """Request i's user side (what the decode side serves) and its prefill side (one token:
        the proxy's max_tokens 1, SGLang's PrefillBootstrapQueue._process_req), or None when
        either side refuses it (the user side says why)."""
        wl = self.workload
        user = new_request(wl, i, t)
        self.users[i] = user
        user.rejected = reject_reason(user, self.decode[0], self.max_model_len)
        if user.rejected is not None:
            return None
        p = new_request(wl, i, t)
        p.output_len, p.remote_decode = 1, True
        p.rejected = reject_reason(p, self.prefill[0], self.max_model_len)
        if p.rejected is not None:
            user.rejected = p.rejected
            return None
        self.prefill_reqs.append(p)
        return user, p

    def _route(self, user, p) -> None:
        """vLLM's proxy: the prefill side first; the decode side when it has its token."""
        self.prefill[least_outstanding(p, self.prefill)].submit(p)

    # transfers: the replicas call these (simcore/stepping.py)
    def prefill_finished(self, replica, p, end: float) -> None:
        """The prefill side sampled its token; the proxy sends the request to a decode replica."""
        d = new_request(self.workload, p.rid, p.arrival_s)
        d.remote_prefill, d.peer, p.peer = True, p, d
        self.users[p.rid] = d
        self.decode[self.route_decode(d, self.decode)].submit(d)

    def loads_started(self, replica, reqs, now: float) -> None:
        for d in reqs:
            p = d.peer
            nbytes = d.prompt_len * self.kv_bytes_per_token
            self.kv_bytes[d.rid] = nbytes
            self.transfer_start[d.rid] = now
            self.links.transfer(p.replica, replica.index, nbytes, lambda d=d, p=p, rep=replica: self._moved(rep, d, p))

    def _moved(self, replica, d, p) -> None:
        self.transfer_end[d.rid] = self.env.now
        replica.kv.received(d)
        self.prefill[p.replica].kv.sent(p)

    def _decoded(self, d) -> None:
        pass

    def run(self, until: float | None = None) -> Result:
        require(not self._ran, "DisaggSimulation.run", until, "runs once; build a new one to run again")
        self._ran = True
        collecting = gc.isenabled()
        gc.disable()
        try:
            self.env.run(until=until)
        finally:
            if collecting:
                gc.enable()
        return self._results()

    def _results(self) -> Result:
        users = [u for u in self.users if u is not None]
        df = requests_frame(users)
        rid = df.rid.to_numpy()
        pre = {p.rid: p for p in self.prefill_reqs}
        df["prefill_replica"] = [pre[i].replica if i in pre else -1 for i in rid.tolist()]
        df["prefill_token_s"] = [pre[i].first_token_s if i in pre else math.nan for i in rid.tolist()]
        df["transfer_start_s"] = self.transfer_start[rid]
        df["transfer_end_s"] = self.transfer_end[rid]
        df["kv_bytes"] = self.kv_bytes[rid]
        itl = LogHistogram()
        for r in self.decode:
            itl.merge(r.itl)
        summary = summarize(df, itl, sum(r.num_iterations for r in self.prefill + self.decode))
        pdf = requests_frame(sorted(self.prefill_reqs, key=lambda r: r.rid)) if self.prefill_reqs else df.iloc[:0]
        summary["prefill"] = summarize(pdf, LogHistogram(), sum(r.num_iterations for r in self.prefill))
        summary["decode"] = summarize(df, itl, sum(r.num_iterations for r in self.decode))
        moved = df[df.transfer_end_s.notna()]
        t = (moved.transfer_end_s - moved.transfer_start_s).to_numpy() * 1e3
        summary["kv_transfer"] = {
            "transfers": int(len(moved)),
            "total_bytes": float(moved.kv_bytes.sum()),
            "mean_ms": float(t.mean()) if len(t) else 0.0,
            "p99_ms": float(np.percentile(t, 99)) if len(t) else 0.0,
            "mean_prefill_hold_ms": float((moved.transfer_end_s - moved.prefill_token_s).mean() * 1e3)
            if len(moved)
            else 0.0,
        }
        summary["loop"] = "reference (simcore/stepping.py): PD runs no fast path"
        return Result(df, summary, None, self.prefill + self.decode)

    def kv_returned(self) -> bool:
        """Every block of both pools is back (after a run to the end)."""
        return all(r.state.pool.used == 0 and not r.state.connector.sending for r in self.prefill + self.decode)


def _nothing(req) -> None:
    """A prefill-side finish needs nothing here: prefill_finished has handed it on."""
