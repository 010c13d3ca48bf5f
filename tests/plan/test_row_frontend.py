"""Which front end a published run is simulated behind (plan/published_runs.py row_frontend)."""

from __future__ import annotations

from inferplan.engine.frontend import FrontEnd, engine_frontend
from inferplan.plan.published import bundled_published
from inferplan.plan.published_runs import row_frontend


def test_triton_rows_tokenize_before_the_engine_and_bench_rows_have_no_front_end() -> None:
    rows = bundled_published()
    triton = next(r for r in rows if r.settings.get("frontend", "").startswith("Triton"))
    fe = row_frontend(triton)
    assert 0 < fe.per_request_s <= 0.010  # the fit's bound: 10 ms per request
    # each streamed token passes Triton's Python ``postprocessing`` model (fit's bound 100 us)
    assert 0 < fe.per_token_s <= 100e-6
    bench = next(r for r in rows if not r.settings.get("bench") and not r.settings.get("frontend"))
    assert row_frontend(bench) == FrontEnd()


def test_vllm_serve_rows_keep_their_engine_front_end() -> None:
    served = [
        r
        for r in bundled_published()
        if r.engine == "vllm" and r.settings.get("bench", "").startswith("vllm bench serve")
    ]
    # gpt-oss: vLLM renders its prompt with openai_harmony, nothing before the engine
    row = next(r for r in served if "gpt-oss" in r.model)
    assert row_frontend(row) == engine_frontend("vllm", row.engine_version)
    # the API server's own intake only (tokenise; fit_frontend.py's bound: under 10 ms)
    assert 0.0 <= row_frontend(row).per_request_s < 0.010
    # a jinja template (Qwen3 on vLLM 0.11, chat endpoint): parsed per request, interleaved
    qwen = next(r for r in served if "Qwen3" in r.model and r.engine_version == "0.11.0")
    fe, base = row_frontend(qwen), engine_frontend("vllm", qwen.engine_version)
    assert fe.intake_interleaved and fe.per_request_s > base.per_request_s
    assert fe.per_token_s == base.per_token_s
