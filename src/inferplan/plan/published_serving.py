"""How a published served run met its engine: the front end in front of it, and DP attention.

- **Front end** (``row_frontend``): runs measured through an HTTP server by ``vllm bench
  serve`` have their engine's fitted front end (``engine/frontend.py``; its per-request cost is
  also the tokenizer stage before the engine, ``engine/tokenizer_stage.py``); TensorRT-LLM 0.14
  behind Triton's ``tensorrtllm_backend`` has ``triton-trtllm`` (its ensemble's
  ``preprocessing`` Python model tokenises each request before the ``tensorrt_llm`` model sees
  it); ``trtllm-bench`` has none. vLLM 0.11's chat requests add its per-request parse of the
  chat template, ahead of the handler's first ``await`` (``engine/chat_template.py``).
- **DP attention** (``dp_attention``): the table's ``attention_dp`` column mirrors the
  ``--enable-dp-attention`` flag, but SGLang turns the flag off when ``--dp-size`` is 1, its
  default (``server_args.py`` ``_handle_data_parallelism``).
"""

from __future__ import annotations

from inferplan.engine.chat_template import template_parse_s, with_template_parse
from inferplan.engine.frontend import FrontEnd, bundled_frontends, engine_frontend
from inferplan.plan.published import ENGINES, PublishedRow, bundled_model_name
from inferplan.specs.catalog import load_model


def row_frontend(row: PublishedRow) -> FrontEnd:
    """The front end ``row``'s run was measured behind (see the module docstring)."""
    if row.settings.get("frontend", "").startswith("Triton"):
        return bundled_frontends().get("triton-trtllm", FrontEnd())
    if not row.settings.get("bench", "").startswith("vllm bench serve"):
        return FrontEnd()
    fe = engine_frontend(ENGINES[row.engine], row.engine_version)
    if "chat/completions" not in row.settings.get("endpoint", ""):
        return fe
    model_type = load_model(bundled_model_name(row.model) or row.model).model_type
    return with_template_parse(fe, template_parse_s(row.engine, row.engine_version, model_type))


def dp_attention(row: PublishedRow) -> bool:
    """Whether ``row``'s run had attention data-parallel over its TP group."""
    if row.engine == "sglang" and int(row.settings.get("dp_size", "1") or 1) <= 1:
        return False
    return row.attention_dp or row.settings.get("enable_dp_attention") == "true"
