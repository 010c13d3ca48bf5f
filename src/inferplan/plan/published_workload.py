"""What a published run sends: how many requests (the stated count, else the count the perf
overviews state for the nearest length pair), their lengths as the client counts them (fixed,
or ShareGPT's measured pairs scaled to the published means), their arrivals, and the tokens an
engine's chat endpoint prefills around each prompt that the client does not count."""

from __future__ import annotations

from functools import cache

import numpy as np

from inferplan.plan.published import PublishedRow, bundled_model_name, bundled_published
from inferplan.plan.sharegpt import sharegpt_lengths
from inferplan.specs.catalog import load_model
from inferplan.workload import synthetic
from inferplan.workload.prefixes import with_shared_prefix
from inferplan.workload.request import Workload

QUICK_MAX_REQUESTS = 200  # --quick: simulated runs keep at most this many requests
# Requests of a run whose source states no count and that no perf overview's count table covers
# (``stated_requests`` below covers the 27 ``trtllm-bench`` rows whose tables list no entry for
# their lengths: 1000/1000 in 1.1/1.2, 1024/2048 in 0.19; ``data/published.md``); every GPUStack
# row states its "Successful requests".
UNSTATED_REQUESTS = 1000
# The tokens vLLM's chat endpoint wraps around a ``vllm bench serve`` prompt before its engine
# prefills it, which the client's ``prompt_len`` (the published ``input_len_mean``, and the
# ``total_input_tokens`` of ``total_token_throughput``) does not count: the model's chat template
# for one user turn with the generation prompt (``serving_chat.py`` ``_preprocess_chat``), or for
# gpt-oss the ``openai_harmony`` rendering with the system message vLLM always prepends
# (``harmony_utils.py`` ``get_system_message``: "You are ChatGPT, a large language model trained
# by OpenAI.", the knowledge cutoff, the date, "Reasoning: medium" and the valid channels),
# ``<|start|>user<|message|>...<|end|>`` and ``<|start|>assistant``. Per model type, (tokens
# before the user's text, tokens after it), counted from the templates' text: ChatML (Qwen3)
# ``<|im_start|>user\n`` | ``<|im_end|>\n<|im_start|>assistant\n`` (3, 5); GLM-4.5/4.6
# ``[gMASK]<sop><|user|>\n`` | ``<|assistant|>`` (4, 1); DeepSeek-R1 the BOS (``prompt_len``
# excludes it) and ``<｜User｜>`` | ``<｜Assistant｜>`` (2, 1); harmony the system message (58
# tokens of text in cl100k, o200k's sibling, plus 4 special/role tokens) and
# ``<|start|>user<|message|>`` | ``<|end|><|start|>assistant`` (63, 3). The leading part is the
# same in every request, so vLLM's prefix cache (on by default) holds its full 16-token blocks
# after the first request (``workload/prefixes.py`` ``with_shared_prefix``). Built and measured
# cross-validated, left off (docs/validation.md ``vllm20``): ``TEMPLATE_TOKENS_ON``.
CHAT_TEMPLATE_TOKENS = {
    "qwen3": (3, 5),
    "qwen3_moe": (3, 5),
    "glm4_moe": (4, 1),
    "deepseek_v3": (2, 1),
    "gpt_oss": (63, 3),
}
TEMPLATE_TOKENS_ON = False
# A ``trtllm-bench`` row whose table states no count takes the count the perf overviews state
# for the nearest length pair, from the nearest release that states it (``stated_requests``):
# 3,000 for 1.1 / 1.2's 1000/1000 (0.17, 0.19 and 1.0 state it), 1,500 for 0.19's 1024/2048
# (0.19's 1000/2000). On: each unstated row then predicts within 0.6 points of its stated twin
# (the measured twins agree within 0.96-1.05x), where the 1,000 stand-in hid up to 31 points of
# error; held out the 808 rows go 7.1 / 20.2 -> 7.2 / 20.4 %, the cost of no longer hiding them
# (docs/validation.md, ``trt20`` and "Session 20's merges cross-validated together").
NEAREST_STATED_REQUESTS = True
# The perf overviews' releases in order: the doc revision ``main@585c7565`` lies between 1.0 and
# 1.2 (its rows' ``engine_version`` says so).
_BENCH_RELEASES = ("0.17", "0.19", "1.0", "main@", "1.2")


def _bench_release(version: str) -> int | None:
    """``version``'s place among the perf overviews' releases (``_BENCH_RELEASES``)."""
    for i, name in enumerate(_BENCH_RELEASES):
        if version == name or (name.endswith("@") and version.startswith(name)):
            return i
    return None


def _is_bench(row: PublishedRow) -> bool:
    """Whether ``row`` is a ``trtllm-bench`` run, the runs the perf overviews' counts size."""
    return row.settings.get("harness", "").startswith("trtllm-bench")


@cache
def _stated_counts() -> tuple[tuple[int, int, int, int], ...]:
    """(ISL, OSL, release place, requests) of every bundled ``trtllm-bench`` row that states
    its request count."""
    out = set()
    for row in bundled_published():
        place = _bench_release(row.engine_version)
        if place is None or not _is_bench(row) or not row.num_requests:
            continue
        if row.input_len and row.output_len:
            out.add((row.input_len, row.output_len, place, row.num_requests))
    return tuple(sorted(out))


def stated_requests(row: PublishedRow) -> int | None:
    """The request count the perf overviews state for the length pair nearest ``row``'s
    (``|ln ISL / ISL'| + |ln OSL / OSL'|``), from the release nearest ``row``'s on a tie (then
    the larger count), or None where ``row`` is no ``trtllm-bench`` fixed-length row.

    Every overview sizes its dataset by the lengths alone, the same count for a pair in every
    release that lists it (1000/1000: 3,000 in 0.17, 0.19 and 1.0), so a table that skips a
    pair is read at its neighbour's: the main revision's and 1.2's 1000/1000 (whose 1024/1024
    twins, 3,000 requests, measure the same throughput within 3 %, docs/validation.md
    ``trt1019``) at 3,000, 0.19's 1024/2048 at 0.19's 1000/2000 (1,500)."""
    place = _bench_release(row.engine_version)
    if place is None or not _is_bench(row) or not row.input_len or not row.output_len:
        return None
    isl, osl = row.input_len, row.output_len

    def key(entry: tuple[int, int, int, int]) -> tuple[float, int, int]:
        i, o, p, n = entry
        return (abs(np.log(isl / i)) + abs(np.log(osl / o)), abs(p - place), -n)

    counts = _stated_counts()
    return min(counts, key=key)[3] if counts else None


def requests_of(row: PublishedRow) -> int:
    """The run's request count: the stated one, else ``stated_requests`` (with
    ``NEAREST_STATED_REQUESTS``), else ``UNSTATED_REQUESTS``."""
    if row.num_requests:
        return row.num_requests
    if NEAREST_STATED_REQUESTS and (stated := stated_requests(row)) is not None:
        return stated
    return UNSTATED_REQUESTS


def template_split(row: PublishedRow, on: bool | None = None) -> tuple[int, int]:
    """(Tokens before, tokens after the user's text) that vLLM's chat endpoint adds to each of
    ``row``'s prompts and the client does not count (``CHAT_TEMPLATE_TOKENS``); (0, 0) for
    other engines and endpoints, for model types not listed, and while ``TEMPLATE_TOKENS_ON``
    (or ``on``) is False."""
    if not (TEMPLATE_TOKENS_ON if on is None else on):
        return 0, 0
    if row.engine != "vllm" or not row.settings.get("endpoint", "").startswith("openai-chat"):
        return 0, 0
    model_type = load_model(bundled_model_name(row.model) or row.model).model_type
    return CHAT_TEMPLATE_TOKENS.get(model_type, (0, 0))


def template_tokens(row: PublishedRow, on: bool | None = None) -> int:
    """All the prompt tokens ``template_split`` adds to each of ``row``'s requests."""
    return sum(template_split(row, on))


def _lengths(row: PublishedRow, num: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """Each request's (prompt, output) tokens as the client counts them, the chat template's
    trailing tokens added (its leading ones are the shared prefix, ``run_workload``)."""
    trailing = template_split(row)[1]
    if row.dataset == "sharegpt":
        inputs, outputs = sharegpt_lengths(num, row.input_len_mean, row.output_len_mean, rng)
    else:
        mean_in = row.input_len_mean or float(row.input_len or 1)
        mean_out = row.output_len_mean or float(row.output_len or 1)
        inputs = np.full(num, max(1, round(mean_in)), dtype=np.int64)
        outputs = np.full(num, max(1, round(mean_out)), dtype=np.int64)
    if not trailing:
        return inputs, outputs
    inputs = inputs + trailing
    stated = int(row.settings.get("max_model_len") or 0)
    if stated:  # vLLM cuts max_tokens to what the context leaves (``get_max_tokens``)
        leading = template_split(row)[0]
        outputs = np.maximum(1, np.minimum(outputs, stated - leading - inputs))
    return inputs, outputs


def run_workload(row: PublishedRow, quick: bool) -> Workload:
    num = requests_of(row)
    if quick:
        num = min(num, QUICK_MAX_REQUESTS)
    rng = np.random.default_rng(0)
    inputs, outputs = _lengths(row, num, rng)
    arrivals = synthetic.arrival_times_s(num, row.request_rate, 1.0, rng)
    workload = Workload(
        arrival_s=arrivals,
        input_tokens=inputs,
        output_tokens=outputs,
        class_ids=np.zeros(num, dtype=np.int64),
        source="published",
    )
    return with_shared_prefix(workload, template_split(row)[0])
