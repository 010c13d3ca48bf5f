"""Write a synthetic multi-turn chat trace (CSV with a ``session_id`` column) for the measured
effects of ``docs/prefix-caching.md``.

``NUM_SESSIONS`` conversations of ``TURNS`` turns each. A turn's prompt is the conversation so
far (every earlier prompt's new message and every answer) + a new user message of 100-400
tokens; answers are 100-600 tokens; the first message carries a 1,000-token system prompt.
Conversations start as a Poisson process at ``--rate`` per second, and a turn follows the
previous one after a think time of 5-20 s (all uniform, seeded), so turns usually arrive after
their predecessor finished, as in a real chat.

Run with ``python -m benchmarks.session_trace OUT.csv`` (``--rate``, ``--seed``).
"""

from __future__ import annotations

import argparse
import csv

import numpy as np

NUM_SESSIONS = 200
TURNS = 4
SYSTEM_PROMPT_TOKENS = 1000


def session_rows(rate: float, seed: int) -> list[tuple[float, int, int, str]]:
    """(arrival_s, input_tokens, output_tokens, session_id) rows, sorted by arrival."""
    rng = np.random.default_rng(seed)
    rows = []
    starts = np.cumsum(rng.exponential(1.0 / rate, size=NUM_SESSIONS))
    for session, start in enumerate(starts.tolist()):
        context, now = SYSTEM_PROMPT_TOKENS, start
        for _ in range(TURNS):
            prompt = context + int(rng.integers(100, 401))
            output = int(rng.integers(100, 601))
            rows.append((round(now, 6), prompt, output, f"s{session}"))
            context = prompt + output
            now += float(rng.uniform(5.0, 20.0))
    return sorted(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--rate", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with open(args.out, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(("arrival_s", "input_tokens", "output_tokens", "session_id"))
        writer.writerows(session_rows(args.rate, args.seed))


if __name__ == "__main__":
    main()
