"""``simulate --kv-tiers``: KV tiers below HBM and the eviction-bandwidth cap, as flags.

The tier model is ``memory/tiers.py`` (specs and catalog defaults) and ``engine/offload.py``
(offload, reload, backpressure); this module only parses the flags, in their own group so that
``cli.py`` stays a thin parser.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import click

from inferplan.cli_checks import bounded
from inferplan.cli_flags import option_group
from inferplan.memory.tiers import MAX_TIER_BYTES_S, TierRequest, parse_kv_tiers


@dataclass(frozen=True)
class KvTierFlags:
    kv_tiers: str | None
    kv_eviction_bandwidth: float | None

    def check(self) -> None:
        self.tiers()

    def tiers(self) -> tuple[TierRequest, ...]:
        return () if self.kv_tiers is None else parse_kv_tiers(self.kv_tiers)

    def serving_fields(self) -> dict[str, Any]:
        """The ``ServingOptions`` fields these flags set."""
        gb_s = self.kv_eviction_bandwidth
        return {
            "kv_tiers": self.tiers(),
            "kv_eviction_cap_bytes_s": None if gb_s is None else gb_s * 1e9,
        }


kv_tier_options = option_group(
    [
        click.option(
            "--kv-tiers",
            default=None,
            metavar="NAME:SIZE[:GB/S],...",
            help="KV tiers below HBM for preempted sequences, per replica: host, cxl, nvme with "
            "a capacity and optional bandwidth (GB/s, or read/write), e.g. host:512GiB,nvme:3.84TB "
            "(bandwidths default to the GPU catalog's)",
        ),
        click.option(
            "--kv-eviction-bandwidth",
            type=bounded(0, MAX_TIER_BYTES_S / 1e9, is_int=False, low_open=True),
            default=None,
            metavar="GB/S",
            help="Cap on KV write (eviction) bandwidth per replica; beyond it new requests wait",
        ),
    ],
    KvTierFlags,
    "tiers",
)
