"""Cost: the self-hosted fleet over a day, the API for the same traffic, and the hybrid.

Assumptions (``docs/planning.md``):

- A fleet is sized for the busiest hour x headroom and paid for all 24 hours (GPU-hour price x
  GPUs); quiet hours cost as much as busy ones. Tokens per hour are each class's rate x the
  hour's multiplier x its mean input and output lengths.
- ``cost_per_million_output_tokens_usd`` puts the whole day's cost on its output tokens (the
  usual self-hosting figure); ``..._input_...`` puts it all on input tokens, and
  ``cost_per_million_tokens_usd`` spreads it over both. They are three views of one cost, not
  three costs to add.
- The API bills every token at its list prices, hour by hour.
- Hybrid: ``k`` self-hosted replicas carry up to ``k / n`` of the busiest hour's traffic (``n``
  the replicas the full plan needs); in each hour the traffic above that goes to the API. The
  split is the ``k`` in 0..n with the lowest daily cost (ties to more self-hosting). Bursts
  inside an hour are not split off: the base fleet keeps its headroom for them.
"""

from __future__ import annotations

from typing import Any

from inferplan.plan.request import PlanRequest
from inferplan.plan.traffic import LengthStats

HOURS_PER_DAY = 24
SECONDS_PER_HOUR = 3600.0


def tokens_per_hour(request: PlanRequest, stats: tuple[LengthStats, ...]) -> tuple[float, float]:
    """(input, output) tokens in one hour at multiplier 1."""
    inp = sum(c.request_rate * s.mean_input for c, s in zip(request.traffic, stats, strict=True))
    out = sum(c.request_rate * s.mean_output for c, s in zip(request.traffic, stats, strict=True))
    return inp * SECONDS_PER_HOUR, out * SECONDS_PER_HOUR


def fleet_cost(
    request: PlanRequest, stats: tuple[LengthStats, ...], num_gpus: int, price_per_gpu_hour: float
) -> dict[str, Any]:
    per_hour = num_gpus * price_per_gpu_hour
    per_day = per_hour * HOURS_PER_DAY
    inp, out = tokens_per_hour(request, stats)
    day = sum(request.daily_profile)
    return {
        "cost_per_hour_usd": per_hour,
        "cost_per_day_usd": per_day,
        "cost_per_million_output_tokens_usd": per_day / (out * day / 1e6),
        "cost_per_million_input_tokens_usd": per_day / (inp * day / 1e6),
        "cost_per_million_tokens_usd": per_day / ((inp + out) * day / 1e6),
        "mean_load_fraction": day / HOURS_PER_DAY / (request.peak_multiplier * request.headroom),
    }


def api_cost(request: PlanRequest, stats: tuple[LengthStats, ...]) -> dict[str, Any] | None:
    if request.api is None:
        return None
    inp, out = tokens_per_hour(request, stats)
    unit = (
        inp * request.api.input_per_million_usd + out * request.api.output_per_million_usd
    ) / 1e6
    per_day = unit * sum(request.daily_profile)
    return {
        "cost_per_hour_usd": per_day / HOURS_PER_DAY,
        "cost_per_day_usd": per_day,
        "busiest_hour_cost_usd": unit * request.peak_multiplier,
        "input_per_million_usd": request.api.input_per_million_usd,
        "output_per_million_usd": request.api.output_per_million_usd,
    }


def hybrid(
    request: PlanRequest,
    stats: tuple[LengthStats, ...],
    replicas: int,
    gpus_per_replica: int,
    price_per_gpu_hour: float,
) -> dict[str, Any] | None:
    """The cheapest split between ``k`` base replicas and the API (module docstring)."""
    if request.api is None:
        return None
    inp, out = tokens_per_hour(request, stats)
    api_unit = (
        inp * request.api.input_per_million_usd + out * request.api.output_per_million_usd
    ) / 1e6
    total = sum(request.daily_profile)
    options = []
    for k in range(replicas + 1):
        capacity = k / replicas * request.peak_multiplier
        overflow = sum(max(0.0, m - capacity) for m in request.daily_profile)
        self_cost = k * gpus_per_replica * price_per_gpu_hour * HOURS_PER_DAY
        options.append((self_cost + overflow * api_unit, -k, k, overflow))
    day_cost, _, k, overflow = min(options)
    return {
        "base_replicas": k,
        "base_gpus": k * gpus_per_replica,
        "self_hosted_token_share": 1 - overflow / total,
        "api_token_share": overflow / total,
        "cost_per_hour_usd": day_cost / HOURS_PER_DAY,
        "cost_per_day_usd": day_cost,
        "split": _split_name(k, replicas),
    }


def _split_name(k: int, replicas: int) -> str:
    if k == 0:
        return "api only"
    if k == replicas:
        return "self-hosted only"
    return "hybrid"


def verdict(
    best_cost_day: float | None, api: dict[str, Any] | None, hyb: dict[str, Any] | None
) -> str:
    """One sentence: which option is cheapest over the day."""
    options = {}
    if best_cost_day is not None:
        options["self-hosted"] = best_cost_day
    if api is not None:
        options["the API"] = api["cost_per_day_usd"]
    if hyb is not None and hyb["split"] == "hybrid":
        options["the hybrid"] = hyb["cost_per_day_usd"]
    if not options:
        return "no plan meets the SLOs and no API price was given"
    name = min(options, key=lambda k: (options[k], k))
    others = ", ".join(f"{k} ${v:,.0f}/day" for k, v in options.items() if k != name)
    tail = f" (vs {others})" if others else ""
    if name == "the API":
        return f"the API wins: ${options[name]:,.0f}/day{tail}"
    return f"{name} is cheapest: ${options[name]:,.0f}/day{tail}"
