"""The step-time model's bounded caches (``perf/bounded_cache.py``): a full cache starts over, and
caches that start over every few entries time every step as a model that caches nothing does."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplan.perf import attention_pieces, roofline, step_seconds
from inferplan.perf.bounded_cache import keep
from inferplan.perf.roofline import RooflineModel
from inferplan.perf.step_seconds import StepSeconds

from .perf_helpers import mixed_batch
from .perf_helpers import roofline as shared_roofline


def test_a_full_cache_starts_over_with_the_new_entry() -> None:
    cache: dict[str, int] = {}
    assert keep(cache, "a", 1, 3) == 1
    assert keep(cache, "b", 2, 3) == 2
    assert keep(cache, "a", 5, 3) == 5  # a key kept again replaces its value, nothing cleared
    assert cache == {"a": 5, "b": 2}
    keep(cache, "c", 3, 3)
    assert cache == {"a": 5, "b": 2, "c": 3}  # full at three
    assert keep(cache, "d", 4, 3) == 4
    assert cache == {"d": 4}


def _fresh(model: RooflineModel) -> RooflineModel:
    """The same deployment with every cache empty."""
    return RooflineModel(model.spec, model.gpu, model.par, model.formats, model.kv, model.eff)


chunk = st.tuples(st.integers(1, 5000), st.sampled_from([0, 16, 4096]))
step = st.tuples(st.lists(chunk, max_size=2), st.integers(0, 300), st.integers(1, 100_000))


@pytest.mark.parametrize(("name", "kwargs"), [("Llama-3.1-8B", {}), ("gpt-oss-120b", {"pp": 2})])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(step, min_size=4, max_size=12))
def test_caches_that_start_over_time_steps_as_a_fresh_model(
    name: str, kwargs: dict[str, object], steps: list[tuple[list[tuple[int, int]], int, int]]
) -> None:
    """Every cache (plans, piece terms, the roofline's pieces and operators, the attention
    core's pieces) holds two entries at most, so most steps meet a cache that just started
    over, and a piece's id may be reused by a later one: each step's seconds are still those
    of a model that has cached nothing, and the caches stay within their bound."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(step_seconds, "PLAN_CACHE_SIZE", 2)
        patch.setattr(roofline, "LINE_CACHE_SIZE", 2)
        patch.setattr(attention_pieces, "CACHE_SIZE", 2)
        model = _fresh(shared_roofline(name, "h200", **kwargs))
        seconds = StepSeconds(model)
        for chunks, num_decode, context in steps + steps:  # each shape twice: hits and misses
            batch = mixed_batch(chunks, max(num_decode, 0 if chunks else 1), context)
            assert seconds(batch) == _fresh(model).step_time(batch).total_s
            assert model.step_time(batch) == _fresh(model).step_time(batch)
            caches = (seconds._plans, seconds._terms, model._token_parts, model._head_pieces)
            assert all(len(cache) <= 2 for cache in caches)
            assert len(model._gemm_ops) <= 2 and len(model.attention_pieces._cache) <= 2
