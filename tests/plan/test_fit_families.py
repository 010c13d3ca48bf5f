"""``scripts/fit_published.py --families``: refit some GPU families, keep the rest committed."""

from __future__ import annotations

import pytest

from inferplan.perf.efficiency import bundled_efficiency
from inferplan.plan.fitting.config import FitConfig, fit_rows
from inferplan.plan.fitting.descent import committed_constants
from inferplan.plan.served import release_cpu_costs

from .fit_script import fit_published


def test_refit_families_restart_from_the_priors_and_the_others_stay_committed() -> None:
    rows = [r for r in fit_rows() if r.gpu in ("l40s", "h200_sxm_141gb")][:40]
    constants = committed_constants(rows, {"ada"}, FitConfig())
    prior = bundled_efficiency("default")
    assert constants.family["ada"].gemm_compute == prior.gemm_compute
    assert constants.family["ada"].moe_gemm == prior.moe_gemm
    assert constants.family["hopper"] == bundled_efficiency("hopper")
    for release, costs in constants.costs.items():
        assert costs == release_cpu_costs()[release]


def test_unknown_family_is_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert fit_published().main(["--families", "volta", "--dry-run", "--no-cv"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --families: choose from ") and "blackwell" in err


@pytest.mark.parametrize("flag", ["--owners", "--cv-owners"])
def test_unknown_owner_is_one_error_line(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A misspelt owner refits nothing: refused before any row is simulated."""
    assert fit_published().main(["--served", flag, "hopper,hoppr", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {flag}: choose from ") and "trtllm-cpp" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--folds", "1", "--cv-only"], "--folds: must be at least 2"),
        (["--served", "--served-load", "/nonexistent/f.pkl", "--cv-only"], "--served-load: "),
    ],
)
def test_bad_fold_count_or_missing_linearisation_is_one_error_line(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """No empty cross-validation printed as a result, no traceback for a missing pickle."""
    assert fit_published().main(args) == 2
    assert capsys.readouterr().err.startswith(f"error: {message}")
