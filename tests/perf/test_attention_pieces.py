"""The roofline's operators in cached pieces (``perf/attention_pieces.py``,
``RooflineModel._pieces``) are the operators built from the whole batch at once, in the same
order: the attention core split into its prefill and decode pieces equals ``attention_ops`` of
the whole batch (a saturating read window, DSA's indexer and linear attention included), and a
model whose caches are warm from other shapes returns what a fresh one builds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferplan.perf.batch import StepBatch
from inferplan.perf.roofline import RooflineModel

from .perf_helpers import MODELS, mixed_batch, roofline

VARIANTS = [
    *[(name, {}) for name in MODELS],
    ("DeepSeek-V3.2", {"tp": 8}),  # DSA: the indexer interleaves prefill and decode
    ("Llama-4-Scout-17B-16E-Instruct", {"tp": 2}),  # chunked local attention
    ("Llama-3.1-70B", {"tp": 2, "pp": 2}),
    ("DeepSeek-V3", {"tp": 8, "dp": 8, "ep": True}),  # attention DP
]

Test = TypeVar("Test", bound=Callable[..., None])

chunk = st.tuples(st.integers(1, 9000), st.sampled_from([0, 16, 4096, 100_000]))
shapes = {
    "chunks": st.lists(chunk, max_size=3),
    "num_decode": st.integers(0, 600),
    "contexts": st.lists(
        st.sampled_from([1, 100, 127, 128, 129, 5000, 140_000]), min_size=1, max_size=3
    ),
    "drafts": st.sampled_from([0, 0, 3]),
}


def _fresh(model: RooflineModel) -> RooflineModel:
    return RooflineModel(model.spec, model.gpu, model.par, model.formats, model.kv, model.eff)


def _each_variant_at_shapes(max_examples: int) -> Callable[[Test], Test]:
    """The test for every variant, at hypothesis's ``shapes``."""

    def wrap(test: Test) -> Test:
        health = [HealthCheck.too_slow]
        timed = settings(max_examples=max_examples, deadline=None, suppress_health_check=health)
        return pytest.mark.parametrize(("name", "kwargs"), VARIANTS)(
            timed(given(shape=st.fixed_dictionaries(shapes))(test))
        )

    return wrap


def _batches(shape: dict[str, Any]) -> list[StepBatch]:
    """One shape's batch at each of its contexts."""
    chunks, num_decode, drafts = shape["chunks"], shape["num_decode"], shape["drafts"]
    return [mixed_batch(chunks, num_decode, context, drafts) for context in shape["contexts"]]


@_each_variant_at_shapes(max_examples=25)
def test_attention_pieces_are_the_whole_batchs_operators(
    name: str, kwargs: dict[str, object], shape: dict[str, Any]
) -> None:
    """At one shape and several contexts: a read window saturates at some, not others."""
    model = roofline(name, "h200", **kwargs)  # shared: its caches are warm from other shapes
    pieces = model.attention_pieces
    for batch in _batches(shape):
        m = model.microbatches(batch)
        for i in range(len(pieces.groups)):
            split = tuple(op for piece in pieces.of(i, batch, m) for op in piece)
            assert split == pieces._build(i, batch, m)


@_each_variant_at_shapes(max_examples=15)
def test_a_warm_model_builds_what_a_fresh_one_does(
    name: str, kwargs: dict[str, object], shape: dict[str, Any]
) -> None:
    model = roofline(name, "h200", **kwargs)
    for batch in _batches(shape):
        assert model._ops(batch) == _fresh(model)._ops(batch)


def test_the_moe_exchange_is_part_of_the_cached_communication() -> None:
    model = _fresh(roofline("DeepSeek-V3", "h200", tp=8, dp=8, ep=True))
    batch = mixed_batch([(2048, 0)], 64, 3000, 0)
    alltoall = model.step_time(batch).by_bound_s["communication"]
    model.moe_exchange = "allgather"
    other = _fresh(model)
    other.moe_exchange = "allgather"
    allgather = model.step_time(batch).by_bound_s["communication"]
    assert allgather == other.step_time(batch).by_bound_s["communication"]
    assert allgather != alltoall


def test_a_tiled_decode_row_in_a_mixed_step_is_charged_in_the_pieces() -> None:
    """Where a kernel runs each decode row of a step with a prefill chunk in a whole query
    tile (vLLM's FlashAttention-2 on Ampere, ``Efficiency.mixed_decode_rows``), the decode
    operator depends on the prefill's presence: a decode piece cached from a pure-decode step
    must not stand in for it."""
    base = roofline("Llama-3.1-8B", "a100")
    eff = replace(base.eff, mixed_decode_rows=64.0)
    model = RooflineModel(base.spec, base.gpu, base.par, base.formats, base.kv, eff)
    pieces = model.attention_pieces
    decode_only = mixed_batch([], 200, 5000, 0)
    mixed = mixed_batch([(512, 0)], 200, 5000, 0)
    decode_ops = {}
    for batch in (decode_only, mixed):  # the pure-decode piece is cached first
        m = model.microbatches(batch)
        split = tuple(op for piece in pieces.of(0, batch, m) for op in piece)
        assert split == pieces._build(0, batch, m)
        decode_ops[batch.prefill_tokens] = next(op for op in split if op.name == "attn_decode")
    # the 64-row tiles: 64x the decode rows' attention FLOPs per context token, same bytes
    assert decode_ops[512].f1 == 64 * decode_ops[0].f1
    assert decode_ops[512].b1 == decode_ops[0].b1
