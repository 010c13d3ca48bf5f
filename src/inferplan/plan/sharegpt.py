"""ShareGPT requests as ``vllm bench serve --dataset-name sharegpt`` sends them.

``vllm bench serve`` (vLLM 0.11, ``vllm/benchmarks/datasets.py`` ``ShareGPTDataset``) shuffles
the conversations with ``--seed`` (every GPUStack run: the default, so every run of one model
sends the same prompts), takes each one's first human turn as the prompt and the token count of
the second turn as ``max_tokens``, and keeps a pair only if both have at least 4 tokens, the
prompt at most 1,024 and the two together at most 2,048 (``is_valid_sequence``). Without
``--ignore-eos`` the reasoning models GPUStack served still generate up to ``max_tokens`` (the
published means are within 1 % of the sampled completions' mean).

The bundled table (``data/sharegpt_lengths.csv``, provenance in its header) holds 4,000 such
pairs counted with the Qwen3 tokenizer. The lengths are far from a lognormal: prompts have a
median of 108 tokens against a mean of 220 (a quarter at 20 tokens or fewer, none above 1,024),
completions a median of 132 against 200 (longest 1,856), and the two are anti-correlated
(log-space correlation -0.44: long prompts ask for short answers).

A run draws its requests from the table without replacement, in the table's order after a
seeded permutation, and scales each column to the run's published mean (tokenizers differ by a
few per cent: 214-219 prompt tokens on the GPUStack pages).
"""

from __future__ import annotations

from functools import cache
from importlib import resources

import numpy as np

from inferplan.metrics.records import IntArray


@cache
def bundled_pairs() -> tuple[IntArray, IntArray]:
    """(prompt tokens, output tokens) of the bundled ShareGPT pairs, in file order."""
    text = resources.files("inferplan.plan").joinpath("data/sharegpt_lengths.csv").read_text()
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    pairs = np.array([[int(x) for x in line.split(",")] for line in lines[1:]], dtype=np.int64)
    return pairs[:, 0], pairs[:, 1]


def _scaled(lengths: IntArray, mean_tokens: float) -> IntArray:
    scaled = np.rint(lengths * (mean_tokens / float(lengths.mean())))
    return np.maximum(scaled, 1).astype(np.int64)


def sharegpt_lengths(
    num: int, mean_in: float, mean_out: float, rng: np.random.Generator
) -> tuple[IntArray, IntArray]:
    """``num`` (prompt, output) token counts drawn from the bundled pairs, each column scaled to
    its published mean; above the table's size the draw repeats the table (with replacement)."""
    prompts, outputs = bundled_pairs()
    replace = num > prompts.size
    index = rng.choice(prompts.size, size=num, replace=replace)
    return _scaled(prompts[index], mean_in), _scaled(outputs[index], mean_out)


def at_means(
    inputs: IntArray, outputs: IntArray, mean_in: float, mean_out: float, max_tokens: int
) -> tuple[IntArray, IntArray]:
    """A run's drawn lengths scaled to the means it published, within ``[1, max_tokens]``.

    ``vllm bench serve`` reports the means of what its requests actually sent and received
    (``total_input_tokens`` and ``total_output_tokens`` over the completed requests,
    ``vllm/benchmarks/serve.py`` ``calculate_metrics``), so they are the run's own, not a
    population's: a draw of 100 lognormal lengths (sigma 1) has a mean 15 % below its
    population's at seed 0, which makes every request of a closed-loop run that much shorter
    (its request rate that much higher at the same token rate)."""
    return (
        np.minimum(_scaled(inputs, mean_in), max_tokens),
        np.minimum(_scaled(outputs, mean_out), max_tokens),
    )
