"""``make demo``: the tool's main job on bundled defaults, a small capacity plan end to end.

1. Memory plans from the design: a dense model (Llama-3.1-70B on two H200s) and a large MoE
   (DeepSeek-R1 on 8 x H200 with its fp8 checkpoint): weights against KV cache, and how many
   sequences fit at reasoning-length contexts.
2. The step-time model of the dense deployment: prefill and decode speed, and their bounds.
3. A simulation of the bundled real trace (the first 2,000 requests of the Azure LLM 2023
   conversation trace, at their recorded arrival times) on that deployment, with the summary a
   ``vllm bench serve`` run would report.
"""

from __future__ import annotations

import sys

from inferplan.cli import main

DENSE = ["--model", "meta-llama/Llama-3.1-70B", "--gpu", "h200", "-tp", "2"]
SCENARIOS = (
    ["memory", *DENSE],
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
    ["roofline", *DENSE, "--batch-sizes", "1,32,256", "--input-len", "1024,8192"],
    [
        "simulate",
        *DENSE,
        "--dataset-name",
        "trace",
        "--dataset-path",
        "azure_llm_2023_conv",
        "--goodput",
        "ttft:2000",
        "--goodput",
        "tpot:100",
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
