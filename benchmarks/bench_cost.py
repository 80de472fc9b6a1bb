"""How long pricing one forward pass takes: a 256-sequence batch (255 decodes and one prefill
chunk), for a dense and an MoE model, with and without reducing the shape first.

    python benchmarks/bench_cost.py
"""

from __future__ import annotations

import timeit

from costmodel import CostModel, cost, load_hardware, load_model


def main() -> None:
    hw = load_hardware("h100")
    q = [1] * 255 + [1792]
    kv = [2048 + 13 * i for i in range(255)] + [4096]
    for name, tp in (("llama-3.1-8b", 1), ("llama-3.1-70b", 4), ("qwen3-30b-a3b", 1)):
        cm = CostModel(load_model(name), hw, tp)
        shape = cm.shape(q, kv)
        n = 20000
        # the lambdas are timed within this iteration, so their loop variables are current (noqa: B023)
        t_shape = timeit.timeit(lambda: cm.shape(q, kv), number=n) / n  # noqa: B023
        t_time = timeit.timeit(lambda: cm.time(shape), number=n) / n  # noqa: B023
        t_api = timeit.timeit(lambda: cost(cm.model, hw, q, kv, tp), number=2000) / 2000  # noqa: B023
        print(
            f"{name:14} tp={tp}: reduce 256 sequences {t_shape * 1e6:6.1f} µs + price {t_time * 1e6:5.1f} µs "
            f"= {(t_shape + t_time) * 1e6:6.1f} µs per pass;  cost() with breakdown and validation {t_api * 1e6:6.1f} µs;"
            f"  pass = {cm.time(shape) * 1e3:.2f} ms"
        )


if __name__ == "__main__":
    main()
