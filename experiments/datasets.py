"""`vllm bench serve`'s dataset flags as a workload section (vllm/benchmarks/datasets/datasets.py,
``add_dataset_parser``, ``RandomDataset``, ``PrefixRepetitionRandomDataset``, ``ShareGPTDataset``;
vllm/benchmarks/serve.py for the ramp-up rules).

``random`` (vLLM's default): prefix + U[⌊len(1−r)⌋, ⌈len(1+r)⌉] tokens in, likewise out; ``sharegpt``:
first-turn ShareGPT lengths as vLLM samples them (prompt 4..1,024 tokens, prompt + output <=
2,048), from the shipped first-turn table (Llama 3 tokenizer, docs/datasets.md) or a
``--dataset-path`` length table of first turns, output replaced by ``--sharegpt-output-len``;
``prefix_repetition``: num_prompts // num_prefixes prompts per prefix. The other datasets carry
text or media chunksim does not read: refused by name.
"""

from __future__ import annotations

import os
from pathlib import Path

from costmodel.errors import InputError, require

SIMULATED = ("random", "sharegpt", "prefix_repetition")
VLLM_DATASETS = (
    "sharegpt",
    "burstgpt",
    "random",
    "random-mm",
    "random-rerank",
    "hf",
    "custom",
    "custom_audio",
    "custom_image",
    "prefix_repetition",
    "spec_bench",
    "speed_bench",
    "timed_trace",
)
RANDOM_KEYS = {
    "random_input_len": "input_len",
    "random_output_len": "output_len",
    "random_range_ratio": "range_ratio",
    "random_prefix_len": "prefix_len",
}
PREFIX_KEYS = {
    "prefix_repetition_prefix_len": "prefix_len",
    "prefix_repetition_suffix_len": "suffix_len",
    "prefix_repetition_num_prefixes": "num_prefixes",
    "prefix_repetition_output_len": "output_len",
}
RAMP_KEYS = ("ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps")


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _given(o: dict, keys) -> list[str]:
    return [k for k in keys if o.get(k) is not None]


def apply(w: dict, o: dict) -> dict:
    """The workload section ``w`` with the dataset and ramp-up flags in ``o`` (argparse names) applied."""
    for a, b in (("input_len", "random_input_len"), ("output_len", "random_output_len")):
        require(not (a in o and b in o), flag(b), o.get(b), f"give {flag(a)} or {flag(b)}, not both")
    name = o.get("dataset_name")
    random_given, prefix_given = _given(o, RANDOM_KEYS), _given(o, PREFIX_KEYS)
    if name is None and (random_given or prefix_given or "sharegpt_output_len" in o or "dataset_path" in o):
        name = "prefix_repetition" if prefix_given else "sharegpt" if "sharegpt_output_len" in o else "random"
    if name is not None:
        require(
            name in SIMULATED,
            "--dataset-name",
            name,
            f"carries text or media chunksim does not read; simulated: {', '.join(SIMULATED)} "
            "(replay a trace with --workload-file)",
        )
        require(
            "workload_file" not in o and "scenario" not in o,
            "--dataset-name",
            name,
            "not with --workload-file or --scenario",
        )
        for k in (prefix_given if name != "prefix_repetition" else []) + (random_given if name != "random" else []):
            raise InputError(
                flag(k),
                o[k],
                f"is a {'prefix_repetition' if k in PREFIX_KEYS else 'random'} dataset flag; --dataset-name is {name}",
            )
        if name != "random":
            for k in ("input_len", "output_len"):
                require(k not in o, flag(k), o.get(k), f"sets random lengths; --dataset-name is {name}")
        w = {k: v for k, v in w.items() if k not in ("scenario",)}
        w["lengths"] = _lengths(name, o, w.get("lengths") or {})
    if any(o.get(k) is not None for k in RAMP_KEYS):
        w = _ramp(w, o)
    return w


def _lengths(name: str, o: dict, old: dict) -> dict:
    if name == "random":
        keep = {k: old[k] for k in ("input_len", "output_len") if old.get("kind") in ("fixed", "random") and k in old}
        out = {"kind": "random", **keep, **{v: o[k] for k, v in RANDOM_KEYS.items() if o.get(k) is not None}}
        out.update({k: o[k] for k in ("input_len", "output_len") if k in o})
        return out
    if name == "prefix_repetition":
        d = {"prefix_len": 256, "suffix_len": 256, "num_prefixes": 10, "output_len": 128}  # vLLM's defaults
        d.update({v: o[k] for k, v in PREFIX_KEYS.items() if o.get(k) is not None})
        return {"kind": "shared_prefix", **d}
    out = {"kind": "sharegpt"}
    if o.get("dataset_path"):
        out["path"] = os.path.normpath(Path(o["dataset_path"]).expanduser().absolute())
    if o.get("sharegpt_output_len") is not None:
        out["output_len"] = o["sharegpt_output_len"]
    return out


def _ramp(w: dict, o: dict) -> dict:
    """vLLM's rules: a strategy needs both rates, start <= end, and no --request-rate."""
    require(
        o.get("ramp_up_strategy") is not None,
        "--ramp-up-strategy",
        None,
        "give linear or exponential with --ramp-up-start-rps and --ramp-up-end-rps",
    )
    for k in RAMP_KEYS[1:]:
        require(o.get(k) is not None, flag(k), None, "required with --ramp-up-strategy")
    require(
        "request_rate" not in o,
        "--request-rate",
        o.get("request_rate"),
        "not with --ramp-up-strategy (the ramp sets the rate), as in vllm bench serve",
    )
    require(
        o["ramp_up_start_rps"] <= o["ramp_up_end_rps"],
        "--ramp-up-start-rps",
        o["ramp_up_start_rps"],
        f"must be <= --ramp-up-end-rps ({o['ramp_up_end_rps']})",
    )
    out = {k: v for k, v in w.items() if k in ("num_prompts", "lengths", "max_concurrency")}
    out.update({"kind": "ramp", **{k: o[k] for k in RAMP_KEYS}})
    if "burstiness" in o:
        out["burstiness"] = o["burstiness"]
    return out
