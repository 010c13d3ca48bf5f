"""``simulate --disaggregate``: the prefill and decode pools' plans and step models from the
deployment flags (each pool's GPU, TP and replicas override ``--gpu``/``-tp``), the KV link
between them, the three-stage run (``cluster/disagg.py``) and its summary with ``kv_transfer`` and
per-pool sections. Kept out of ``cli.py`` so that the command module stays a thin parser."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any

import click

from inferplan.cli_checks import bounded, goodput_slo
from inferplan.cli_flags import DEVICES, DeploymentFlags, option_group
from inferplan.cluster import pools
from inferplan.engine.frontend import behind_frontend, shift_itl
from inferplan.engine.session import ServingOptions
from inferplan.errors import DoesNotFitError, InferplanError
from inferplan.metrics.summary import summarize
from inferplan.perf.expert_loads import class_token_shares
from inferplan.workload.request import Workload


@dataclass(frozen=True)
class DisaggFlags:
    disaggregate: bool
    prefill_gpu: str | None
    prefill_tp: int | None
    prefill_dp: int | None
    decode_gpu: str | None
    decode_tp: int | None
    decode_dp: int | None
    kv_link_latency_ms: float | None

    def given(self) -> list[str]:
        """The pool flags set on the command line, as flags."""
        return [
            "--" + f.name.replace("_", "-")
            for f in fields(self)
            if f.name != "disaggregate" and getattr(self, f.name) is not None
        ]


def _pool_options(pool: str) -> list[Callable[[Any], Any]]:
    return [
        click.option(f"--{pool}-gpu", default=None, help=f"{pool} pool's GPU (default: --gpu)"),
        click.option(
            f"--{pool}-tp", type=DEVICES, default=None, help=f"{pool} pool's TP (default: -tp)"
        ),
        click.option(
            f"--{pool}-dp", type=DEVICES, default=None, help=f"{pool} pool's replicas (1)"
        ),
    ]


disagg_options = option_group(
    [
        click.option(
            "--disaggregate",
            is_flag=True,
            help="Prefill and decode on separate pools, KV moved between them",
        ),
        *_pool_options("prefill"),
        *_pool_options("decode"),
        click.option(
            "--kv-link-latency-ms",
            type=bounded(0, 60_000, is_int=False),
            default=None,
            help="Fixed cost per KV transfer (default 0: bandwidth only)",
        ),
    ],
    DisaggFlags,
    "disagg",
)


def simulate_disaggregated(
    deployment: DeploymentFlags,
    shapes: dict[str, pools.PoolShape],
    disagg: DisaggFlags,
    requests: Workload,
    options: ServingOptions,
    moe_skew: float,
    percentiles: list[float],
    goodput: tuple[str, ...],
) -> dict[str, Any]:
    """``simulate --disaggregate``: each pool its own plan and step model, the KV link."""
    tokens = requests.input_tokens + requests.output_tokens
    shares = class_token_shares(requests.class_names, requests.class_ids, tokens)
    built = {}
    for name, shape in shapes.items():
        flags = replace(
            deployment,
            gpu=shape.gpu or deployment.gpu,
            tp=shape.tp or deployment.tp,
            dp=shape.dp or 1,
        )
        try:
            plan = flags.plan()
        except DoesNotFitError:
            raise
        except InferplanError as err:
            text = str(err)
            if text.startswith("--gpu:") and shape.gpu:
                raise InferplanError(f"--{name}-gpu:{text[6:]}") from None
            raise InferplanError(f"{name} pool: {text}") from None
        model = flags.step_model(
            plan, moe_skew=moe_skew, class_token_shares=shares, engine_costs=True
        )
        built[name] = pools.build_pool(name, plan, model, options)
    prefill, decode = built["prefill"], built["decode"]
    latency_s = (disagg.kv_link_latency_ms or 0.0) / 1e3
    link = pools.pools_link(prefill.plan, decode.plan, latency_s)
    result = pools.run_pools(requests, prefill, decode, link)
    # As the client sees it: behind the engine's front end, one per decode replica (they stream).
    fe, servers = deployment.frontend(), decode.plan.parallelism.num_replicas
    records, duration_s, fe_times = behind_frontend(result.records, result.duration_s, fe, servers)
    summary = summarize(
        records,
        result.itl,
        duration_s=duration_s,
        percentiles=percentiles,
        goodput_slo_ms=goodput_slo(goodput),
    )
    summary = shift_itl(summary, fe_times)
    summary["num_steps"] = result.prefill.num_steps + result.decode.num_steps
    summary["disaggregated"] = True
    summary["kv_transfer"] = pools.kv_transfer_json(result)
    summary["pools"] = {
        "prefill": pools.pool_json("prefill", prefill, result.prefill),
        "decode": pools.pool_json("decode", decode, result.decode),
    }
    return summary
