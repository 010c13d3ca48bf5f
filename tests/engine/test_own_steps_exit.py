"""``_Chain._own_steps``' early exit (``engine/chain.py``): where the queue head has no cached
run it returns ``k`` before the rows' array is built, which must be exactly
``ownstretch.steps_before_head_joins``' own ``not run0`` exit. Each call is checked against the
full call (the body without the exit), on own-block chains where the head's run does cut the
stretch short: an exit taken when the head has a run answers ``k`` there instead."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inferplan.engine import chain as chain_module
from inferplan.engine.ownstretch import steps_before_head_joins
from native_mode import pure_only

from .test_chain import TAIL
from .test_own_chain import _own_run


def _full(chain: chain_module._Chain, k: int) -> tuple[int, int]:
    """``_own_steps`` without its early exit (the body before it): the steps, and the head's
    run's entries."""
    own, r, p, j = chain.own, chain.r, chain.p, chain.j
    assert own is not None
    rid = r.waiting.peek()[0]
    run_entries, known = own.head_run(rid)
    free = chain.usable - chain.blocks.held(j - 1)
    steps = steps_before_head_joins(
        r,
        chain._computed()[:p] + j,
        k,
        (free, own.lru_blocks),
        (run_entries, lambda limit: own.entries_before(rid, known, limit)),
    )
    return steps, run_entries


@pure_only
def test_own_steps_exit_only_without_a_run(monkeypatch: pytest.MonkeyPatch) -> None:
    original = chain_module._Chain._own_steps
    seen = {"no_run": 0, "run_cuts": 0}

    def checked(self: chain_module._Chain, k: int) -> int:
        expected, run_entries = _full(self, k)
        got = original(self, k)
        assert got == expected, (k, run_entries, got, expected)
        if not run_entries:
            seen["no_run"] += 1
        elif expected < k:
            seen["run_cuts"] += 1
        return got

    monkeypatch.setattr(chain_module._Chain, "_own_steps", checked)
    # 60 spare blocks: a case whose head's run cuts a stretch short (the one of 36 tried;
    # 20 spare blocks, ``test_own_chain``'s case, has none).
    _own_run(replace(TAIL, max_num_batched_tokens=96, spare_blocks=60))
    # Both paths ran: heads without a run (the exit) and heads whose run cut the stretch.
    assert seen["no_run"] > 0 and seen["run_cuts"] > 0, seen
