"""The named bounds every user-supplied number is checked against at the edge, before any work.

A bound here is not a modelling constant: it is the point past which an input is a mistake
rather than a plan (a typo, a unit slip, a value from a fuzzer), chosen with a wide margin over
every real deployment, model and trace, so that a valid plan never meets one. Each is named in
the error it produces, so a user who really needs more knows which line to change. Sources for
the margins:

- Requests: the 100,000-request reasoning benchmark runs in about 10 s (README), so 10 million
  requests is about 20 minutes of simulation; beyond that, sample the traffic.
- Simulated span: ten years. Published traces span an hour (Mooncake) to a week (Azure 2023),
  but the simulator benchmark's 10x-longer-outputs run keeps the offered tokens/s by sending
  100,000 requests at a tenth of the rate (1.06 years of arrivals), and the engine's cost follows
  events, not seconds. A synthetic run spanning more than ten years (``--num-prompts /
  --request-rate``) is a unit slip, not a capacity plan. Trace timestamps may be large
  (Unix-epoch seconds, 1.7e9); only their span is bounded.
- Tokens: 10^9 per request, far above any context window (the largest bundled is 262,144).
- Devices: 131,072 per deployment (the largest published training clusters are ~100k GPUs).
- Simulated replicas: 1,024 (setting up 131,072 takes 37 s before the first request); a larger
  fleet is planned by simulating one replica's share of the traffic.
- Step token budget 2^24 and running sequences 2^20: vLLM's defaults are 8,192 and 1,024.
- Burstiness (gamma shape) at least 0.01: the inter-arrival coefficient of variation is
  1/sqrt(shape), 10 at 0.01; below that nearly every gamma draw underflows to 0 s.
"""

from __future__ import annotations

import sys

MAX_NUM_REQUESTS = 10_000_000
MAX_SPAN_S = 10 * 366 * 24 * 3600.0  # ten years of simulated time
MAX_TOKENS = 10**9  # per request (prompt or output) and per context
MAX_DEVICES = 131_072  # tp x pp x dp
MAX_STEP_TOKENS = 2**24  # --max-num-batched-tokens
MAX_NUM_SEQS = 2**20  # --max-num-seqs, --batch-sizes
MAX_BLOCK_TOKENS = 4096  # --block-size for engines without a fixed list
MAX_SIMULATED_REPLICAS = 1024  # simulate: replicas stepped side by side (0.3 s to set up)
MAX_SCHEDULER_STEPS = 1024  # --num-scheduler-steps (vLLM V0 used 8-16)
MAX_SIM_WORKERS = 256  # simulate --sim-workers: processes (one per replica at most runs)
MIN_BURSTINESS = 0.01
MAX_SEED = 2**64 - 1
MAX_LIST_VALUES = 1000  # comma-separated flag lists (--batch-sizes, --metric-percentiles)
MAX_SLO_MS = 1e9  # --goodput: about 11.6 days
MAX_OPERATOR_TIME_S = 3600.0  # one operator of one layer, in an --operator-table row
MAX_USER_FILE_BYTES = 4 * 1024**3  # any file inferplan reads (the full Azure trace is ~0.1 GB)

# Model config.json fields (the bundled ones stay far below: 126 layers, 262,208 vocab).
MAX_CONFIG_LAYERS = 4096
MAX_CONFIG_DIMENSION = 2**24  # widths, vocabularies, head counts, expert counts
MAX_CONFIG_POSITIONS = MAX_TOKENS  # max_position_embeddings, sliding_window


def span_years(span_s: float) -> str:
    """A span for a message: ``1.2e+03 years``; one past the largest float (a count over a
    subnormal rate) is ``over 5.7e+300 years``, not ``inf years``."""
    year_s = 365.25 * 24 * 3600
    if span_s > sys.float_info.max:
        return f"over {sys.float_info.max / year_s:.2g} years"
    years = f"{span_s / year_s:.3g}"
    return f"{years} year" if years == "1" else f"{years} years"
