"""KV tier specs (``memory/tiers.py``): the ``--kv-tiers`` syntax and the catalog's defaults."""

from __future__ import annotations

import pytest

from inferplan.errors import InferplanError
from inferplan.memory.tiers import (
    OffloadConfig,
    TierRequest,
    TierSpec,
    catalog_tier,
    parse_kv_tiers,
    parse_size_bytes,
    replica_tier,
)
from inferplan.specs.hardware import load_gpu


def test_sizes_in_decimal_and_binary_units() -> None:
    assert parse_size_bytes("f", "512GiB") == 512 * 1024**3
    assert parse_size_bytes("f", "3.84TB") == 3.84e12
    assert parse_size_bytes("f", "256gb") == 256e9
    assert parse_size_bytes("f", "1e9") == 1e9


def test_tier_list_with_bandwidth_overrides() -> None:
    tiers = parse_kv_tiers("host:512GiB, cxl, nvme:3.84TB:13/6.6")
    assert tiers == (
        TierRequest("host", 512 * 1024**3),
        TierRequest("cxl", None),
        TierRequest("nvme", 3.84e12, 13e9, 6.6e9),
    )
    assert parse_kv_tiers("host:1TB:50")[0] == TierRequest("host", 1e12, 50e9, 50e9)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "expected name:capacity"),
        ("host:1TB,,nvme:1TB", "expected name:capacity"),
        ("ssd:1TB", "name one of host, cxl, nvme"),
        ("host:1TB:2:3", "name one of"),
        ("host:lots", "is not a size"),
        ("host:0GB", "must be > 0"),
        ("host:-1GB", "is not a size"),
        ("host:1e30", "at most 1 EB"),
        ("host:1TB,host:2TB", "listed twice"),
        ("nvme:1TB:fast", "bandwidth 'fast'"),
        ("nvme:1TB:0", "bandwidth '0'"),
        ("nvme:1TB:1/2/3", "read/write"),
    ],
)
def test_bad_tier_lists_name_the_flag(text: str, says: str) -> None:
    with pytest.raises(InferplanError, match="--kv-tiers") as err:
        parse_kv_tiers(text)
    assert says in str(err.value)


def test_catalog_defaults_behind_the_h200_host_link() -> None:
    link = load_gpu("h200").host_link_bytes_s
    assert link == 64e9  # PCIe Gen5 x16, one direction
    assert catalog_tier("host", link) == TierSpec("host", 0.0, 64e9, 64e9)
    assert catalog_tier("cxl", link) == TierSpec("cxl", 256e9, 36e9, 36e9)  # Micron CZ120
    assert catalog_tier("nvme", link) == TierSpec("nvme", 0.0, 13e9, 6.6e9)  # Samsung PM1743
    # A slow host link bounds every tier behind it.
    assert catalog_tier("cxl", 16e9).read_bytes_s == 16e9


def test_replica_bandwidth_is_per_gpu_times_gpus_and_overrides_win() -> None:
    nvme = replica_tier(TierRequest("nvme", 3.84e12), 64e9, gpus=4)
    assert (nvme.read_bytes_s, nvme.write_bytes_s, nvme.capacity_bytes) == (52e9, 26.4e9, 3.84e12)
    given = replica_tier(TierRequest("nvme", 1e12, 7e9, 3e9), 64e9, gpus=4)
    assert (given.read_bytes_s, given.write_bytes_s) == (7e9, 3e9)
    assert replica_tier(TierRequest("cxl", None), 64e9, gpus=1).capacity_bytes == 256e9


def test_missing_capacity_or_link_is_an_error() -> None:
    with pytest.raises(InferplanError, match="host:512GiB"):
        replica_tier(TierRequest("host", None), 64e9, gpus=1)
    with pytest.raises(InferplanError, match="host link bandwidth is not in the catalog"):
        replica_tier(TierRequest("host", 1e12), None, gpus=1)


def test_offload_config_blocks_and_eviction_cap() -> None:
    tier = TierSpec("host", 10.5e6, 4e9, 2e9)
    cfg = OffloadConfig((tier,), block_bytes=1e6, eviction_cap_bytes_s=1e9)
    assert cfg.capacity_blocks(tier) == 10
    assert cfg.write_bytes_s(tier) == 1e9
    assert OffloadConfig((tier,), 1e6).write_bytes_s(tier) == 2e9
