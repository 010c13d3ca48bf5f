"""``plan/fitting/flags.py`` and ``scripts/fit_published.py``'s main: a flag that a combination
would leave without effect is refused with one error line and exit 2 (docs/validation.md,
``debt20``); ``--rank-sync`` under ``--release-split --split-keys`` fitted as the other shared
host costs are."""

from __future__ import annotations

import argparse
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferplan.perf import comm, multi_rank
from inferplan.plan.calibration import LinearLogModel
from inferplan.plan.fitting.config import (
    FIT_BOUNDS,
    PYTORCH,
    PYTORCH_1_1,
    Constants,
    FitConfig,
    fit_rows,
    reaches,
)
from inferplan.plan.fitting.descent import committed_constants, start_constants
from inferplan.plan.fitting.flags import linearisation_flags, owners_error, served_load_error
from inferplan.plan.fitting.served_fit import Served

from .fit_script import fit_published


@pytest.fixture(autouse=True)
def _switches(monkeypatch: pytest.MonkeyPatch) -> None:
    """main sets the simulator's module switches: put back after each test."""
    monkeypatch.setattr(comm, "PER_HOP_LATENCY", comm.PER_HOP_LATENCY)
    monkeypatch.setattr(multi_rank, "LOGITS_GATHER", multi_rank.LOGITS_GATHER)


# Appended to every run expected to be refused: were the refusal dropped, the run would fit no
# round, cross-validate nothing and write no constant file (without them a dropped check made the
# test fit the whole table for minutes and rewrite the committed constants; review20).
HARMLESS = ("--dry-run", "--no-cv", "--rounds", "0")


def _refused(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert fit_published().main([*args, *HARMLESS]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ")
    return err.removeprefix("error: ").rstrip("\n")


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--served-load", "f.pkl"], "--served-load: needs --served"),
        (["--served-save", "f.pkl"], "--served-save: needs --served"),
        (["--served-weight", "0.5"], "--served-weight: needs --served"),
        (["--balance", "family"], "--balance: needs --served"),
        (["--cv-owners", "hopper", "--cv-only"], "--cv-owners: needs --served"),
        (["--served", "--cv-owners", "hopper"], "--cv-owners: needs --served --cv-only"),
    ],
)
def test_served_flags_without_served_are_refused(
    args: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _refused(args, capsys) == line


@pytest.mark.parametrize(
    ("args", "ignored"),
    [
        (["--rank-sync"], "--rank-sync"),
        (["--gemm-shape", "--per-hop"], "--gemm-shape"),
        (["--overlap-scheduler", "--grace-host"], "--overlap-scheduler, --grace-host"),
        (["--release-split"], "--release-split"),
        (["--served"], "--served"),
        (["--families", "hopper"], "--families"),
        (["--owners", "hopper"], "--owners"),
        (["--cv-only"], "--cv-only"),
    ],
)
def test_collectives_only_refuses_what_it_would_ignore(
    args: list[str], ignored: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _refused(["--collectives-only", *args], capsys)
    assert line == (
        "--collectives-only: refits the committed collective constants alone (with --per-hop, "
        f"--logits-gather, --rounds, --steps); not with {ignored}"
    )


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--families", "hopper", "--rank-sync"],
            "--rank-sync: with --families, name a release class (trtllm-cpp, trtllm-pytorch)",
        ),
        (
            ["--served", "--owners", "trtllm-cpp", "--gemm-shape"],
            "--gemm-shape: with --owners, name a GPU family (ada, ampere, blackwell, hopper)",
        ),
        (
            ["--families", "trtllm-pytorch", "--per-hop"],
            "--per-hop: with --families, name a GPU family (ada, ampere, blackwell, hopper)",
        ),
        (
            ["--families", "hopper", "--overlap-scheduler"],
            "--overlap-scheduler: with --families, name its classes too (trtllm-pytorch)",
        ),
        (
            ["--families", "hopper,trtllm-pytorch", "--grace-host", "--release-split"],
            "--grace-host: with --families, name its classes too "
            "(trtllm-pytorch, trtllm-pytorch-1.1)",
        ),
        (
            ["--served", "--cv-only", "--cv-owners", "hopper,trtllm-pytorch", "--release-split"],
            "--release-split: with --cv-owners, name trtllm-pytorch-1.1 too (the committed file "
            "has no such class: its rows would run the priors)",
        ),
        (
            ["--served", "--cv-only", "--cv-owners", "hopper", "--rank-sync"],
            "--rank-sync: with --cv-owners, name a release class (trtllm-cpp, trtllm-pytorch)",
        ),
    ],
)
def test_a_fit_flag_needs_an_owner_named_that_holds_its_constants(
    args: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _refused([*args, "--dry-run", "--no-cv"], capsys) == line


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--split-keys", "step_overhead_s", "--grace-host"],
            "--split-keys: not with --grace-host "
            "(each PyTorch class fits its own: no --split-keys)",
        ),
        (
            ["--split-keys", "step_overhead_s", "--overlap-scheduler"],
            "--split-keys: not with --overlap-scheduler "
            "(each PyTorch class fits its own: no --split-keys)",
        ),
        (
            ["--split-keys", "rank_step_overhead_s"],
            "--split-keys: with --release-split, from step_overhead_s, per_seq_overhead_s, "
            "layer_overhead_s, host_overlap, routing_skew",
        ),
    ],
)
def test_split_keys_refused_where_the_second_class_would_not_fit_them(
    args: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _refused(["--release-split", *args], capsys) == line


def test_rank_sync_under_split_keys_is_a_shared_host_cost() -> None:
    """``--rank-sync --release-split --split-keys K``: the 1.1 class inherits the rank cost from
    the 0.19-1.0 class (fitted on both classes' rows and reaching both), or fits its own when
    named; before, neither class's fit reached the 1.1 rows' rank cost."""
    tied = FitConfig.from_flags(release_split=True, split_keys=("step_overhead_s",), rank_sync=True)
    assert "rank_step_overhead_s" in tied.inherited()
    assert "rank_step_overhead_s" in tied.release_bounds(PYTORCH)
    assert "rank_step_overhead_s" not in tied.release_bounds(PYTORCH_1_1)
    rows = [r for r in fit_rows() if r.gpu == "b200_hgx"]
    start = start_constants(rows, tied)
    assert "rank_step_overhead_s" not in start.costs[PYTORCH_1_1]
    moved = start.costs[PYTORCH] | {"rank_step_overhead_s": 4e-4}
    c = Constants(start.family, start.costs | {PYTORCH: moved}, True, tied.inherited())
    assert c.class_costs(PYTORCH_1_1)["rank_step_overhead_s"] == 4e-4
    newer = next(r for r in rows if c.release_of(r) == PYTORCH_1_1)
    assert c.for_row(newer).rank_step_overhead_s == 4e-4
    own = FitConfig.from_flags(
        release_split=True, split_keys=("rank_step_overhead_s",), rank_sync=True
    )
    assert set(own.release_bounds(PYTORCH_1_1)) == {"rank_step_overhead_s"}
    assert start_constants(rows, own).costs[PYTORCH_1_1] == {"rank_step_overhead_s": 0.0}


def test_rank_key_named_in_split_keys_needs_rank_sync(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--release-split", "--split-keys", "rank_step_overhead_s", "--rank-sync"]
    fit = fit_published()
    assert fit.fit_config(fit.parser().parse_args(args)).split_keys == ("rank_step_overhead_s",)
    assert _refused(args[:3], capsys).startswith("--split-keys: with --release-split, from ")


def test_an_inherited_cost_reaches_the_second_class_rows_in_the_linearisation() -> None:
    """``linearize``'s columns: a 0.19-1.0 cost the 1.1 class inherits moves its rows; one the
    1.1 class fits for itself does not."""
    rows = [r for r in fit_rows() if r.gpu == "b200_hgx"]
    config = FitConfig.from_flags(release_split=True, split_keys=("step_overhead_s",))
    c = start_constants(rows, config)
    newer = next(r for r in rows if c.release_of(r) == PYTORCH_1_1)
    older = next(r for r in rows if c.release_of(r) == PYTORCH)
    assert reaches(c, newer, f"{PYTORCH}:per_seq_overhead_s")
    assert not reaches(c, newer, f"{PYTORCH}:step_overhead_s")
    assert reaches(c, newer, f"{PYTORCH_1_1}:step_overhead_s")
    assert not reaches(c, older, f"{PYTORCH_1_1}:step_overhead_s")
    assert reaches(c, older, "blackwell:gemm_compute")
    split_only = start_constants(rows, FitConfig.from_flags(release_split=True))
    assert not reaches(split_only, newer, f"{PYTORCH}:per_seq_overhead_s")


def _flags(**given: Any) -> argparse.Namespace:
    args = dict.fromkeys(
        ("per_hop", "logits_gather", "gemm_shape", "rank_sync", "release_split", "grace_host"),
        False,
    )
    return argparse.Namespace(**(args | given))


def test_linearisation_flags_are_canonical() -> None:
    config = FitConfig.from_flags(
        overlap_scheduler=(PYTORCH_1_1, PYTORCH),
        release_split=True,
        split_keys=("per_seq_overhead_s", "step_overhead_s"),
    )
    got = linearisation_flags(_flags(release_split=True, rank_sync=True), config)
    assert got == (
        "--rank-sync",
        "--release-split",
        f"--overlap-scheduler {PYTORCH},{PYTORCH_1_1}",
        "--split-keys per_seq_overhead_s,step_overhead_s",
    )
    assert linearisation_flags(_flags(), FitConfig()) == ()


def _served(flags: tuple[str, ...] | None, origin: dict[str, float]) -> Served:
    model = LinearLogModel(np.zeros(0), np.zeros(0), origin, {}, frozenset())
    return Served([], model, flags=flags)


def test_a_linearisation_is_read_back_only_under_its_flags_and_constants() -> None:
    origin = {"hopper:gemm_compute": 0.6}
    assert (
        served_load_error("f", _served(("--rank-sync",), origin), ("--rank-sync",), origin) is None
    )
    assert served_load_error("f", _served((), origin), ("--rank-sync",), origin) == (
        "--served-load: f was linearised without --rank-sync, unlike this run; save one with "
        "this run's flags (--served-save)"
    )
    made = _served(("--per-hop", "--rank-sync"), origin)
    assert served_load_error("f", made, ("--logits-gather",), origin) == (
        "--served-load: f was linearised with --per-hop and with --rank-sync and without "
        "--logits-gather, unlike this run; save one with this run's flags (--served-save)"
    )
    assert served_load_error("f", _served(None, origin), (), origin) == (
        "--served-load: f records no fit flags; save it again (--served-save)"
    )
    assert served_load_error("f", _served((), origin), (), {"hopper:gemm_compute": 0.61}) == (
        "--served-load: f was linearised at other constants than the committed files "
        "(hopper:gemm_compute 0.6 there, 0.61 now); save it again (--served-save)"
    )


def test_main_refuses_a_linearisation_made_without_rank_sync(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The case ``tp19`` left: ``--rank-sync`` on a ``--served-load`` made without it."""
    rows = fit_rows()
    origin = committed_constants(rows, set(), FitConfig())
    saved = tmp_path / "lin.pkl"
    made = _served((), {"hopper:gemm_compute": origin.family["hopper"].gemm_compute})
    saved.write_bytes(pickle.dumps(made))
    # --rounds 0: were the file read back, a quick cross-validation, not a whole fit
    args = ["--served", "--served-load", str(saved), "--cv-only", "--rounds", "0"]
    assert _refused([*args, "--rank-sync"], capsys) == (
        f"--served-load: {saved} was linearised without --rank-sync, unlike this run; save one "
        "with this run's flags (--served-save)"
    )
    saved.write_bytes(b"not a pickle")
    assert _refused(args, capsys) == (
        f"--served-load: {saved}: not a --served-save file (UnpicklingError)"
    )
    saved.write_bytes(pickle.dumps({"rows": []}))
    assert _refused(args, capsys) == f"--served-load: {saved}: not a --served-save file"


def test_a_saved_linearisation_records_its_flags_and_is_read_back_under_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The round trip on two vLLM rows: ``--served-save`` records the flags (none here) and the
    committed constants it was linearised at; the same flags read it back, ``--rank-sync``
    does not."""
    fit = fit_published()
    two = [r for r in fit.served_rows() if r.engine == "vllm"][:2]
    monkeypatch.setattr(fit, "served_rows", lambda: two)
    saved = tmp_path / "lin.pkl"
    args = ["--served", "--dry-run", "--no-cv", "--rounds", "0"]
    assert fit.main([*args, "--served-save", str(saved)]) == 0
    capsys.readouterr()
    served = fit.read_served(str(saved))
    assert isinstance(served, Served) and served.flags == () and len(served.rows) == 2
    origin = committed_constants(fit_rows(), set(), FitConfig())
    values = {f"{f}:{k}": getattr(e, k) for f, e in origin.family.items() for k in FIT_BOUNDS}
    assert served_load_error(str(saved), served, (), values) is None
    assert _refused([*args, "--served-load", str(saved), "--rank-sync"], capsys) == (
        f"--served-load: {saved} was linearised without --rank-sync, unlike this run; save one "
        "with this run's flags (--served-save)"
    )


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (b"X\x01\x00\x00\x00\xff.", "UnicodeDecodeError"),
        (b"\x8e" + b"\xff" * 8, "OverflowError"),
        (b"I1x\n.", "ValueError"),
        (b"K\x01)R.", "TypeError"),
    ],
)
def test_a_file_that_unpickles_to_an_error_is_one_line(
    data: bytes, kind: str, tmp_path: Path
) -> None:
    """``read_served`` on bytes that are no ``--served-save`` pickle: one line whatever the
    unpickler raises (before review20, only five exception types were caught and these four
    gave a traceback)."""
    saved = tmp_path / "lin.pkl"
    saved.write_bytes(data)
    assert fit_published().read_served(str(saved)) == (
        f"--served-load: {saved}: not a --served-save file ({kind})"
    )


def test_owners_that_hold_each_flags_constants_are_accepted() -> None:
    """The accepted side of ``owners_error``: a family beside a release class (each flag's
    owner named) passes, so a check that asked for every name to be of one kind would fail."""
    config = FitConfig.from_flags(per_hop=True, gemm_shape=True, rank_sync=True)
    start = start_constants(fit_rows(), config)
    for names in ({"hopper", "trtllm-pytorch"}, {"ampere", "hopper", "trtllm-cpp"}):
        assert owners_error("--families", names, config, start) is None
    assert owners_error("--families", {"hopper"}, config, start) is not None
