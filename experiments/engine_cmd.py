"""A pasted engine command line (``vllm serve …``, ``python -m sglang.launch_server …``) as
chunksim's policy, engine flags, model and tensor-parallel degree.

Flag names and meanings follow vLLM's ``EngineArgs.add_cli_args`` (vllm/engine/arg_utils.py) and
SGLang's ``ServerArgs.add_cli_args`` (sglang/srt/server_args.py): ``--context-length`` is SGLang's
``max_model_len``, ``--chunked-prefill-size -1`` turns SGLang's chunking off, ``--tp-size`` /
``--tensor-parallel-size`` / ``-tp`` the TP degree. Flags chunksim does not model are returned,
so the caller can list them in one warning, never dropped silently.
"""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from costmodel.errors import InputError, require
from costmodel.model import MODELS_DIR

INT, FLOAT, TRUE, FALSE = "int", "float", "true", "false"
VLLM = {"--max-model-len": ("max_model_len", INT), "--max-num-seqs": ("max_num_seqs", INT),
        "--max-num-batched-tokens": ("max_num_batched_tokens", INT),
        "--long-prefill-token-threshold": ("long_prefill_token_threshold", INT),
        "--enable-chunked-prefill": ("enable_chunked_prefill", TRUE),
        "--no-enable-chunked-prefill": ("enable_chunked_prefill", FALSE),
        "--enable-prefix-caching": ("enable_prefix_caching", TRUE),
        "--no-enable-prefix-caching": ("enable_prefix_caching", FALSE),
        "--block-size": ("block_size", INT), "--gpu-memory-utilization": ("gpu_memory_utilization", FLOAT),
        "--num-gpu-blocks-override": ("num_gpu_blocks_override", INT),
        "--async-scheduling": ("async_scheduling", TRUE), "--no-async-scheduling": ("async_scheduling", FALSE),
        "--scheduler-reserve-full-isl": ("scheduler_reserve_full_isl", TRUE),
        "--no-scheduler-reserve-full-isl": ("scheduler_reserve_full_isl", FALSE),
        "--tensor-parallel-size": ("tp", INT), "-tp": ("tp", INT)}
SGLANG = {"--context-length": ("max_model_len", INT), "--chunked-prefill-size": ("chunked_prefill_size", INT),
          "--max-prefill-tokens": ("max_prefill_tokens", INT), "--enable-mixed-chunk": ("enable_mixed_chunk", TRUE),
          "--page-size": ("page_size", INT), "--max-running-requests": ("max_running_requests", INT),
          "--mem-fraction-static": ("mem_fraction_static", FLOAT), "--max-total-tokens": ("max_total_tokens", INT),
          "--disable-radix-cache": ("disable_radix_cache", TRUE), "--disable-overlap-schedule": ("disable_overlap_schedule", TRUE),
          "--tp-size": ("tp", INT), "--tp": ("tp", INT),
          "--tensor-parallel-size": ("tp", INT)}
MODEL_FLAGS = {"vllm": ("--model",), "sglang": ("--model-path", "--model")}


@dataclass
class EngineCommand:
    policy: str
    model: str | None
    flags: dict = field(default_factory=dict)
    tp: int | None = None
    ignored: list = field(default_factory=list)


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
    raise InputError("--engine-cmd", " ".join(tokens[:3]),
                     "must start with `vllm serve` or `python -m sglang.launch_server`")


def _value(flag: str, name: str, kind: str, text: str):
    try:
        v = int(text) if kind == INT else float(text)
    except ValueError:
        raise InputError(f"--engine-cmd {flag}", text, f"must be {'an integer' if kind == INT else 'a number'}") from None
    if name == "chunked_prefill_size":
        require(v > 0 or v == -1, f"--engine-cmd {flag}", v, "must be positive, or -1 to turn chunking off")
    elif name == "long_prefill_token_threshold":
        require(v >= 0, f"--engine-cmd {flag}", v, "must be >= 0")
    elif kind == FLOAT:
        require(0 < v <= 1, f"--engine-cmd {flag}", v, "must be in (0, 1]")
    else:
        require(v > 0, f"--engine-cmd {flag}", v, "must be a positive integer")
    return v


def parse_engine_cmd(line: str) -> EngineCommand:
    """The engine, its modelled flags (chunksim's names), the model id and the rest of the flags."""
    require(isinstance(line, str) and line.strip(), "--engine-cmd", line, "give the engine's command line")
    try:
        tokens = shlex.split(line.replace("\\\n", " "))
    except ValueError as e:
        raise InputError("--engine-cmd", line[:60], f"cannot split ({e})") from None
    engine, rest = _program(tokens)
    table = VLLM if engine == "vllm" else SGLANG
    out = EngineCommand(policy=engine, model=None)
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
        if flag in table:
            name, kind = table[flag]
            if kind in (TRUE, FALSE):
                require(not eq, f"--engine-cmd {flag}", val, "takes no value")
                value = kind == TRUE
                i += 1
            else:
                require(eq or takes_value, f"--engine-cmd {flag}", None, "needs a value")
                value = _value(flag, name, kind, val if eq else rest[i + 1])
                i += 1 if eq else 2
            if name == "tp":
                out.tp = value
            else:
                out.flags[name] = value
            continue
        out.ignored.append(tok if eq or not takes_value else f"{tok} {rest[i + 1]}")
        i += 1 if eq or not takes_value else 2
    return out


def shipped_model(model_id: str) -> str:
    """A Hugging Face id (``meta-llama/Llama-3.1-8B-Instruct``) as a shipped config's short name
    (the file whose ``_source`` names the base model), or a local config.json path as given."""
    p = Path(model_id).expanduser()
    if p.is_file() or (p.is_dir() and (p / "config.json").is_file()):
        return str(p)
    want = model_id.strip().lower()
    sources = {}
    for f in sorted(MODELS_DIR.glob("*.json")):
        try:
            sources[f.stem] = str(json.loads(f.read_text()).get("_source", "")).lower()
        except (OSError, ValueError):
            continue
    candidates = {want} | {want[: -len(s)] for s in ("-instruct", "-chat", "-hf", "-it") if want.endswith(s)}
    for stem, src in sources.items():
        if src in candidates:
            return stem
    raise InputError("--engine-cmd model", model_id,
                     f"no shipped config for this Hugging Face id (shipped: {', '.join(sorted(sources.values()))}); "
                     "download its config.json and pass --model PATH")
