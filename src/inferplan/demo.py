"""``make demo``: the tool's main job on bundled defaults.

Two memory plans from the design: a dense model (Llama-3.1-70B on H200, split over two GPUs) and
a large MoE (DeepSeek-R1 on 8 x H200 with its fp8 checkpoint), each showing weights against KV
cache and how many sequences fit at reasoning-length contexts.
"""

from __future__ import annotations

import sys

from inferplan.cli import main

SCENARIOS = (
    ["memory", "--model", "meta-llama/Llama-3.1-70B", "--gpu", "h200", "-tp", "2"],
    [
        "memory",
        "--model",
        "deepseek-ai/DeepSeek-R1",
        "--gpu",
        "h200",
        "-tp",
        "8",
        "--enable-expert-parallel",
    ],
)


def run() -> int:
    for argv in SCENARIOS:
        print(f"\n$ inferplan {' '.join(argv)}")
        status = main(argv)
        if status:
            return status
    return 0


if __name__ == "__main__":
    sys.exit(run())
