"""Chunks of an OpenAI chat stream that carry no new token, as ``vllm bench serve`` counts them.

``vllm bench serve --backend openai-chat`` (``vllm-0.11.0:vllm/benchmarks/lib/
endpoint_request_func.py`` ``async_request_openai_chat_completions``) takes a timestamp for
every SSE message whose JSON has ``choices``: the first sets TTFT, every later one appends the
gap since the previous message to the request's ITL list, whether or not it carries text
(messages without ``choices``, the usage chunk, only move the last timestamp). TPOT is
``(latency - TTFT) / (completion_tokens - 1)`` and does not see them.

SGLang's chat stream (``sglang-0.5.5.post1:sglang/srt/entrypoints/openai/serving_chat.py``
``_generate_chat_stream``) sends, besides one chunk per output token:

- a chunk ``{"role": "assistant", "content": ""}`` when the first output arrives, followed at
  once by the first token's chunk (the client reads both in the same network read: the gap
  between them is about zero);
- after the last output, a chunk with an empty delta and the ``finish_reason``, then the usage
  chunk (no ``choices``).

So each request adds **two gaps of about zero** to the ITL samples: the published ITL mean is
``(out - 1) / (out + 1)`` of the token gaps' mean, 3/5 at 4 output tokens. GPUStack's SGLang
``128/4`` runs (0.5.3-0.5.6) show exactly that: ITL mean / TPOT mean = 0.600 in all but one
(GLM-4.6-FP8 on SGLang 0.5.3 with ``--reasoning-parser`` shows 0.750: one such gap; not
modelled). ``trtllm-serve``'s streams show 0.750 on the same runs (the role chunk alone); its
count is left to its own fit (0 here), so its rows are unchanged.

vLLM's chat stream (``vllm-0.11.0:vllm/entrypoints/openai/serving_chat.py``
``chat_completion_stream_generator``; the same in 0.10.2) sends, on the engine's first output
of a request, a chunk ``{"role": "assistant", "content": ""}`` and then, from the same output,
the first token's chunk; the last token's chunk carries the ``finish_reason`` itself, and the
usage chunk has no ``choices``. So each request adds **one gap of about zero**: ITL mean / TPOT
mean = ``(out - 1) / out``, 0.750 at 4 output tokens, which every GPUStack vLLM ``128/4`` run of
a jinja-templated model shows (DeepSeek-R1, GLM-4.5-Air, GLM-4.6, Qwen3-14B/32B/235B: 0.750 on
all seven). gpt-oss is rendered and parsed by ``openai_harmony`` (``use_harmony``): its first
output's header tokens (``<|channel|>``, the channel name) have no channel yet, so their delta
is ``None`` and no chunk follows the role chunk; no zero gap, but the first two token gaps reach
the client as one (its ``128/4`` runs show 1.50-1.61: two samples over three gaps). Most
gpt-oss runs' published ITL p99 is about twice their ITL median (1.89-2.07 on 14 of the 20
random-prompt rows, A100 and H100, TP1 and TP2): the merged gap is one sample in a request's
100-200, so the 99th percentile lands on it. ``with_merged_gaps`` takes two gaps out of
each completed request of three or more tokens and puts one of twice a gap in (below; it
reaches the ``128/4`` runs' p99, not yet the longer runs', docs/validation.md ``vllm6``).
Later header runs (``<|end|><|start|>assistant<|channel|>final<|message|>``, where the
analysis channel ends within ``max_tokens``) merge more; not modelled.
"""

from __future__ import annotations

import numpy as np

from inferplan.engine.chat_template import HARMONY_MODEL_TYPES
from inferplan.metrics.histogram import ItlHistogram
from inferplan.metrics.records import RequestRecords, RequestStatus
from inferplan.plan.published import PublishedRow, bundled_model_name
from inferplan.specs.catalog import load_model

SGLANG_EMPTY_CHUNKS = 2  # the role chunk before the first token, the finish chunk after the last
VLLM_EMPTY_CHUNKS = 1  # the role chunk before the first token's, from the same engine output
HARMONY_MERGED_GAPS = 2  # gaps that reach the client as one sample after the role chunk


def empty_chunks(row: PublishedRow) -> int:
    """Chunks per request of ``row``'s stream that the client counts as ITL gaps of about zero
    (see the module docstring): SGLang's chat endpoint 2, vLLM's 1 (none for harmony models),
    anything else 0."""
    if not row.settings.get("endpoint", "").startswith("openai-chat"):
        return 0
    if row.engine == "sglang":
        return SGLANG_EMPTY_CHUNKS
    if row.engine == "vllm" and not _harmony(row):
        return VLLM_EMPTY_CHUNKS
    return 0


def _harmony(row: PublishedRow) -> bool:
    """Whether vLLM renders ``row``'s model with ``openai_harmony`` (its stream skips the first
    output's header tokens instead of adding a zero gap)."""
    model_type = load_model(bundled_model_name(row.model) or row.model).model_type
    return model_type in HARMONY_MODEL_TYPES


def with_empty_chunks(itl: ItlHistogram, num_requests: int, per_request: int) -> ItlHistogram:
    """``itl`` with ``per_request`` zero gaps for each of ``num_requests`` streamed requests (a
    new histogram; ``itl`` itself unchanged, or returned as it is where there are none)."""
    if num_requests <= 0 or per_request <= 0:
        return itl
    out = ItlHistogram(itl.grid)
    out.merge(itl)
    out.add(0.0, float(num_requests * per_request))
    return out


def merged_gaps(row: PublishedRow) -> int:
    """Token gaps per request that vLLM's harmony stream delivers as one ITL sample (the module
    docstring): 2 for a harmony model on vLLM's chat endpoint, else 0 (none merged)."""
    if row.engine != "vllm" or not row.settings.get("endpoint", "").startswith("openai-chat"):
        return 0
    return HARMONY_MERGED_GAPS if _harmony(row) else 0


def with_merged_gaps(itl: ItlHistogram, records: RequestRecords, merged: int) -> ItlHistogram:
    """``itl`` with ``merged`` gaps of each completed request of more than ``merged`` output
    tokens seen as one sample (a new histogram; ``itl`` returned as it is where nothing
    merges). The histogram keeps no request's own first gaps: the merged ones come out in
    proportion to every gap, and each request's sample is ``merged`` times a gap drawn from the
    same distribution (evenly spaced quantiles: consecutive steps of one batch take about the
    same time, so a merged gap is about ``merged`` steps, what the published p99 shows)."""
    if merged < 2:
        return itl
    done = (records.status == RequestStatus.COMPLETED) & (records.output_tokens > merged)
    num = int(np.count_nonzero(done))
    total = itl.total_weight
    if num == 0 or total <= merged * num:
        return itl
    gaps_s = itl.quantiles((np.arange(num) + 0.5) / num)
    out = itl.scaled((total - merged * num) / total)
    out.add_many(merged * gaps_s)
    return out
