"""``scripts/fit_published.py``'s flags: the ``FitConfig`` they build (``fit_config``), and
which go together: a flag that a combination would leave without effect is refused with one
line, never ignored (docs/validation.md, ``debt20``).

- ``--served``'s own flags (``--served-load``, ``--served-save``, ``--served-weight``,
  ``--balance``, ``--cv-owners``) need ``--served``; ``--cv-owners`` needs ``--cv-only`` too
  (``scripts/fit_published.py`` ``checked``, after the owners' names).
- ``--collectives-only`` refits the committed collective constants alone: it takes
  ``--per-hop`` and ``--logits-gather`` (the collectives and the LM head's gather priced
  otherwise), not a flag that fits another constant or another set of rows.
- ``--families``, ``--owners`` and ``--cv-owners`` refit only the owners named: each flag that
  fits a constant of its own needs an owner that holds it named (``--rank-sync`` a release
  class, ``--gemm-shape`` and ``--per-hop`` a GPU family, ``--overlap-scheduler`` and
  ``--grace-host`` their classes, ``--release-split`` the 1.1 class, which the committed file
  lacks, so that its rows run fitted costs, not the priors).
- ``--served-load``: a linearisation is read back only by a fit with the flags it was made with
  (``linearisation_flags``, recorded in the file) and at the constants it was made at.
"""

from __future__ import annotations

import argparse

from inferplan.plan.fitting.config import (
    PER_HOP_BOUNDS,
    PYTORCH_1_1,
    Constants,
    FitConfig,
)
from inferplan.plan.fitting.served_fit import Served


def fit_config(args: argparse.Namespace) -> FitConfig | str:
    """The fit's configuration from its flags, or an error line."""
    classes: tuple[str, ...] = ()
    if args.overlap_scheduler:
        known = FitConfig(release_split=args.release_split).pytorch_classes()
        named = args.overlap_scheduler.split(",")
        classes = known if named == ["pytorch"] else tuple(named)
        if not set(classes) <= set(known):
            return f"--overlap-scheduler: choose from {', '.join(known)} (or no value: all)"
    keys = tuple(args.split_keys.split(",")) if args.split_keys else ()
    shared = FitConfig(rank_sync=args.rank_sync).shared_keys()
    if keys and not (args.release_split and set(keys) <= set(shared)):
        return f"--split-keys: with --release-split, from {', '.join(shared)}"
    if keys and (args.overlap_scheduler or args.grace_host):
        # The Grace host speed is each class's own: the 1.1 class would keep it at 1, unfitted.
        flag = "--overlap-scheduler" if args.overlap_scheduler else "--grace-host"
        return f"--split-keys: not with {flag} (each PyTorch class fits its own: no --split-keys)"
    grace: tuple[str, ...] = ()
    if args.grace_host:
        grace = FitConfig(release_split=args.release_split).pytorch_classes()
    return FitConfig.from_flags(
        args.per_hop, args.gemm_shape, classes, args.release_split, keys, args.rank_sync, grace
    )


def served_only_error(args: argparse.Namespace) -> str | None:
    """``--served``'s own flags given without it."""
    if not args.served:
        given = (
            ("--served-load", args.served_load),
            ("--served-save", args.served_save),
            ("--served-weight", args.served_weight != 1.0),
            ("--balance", args.balance != "row"),
            ("--cv-owners", args.cv_owners),
        )
        for flag, is_given in given:
            if is_given:
                return f"{flag}: needs --served"
    return None


def collectives_only_error(args: argparse.Namespace) -> str | None:
    """``--collectives-only`` beside a flag it would ignore."""
    ignored = [
        flag
        for flag, is_given in (
            ("--gemm-shape", args.gemm_shape),
            ("--rank-sync", args.rank_sync),
            ("--overlap-scheduler", args.overlap_scheduler),
            ("--grace-host", args.grace_host),
            ("--release-split", args.release_split),
            ("--served", args.served),
            ("--families", args.families),
            ("--owners", args.owners),
            ("--cv-only", args.cv_only),
        )
        if is_given
    ]
    if not args.collectives_only or not ignored:
        return None
    return (
        "--collectives-only: refits the committed collective constants alone (with --per-hop, "
        f"--logits-gather, --rounds, --steps); not with {', '.join(ignored)}"
    )


def owners_error(flag: str, names: set[str], config: FitConfig, start: Constants) -> str | None:
    """A fit flag whose constants no owner in ``names`` (``--families``, ``--owners``,
    ``--cv-owners``) holds, so that it would fit nothing."""
    families = sorted(start.family)
    releases = sorted(start.costs)
    if config.rank_sync and not names & set(releases):
        return f"--rank-sync: with {flag}, name a release class ({', '.join(releases)})"
    if not names & set(families):
        for fit_flag, is_given in (
            ("--gemm-shape", "gemm_half_outputs" in config.family_bounds),
            ("--per-hop", config.family_bounds["collective_latency_s"] == PER_HOP_BOUNDS),
        ):
            if is_given:
                return f"{fit_flag}: with {flag}, name a GPU family ({', '.join(families)})"
    overlap = set(config.release_fixed)
    grace = set(config.release_only.get("grace_host", ()))
    for fit_flag, classes in (("--overlap-scheduler", overlap), ("--grace-host", grace)):
        if not classes <= names:
            return f"{fit_flag}: with {flag}, name its classes too ({', '.join(sorted(classes))})"
    if config.release_split and PYTORCH_1_1 not in names:
        return (
            f"--release-split: with {flag}, name {PYTORCH_1_1} too (the committed file has "
            "no such class: its rows would run the priors)"
        )
    return None


def linearisation_flags(args: argparse.Namespace, config: FitConfig) -> tuple[str, ...]:
    """The flags that shape a ``--served`` linearisation (the constants it is linearised in and
    what the simulator prices), canonical: recorded in a saved one, compared on loading."""
    switches = (
        ("--per-hop", args.per_hop),
        ("--logits-gather", args.logits_gather),
        ("--gemm-shape", args.gemm_shape),
        ("--rank-sync", args.rank_sync),
        ("--release-split", args.release_split),
        ("--grace-host", args.grace_host),
    )
    flags = [flag for flag, is_given in switches if is_given]
    if config.release_fixed:
        flags.append("--overlap-scheduler " + ",".join(sorted(config.release_fixed)))
    if config.split_keys:
        flags.append("--split-keys " + ",".join(sorted(config.split_keys)))
    return tuple(flags)


def served_load_error(
    path: str, served: Served, flags: tuple[str, ...], origin: dict[str, float]
) -> str | None:
    """A read linearisation that does not fit this run: made under other flags (``flags``:
    this run's), or at other constants than ``origin`` (the committed ones, by name)."""
    if served.flags is None:
        return f"--served-load: {path} records no fit flags; save it again (--served-save)"
    if served.flags != flags:
        made = set(served.flags)
        differs = [f"with {f}" for f in served.flags if f not in flags]
        differs += [f"without {f}" for f in flags if f not in made]
        return (
            f"--served-load: {path} was linearised {' and '.join(differs)}, unlike this run; "
            "save one with this run's flags (--served-save)"
        )
    for name, value in served.model.origin.items():
        if origin.get(name) != value:
            now = origin.get(name)
            at = f"{now:.4g}" if now is not None else "none"
            return (
                f"--served-load: {path} was linearised at other constants than the committed "
                f"files ({name} {value:.4g} there, {at} now); save it again (--served-save)"
            )
    return None
