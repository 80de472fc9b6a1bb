"""GPU rental prices, and a run's cost per million tokens.

Defaults are on-demand list prices in USD per GPU-hour for the shipped profiles whose GPU one
public price list names; every other profile needs ``--gpu-hourly-price``. They come from one
provider, so they compare GPUs with each other, not providers:

  Lambda, https://lambda.ai/instances ("8x NVIDIA … SXM" on-demand instances, per GPU per hour),
  as transcribed on 2026-09-20 by api-evangelist/lambda-labs, plans/lambda-labs-plans-pricing.yml
  ("every price_text was found verbatim in the fetched page text"); the H100 figure agrees with
  tgarg01/silybench-data derived/csv/gpu_prices.csv (lambda.ai/pricing, 8x H100 SXM, 2026-09-25).
  Not re-read by chunksim; list prices move, so pass your own with --gpu-hourly-price.

No default for h200, l40s, rtx4090 and the RTX PRO 6000s: that list has no on-demand price for
them, and a figure from elsewhere would not compare with the ones above.
"""

from __future__ import annotations

from costmodel.errors import require

LAMBDA = "Lambda on-demand list price, lambda.ai/instances, as transcribed 2026-09-20"
DEFAULT_GPU_HOURLY_USD = {  # shipped profile name -> (USD per GPU-hour, source)
    "h100": (3.99, f"{LAMBDA} (8x NVIDIA H100 SXM)"),
    "h100-sxm": (3.99, f"{LAMBDA} (8x NVIDIA H100 SXM)"),
    "a100-80gb": (2.79, f"{LAMBDA} (8x NVIDIA A100 SXM 80 GB)"),
    "a100-sxm": (2.79, f"{LAMBDA} (8x NVIDIA A100 SXM 80 GB)"),
    "b200": (6.69, f"{LAMBDA} (8x NVIDIA B200 SXM6)"),
}
COST_KEYS = ("usd_per_million_output_tokens", "usd_per_million_total_tokens")


def gpu_hourly_price(hardware_name: str, given: float | None) -> tuple[float | None, str]:
    """(USD per GPU-hour, where it came from); (None, why) when neither given nor sourced."""
    if given is not None:
        return float(given), "given (--gpu-hourly-price)"
    if hardware_name in DEFAULT_GPU_HOURLY_USD:
        return DEFAULT_GPU_HOURLY_USD[hardware_name]
    return None, f"no sourced price for {hardware_name}; pass --gpu-hourly-price USD"


def require_price(hardware_name: str, given: float | None, why: str) -> float:
    price, source = gpu_hourly_price(hardware_name, given)
    require(price is not None, "--gpu-hourly-price", given, f"{why}: {source}")
    return price


def cost_per_million(summary: dict, gpus: int, price: float) -> dict:
    """USD per million output (and input + output) tokens: the cluster's GPU-hours over the tokens
    it served at the run's throughput (tokens/s from the summary)."""
    usd_per_s = price * gpus / 3600.0
    out = {}
    for key, rate in (
        ("usd_per_million_output_tokens", summary.get("output_throughput")),
        ("usd_per_million_total_tokens", summary.get("total_token_throughput")),
    ):
        out[key] = usd_per_s / rate * 1e6 if rate else float("inf")
    return out
