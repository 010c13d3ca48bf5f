"""A chat + reasoning mix (``--dataset-name mixed``): two workload classes in one stream.

Each request is ``reasoning`` with probability ``reasoning_share`` (default 0.3), else ``chat``:

- ``chat``: lognormal inputs and outputs matched to the Azure LLM inference 2023 conversation
  trace (``Azure/AzurePublicDataset`` ``AzureLLMInferenceTrace_conv.csv``, 19,366 requests;
  Splitwise, Patel et al., ISCA 2024):
  input mean 1,155 and median 1,020 tokens (sigma = sqrt(2 ln(1155/1020)) = 0.50), output mean
  211 and median 129 tokens (sigma = sqrt(2 ln(211/129)) = 0.99); outputs capped at the cap.
- ``reasoning``: the ``reasoning`` dataset's lengths (``synthetic.reasoning_mix_lengths``):
  inputs UniformInt 50-150 tokens, outputs the long/short mix (45 % above 5,000 tokens).

Draw order from the one lengths stream: the class of every request, then chat inputs and
outputs, then reasoning inputs and outputs, so a share of 0 or 1 gives the single-class streams'
shapes and the same seed gives the same requests.
"""

from __future__ import annotations

import math

import numpy as np

from inferplan.errors import InferplanError
from inferplan.workload import synthetic
from inferplan.workload.request import IntArray

CLASS_NAMES = ("chat", "reasoning")
DEFAULT_REASONING_SHARE = 0.3
CHAT_INPUT_MEAN_TOKENS, CHAT_INPUT_SIGMA = 1155.0, 0.50
CHAT_OUTPUT_MEAN_TOKENS, CHAT_OUTPUT_SIGMA = 211.0, 0.99
REASONING_INPUT_TOKENS, REASONING_INPUT_RATIO = 100, 0.5


def check_share(share: float) -> float:
    value = float(share)
    if not (0.0 <= value <= 1.0) or math.isnan(value):
        raise InferplanError(f"--reasoning-share: must be in [0, 1], got {share}")
    return value


def mixed_lengths(
    num_requests: int,
    reasoning_share: float,
    rng: np.random.Generator,
    *,
    long_fraction: float = 0.45,
    max_tokens: int = 32768,
) -> tuple[IntArray, IntArray, IntArray]:
    """(input_tokens, output_tokens, class_ids) with class ids into ``CLASS_NAMES``."""
    share = check_share(reasoning_share)
    is_reasoning = rng.random(num_requests) < share
    inputs = np.empty(num_requests, dtype=np.int64)
    outputs = np.empty(num_requests, dtype=np.int64)
    num_reasoning = int(is_reasoning.sum())
    num_chat = num_requests - num_reasoning
    if num_chat:
        chat = ~is_reasoning
        inputs[chat] = synthetic.lognormal_lengths(
            num_chat, CHAT_INPUT_MEAN_TOKENS, CHAT_INPUT_SIGMA, max_tokens, rng
        )
        outputs[chat] = synthetic.lognormal_lengths(
            num_chat, CHAT_OUTPUT_MEAN_TOKENS, CHAT_OUTPUT_SIGMA, max_tokens, rng
        )
    if num_reasoning:
        inputs[is_reasoning] = synthetic.uniform_lengths(
            num_reasoning, REASONING_INPUT_TOKENS, REASONING_INPUT_RATIO, rng, "--num-prompts"
        )
        outputs[is_reasoning] = synthetic.reasoning_mix_lengths(
            num_reasoning, rng, long_fraction=long_fraction, max_tokens=max_tokens
        )
    return inputs, outputs, is_reasoning.astype(np.int64)
