"""vLLM 0.11's per-request chat-template parse (engine/chat_template.py)."""

from __future__ import annotations

import pytest

from inferplan.engine.chat_template import (
    bundled_parse_costs,
    template_parse_s,
    with_template_parse,
)
from inferplan.engine.frontend import FrontEnd


def test_vllm_011_parses_jinja_templates_and_not_harmony() -> None:
    parse_s = template_parse_s("vllm", "0.11.0", "qwen3")
    _, fitted = bundled_parse_costs()["vllm"]
    assert parse_s == fitted and 0 < parse_s <= 0.05
    assert template_parse_s("vllm", "0.11.0", "gpt_oss") == 0.0  # openai_harmony renders it
    assert template_parse_s("vllm", "0.10.2", "qwen3") == 0.0  # release not read: not charged
    assert template_parse_s("sglang", "0.5.5", "qwen3") == 0.0


def test_the_parse_runs_before_the_first_await() -> None:
    fe = FrontEnd(per_request_s=0.001, per_token_s=5e-5)
    parsed = with_template_parse(fe, 0.008)
    assert parsed.intake_interleaved and not fe.intake_interleaved
    assert parsed.per_request_s == pytest.approx(0.009) and parsed.per_token_s == fe.per_token_s
    assert with_template_parse(fe, 0.0) == fe
