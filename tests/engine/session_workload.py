"""Random multi-turn conversations for the prefix-cache property tests."""

from __future__ import annotations

import numpy as np

from inferplan.workload.prefixes import HASH_BLOCK_TOKENS, session_hashes
from inferplan.workload.request import Workload


def conversation_workload(
    seed: int, num_sessions: int, cover_output: bool, n: int = 36
) -> Workload:
    """``n`` turns of ``num_sessions`` interleaved conversations: each turn's prompt is its
    session's context (previous prompt + output) plus a new message; Poisson arrivals. With
    ``cover_output`` (as a session trace gives) the hashes cover each turn's output too."""
    rng = np.random.default_rng(seed)
    sessions: list[str | None] = [str(s) for s in rng.integers(0, num_sessions, size=n)]
    context: dict[str | None, int] = {}
    inputs, outputs = [], []
    for s in sessions:
        prompt = context.get(s, 0) + int(rng.integers(1, 60))
        output = int(rng.integers(1, 30))
        inputs.append(prompt)
        outputs.append(output)
        context[s] = prompt + output
    ins, outs = np.array(inputs, dtype=np.int64), np.array(outputs, dtype=np.int64)
    return Workload(
        arrival_s=np.cumsum(rng.exponential(0.05, size=n)),
        input_tokens=ins,
        output_tokens=outs,
        class_ids=np.zeros(n, dtype=np.int64),
        prefix_hashes=session_hashes(sessions, ins, outs),
        prefix_block_tokens=HASH_BLOCK_TOKENS,
        prefix_hashes_cover_output=cover_output,
    )
