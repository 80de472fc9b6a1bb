"""List what ships with chunksim: models, hardware profiles, routers, datasets.

models: the short names --model takes, with the Hugging Face id each came from (also accepted);
hardware: the GPU profiles --hardware takes, with the default --gpu-hourly-price and its source;
routers: the --router choices; datasets: what --dataset-name simulates, the trace formats
--workload-file reads, and the shipped trace fixtures.
"""

from __future__ import annotations

import json
from pathlib import Path

KINDS = ("models", "hardware", "routers", "datasets")
ROOT = Path(__file__).resolve().parents[2]


def add_parser(p):
    p.add_argument("what", choices=KINDS, help="models, hardware, routers or datasets")
    p.add_argument("--json", action="store_true", help="print a machine-readable list")


def models() -> list[dict]:
    from costmodel.model import load_model, shipped_sources

    rows = []
    for name, source in shipped_sources().items():
        m = load_model(name)
        rows.append({"name": name, "hugging_face_id": source, "layers": m.L, "context": m.max_model_len or None})
    return rows


def hardware() -> list[dict]:
    from costmodel.hardware import HARDWARE_DIR, load_hardware

    from ..pricing import gpu_hourly_price

    rows = []
    for f in sorted(HARDWARE_DIR.glob("*.yaml")):
        hw = load_hardware(f.stem)
        price, source = gpu_hourly_price(hw.name, None)
        rows.append(
            {
                "name": f.stem,
                "description": hw.description,
                "memory_gib": round(hw.memory_bytes / 2**30, 1),
                "gpus_per_node": hw.gpus_per_node,
                "usd_per_gpu_hour": price,
                "price_source": source if price is not None else "none (pass --gpu-hourly-price)",
            }
        )
    return rows


def routers() -> list[dict]:
    import simcore.router as r

    doc, name = {}, None
    for line in r.__doc__.splitlines()[2:]:
        if line.strip() and not line.startswith(" "):
            name, *words = line.split()
            doc[name] = " ".join(words)
        elif line.strip() and name:
            doc[name] += " " + " ".join(line.split())
    return [{"name": n, "what": doc.get(n, "")} for n in r.ROUTERS]


def datasets() -> list[dict]:
    from workloads.lengths import SHAREGPT_FIRST_TURNS
    from workloads.traces import FORMATS

    from .. import datasets as ds

    what = {
        "random": "vLLM's default: lengths uniform around --random-input-len / --random-output-len",
        "sharegpt": "first-turn ShareGPT lengths as vllm bench serve samples them (the shipped table, or --dataset-path)",
        "prefix_repetition": "prompts sharing --prefix-repetition-num-prefixes prefixes",
    }
    rows = [{"name": n, "kind": "--dataset-name", "what": what[n]} for n in ds.SIMULATED]
    rows += [{"name": n, "kind": "--trace-format", "what": "trace file read by --workload-file"} for n in FORMATS]
    fixtures = ROOT / "workloads" / "fixtures"
    tables = {
        SHAREGPT_FIRST_TURNS.name: "sharegpt's default table (first turns, --dataset-path takes your own)",
        "sharegpt_8k_filtered_200.csv": "a plain length table (workload lengths: kind: table)",
    }
    rows += [
        {
            "name": f"workloads/fixtures/{f.name}",
            "kind": "length table" if f.name in tables else "trace fixture",
            "what": tables.get(f.name) or f"--workload-file ({'azure' if f.suffix == '.csv' else 'mooncake'} format)",
        }
        for f in sorted(fixtures.glob("*"))
        if f.suffix in (".csv", ".jsonl")
    ]
    return rows


def run(args) -> int:
    from ..report import table

    rows = {"models": models, "hardware": hardware, "routers": routers, "datasets": datasets}[args.what]()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if args.what == "hardware":  # the table short: the GPU, and the price's provider and date
        rows = [
            {
                **r,
                "description": r["description"].split(", calibrated")[0],
                "price_source": r["price_source"].split(" (8x")[0].replace("on-demand list price, ", ""),
            }
            for r in rows
        ]
    print(table(rows))
    return 0
