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
few per cent: 214-219 prompt tokens on the GPUStack pages). ``vllm bench serve`` reports the
totals of what its requests sent and received (``total_input_tokens``, ``total_output_tokens``
over the completed requests, ``vllm/benchmarks/serve.py`` ``calculate_metrics``), so a run's
scaled lengths add up to exactly ``round(mean * num)``: the page's own totals, not a
population's (a draw of 100 pairs has a mean a few per cent off the table's).
"""

from __future__ import annotations

import math
from functools import cache
from importlib import resources

import numpy as np

from inferplan.errors import InferplanError
from inferplan.metrics.records import IntArray

_DATA = "data/sharegpt_lengths.csv"


@cache
def bundled_pairs() -> tuple[IntArray, IntArray]:
    """(prompt tokens, output tokens) of the bundled ShareGPT pairs, in file order."""
    text = resources.files("inferplan.plan").joinpath(_DATA).read_text()
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    pairs = []
    for number, line in enumerate(lines[1:], start=2):
        cells = line.split(",")
        if len(cells) != 2 or not all(c.strip().isdigit() and int(c) >= 1 for c in cells):
            raise InferplanError(f"{_DATA}: data line {number}: {line!r}; valid: two counts >= 1")
        pairs.append([int(c) for c in cells])
    if not pairs:
        raise InferplanError(f"{_DATA}: no (prompt, output) pairs")
    table = np.array(pairs, dtype=np.int64)
    table.flags.writeable = False  # cached: shared by every caller
    return table[:, 0], table[:, 1]


def scaled_to_total(lengths: IntArray, total_tokens: int) -> IntArray:
    """``lengths`` scaled to add up to ``total_tokens``, each at least 1: the scaled values
    rounded down, the tokens left given one each to the largest remainders (ties: the earlier
    request). Above ``total_tokens`` only where a length rounds to 0 and is raised to 1."""
    exact = lengths * (total_tokens / float(lengths.sum()))
    floor = np.floor(exact).astype(np.int64)
    left = total_tokens - int(floor.sum())
    order = np.argsort(-(exact - floor), kind="stable")
    floor[order[:left]] += 1
    return np.maximum(floor, 1)


def _check(num: int, mean_in: float | None, mean_out: float | None) -> None:
    if num < 1:
        raise InferplanError(f"ShareGPT draw: {num} requests; valid: a whole number >= 1")
    for name, mean in (("prompt", mean_in), ("output", mean_out)):
        if mean is not None and not (math.isfinite(mean) and mean > 0):
            raise InferplanError(
                f"ShareGPT draw: mean {name} length {mean}; valid: a finite number > 0"
            )


def sharegpt_lengths(
    num: int, mean_in: float | None, mean_out: float | None, rng: np.random.Generator
) -> tuple[IntArray, IntArray]:
    """``num`` (prompt, output) token counts drawn from the bundled pairs, each column scaled to
    add up to its mean times ``num`` (None: the drawn pairs as counted, unscaled); above the
    table's size the draw repeats the table (with replacement)."""
    _check(num, mean_in, mean_out)
    table_in, table_out = bundled_pairs()
    index = rng.choice(table_in.size, size=num, replace=num > table_in.size)
    inputs, outputs = table_in[index], table_out[index]
    if mean_in is not None:
        inputs = scaled_to_total(inputs, round(mean_in * num))
    if mean_out is not None:
        outputs = scaled_to_total(outputs, round(mean_out * num))
    return inputs, outputs
