"""Fit each GPU family's constants to the published table, and cross-validate by configuration.

Rows: the published throughput rows predicted in closed form (``trtllm-bench`` offline runs on
fixed lengths, ``plan/published_runs.py``), grouped by GPU family (Hopper, Blackwell, Ampere,
Ada). Constants fitted per family, inside physical bounds (fractions of a datasheet peak in
(0, 1]; overheads >= 0): ``plan/fitting/config.py``. Loss: mean Huber loss of log errors
(``plan/calibration.py``). Method: coordinate descent, each constant by golden-section search
(``plan/fitting/descent.py``). The flags build one ``FitConfig`` that every step is given.

Cross-validation: grouped k-fold by configuration (``case_id``): the configurations of a family
are dealt round-robin into ``--folds`` folds in sorted order; each fold is predicted with the
constants fitted on the others. The out-of-fold errors are the headline; the in-sample errors
(constants fitted on every row) are printed beside them. Run from the repository root:

    .venv/bin/python scripts/fit_published.py --dry-run   # fit, CV, print tables only
    .venv/bin/python scripts/fit_published.py             # ... and write the family files
    .venv/bin/python scripts/fit_published.py --families blackwell,ada --no-cv  # refit two
    .venv/bin/python scripts/fit_published.py --collectives-only [--per-hop]  # in-sample, fast

``--served`` fits the families and the releases' host costs on every engine's rows in one loss:
the closed-form rows beside the served runs' rows (vLLM v1, SGLang, ``trtllm-serve`` and
TensorRT-LLM 0.14 on Triton, simulated by the event engine as ``validate`` does), a served row
weighing as much as a closed-form row (``--served-weight``). The served rows are simulated
once at the committed constants and once a step off in each constant that reaches them, and
are linear in the constants' logs (fractions) or values (overheads) in between (one
Gauss-Newton linearisation, ``plan/calibration.py`` ``LinearLogModel``); the engines' own
constants (front ends, host costs, kernel factors, ``scripts/fit_frontend.py``) stay as
committed. Its cross-validation holds each fold's served configurations out too and simulates
them with the fold's constants. The whole refit (docs/validation.md, ``joint13``):

    .venv/bin/python scripts/fit_published.py --served --jobs 2 --no-cv

``--owners hopper`` (with ``--served``) refits only the named families' and releases' constants
from the committed files, every other one as committed (``hopdep16``'s Hopper refit).

``--balance`` weighs each engine's rows as one block in a family's or release's loss (``family``:
the same total per engine there; ``overall``: per engine in the whole fit; ``sqrt``: the square
root of its count there) instead of every row alike (``row``, the default: the quick
cross-validation found no rule better over every engine; docs/validation.md, ``block14``).

``--per-hop`` charges NCCL's per-step collective latency (``perf/comm.py``, off by default) and
fits ``collective_latency_s`` as that per-step latency (``PER_HOP_BOUNDS``). ``--gemm-shape``
also fits ``gemm_half_outputs``, the SM-occupancy ramp of TP-sharded GEMMs
(``perf/gemm_shape.py``, ``GEMM_SHAPE_BOUNDS``).

``--release-split`` fits the PyTorch backend's host costs as two release classes, 0.19-1.0 and
the main revision and 1.1 on (``trtllm-pytorch-1.1``; ``--split-keys``: only those host costs
its own, the others the first class's); ``--overlap-scheduler [CLASSES]`` puts
those classes' host work behind the GPU's (``host_overlap`` 1) and fits their Grace host speed
(``grace_host``; docs/validation.md, ``grace17`` and ``split18``); ``--grace-host`` fits the
PyTorch classes' Grace host speed with their ``host_overlap`` still fitted (``trt1019``).

``--rank-sync`` fits each release's per-step host work of a multi-GPU replica
(``rank_step_overhead_s``) and ``--logits-gather`` times the LM head's logits all-gather at
TP > 1 (``perf/multi_rank.py``, both off by default; docs/validation.md, ``tp19``).

A flag that a combination would leave without effect is refused with one error line, exit 2
(``plan/fitting/flags.py``; docs/validation.md, ``debt20``): ``--served``'s own flags without
it, ``--collectives-only`` beside a flag that fits something else, ``--families`` /
``--owners`` / ``--cv-owners`` naming no owner of a fit flag's constants, ``--split-keys``
with a Grace host speed, and a ``--served-load`` file made under other flags or constants (a
saved linearisation records the flags it was made with).
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from inferplan.perf import comm, multi_rank
from inferplan.plan.fitting.config import (
    COLLECTIVE_KEYS,
    Constants,
    FitConfig,
    family_of,
    fit_rows,
    loss,
    predict,
    served_rows,
    set_family,
    values_of,
)
from inferplan.plan.fitting.crossval import cross_validate, joint_cross_validate
from inferplan.plan.fitting.descent import (
    as_written,
    committed_constants,
    descend,
    fit,
    start_constants,
)
from inferplan.plan.fitting.flags import (
    collectives_only_error,
    fit_config,
    linearisation_flags,
    owners_error,
    served_load_error,
    served_only_error,
)
from inferplan.plan.fitting.report import costs_yaml, family_yaml, report, served_report
from inferplan.plan.fitting.served_fit import BALANCES, Served, linearize, predict_served
from inferplan.plan.published import PublishedRow
from inferplan.plan.published_runs import RowResult

DATA = Path("src/inferplan/perf/data/efficiency")
COSTS_FILE = Path("src/inferplan/plan/data/published_cpu_costs.yaml")


def collectives_only(config: FitConfig, rounds: int, steps: int) -> int:
    """In-sample: every family's collective constants refitted, everything else as committed."""
    rows = fit_rows()
    origin = committed_constants(rows, set(), config)
    before = predict(rows, origin)
    bounds = {k: config.family_bounds[k] for k in COLLECTIVE_KEYS}
    fitted = origin
    for _ in range(rounds):
        for family in sorted(fitted.family):
            mine = [r for r in rows if family_of(r) == family]
            if mine:
                fitted = descend(mine, fitted, bounds, set_family(family), steps, config)
    after = predict(rows, fitted)
    for family, eff in fitted.family.items():
        print(f"  {family}: " + ", ".join(f"{k}={getattr(eff, k):.4g}" for k in COLLECTIVE_KEYS))
    print(report(before, "Committed constants (in-sample)"))
    print()
    print(report(after, "Collective constants refitted (in-sample)"), flush=True)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", type=int, default=7)
    p.add_argument("--no-cv", action="store_true", help="Fit only")
    p.add_argument("--cv-only", action="store_true", help="Cross-validate only (no files)")
    p.add_argument("--jobs", type=int, default=1, help="Folds fitted at once (processes)")
    p.add_argument(
        "--families",
        help="In-sample fit of these families only (comma-separated, e.g. blackwell,ada), "
        "from the priors, and of the releases named beside them (e.g. trtllm-pytorch), from "
        "the committed file; every other constant stays as committed, and only these files "
        "are written. The cross-validation still fits everything per fold.",
    )
    p.add_argument(
        "--per-hop",
        action="store_true",
        help="Charge NCCL's per-step latency (perf/comm.py PER_HOP_LATENCY) and fit it",
    )
    p.add_argument(
        "--logits-gather",
        action="store_true",
        help="Time the LM head's logits all-gather at TP > 1 (perf/multi_rank.py LOGITS_GATHER)",
    )
    p.add_argument(
        "--rank-sync",
        action="store_true",
        help="Fit each release's per-step host work of a multi-GPU replica "
        "(perf/multi_rank.py rank_step_overhead_s)",
    )
    p.add_argument(
        "--gemm-shape",
        action="store_true",
        help="Fit gemm_half_outputs, the SM-occupancy ramp of TP-sharded GEMMs "
        "(perf/gemm_shape.py)",
    )
    p.add_argument(
        "--release-split",
        action="store_true",
        help="The PyTorch backend's host costs as two release classes: 0.19-1.0 "
        "(trtllm-pytorch) and the main revision and 1.1 on (trtllm-pytorch-1.1)",
    )
    p.add_argument(
        "--split-keys",
        help="With --release-split: the host costs the 1.1 class fits for itself "
        "(comma-separated, e.g. step_overhead_s,per_seq_overhead_s); the others it takes from "
        "the 0.19-1.0 class (default: every one its own); with --rank-sync also "
        "rank_step_overhead_s; not with --overlap-scheduler or --grace-host",
    )
    p.add_argument(
        "--overlap-scheduler",
        nargs="?",
        const="pytorch",
        help="These PyTorch release classes' host work behind the GPU's (host_overlap 1, not "
        "fitted) and their speed on a Grace host fitted (grace_host); comma-separated, no value: "
        "every PyTorch class (docs/validation.md, grace17, split18)",
    )
    p.add_argument(
        "--grace-host",
        action="store_true",
        help="Fit the PyTorch release classes' speed on a Grace host (grace_host) with their "
        "host_overlap still fitted (docs/validation.md, trt1019)",
    )
    p.add_argument(
        "--collectives-only",
        action="store_true",
        help="In-sample refit of the collective constants alone from the committed files; "
        "prints, writes nothing",
    )
    _served_flags(p)
    return p


def _served_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--served",
        action="store_true",
        help="Fit the families and releases on the served runs' rows too (vLLM, SGLang, "
        "trtllm-serve, TensorRT-LLM 0.14 on Triton), linearised around the committed constants",
    )
    p.add_argument(
        "--served-weight",
        type=float,
        default=1.0,
        help="With --served: a served row's weight against a closed-form row's (0: the "
        "closed-form fit, the served rows predicted beside it)",
    )
    p.add_argument(
        "--balance",
        choices=BALANCES,
        default="row",
        help="With --served: how the engines' rows weigh in each family's and release's loss "
        "(row: every row alike; family: each engine's rows there the same total; overall: "
        "each engine's rows in the whole fit the same total; sqrt: each engine's rows there "
        "the square root of their count)",
    )
    p.add_argument(
        "--served-save", help="With --served: pickle the linearised served rows to this file"
    )
    p.add_argument(
        "--served-load",
        help="With --served: read the linearised served rows from --served-save's file "
        "instead of simulating them (refused unless made with the same fit flags, on the "
        "same committed constants)",
    )
    p.add_argument(
        "--owners",
        help="With --served: the in-sample fit refits only these families' and releases' "
        "constants (comma-separated, e.g. hopper), from the committed files, every other "
        "constant as committed; only their files are written",
    )
    p.add_argument(
        "--cv-owners",
        help="With --served --cv-only: refit per fold only these families' and releases' "
        "constants (comma-separated, e.g. ampere,hopper,trtllm-cpp), from the committed "
        "files, on these families' rows (a quicker check than every constant from the priors)",
    )


@dataclass
class Run:
    """One invocation's parsed state: its flags, configuration, rows and starting point."""

    args: argparse.Namespace
    config: FitConfig
    rows: list[PublishedRow]
    start: Constants
    only: set[str] | None
    served: Served | None = None


def checked(args: argparse.Namespace, config: FitConfig) -> Run | str:
    """The run's rows and starting point, or the error line that refuses the flags."""
    if args.jobs < 1:
        return "--jobs: must be at least 1"
    if args.folds < 2 and (args.cv_only or not args.no_cv):  # else an empty CV reported
        return "--folds: must be at least 2"
    if args.served_load and not Path(args.served_load).is_file():
        return f"--served-load: {args.served_load}: no such file"
    rows = fit_rows()
    start = start_constants(rows, config)
    known = set(start.family) | set(start.costs)
    only = set(args.families.split(",")) if args.families else None
    if only is not None and not only <= known:
        return f"--families: choose from {', '.join(sorted(known))}"
    for flag, names in (("--owners", args.owners), ("--cv-owners", args.cv_owners)):
        if names and not set(names.split(",")) <= known:
            return f"{flag}: choose from {', '.join(sorted(known))}"
    if args.served and only is not None:
        return "--served: refits every family (no --families)"
    if args.owners and not args.served:
        return "--owners: needs --served (else --families)"
    if args.cv_owners and not args.cv_only:
        return "--cv-owners: needs --served --cv-only"
    named = (
        ("--families", args.families),
        ("--owners", args.owners),
        ("--cv-owners", args.cv_owners),
    )
    for flag, names in named:
        error = owners_error(flag, set(names.split(",")), config, start) if names else None
        if error:
            return error
    return Run(args, config, rows, start, only)


def load_served(run: Run) -> Served | str:
    """The served rows linearised (or read back), or the error line that refuses the file."""
    args = run.args
    began = time.monotonic()
    origin = committed_constants(run.rows, set(), run.config)
    flags = linearisation_flags(args, run.config)
    if args.served_load:
        served = read_served(args.served_load)
        if isinstance(served, str):
            return served
        error = served_load_error(args.served_load, served, flags, values_of(origin, run.config))
        if error:
            return error
    else:
        served = linearize(served_rows(), origin, run.config, args.jobs)
        served.flags = flags
    if args.served_save:
        Path(args.served_save).write_bytes(pickle.dumps(served))
    served.weight = args.served_weight
    served.balance = args.balance
    print(
        f"{len(served.rows)} served rows linearised in {len(served.model.slopes)} constants, "
        f"{time.monotonic() - began:.0f} s wall",
        flush=True,
    )
    return served


def read_served(path: str) -> Served | str:
    """``--served-save``'s pickle, or the error line for a file that is not one."""
    # Unpickling bytes that are no pickle can raise almost anything (the pickle docs: "other
    # exceptions, including but not limited to ..."; a clipped numpy array a ValueError).
    try:
        served = pickle.loads(Path(path).read_bytes())
    except Exception as e:
        return f"--served-load: {path}: not a --served-save file ({type(e).__name__})"
    if not isinstance(served, Served):
        return f"--served-load: {path}: not a --served-save file"
    return served


def cross_validated(run: Run, lead: str = "") -> int:
    """The out-of-fold errors (``--cv-only``, and after the in-sample fit)."""
    args, config, rows, served = run.args, run.config, run.rows, run.served
    title = f"Cross-validated ({args.folds}-fold by configuration)"
    cv = (args.folds, args.rounds, args.steps, args.jobs)
    if served is not None and args.cv_owners and args.cv_only:
        # The quick check: only these owners refitted per fold, from the committed files,
        # on their families' closed-form rows; every other constant as committed.
        cv_owners = set(args.cv_owners.split(","))
        owned = [r for r in rows if family_of(r) in cv_owners]
        origin = committed_constants(rows, set(), config)
        closed, out = joint_cross_validate(owned, served, origin, config, *cv, cv_owners)
        title = f"Cross-validated ({args.folds}-fold by configuration; {args.cv_owners})"
        print(report(closed, title) + "\n\n" + served_report(out, title + ", served rows"))
        return 0
    if served is not None:
        closed, out = joint_cross_validate(rows, served, run.start, config, *cv)
        tail = ", served rows" if args.cv_only else ", served"
        print(lead + report(closed, title) + "\n\n" + served_report(out, title + tail))
        return 0
    results = cross_validate(rows, run.start, config, *cv)
    print(lead + report(results, title))
    return 0


def in_sample(run: Run) -> Constants:
    """The fit on every row, printed with its tables; the fitted constants as written."""
    args, config, rows, served, only = run.args, run.config, run.rows, run.served, run.only
    owners = set(args.owners.split(",")) if args.owners else None
    refit = only is not None or owners is not None
    origin = committed_constants(rows, only or set(), config) if refit else run.start
    before = predict(rows, origin)
    fitted = as_written(fit(rows, origin, config, args.rounds, args.steps, only, served, owners))
    after = predict(rows, fitted)
    print(f"{len(rows)} rows; loss {loss(before):.4f} -> {loss(after):.4f}")
    for family, eff in fitted.family.items():
        values = ", ".join(f"{k}={getattr(eff, k):.4g}" for k in config.family_bounds)
        print(f"  {family}: {values}")
    for release, costs in fitted.costs.items():
        print(f"  {release}: " + ", ".join(f"{k}={v:.4g}" for k, v in costs.items()))
    print(report(before, "Starting constants (in-sample)"))
    print()
    print(report(after, "In-sample (fitted on every row)"), flush=True)
    if served is not None:
        committed = committed_constants(rows, set(), config)
        print()
        print(
            served_report(
                predict_served(served.rows, committed), "Served rows, committed constants"
            )
        )
        print()
        print(served_report(predict_served(served.rows, fitted), "Served rows, in-sample"))
    if not args.dry_run:
        write_files(run, fitted, after, owners)
    return fitted


def write_files(
    run: Run, fitted: Constants, after: list[RowResult], owners: set[str] | None
) -> None:
    """The refitted family files and (where a release class was refitted) the host costs."""
    only, served = run.only, run.served
    keys = list(run.config.family_bounds)
    for family, eff in fitted.family.items():
        if (only is not None and family not in only) or (owners and family not in owners):
            continue
        mine = [r for r in after if family_of(r.row) == family]
        theirs = sum(family_of(r) == family for r in served.rows) if served else 0
        (DATA / f"{family}.yaml").write_text(family_yaml(family, eff, mine, keys, theirs))
    refit_costs = owners if only is None else only
    if refit_costs is None or refit_costs & set(fitted.costs):
        COSTS_FILE.write_text(costs_yaml(fitted.costs, served is not None))


def refused(error: str) -> int:
    print(f"error: {error}", file=sys.stderr)
    return 2


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    config = fit_config(args)
    if isinstance(config, str):
        return refused(config)
    error = served_only_error(args) or collectives_only_error(args)
    if error:
        return refused(error)
    run = None if args.collectives_only else checked(args, config)
    if isinstance(run, str):
        return refused(run)
    # NCCL's per-step latency and the logits all-gather are module switches the simulator reads
    # (perf/comm.py, perf/multi_rank.py), the globals a flag sets (the fit's worker processes
    # take them, ``fitting.config.worker_pool``); every other flag is in ``config``.
    if args.per_hop:
        comm.PER_HOP_LATENCY = True
    if args.logits_gather:
        multi_rank.LOGITS_GATHER = True
    if run is None:
        return collectives_only(config, args.rounds, args.steps)
    if args.served:
        served = load_served(run)
        if isinstance(served, str):
            return refused(served)
        run.served = served
    if args.cv_only:
        return cross_validated(run)
    in_sample(run)
    if not args.no_cv:
        return cross_validated(run, "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
