"""The one-frame chain (``engine/chainlinks.py``) reuses a preemption step's roofline line for
the stretch after it only while the stretch's context stays below the line's ``limit``: with
a model whose lines change slope every ``SPAN`` tokens of context (a limit crossed by about
one stretch in ``SPAN / p``), the runs equal the reference's (``_Chain``'s methods, which ask
the model at every piece) bit for bit. Bent either as the instance's own ``decode_line`` (the
chain then asks it every link) or under the model's line cache (``_decode_line``: the chain
reads the cached line inline where its context is in the line's range, and asks otherwise)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inferplan.engine import chain as chain_module
from inferplan.engine import simulator as simulator_module
from inferplan.perf.roofline import RooflineModel
from native_mode import pure_only

from .test_chain import TAIL, _assert_identical
from .test_fast_equals_exact import Case, _config, _plan_and_model, _workload

SPAN = 50  # tokens of total context between two slopes


def _run(case: Case, *, one_frame: bool, cached: bool = False) -> tuple[object, set[int]]:
    """A run whose model's decode lines bend every ``SPAN`` tokens (steeper on odd spans),
    and the spans' parities it was asked at (``cached``: the lines the model caches bend)."""
    plan, model = _plan_and_model()
    assert type(model) is RooflineModel  # the reuse applies to the roofline's lines alone
    real, real_uncached, parities = model.decode_line, model._decode_line, set()

    def bent(num_seqs: int, context_tokens: int) -> tuple[float, float, float]:
        a, b, limit = real(num_seqs, context_tokens)
        span = context_tokens // SPAN
        parities.add(span % 2)
        return a, b * (1.5 if span % 2 else 1.0), min(limit, float((span + 1) * SPAN))

    def bent_uncached(num_seqs: int, context_tokens: int) -> tuple[float, float, float, float]:
        a, b, lower, limit = real_uncached(num_seqs, context_tokens)
        span = context_tokens // SPAN
        parities.add(span % 2)
        lower, limit = max(lower, float(span * SPAN)), min(limit, float((span + 1) * SPAN))
        return a, b * (1.5 if span % 2 else 1.0), lower, limit

    wl = _workload(case)
    sim = simulator_module.Simulation(wl, _config(case, wl, plan, exact=False), model)
    with pytest.MonkeyPatch.context() as monkeypatch:
        if cached:
            monkeypatch.setattr(model, "_lines", {})
            monkeypatch.setattr(model, "_decode_line", bent_uncached)
        else:
            monkeypatch.setattr(model, "decode_line", bent)
        monkeypatch.setattr(chain_module, "LINKS_IN_ONE_FRAME", one_frame)
        res = sim.run()
    return res, parities


@pure_only
@pytest.mark.parametrize("cached", [False, True])
@pytest.mark.parametrize("change", [{}, {"block_size": 32, "max_num_batched_tokens": 256}])
def test_a_line_crossed_by_the_stretch_is_asked_again(
    change: dict[str, object], cached: bool
) -> None:
    case = replace(TAIL, **change)  # type: ignore[arg-type]
    fast, parities = _run(case, one_frame=True, cached=cached)
    reference, _ = _run(case, one_frame=False, cached=cached)
    assert parities == {0, 1}
    assert int(fast.records.num_preemptions.sum()) > 20  # type: ignore[attr-defined]
    _assert_identical(fast, reference)  # type: ignore[arg-type]
