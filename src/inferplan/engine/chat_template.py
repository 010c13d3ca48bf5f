"""vLLM 0.11 parses the model's chat template on every chat request, before the request's first
``await``: a burst of chat requests reaches the engine only after the whole burst is parsed.

``vllm/entrypoints/chat_utils.py`` (vLLM 0.11.0) ``apply_hf_chat_template`` calls
``resolve_chat_template_kwargs`` for every ``/v1/chat/completions`` request, which builds a new
jinja2 ``ImmutableSandboxedEnvironment``, parses the whole template (``env.parse``) and walks it
(``jinja2.meta.find_undeclared_variables``), uncached, before rendering it. This runs in the API
server's event loop (``serving_chat.py`` ``create_chat_completion`` -> ``_preprocess_chat``)
ahead of the handler's first ``await`` (the multimodal future, then the tokeniser), so asyncio
runs it for every waiting request before any goes on (``FrontEnd.intake_interleaved``,
``tokenizer_stage.interleaved_delays``). vLLM's own record of the same cost: vllm#20065 cached
``_detect_content_format``, another per-request parse of the template, because "when we send 1000
requests to OpenAI server ... [it] results in 6-8 seconds delay before prompts actually are
started to process" (Llama 3's template), and vllm#19735 measured its skip as a 3x request rate
for a small model.

gpt-oss skips it: ``serving_chat.py`` renders gpt-oss prompts with the ``openai_harmony``
library (``use_harmony = model_type == "gpt_oss"``), no jinja. The completions endpoint
(``/v1/completions``) has no template. The cost per request is one constant per engine release
(``data/chat_template.yaml``): templates differ in size (3-6 KB for Qwen3, DeepSeek-R1, GLM-4.5),
which the data cannot separate from the serving hosts' CPUs.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from importlib import resources

import yaml

from inferplan.engine.frontend import FrontEnd
from inferplan.errors import InferplanError

HARMONY_MODEL_TYPES = ("gpt_oss",)  # vLLM renders these with openai_harmony, not jinja


@cache
def bundled_parse_costs() -> dict[str, tuple[tuple[str, ...], float]]:
    """``{engine: (release prefixes, seconds per request)}`` from ``data/chat_template.yaml``."""
    text = resources.files("inferplan.engine").joinpath("data/chat_template.yaml").read_text()
    data = yaml.safe_load(text) or {}
    out = {}
    for engine, entry in data.items():
        seconds = float(entry["parse_s"])
        if not 0.0 <= seconds <= 0.05:  # 50 ms: the slowest 128/4 run's time per request
            raise InferplanError(f"chat_template.yaml: {engine}: parse_s must lie in [0, 0.05]")
        out[str(engine)] = (tuple(str(v) for v in entry["versions"]), seconds)
    return out


def template_parse_s(engine: str, version: str, model_type: str) -> float:
    """Seconds of template parsing per chat request for ``engine`` at ``version`` serving a
    model of ``model_type`` (0 where the release does not parse per request, or for harmony)."""
    versions, seconds = bundled_parse_costs().get(engine, ((), 0.0))
    if model_type in HARMONY_MODEL_TYPES or not versions or not version.startswith(versions):
        return 0.0
    return seconds


def with_template_parse(fe: FrontEnd, parse_s: float) -> FrontEnd:
    """``fe`` with ``parse_s`` more per request, run before the request's first ``await``."""
    if parse_s <= 0.0:
        return fe
    return replace(fe, per_request_s=fe.per_request_s + parse_s, intake_interleaved=True)
