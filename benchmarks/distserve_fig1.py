"""DistServe's Figure 1 (Zhong et al., OSDI'24; the authors' blog post, Figure 6): OPT-13B on one
A100-80GB, Poisson arrivals of 512-token prompts with 64 output tokens, SLOs P90 TTFT 0.4 s and
P90 TPOT 0.04 s. Published: the colocated system (vLLM of the time: whole prompts, no chunking)
sustains 1.6 req/s per GPU (TPOT binds; TTFT alone would allow 2.3); a prefill-only instance
5.6 req/s (TTFT alone), a decode-only instance 10 req/s (TPOT alone); 2P1D = min(2 x 5.6, 10) / 3
= 3.3 req/s per GPU, "2x" the colocated goodput.

The paper's engine is not chunksim's A100 profile and its step times are not published, so the
spec-sheet A100 roofline (costmodel/hardware/a100-80gb.yaml) gets two free parameters, fitted
(``--fit``) to the two single-phase rates (5.6 prefill-only, 10 decode-only); the colocated
goodput and the 2P1D gain are then predictions. Two assumptions about where the engine's time
went, each two parameters:

- ``bandwidth``: the effective FLOP rate and the effective bandwidth scaled;
- ``host``: the effective FLOP rate scaled and a fixed cost per forward pass (the engine's host
  time: the vLLM of 2023 ran eagerly, without CUDA graphs), the bandwidth as the roofline has it.

Goodput is experiments/disagg_study.py's: the highest rate at which 90 % of requests meet the
SLOs, on 1,000 requests of one seed.

    python -m benchmarks.distserve_fig1            # both assumptions at their fitted values
    python -m benchmarks.distserve_fig1 --fit      # refit both (several minutes)
"""

from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path

import yaml

PUBLISHED = {"prefill_only": 5.6, "decode_only": 10.0, "colocated": 1.6, "colocated_ttft": 2.3, "2p1d_per_gpu": 10 / 3}
FITTED = {
    "bandwidth": {"pi": 0.8797, "beta": 0.6225, "overhead_s": 0.0},  # --fit, 2026-12-05
    "host": {"pi": 1.0040, "beta": 1.0, "overhead_s": 0.014941},  # --fit, 2026-12-05
}
BASE = Path(__file__).resolve().parent.parent / "costmodel" / "hardware" / "a100-80gb.yaml"
WORKLOAD = {"kind": "poisson", "num_prompts": 1000, "lengths": {"kind": "fixed", "input_len": 512, "output_len": 64}}
TTFT_MS, TPOT_MS, NONE = 400.0, 40.0, 1e9


def profile(pi: float, beta: float, folder: str, overhead_s: float = 0.0) -> str:
    """The A100 roofline with its effective FLOP rate and bandwidth scaled and a fixed cost per
    forward pass: a YAML path."""
    hw = yaml.safe_load(BASE.read_text())
    hw.update(
        name=f"a100-distserve-{pi:.3f}-{beta:.3f}-{overhead_s * 1e3:.2f}",
        pi_eff=hw["pi_eff"] * pi,
        beta_eff=hw["beta_eff"] * beta,
        step_overhead_s=overhead_s,
    )
    path = Path(folder) / f"{hw['name']}.yaml"
    path.write_text(yaml.safe_dump(hw))
    return str(path)


def rates(
    pi: float, beta: float, which=("prefill_only", "decode_only", "colocated", "colocated_ttft", "2p1d"), overhead_s=0.0
):
    """Goodput (req/s) of each published configuration under the scaled profile."""
    from experiments.disagg_study import Candidate, StudySpec, goodput

    with tempfile.TemporaryDirectory() as d:
        hw = profile(pi, beta, d, overhead_s)

        def spec(ttft, tpot, policy="vllm"):
            return StudySpec(
                gpus=4,
                ttft_slo_ms=ttft,
                itl_slo_ms=tpot,
                model="opt-13b",
                hardware=hw,
                workload=WORKLOAD,
                colocated_policy=policy,
                rel_tol=0.02,
            )

        split = lambda x, y: Candidate("disaggregated", prefill=x, prefill_tp=1, decode=y, decode_tp=1)  # noqa: E731
        runs = {
            # one prefill instance, TTFT alone (two decode instances so that decode never limits it)
            "prefill_only": (spec(TTFT_MS, NONE), split(1, 2), 1),
            # one decode instance, TPOT alone (three prefill instances feed it)
            "decode_only": (spec(NONE, TPOT_MS), split(3, 1), 1),
            "colocated": (spec(TTFT_MS, TPOT_MS, "nochunk"), Candidate("colocated", tp=1), 1),
            "colocated_ttft": (spec(TTFT_MS, NONE, "nochunk"), Candidate("colocated", tp=1), 1),
            "2p1d": (spec(TTFT_MS, TPOT_MS), split(2, 1), 3),
        }
        return {k: goodput(*runs[k][:2])["goodput"] / runs[k][2] for k in which}


def _bisect(lo: float, hi: float, target: str, make, steps: int, geometric: bool = True) -> float:
    """The parameter at which ``target``'s rate crosses the published one (the rate rises with it)."""
    x = lo
    for _ in range(steps):
        x = math.sqrt(lo * hi) if geometric else (lo + hi) / 2
        pi, beta, overhead_s = make(x)
        lo, hi = (x, hi) if rates(pi, beta, (target,), overhead_s)[target] < PUBLISHED[target] else (lo, x)
    return x


def fit(assumption: str, steps: int = 9) -> dict:
    """Alternating bisections: the FLOP rate to the prefill-only rate, then the bandwidth (or the
    fixed cost per pass, falling as the rate rises) to the decode-only rate; twice round."""
    p = {"pi": 1.0, "beta": 1.0, "overhead_s": 0.0}
    for _ in range(2):
        p["pi"] = _bisect(0.05, 2.0, "prefill_only", lambda x: (x, p["beta"], p["overhead_s"]), steps)
        if assumption == "bandwidth":
            p["beta"] = _bisect(0.05, 2.0, "decode_only", lambda x: (p["pi"], x, 0.0), steps)
        else:  # a larger overhead lowers the rate: bisect on its negative
            p["overhead_s"] = -_bisect(-0.05, 0.0, "decode_only", lambda x: (p["pi"], 1.0, -x), steps, False)
    return p


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fit", action="store_true", help="refit both assumptions first")
    a = ap.parse_args()
    for assumption, p in FITTED.items():
        p = fit(assumption) if a.fit else p
        print(
            f"{assumption}: A100 roofline with pi_eff x {p['pi']:.4f}, beta_eff x {p['beta']:.4f}, "
            f"{p['overhead_s'] * 1e3:.2f} ms per pass"
        )
        r = rates(p["pi"], p["beta"], overhead_s=p["overhead_s"])
        r["2p1d_per_gpu"] = r.pop("2p1d")
        for k, pub in PUBLISHED.items():
            print(f"  {k:16s} published {pub:6.2f}  chunksim {r[k]:6.2f}  {(r[k] - pub) / pub:+.1%}")
        gain, pub_gain = r["2p1d_per_gpu"] / r["colocated"], PUBLISHED["2p1d_per_gpu"] / PUBLISHED["colocated"]
        print(
            f"  {'2P1D gain':16s} published {pub_gain:6.2f}  chunksim {gain:6.2f}  {(gain - pub_gain) / pub_gain:+.1%}"
        )


if __name__ == "__main__":
    main()
