"""`chunksim simulate --prefill-replicas X --decode-replicas Y`: a disaggregated run, vLLM with a KV
connector (simcore/disagg.py) or SGLang's ``--disaggregation-mode prefill`` / ``decode`` servers
(simcore/disagg_sglang.py): its flags, their checks, and its table. Units convert here, once: the
link's GB/s (per GPU) and µs to bytes/s and s."""

from __future__ import annotations

import sys

from costmodel import load_hardware, load_model
from costmodel.errors import require
from simcore.disagg import DECODE_ROUTERS
from simcore.kv_transfer import LATENCY_S, RDMA_BYTES_PER_S, LinkConfig

from .. import experiment_file
from ..engines import PD_CONNECTOR, build_engine, pd_simulation
from ..report import table

NOT_WITH_PD = ("replicas", "router", "uncertainty", "trace", "plots", "report", "save_result", "out")

PD_POLICIES = ("vllm", "sglang")
SGLANG_BACKEND = "mooncake"  # ServerArgs.disaggregation_transfer_backend's default


def add_pd_flags(p) -> None:
    from .common import positive_float, positive_int

    g = p.add_argument_group(
        "PD disaggregation (vLLM with a KV connector, simcore/disagg.py; SGLang, simcore/disagg_sglang.py)"
    )
    g.add_argument("--prefill-replicas", type=positive_int, help="prefill pool size (with --decode-replicas)")
    g.add_argument("--decode-replicas", type=positive_int, help="decode pool size (with --prefill-replicas)")
    g.add_argument(
        "--prefill-cmd",
        metavar='"CMD"',
        help="the prefill pool's pasted `vllm serve` or `sglang.launch_server` line (Dynamo / llm-d style, "
        "with --decode-cmd): its flags, tp and -dp (replicas) set that pool",
    )
    g.add_argument("--decode-cmd", metavar='"CMD"', help="the decode pool's pasted engine line (with --prefill-cmd)")
    g.add_argument("--prefill-tp", type=positive_int, help="tensor parallel size of a prefill replica (default --tp)")
    g.add_argument("--decode-tp", type=positive_int, help="tensor parallel size of a decode replica (default --tp)")
    g.add_argument(
        "--kv-link-bandwidth",
        type=positive_float,
        metavar="GB/s",
        help=f"RDMA bandwidth per GPU (default {RDMA_BYTES_PER_S / 1e9:g}: one 400 Gb/s NIC per GPU)",
    )
    g.add_argument(
        "--kv-link-latency-us",
        type=float,
        metavar="US",
        help=f"latency per KV transfer (default {LATENCY_S * 1e6:g} µs; chunksim's assumption)",
    )
    g.add_argument(
        "--kv-link",
        choices=["auto", "rdma", "nvlink"],
        help="auto (default): NVLink within a node, RDMA across (replicas fill --gpus-per-node GPUs in order)",
    )
    g.add_argument("--gpus-per-node", type=positive_int, help="GPUs per node for placement (default 8)")
    g.add_argument(
        "--decode-router", choices=list(DECODE_ROUTERS), help="decode replica choice (default least_outstanding)"
    )


def wants_pd(args) -> bool:
    return any(getattr(args, k, None) for k in ("prefill_replicas", "decode_replicas", "prefill_cmd", "decode_cmd"))


def _pair(args) -> tuple[dict, list[str], dict | None]:
    """The prefill and decode pools' configs: one config, or (with --prefill-cmd / --decode-cmd) each
    pool's own pasted line under the same explicit flags. Replicas and tp come from each line's
    -dp / -tp unless given as --prefill-replicas / --prefill-tp etc."""
    import argparse

    from ..engine_cmd import parse_engine_cmd
    from .simulate_run import config

    if not (args.prefill_cmd or args.decode_cmd):
        cfg, notes = config(args)
        return cfg, notes, None
    require(args.engine_cmd is None, "--engine-cmd", args.engine_cmd, "not with --prefill-cmd / --decode-cmd")
    require(
        bool(args.prefill_cmd and args.decode_cmd),
        "--prefill-cmd" if not args.prefill_cmd else "--decode-cmd",
        None,
        "give both the prefill and the decode line",
    )
    out = []
    for flag, line in (("--prefill-cmd", args.prefill_cmd), ("--decode-cmd", args.decode_cmd)):
        cmd = parse_engine_cmd(line, bool(getattr(args, "allow_unmodeled", None)))
        require(cmd.policy in PD_POLICIES, flag, cmd.policy, "PD pools run vllm or sglang")
        out.append((cmd, config(argparse.Namespace(**{**vars(args), "engine_cmd": line}))))
    (pc, (cfg_p, notes)), (dc, (cfg_d, notes_d)) = out
    require(pc.policy == dc.policy, "--decode-cmd", dc.policy, f"the prefill line runs {pc.policy}: one engine")
    require(
        pc.model == dc.model and cfg_p["model"] == cfg_d["model"],
        "--decode-cmd model",
        dc.model,
        f"differs from the prefill line's model {pc.model!r}: both pools must serve the same model",
    )
    for cmd, pool in ((pc, "prefill"), (dc, "decode")):
        if getattr(args, f"{pool}_replicas") is None:
            setattr(args, f"{pool}_replicas", cmd.dp or 1)
        if getattr(args, f"{pool}_tp") is None:
            setattr(args, f"{pool}_tp", cmd.tp or 1)
    notes += [n.replace("--engine-cmd", "--decode-cmd") for n in notes_d if n not in notes]
    return cfg_p, [n.replace("--engine-cmd", "--prefill-cmd") for n in notes], cfg_d


def run_pd(args) -> dict:
    cfg, notes, cfg_d = _pair(args)
    require(
        args.prefill_replicas and args.decode_replicas,
        "--prefill-replicas" if not args.prefill_replicas else "--decode-replicas",
        None,
        "give both --prefill-replicas and --decode-replicas for a disaggregated run",
    )
    for name in NOT_WITH_PD:
        v = getattr(args, name, None)
        require(
            v in (None, False), f"--{name.replace('_', '-')}", v, "not with --prefill-replicas/--decode-replicas yet"
        )
    us = args.kv_link_latency_us
    require(us is None or us >= 0, "--kv-link-latency-us", us, "must be >= 0")
    policy = cfg["policy"]
    require(policy in PD_POLICIES, "--policy", policy, "PD pools run vllm or sglang")
    require(
        cfg_d is not None or cfg.get("replicas", 1) == 1,
        "--engine-cmd -dp",
        cfg.get("replicas"),
        "a PD run sets each pool's replicas: --prefill-replicas / --decode-replicas, or each line's -dp "
        "in --prefill-cmd / --decode-cmd",
    )
    engine = dict(cfg["engine"])
    engine_d = dict(cfg_d["engine"]) if cfg_d else dict(engine)
    if policy == "vllm":
        if not engine.get("kv_transfer_config") or not engine_d.get("kv_transfer_config"):
            notes.append(f"note: --kv-transfer-config {PD_CONNECTOR} (the PD split implies a connector)")
        for e in (engine, engine_d):
            e["kv_transfer_config"] = e.get("kv_transfer_config") or PD_CONNECTOR
    else:
        _sglang_modes(engine, engine_d, bool(cfg_d))
    _same_kv(policy, engine, engine_d)
    notes.append("note: PD runs the reference loop (simcore/stepping.py); fast-forward does not apply")
    model, hw = load_model(cfg["model"]), load_hardware(cfg["hardware"])
    tp_p, tp_d = args.prefill_tp or cfg["tp"], args.decode_tp or cfg["tp"]

    def pool(n: int, tp: int, flags: dict):
        out = []
        for _ in range(n):
            sched, blocks, cm, max_len = build_engine(policy, model, hw, tp, dict(flags))
            out.append((sched, blocks, cm))
        return out, max_len

    prefill, max_len = pool(args.prefill_replicas, tp_p, engine)
    decode, max_len_d = pool(args.decode_replicas, tp_d, engine_d)
    if max_len_d != max_len:  # a request must fit both servers' context length
        notes.append(f"note: context length {min(max_len, max_len_d):,}, the smaller of the two pools'")
        max_len = min(max_len, max_len_d)
    link = LinkConfig(
        rdma_bandwidth=args.kv_link_bandwidth * 1e9 if args.kv_link_bandwidth else RDMA_BYTES_PER_S,
        latency_s=us * 1e-6 if us is not None else LATENCY_S,
        gpus_per_node=args.gpus_per_node or 8,
        medium=args.kv_link or "auto",
    )
    workload = experiment_file.build_workload(cfg)
    quiet = args.quiet or args.json
    for n in notes:
        if not quiet or not n.startswith("note"):
            print(n, file=sys.stderr)
    sim = pd_simulation(policy)(
        prefill,
        decode,
        workload,
        link,
        max_model_len=max_len,
        decode_router=args.decode_router or "least_outstanding",
    )
    res = sim.run()
    s = res.summary
    s["pd"] = {
        "prefill_replicas": args.prefill_replicas,
        "decode_replicas": args.decode_replicas,
        "prefill_tp": tp_p,
        "decode_tp": tp_d,
        "policy": policy,
        "link": {"medium": link.medium, "rdma_bytes_per_s": link.rdma_bandwidth, "latency_s": link.latency_s},
        "gpus": args.prefill_replicas * tp_p + args.decode_replicas * tp_d,
    }
    if policy == "vllm":
        s["pd"] |= {
            "kv_transfer_config": engine["kv_transfer_config"],
            "decode_kv_transfer_config": engine_d["kv_transfer_config"],
        }
    else:
        s["pd"]["transfer_backend"] = engine["disaggregation_transfer_backend"]
    return {"summary": s, "text": _text(model, hw, s, prefill[0][1], decode[0][1]), "files": []}


def _sglang_modes(engine: dict, engine_d: dict, two_lines: bool) -> None:
    """Each pool's --disaggregation-mode is its role (a pasted line may say so, or not); the transfer
    backend is mooncake unless given, and never fake (a decode server alone)."""
    for e, mode in ((engine, "prefill"), (engine_d, "decode")):
        where = f"--{mode}-cmd " if two_lines else ""
        given = e.get("disaggregation_mode")
        require(
            given in (None, mode),
            f"{where}--disaggregation-mode",
            given,
            f"the {mode} pool's servers run --disaggregation-mode {mode}",
        )
        e["disaggregation_mode"] = mode
        b = e.setdefault("disaggregation_transfer_backend", SGLANG_BACKEND)
        require(b != "fake", f"{where}--disaggregation-transfer-backend", b, "fake is a decode server alone")
    require(
        engine["disaggregation_transfer_backend"] == engine_d["disaggregation_transfer_backend"],
        "--decode-cmd --disaggregation-transfer-backend",
        engine_d["disaggregation_transfer_backend"],
        f"the prefill pool uses {engine['disaggregation_transfer_backend']}: both pools use one backend",
    )


def _same_kv(policy: str, engine: dict, engine_d: dict) -> None:
    """One KV layout on both sides: the transfer is priced in one KV dtype, and SGLang's decode server
    refuses a prefill server of another page size or KV dtype (disaggregation/common/conn.py,
    try_ensure_parallel_info: "Page size mismatch", "KV cache dtype mismatch")."""
    keys = ("kv_cache_dtype", "page_size") if policy == "sglang" else ("kv_cache_dtype",)
    for k in keys:
        a, b = engine.get(k), engine_d.get(k)
        require(
            a == b,
            f"--decode-cmd --{k.replace('_', '-')}",
            b,
            f"the prefill pool has {a if a is not None else 'the default'}: both pools must use the same value",
        )


def _text(model, hw, s: dict, ppool, dpool) -> str:
    pd_ = s["pd"]
    head = (
        f"{pd_['policy']} PD · {model.name} on {hw.name} · {pd_['prefill_replicas']} prefill (tp={pd_['prefill_tp']}, "
        f"KV {ppool.total * ppool.block_size:,} tokens) + {pd_['decode_replicas']} decode (tp={pd_['decode_tp']}, "
        f"KV {dpool.total * dpool.block_size:,} tokens) · {pd_['gpus']} GPUs"
    )
    keys = ["completed", "num_rejected", "request_throughput", "output_throughput", "mean_ttft_ms", "p99_ttft_ms"]
    keys += ["mean_tpot_ms", "p99_tpot_ms", "p99_itl_ms", "max_itl_ms", "num_preemptions"]
    rows = [{"metric": k, "user (decode stream)": s[k], "prefill pool": s["prefill"].get(k)} for k in keys]
    t = s["kv_transfer"]
    xfer = (
        f"KV transfers: {t['transfers']:,}, {t['total_bytes'] / 1e9:,.2f} GB, mean {t['mean_ms']:.3f} ms, "
        f"p99 {t['p99_ms']:.3f} ms; prefill blocks held after the prefill token: mean {t['mean_prefill_hold_ms']:.3f} ms"
    )
    if "pushes_per_request" in t:
        xfer += f"; pushes per request (chunks + the last) {t['pushes_per_request']:.2f}"
    note = (
        "TTFT: the decode server's first output, the prefill's token, streamed once its KV is in; "
        "a transfer spans the first chunk's push to the last push's arrival"
        if pd_["policy"] == "sglang"
        else "TTFT: the decode replica's first token, as the proxy streams it (the prefill pool's token is discarded)"
    )
    return "\n".join([head, table(rows), xfer, note])
