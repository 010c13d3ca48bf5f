"""TensorRT-LLM v1.0's MoE rows: their ``llm_options`` turn attention DP on where the table
gives only ``TPn`` (``plan/trtllm_bench.py`` ``stated_attention_dp``), so they run as DEP."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inferplan.plan import trtllm_bench
from inferplan.plan.published import PublishedRow, bundled_published
from inferplan.plan.published_runs import run_setup
from inferplan.plan.trtllm_bench import stated_attention_dp


def _first(case_id: str) -> PublishedRow:
    return next(r for r in bundled_published() if r.case_id == case_id)


@pytest.fixture(autouse=True)
def _read_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trtllm_bench, "READ_STATED_ATTENTION_DP", True)


def test_off_the_table_column_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trtllm_bench, "READ_STATED_ATTENTION_DP", False)
    row = _first("trt10-q235-b200-tp8-fp4")
    assert not stated_attention_dp(row)
    assert run_setup(row).par.tp == 8


def test_v10_moe_rows_that_state_attention_dp_run_as_dep() -> None:
    row = _first("trt10-q235-b200-tp8-fp4")
    assert not row.attention_dp  # the table's column says TP8 only
    assert stated_attention_dp(row)
    par = run_setup(row).par
    assert (par.tp, par.dp, par.enable_expert_parallel) == (1, 8, True)
    # Pipeline stages stay stages: TP2 x PP2 on RTX PRO 6000 is DP2 x PP2.
    par = run_setup(_first("trt10-scout-rtx6000-tp2pp2-fp4")).par
    assert (par.tp, par.dp, par.pp) == (1, 2, 2)


def test_one_gpu_dense_and_unstated_rows_keep_their_tensor_parallelism() -> None:
    one_gpu = _first("trt10-scout-b200-tp1-fp4")  # states it, but a group of one has no DP
    assert not stated_attention_dp(one_gpu)
    dense = _first("trt10-l405-h100-tp8-fp8")  # the dense llm_options: no attention DP
    assert not stated_attention_dp(dense)
    assert run_setup(dense).par.tp == 8
    # The same words outside a trtllm-bench row (a served run) do not count.
    served = replace(dense, settings={**dense.settings, "enable_attention_dp": "true"})
    assert stated_attention_dp(served)
    served = replace(served, settings={**served.settings, "harness": "vllm bench serve"})
    assert not stated_attention_dp(served)
