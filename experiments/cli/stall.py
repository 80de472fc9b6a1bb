"""The seed's stall study: what one long prompt does to running decoders' inter-token latency."""

from __future__ import annotations

import json

from costmodel.expected_error import expected_error

from ..report import table
from ..stall import JSON_KEYS, LABELS, SEED_SCENE, SEED_VALUES, StallScene, chunk_table, stall_figures
from .common import add_model_hardware, model_and_hardware, positive_float, positive_int


def add_parser(p):
    add_model_hardware(p)
    d = SEED_SCENE
    p.add_argument("--prompt-len", type=positive_int, default=d["prompt_len"], help="the long prompt's tokens (32768)")
    p.add_argument("--num-decodes", type=positive_int, default=d["num_decodes"], help="running decoders (32)")
    p.add_argument(
        "--decode-context",
        type=positive_int,
        default=d["decode_context"],
        help="each decoder's context in tokens (2048)",
    )
    p.add_argument("--budget", type=positive_int, default=d["budget"], help="vLLM max_num_batched_tokens (2048)")
    p.add_argument("--slo-ms", type=positive_float, default=d["slo_ms"], help="ITL SLO for the budget figure (ms)")
    p.add_argument("--align", type=positive_int, default=d["align"], help="round the SLO budget down to this")
    p.add_argument("--chunks", action="store_true", help="also print the per-chunk table")
    p.add_argument("--no-simulate", action="store_true", help="skip the simulated run of the scene through each policy")


def run(args) -> int:
    model, hw = model_and_hardware(args)
    scene = StallScene(args.prompt_len, args.num_decodes, args.decode_context, args.budget, args.slo_ms, args.align)
    from ..stall_sim import check_context

    check_context(model, scene)
    figs = stall_figures(model, hw, scene, args.tp)
    if args.json:
        print(json.dumps({k: figs[k] for k in JSON_KEYS}, indent=2))
        return 0
    other = "faithful" if hw.counting == "seed" else "seed"
    alt = stall_figures(model, hw, scene, args.tp, counting=other)
    is_seed = (
        all(getattr(args, k) == v for k, v in SEED_SCENE.items() if k not in ("model", "hardware"))
        and model.name == SEED_SCENE["model"]
        and hw.name == SEED_SCENE["hardware"]
    )
    rows = []
    for key, (label, unit) in LABELS.items():
        seed = SEED_VALUES.get(key) if is_seed else None
        rows.append(
            {
                "figure": label,
                "unit": unit,
                "seed": seed,
                "chunksim": figs[key],
                "diff": f"{(figs[key] - seed) / seed:+.1%}" if seed else None,
                f"{other} counting": alt[key],
            }
        )
    print(
        f"{model.name} on {hw.name} (tp={args.tp}): {scene.prompt_len}-token prompt, {scene.num_decodes} decoders "
        f"at {scene.decode_context} tokens, budget {scene.budget}; counting={hw.counting}"
    )
    print(table(rows))
    print(expected_error(hw).line(hw.name))
    if not args.no_simulate:
        from ..stall_sim import simulated_stalls

        print()
        print("simulated: decoders at decode steady state when the long prompt arrives; max ITL from its arrival on")
        print(table(simulated_stalls(model, hw, scene, args.tp)))
    if args.chunks:
        from costmodel import CostModel

        print()
        print(table(chunk_table(CostModel(model, hw, args.tp), scene).to_dict("records")))
    return 0
