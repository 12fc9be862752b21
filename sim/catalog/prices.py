"""List prices of the hardware presets, in US dollars per GPU-hour, each with its source,
for ``pagesim capacity``'s cost per million output tokens.

All from one provider and one kind of price so that they compare: AWS EC2 on-demand,
Linux, region us-east-1, the instance's hourly price divided by its GPUs (the instance's
CPUs, memory and disks come with it). Prices change: the date says when each was read,
and ``pagesim capacity --price NAME=USD`` replaces or adds one. Presets without an AWS
instance (``l4``'s g6 instances bundle other GPU counts per size, ``a40`` is not offered)
have no price here; a run on them reports no cost unless ``--price`` gives one.
"""

from __future__ import annotations

from typing import NamedTuple


class Price(NamedTuple):
    usd_per_gpu_hour: float
    source: str


_AWS = "AWS EC2 On-Demand pricing, Linux, us-east-1 (https://aws.amazon.com/ec2/pricing/on-demand/)"

#: hardware preset name -> price per GPU-hour and where it comes from.
GPU_PRICES: dict[str, Price] = {
    "a100-40gb": Price(
        2.7447,
        f"{_AWS}: p4d.24xlarge (8x A100 40GB) $21.957642/h / 8, as read on 2026-11-09 "
        "(datareceipts/data-receipts, 109-gpu-pricing/hyperscalers.json)",
    ),
    "a100-80gb": Price(
        3.4309,
        f"{_AWS}: p4de.24xlarge (8x A100 80GB) $27.44705/h / 8, as read on 2026-11-09 "
        "(datareceipts/data-receipts, 109-gpu-pricing/hyperscalers.json)",
    ),
    "h100-sxm": Price(
        6.88,
        f"{_AWS}: p5.48xlarge (8x H100 SXM) $55.04/h / 8, as read on 2026-11-09 "
        "(datareceipts/data-receipts, 109-gpu-pricing/hyperscalers.json)",
    ),
    "h200": Price(
        7.912,
        f"{_AWS}: p5en.48xlarge (8x H200) $63.296/h / 8, as listed by dstack's AWS offers "
        "in August 2026 (github.com/dstackai/dstack pull request 4110)",
    ),
}


def gpu_price(hardware: str, extra: dict[str, float] | None = None) -> Price | None:
    """The price of one GPU of ``hardware`` (a preset name): ``extra`` (from the command
    line) first, then :data:`GPU_PRICES`; None when neither has one."""
    if extra and hardware in extra:
        return Price(extra[hardware], "given on the command line (--price)")
    return GPU_PRICES.get(hardware)


def cost_per_million_tokens(
    price: Price | None, gpus: int, tokens_per_s: float | None
) -> float | None:
    """US dollars per million output tokens for ``gpus`` GPUs producing ``tokens_per_s``
    (None without a price or a rate)."""
    if price is None or not tokens_per_s:
        return None
    return price.usd_per_gpu_hour * gpus / (tokens_per_s * 3600) * 1e6
