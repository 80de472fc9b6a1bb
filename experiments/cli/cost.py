"""Price one forward pass of a batch shape, operator by operator."""

from __future__ import annotations

import csv
import io
import json

from costmodel import cost
from costmodel.calibration import forward_interval
from costmodel.errors import InputError, require
from costmodel.expected_error import expected_error

from ..engines import with_precision
from ..report import table
from .common import add_model_hardware, engine_type, model_and_hardware, read_text


def add_parser(p):
    add_model_hardware(p)
    p.add_argument("--q-lens", help="new tokens per sequence, e.g. 2016,1,1")
    p.add_argument("--kv-lens", help="cached tokens per sequence, e.g. 0,2048,2048 (default all 0)")
    p.add_argument("--batch-file", help="CSV with columns q_len,kv_len")
    p.add_argument("--counting", choices=["seed", "faithful"], help="FLOP-counting convention (default: the profile's)")
    p.add_argument("--interval", action="store_true", help="prediction interval from a calibrated profile's covariance")
    p.add_argument(
        "--quantization", "-q", type=engine_type("quantization"), help="weight quantization, as the engines spell it"
    )
    p.add_argument("--kv-cache-dtype", type=engine_type("kv_cache_dtype"), help="KV cache dtype (auto, fp8, ...)")
    p.add_argument(
        "--ep",
        "--ep-size",
        type=int,
        default=1,
        help="expert-parallel size (SGLang --ep-size): routed experts split ep ways, the DeepEP all-to-all added; "
        "a multiple of --tp runs ep/tp data-parallel attention groups of this batch shape",
    )
    p.add_argument(
        "--moe-skew", type=float, default=0.0, help="with --ep: Zipf exponent of the experts' load (0: uniform)"
    )
    p.add_argument(
        "--eplb", action="store_true", help="with --ep: EPLB's balanced expert placement (rows even per rank)"
    )
    p.add_argument(
        "--overlap-host",
        action="store_true",
        help="price host time as overlapped with the GPU (async scheduling): only host time beyond the GPU's shows",
    )


def _ints(field: str, text: str) -> list[int]:
    items = text.split(",")
    if text.strip() and any(not x.strip() for x in items):
        raise InputError(field, text, "has an empty entry; give a comma-separated list of integers")
    try:
        return [int(x) for x in items if x.strip()]
    except ValueError:
        raise InputError(field, text, "must be a comma-separated list of integers") from None


def within_context(model, q: list[int], kv: list[int], batch_file: str | None = None, q_text=None, kv_text=None):
    """No sequence longer than the model's context window (max_position_embeddings): an engine could
    never hold it, and its price would be a figure for nothing that runs."""
    limit = model.max_model_len or 2**31 - 1
    for field, text, lens in (("--q-lens", q_text, q), ("--kv-lens", kv_text, [a + b for a, b in zip(q, kv)])):
        worst = max(lens, default=0)
        require(
            worst <= limit,
            "--batch-file" if batch_file else field,
            batch_file or text,
            f"a sequence of {worst:,} tokens (q_len + kv_len) exceeds {model.name}'s context of {limit:,} tokens",
        )


def read_batch_file(path: str) -> tuple[list[int], list[int]]:
    text = read_text(path, "--batch-file")
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        missing = {"q_len", "kv_len"} - set(reader.fieldnames or [])
        require(not missing, "--batch-file", path, f"missing columns {sorted(missing)}")
        q, kv = [], []
        for i, row in enumerate(reader, start=2):
            q.append(_one(f"{path}:{i}:q_len", row["q_len"]))
            kv.append(_one(f"{path}:{i}:kv_len", row["kv_len"]))
    except csv.Error as e:
        raise InputError("--batch-file", path, f"not valid CSV ({e})") from None
    require(len(q) > 0, "--batch-file", path, "has no rows")
    return q, kv


def _one(field: str, text) -> int:
    vals = _ints(field, text or "")
    require(len(vals) == 1, field, text, "must be one integer")
    return vals[0]


def batch_from_args(args) -> tuple[list[int], list[int]]:
    if args.batch_file:
        return read_batch_file(args.batch_file)
    require(args.q_lens is not None, "--q-lens", None, "give --q-lens or --batch-file")
    q = _ints("--q-lens", args.q_lens)
    kv = _ints("--kv-lens", args.kv_lens) if args.kv_lens else [0] * len(q)
    require(len(q) > 0, "--q-lens", args.q_lens, "name at least one sequence")
    require(len(kv) == len(q), "--kv-lens", args.kv_lens, f"must list one length per --q-lens entry ({len(q)})")
    require(all(x >= 1 for x in q), "--q-lens", args.q_lens, "every length must be >= 1")
    require(all(x >= 0 for x in kv), "--kv-lens", args.kv_lens, "every length must be >= 0")
    return q, kv


def explain(model, hw, tp: int, ep: int, decode_only: bool) -> list[str]:
    """What the MLA and expert-parallel terms assumed (costmodel/expert_parallel.py)."""
    out = []
    if model.is_mla:
        out.append(
            f"MLA: a {model.kv_lora_rank}+{model.qk_rope_dim}-element latent per token and layer on every rank "
            f"({model.kv_bytes_per_token / 1e3:.1f} kB a token), attention FLOPs in the expanded (prefill) form"
        )
    if ep > 1:
        from costmodel.expert_parallel import DEEPEP_GPUS

        nodes = -(-ep // max(1, hw.gpus_per_node))
        how = (
            f"DeepEP {'low-latency' if decode_only else 'normal'} mode, {nodes} node(s), constants fitted on "
            "AIConfigurator's H100/H200 tables"
            if hw.name in DEEPEP_GPUS
            else "ncclAllToAll over the profile's NVLink"
        )
        groups = f", {ep // tp} DP-attention groups of this batch" if ep > tp else ""
        out.append(
            f"EP {ep}: {model.num_experts // ep} experts a GPU{groups}; the most loaded rank's experts; "
            f"dispatch and combine by {how}; the MoE layers' all-reduce replaced by the combine"
        )
    return out


def run(args) -> int:
    model, hw = model_and_hardware(args)
    model = with_precision(model, args.quantization, args.kv_cache_dtype)
    q, kv = batch_from_args(args)
    within_context(model, q, kv, args.batch_file, args.q_lens, args.kv_lens)
    require(args.ep > 1 or not (args.moe_skew or args.eplb), "--moe-skew", args.moe_skew, "needs --ep > 1")
    require(not (args.interval and args.ep > 1), "--interval", True, "is not modelled with --ep > 1")
    result = cost(model, hw, q, kv, args.tp, args.counting, args.overlap_host, args.ep, args.moe_skew, args.eplb)
    band = forward_interval(model, hw, q, kv, args.tp, args.counting) if args.interval else None
    if args.json:
        extra = {"expected_error": expected_error(hw).as_dict()} | ({"interval": band} if band else {})
        print(json.dumps(result.to_dict() | extra, indent=2))
        return 0
    rows = [
        {"operator": o.name, "GFLOP": o.flops / 1e9, "MB": o.bytes / 1e6, "ms": o.time_s * 1e3, "bound": o.bound}
        for o in result.operators
    ]
    rows.append({"operator": "total", "GFLOP": result.flops / 1e9, "MB": result.bytes / 1e6, "ms": result.time_s * 1e3})
    dtypes = f", weights {model.weights}, KV {model.kv_elem_bytes:g} B" if model.weights != "bf16" or model.kv_b else ""
    print(
        f"{model.name} on {hw.name} (tp={args.tp}{f', ep={args.ep}' if args.ep > 1 else ''}{dtypes}): {len(q)} sequences, {sum(q)} new tokens, {sum(kv)} cached"
    )
    print(table(rows))
    for line in explain(model, hw, args.tp, args.ep, sum(q) == len(q)):
        print(line)
    print(expected_error(hw).line(hw.name))
    if band:
        print(
            f"interval ({band['draws']} draws): 68 % {band['p16_s'] * 1e3:.4g}-{band['p84_s'] * 1e3:.4g} ms, "
            f"95 % {band['p2.5_s'] * 1e3:.4g}-{band['p97.5_s'] * 1e3:.4g} ms"
        )
    return 0
