"""The GPUs issue 11 added (GH200, B300, GB300, RTX PRO 6000 Server Edition): the names the CLI
and the published table use, the driver-reported memory, and the efficiency family."""

import pytest

from inferplan.perf.efficiency import bundled_efficiency, efficiency_for
from inferplan.specs.hardware import GIB, MIB, load_gpu


@pytest.mark.parametrize(
    ("name", "key", "reported_mib", "family"),
    [
        ("gh200", "gh200_96gb", 97_871, "hopper"),
        ("b300", "b300_hgx", 275_040, "blackwell"),
        ("gb300", "gb300_per_gpu", 284_208, "blackwell"),
        ("rtx_pro_6000", "rtx_pro_6000_server", 97_887, "ada"),
        ("RTX-PRO-6000", "rtx_pro_6000_server", 97_887, "ada"),
    ],
)
def test_new_gpus_resolve_with_reported_memory_and_family(
    name: str, key: str, reported_mib: int, family: str
) -> None:
    gpu = load_gpu(name)
    assert gpu.key == key
    assert gpu.memory_bytes == reported_mib * MIB - 0.5 * GIB
    assert efficiency_for(gpu) == bundled_efficiency(family)


def test_blackwell_ultra_fp4_is_faster_than_b200_and_rtx_pro_has_no_nvlink() -> None:
    b200, b300, gb300 = load_gpu("b200"), load_gpu("b300"), load_gpu("gb300")
    assert b300.peak("fp4") > b200.peak("fp4")
    assert b300.peak("bf16") == b200.peak("bf16")
    assert gb300.scale_up_domain_size == 72 and gb300.gpus_per_node == 4
    rtx = load_gpu("rtx_pro_6000")
    assert rtx.scale_up_domain_size == 1
    assert rtx.memory_bandwidth_bytes_s == pytest.approx(1.792e12)
    gh200 = load_gpu("gh200")
    assert gh200.peak("fp8") == load_gpu("h100").peak("fp8")
    assert gh200.memory_bandwidth_bytes_s == pytest.approx(4.0e12)
