"""A pasted engine command line (``vllm serve …``, ``python -m sglang.launch_server …``) as
chunksim's policy, engine flags, model and tensor-parallel degree.

Flag names and meanings follow vLLM's ``EngineArgs.add_cli_args`` (vllm/engine/arg_utils.py) and
SGLang's ``ServerArgs.add_cli_args`` (sglang/srt/server_args.py): ``--context-length`` is SGLang's
``max_model_len``, ``--chunked-prefill-size -1`` turns SGLang's chunking off, ``--tp-size`` /
``--tensor-parallel-size`` / ``-tp`` the TP degree. Flags chunksim does not model are returned,
so the caller can list them in one warning, never dropped silently.
"""

from __future__ import annotations

import difflib
import json
import re
import shlex
from dataclasses import dataclass, field

from costmodel.errors import InputError, require

from .engine_flags import BOOL, FLAGS

ENGINES = ("vllm", "sglang")
PARALLEL = {  # spelling -> ("tp" | "dp"); vLLM: EngineArgs' ParallelConfig flags, SGLang: ServerArgs
    "vllm": {"--tensor-parallel-size": "tp", "-tp": "tp", "--data-parallel-size": "dp", "-dp": "dp"},
    "sglang": {
        "--tp-size": "tp",
        "--tp": "tp",
        "--tensor-parallel-size": "tp",
        "--dp-size": "dp",
        "--dp": "dp",
        "--data-parallel-size": "dp",
    },
}
DP_ROUTER = {"vllm": "vllm_dp", "sglang": "round_robin"}
"""Each engine's own data-parallel balancer. vLLM: the API server's
``DPLBAsyncMPClient.get_core_engine_for_request`` (vllm/v1/engine/core_client.py), the vllm_dp
router (simcore/router.py; a MoE model's ranks step in lockstep); SGLang:
``ServerArgs.load_balance_method = "round_robin"`` (server_args.py) in its DataParallelController."""
LOAD_BALANCE = ("auto", "round_robin")
LOAD_BALANCE_WHY = (
    "only round_robin (auto, the default, outside PD) is modelled: total_requests and total_tokens "
    "balance on scheduler load snapshots the DataParallelController refreshes every 20 ms of wall "
    "clock (refresh_load_budget), follow_bootstrap_room is PD disaggregation's"
)
"""SGLang's ``--load-balance-method`` (DataParallelController's ``dispatch_lookup``): the values
the round_robin router models, and why the others are refused."""
MODEL_FLAGS = {"vllm": ("--model",), "sglang": ("--model-path", "--model")}
ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
TYPO_CUTOFF = 0.85  # difflib ratio above which an unknown flag is read as a misspelt modelled one
NOT_TYPOS = {  # real flags of each engine close to a modelled one: passed on as unmodelled, not "did you mean"
    "vllm": (
        "--max-num-partial-prefills",
        "--max-long-partial-prefills",
        "--max-seq-len-to-capture",
        "--enable-prompt-embeds",
        "--enable-lora",
        "--enable-sleep-mode",
        "--kv-cache-memory-bytes",
        "--prefix-caching-hash-algo",
        "--max-logprobs",
        "--max-loras",
        "--max-lora-rank",
        "--max-cpu-loras",
        "--cpu-offload-gb",
        "--swap-space",
        "--scheduler-cls",
        "--scheduling-policy",
        "--no-enable-prompt-embeds",
        "--num-lookahead-slots",
        "--seed",
        "--data-parallel-size-local",
        "--data-parallel-rank",
        "--data-parallel-address",
        "--data-parallel-rpc-port",
        "--data-parallel-backend",
        "--pipeline-parallel-size",
    ),
    "sglang": (
        "--max-queued-requests",
        "--disable-chunked-prefix-cache",
        "--enable-dynamic-chunking",
        "--pp-size",
        "--nnodes",
        "--node-rank",
        "--schedule-policy",
        "--disable-outlines-disk-cache",
        "--disable-custom-all-reduce",
        "--enable-torch-compile",
        "--enable-metrics",
    ),
}


def _table(engine: str) -> dict:
    """spelling -> (EngineFlags field, value a bare boolean switch sets)."""
    out = {}
    for name, spec in FLAGS.items():
        for s in getattr(spec, engine):
            out[s] = (name, not s.startswith("--no-") if spec.kind == BOOL else None)
    return out


TABLES = {e: _table(e) for e in ENGINES}


@dataclass
class EngineCommand:
    policy: str
    model: str | None
    flags: dict = field(default_factory=dict)
    tp: int | None = None
    dp: int | None = None
    ignored: list = field(default_factory=list)
    env: list = field(default_factory=list)
    unmodeled: list = field(default_factory=list)  # answer-changing flags let through by --allow-unmodeled


class UnmodeledFlag(InputError):
    """A recognised engine flag that changes the answer and that chunksim does not model; the run
    proceeds without it only under ``--allow-unmodeled``."""


def _default_or_off(default: str):
    return lambda v: v.strip().lower() in (default, "")


ANSWER_CHANGING = {  # flag -> (reason, value test that makes it harmless or None); see CONTRIBUTING.md
    "vllm": {
        "--pipeline-parallel-size": ("pipeline parallelism is not modelled", _default_or_off("1")),
        "-pp": ("pipeline parallelism is not modelled", _default_or_off("1")),
        "--enable-lora": ("LoRA adapters (batch mixing, adapter slots) are not modelled", None),
        "--cpu-offload-gb": ("weight offload to CPU (slower steps, more KV) is not modelled", _default_or_off("0")),
        "--kv-cache-memory-bytes": ("a fixed KV-cache size is not modelled (use --gpu-memory-utilization)", None),
        "--scheduling-policy": ("vLLM's priority scheduling is not modelled (fcfs is)", _default_or_off("fcfs")),
        "--scheduler-cls": ("a custom scheduler class is not modelled", None),
    },
    "sglang": {
        "--pp-size": ("pipeline parallelism is not modelled", _default_or_off("1")),
        "--speculative-accept-threshold-single": (
            "acceptance is --spec-acceptance (chunksim's own), not SGLang's thresholds",
            _default_or_off("1.0"),
        ),
        "--speculative-accept-threshold-acc": (
            "acceptance is --spec-acceptance (chunksim's own), not SGLang's thresholds",
            _default_or_off("1.0"),
        ),
        "--speculative-adaptive": ("adaptive speculative steps are not modelled", None),
        "--schedule-policy": ("only SGLang's default fcfs queue order is modelled", _default_or_off("fcfs")),
        "--enable-dynamic-chunking": ("SGLang's dynamic chunk sizing is not modelled", None),
        "--max-queued-requests": ("SGLang's queue-length rejection is not modelled", None),
        "--optimistic-prefill-attempts": ("PD prefill before bootstrap is not modelled", _default_or_off("0")),
        "--disaggregation-decode-allocation-policy": (
            "PD decode allocation after the prefill completes is not modelled (early is)",
            _default_or_off("early"),
        ),
        "--disaggregation-decode-enable-radix-cache": ("the PD decode server's radix cache is not modelled", None),
        "--disaggregation-decode-enable-offload-kvcache": ("PD decode KV offload is not modelled", None),
        "--disaggregation-decode-retraction-backup": (
            "PD decode retraction backs up to CPU tensors in chunksim (cpu_tensor)",
            _default_or_off("cpu_tensor"),
        ),
        "--disaggregation-decode-polling-interval": ("PD decode polls every iteration here", _default_or_off("1")),
        "--disaggregation-decode-host-receive-threshold": (
            "PD decode host receive is not modelled (1, the default, disables it)",
            lambda v: v.strip() in ("1", "1.0", ""),
        ),
    },
}
"""Recognised flags that change throughput, latency or admission and that chunksim does not model.
Everything else unmodelled (ports, hosts, logging, api keys, served names, download dirs, seeds,
hash algorithms, metrics) is answer-neutral and listed as ignored. Defaults that make a flag harmless:
vLLM ``SchedulerConfig.policy = "fcfs"`` (vllm/config/scheduler.py), ``ParallelConfig.pipeline_parallel_size
= 1`` (vllm/config/parallel.py); SGLang ``schedule_policy = "fcfs"`` (sglang/srt/arg_groups/fields/schedule.py),
the order tests/conformance/sglang_engine.py drives; its PD defaults ``optimistic_prefill_attempts = 0``,
``disaggregation_decode_allocation_policy = "early"``, ``disaggregation_decode_polling_interval = 1``,
``disaggregation_decode_host_receive_threshold = 1.0`` (sglang/srt/arg_groups/fields/disagg.py)."""


def _answer_changing(engine: str, flag: str, value: str | None, allow: bool, out: EngineCommand) -> None:
    entry = ANSWER_CHANGING[engine].get(flag)
    if entry is None:
        return
    reason, harmless = entry
    if harmless is not None and value is not None and harmless(value):
        return
    if not allow:
        raise UnmodeledFlag(
            f"--engine-cmd {flag}", value, f"{reason}; it changes the answer (pass --allow-unmodeled to run without it)"
        )
    out.unmodeled.append(flag if value is None else f"{flag} {value}")


def _program(tokens: list[str]) -> tuple[str, list[str]]:
    if len(tokens) >= 2 and tokens[0] == "vllm" and tokens[1] == "serve":
        return "vllm", tokens[2:]
    if tokens and tokens[0].startswith("python") and len(tokens) >= 3 and tokens[1] == "-m":
        if tokens[2] in ("sglang.launch_server", "sglang.launch_server.py"):
            return "sglang", tokens[3:]
        if tokens[2] == "vllm.entrypoints.openai.api_server":
            return "vllm", tokens[3:]
    if len(tokens) >= 2 and tokens[0] == "sglang" and tokens[1] == "serve":
        return "sglang", tokens[2:]
    raise InputError(
        "--engine-cmd", " ".join(tokens[:3]), "must start with `vllm serve` or `python -m sglang.launch_server`"
    )


def _strip_env(tokens: list[str]) -> tuple[list[str], list[str]]:
    """``CUDA_VISIBLE_DEVICES=0,1 vllm serve …`` and ``env A=1 vllm serve …``: the assignments, and the rest."""
    env, i = [], 0
    if tokens and tokens[0] == "env":
        i = 1
    while i < len(tokens) and ENV.match(tokens[i]):
        env.append(tokens[i])
        i += 1
    return env, tokens[i:]


REFUSED = {  # flags that change what the engine does and that chunksim does not model: an error, not a warning
    "sglang": {},
    "vllm": {
        "--cudagraph-capture-sizes": "give the sizes as --compilation-config "
        "'{\"cudagraph_capture_sizes\": [...]}' (chunksim reads one value per flag)",
        "--performance-mode": "changes vLLM's capture sizes and defaults; not modelled (balanced, the default, "
        "is what --execution engine prices)",
        "--enable-dbo": "vLLM's dual-batch overlap is not modelled (SGLang's --enable-two-batch-overlap is)",
    },
}
REFUSED["sglang"].update(
    {
        s: "changes SGLang's CUDA-graph capture in a way not modelled; modelled: --disable-cuda-graph, "
        "--disable-decode-cuda-graph, --disable-prefill-cuda-graph, --cuda-graph-max-bs-decode, "
        "--cuda-graph-max-bs-prefill (with --execution engine)"
        for s in (
            "--cuda-graph-max-bs",
            "--cuda-graph-config",
            "--cuda-graph-bs-decode",
            "--cuda-graph-bs-prefill",
            "--cuda-graph-backend-decode",
            "--cuda-graph-backend-prefill",
            "--disable-cuda-graph-padding",
        )
    }
)
REFUSED["vllm"].update(
    {
        s: "vLLM's CPU KV offloading (OffloadingConnector) is not modelled; SGLang's host tier is: "
        "--enable-hierarchical-cache"
        for s in ("--kv-offloading-size", "--kv-offloading-backend")
    }
)
REFUSED["sglang"].update(
    {
        s: "HiCache's L3 storage tier is not modelled (the host tier is: --enable-hierarchical-cache)"
        for s in ("--hicache-storage-backend", "--hicache-storage-prefetch-policy")
    }
)
GLUED_LEVEL = re.compile(r"-O=?(.+)$")  # vLLM's -O3 / -O=3 = --optimization-level 3
DOTTED = re.compile(r"(?:-cc|--compilation-config)\.(\w+)=(.*)$")  # vLLM's -cc.key=value


def _refused(engine: str, flag: str) -> None:
    if flag in REFUSED[engine]:
        raise InputError(f"--engine-cmd {flag}", flag, REFUSED[engine][flag])
    if engine == "vllm" and flag.startswith("--kv-transfer-config."):
        raise InputError(
            f"--engine-cmd {flag}", flag, "spell the KV transfer config as one JSON value: --kv-transfer-config '{...}'"
        )
    if engine == "vllm" and flag.startswith("--speculative-config."):
        raise InputError(
            f"--engine-cmd {flag}", flag, "spell the speculative config as one JSON value: --speculative-config '{...}'"
        )


def _not_modelled(engine: str, flag: str) -> None:
    """A flag nobody models: a near-miss of a modelled spelling is a typo (the engine itself would
    refuse it), another engine's flag is refused; anything else is passed on as not modelled."""
    own = list(TABLES[engine]) + list(PARALLEL[engine]) + list(MODEL_FLAGS[engine])
    close = difflib.get_close_matches(flag, own + list(NOT_TYPOS[engine]), n=1, cutoff=TYPO_CUTOFF)
    if close and close[0] in own:
        raise InputError(f"--engine-cmd {flag}", flag, f"not a {engine} flag; did you mean {close[0]}?")
    other = next(e for e in ENGINES if e != engine)
    if flag in TABLES[other] and flag not in NOT_TYPOS[engine]:
        raise InputError(f"--engine-cmd {flag}", flag, f"is {other}'s flag, not {engine}'s")


def _compilation_tokens(engine: str, rest: list[str]) -> tuple[list[str], dict]:
    """vLLM's short spellings: ``-O3`` / ``-O=3`` as ``--optimization-level 3``
    (vllm/utils/argparse_utils.py, ``FlexibleArgumentParser.parse_args``); ``-cc.key=value`` and
    ``--compilation-config.key=value`` as one compilation-config key each."""
    if engine != "vllm":
        return rest, {}
    out, dotted = [], {}
    for tok in rest:
        level, dot = GLUED_LEVEL.match(tok), DOTTED.match(tok)
        if level:
            out += ["--optimization-level", level.group(1)]
        elif dot:
            try:
                dotted[dot.group(1)] = json.loads(dot.group(2))
            except ValueError:
                dotted[dot.group(1)] = dot.group(2)
        else:
            out.append(tok)
    return out, dotted


def parse_engine_cmd(line: str, allow_unmodeled: bool = False) -> EngineCommand:
    """The engine, its modelled flags (chunksim's names), the model id and the rest of the flags."""
    from .engine_flags import convert

    require(isinstance(line, str) and line.strip(), "--engine-cmd", line, "give the engine's command line")
    try:
        tokens = shlex.split(line.replace("\\\n", " "))
    except ValueError as e:
        raise InputError("--engine-cmd", line[:60], f"cannot split ({e})") from None
    env, tokens = _strip_env(tokens)
    engine, rest = _program(tokens)
    rest, dotted = _compilation_tokens(engine, rest)
    table, parallel = TABLES[engine], PARALLEL[engine]
    out = EngineCommand(policy=engine, model=None, env=env)
    i = 0
    while i < len(rest):
        tok = rest[i]
        flag, eq, val = tok.partition("=") if tok.startswith("-") else (tok, "", "")
        if not tok.startswith("-"):
            require(engine == "vllm" and out.model is None, "--engine-cmd", tok, "unexpected positional argument")
            out.model = tok
            i += 1
            continue
        takes_value = not eq and i + 1 < len(rest) and not rest[i + 1].startswith("--")
        if flag in MODEL_FLAGS[engine]:
            require(eq or takes_value, f"--engine-cmd {flag}", None, "needs a model id or path")
            out.model = val if eq else rest[i + 1]
            i += 1 if eq else 2
            continue
        if flag in parallel or flag in table:
            switch = flag in table and FLAGS[table[flag][0]].kind == BOOL
            if switch:
                require(not eq, f"--engine-cmd {flag}", val, "takes no value")
                i += 1
            else:
                require(eq or takes_value, f"--engine-cmd {flag}", None, "needs a value")
                text = val if eq else rest[i + 1]
                i += 1 if eq else 2
            if flag in parallel:
                try:
                    n = int(text)
                except ValueError:
                    raise InputError(f"--engine-cmd {flag}", text, "must be an integer") from None
                require(n >= 1, f"--engine-cmd {flag}", n, "must be a positive integer")
                setattr(out, parallel[flag], n)
            elif switch:
                out.flags[table[flag][0]] = table[flag][1]
            else:
                out.flags[table[flag][0]] = convert(table[flag][0], text, f"--engine-cmd {flag}")
            continue
        if engine == "sglang" and flag == "--load-balance-method":  # the DP controller's dispatch
            require(eq or takes_value, f"--engine-cmd {flag}", None, "needs a value")
            text = val if eq else rest[i + 1]
            require(text in LOAD_BALANCE, f"--engine-cmd {flag}", text, LOAD_BALANCE_WHY)
            i += 1 if eq else 2
            continue
        _refused(engine, flag)
        _not_modelled(engine, flag)
        value = val if eq else (rest[i + 1] if takes_value else None)
        _answer_changing(engine, flag, value, allow_unmodeled, out)
        out.ignored.append(tok if eq or not takes_value else f"{tok} {rest[i + 1]}")
        i += 1 if eq or not takes_value else 2
    if dotted:
        base = json.loads(out.flags.get("compilation_config") or "{}")
        out.flags["compilation_config"] = convert(
            "compilation_config", json.dumps({**base, **dotted}), "--engine-cmd -cc"
        )
    return out


def shipped_model(model_id: str) -> str:
    """A Hugging Face id (``meta-llama/Llama-3.1-8B-Instruct``) as a shipped config's short name
    (the file whose ``_source`` names the base model), or a local config.json path as given."""
    from pathlib import Path

    from costmodel.model import shipped_for_id, shipped_sources

    p = Path(model_id).expanduser()
    if p.is_file() or (p.is_dir() and (p / "config.json").is_file()):
        return str(p)
    stem = shipped_for_id(model_id)
    if stem:
        return stem
    raise InputError(
        "--engine-cmd model",
        model_id,
        f"no shipped config for this Hugging Face id (shipped: {', '.join(sorted(shipped_sources().values()))}); "
        "download its config.json and pass --model PATH",
    )
