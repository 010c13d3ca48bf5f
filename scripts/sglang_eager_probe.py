"""SGLang's steps outside CUDA graphs, and the first wave as measured: probes over every SGLang run.

``sgl18`` (docs/validation.md). SGLang 0.5 runs every extend (prefill) batch and every decode
batch above ``cuda_graph_max_bs`` (256 below TP4 on 80-141 GB parts, 512 from TP4) eagerly: the
model's forward launches each layer's kernels from Python. Only the ShareGPT runs (1,000
requests decoding at once) and the ``128/4`` runs (three decode steps) decode above it; the
``random`` runs are KV-bound at 10-500 sequences. The model charges such a step
``eager_layer_overhead_s`` a layer, added to the step (``perf/roofline.py`` ``_overhead``; the
GPU family's 10 us). Probes:

- ``--eager-us X``: SGLang's cost a layer on eager steps, X us (TensorRT-LLM's PyTorch backend
  is fitted at 300, ``plan/data/trtllm_serve.yaml``).
- ``--per-seq-us X``: SGLang's host cost a sequence and step, X us (fitted: 99, at its bound).
- ``--hide``: the launches as host work that hides behind the GPU's with the scheduler's
  (SGLang 0.5's overlap thread launches batch n + 1 while the GPU runs batch n, and shares the
  GIL with the scheduler's result processing): a step takes ``max(GPU, host + launches)``
  instead of ``max(GPU, host) + launches``; monkeypatched here, not in the model.
- ``--oracle-wave``: each ShareGPT run's prefill-only steps scaled by measured / simulated TTFT
  p99 (a first pass at scale 1 gives it), so that its first wave ends as measured: what the
  TPOT and ITL rows say once the wave is right (a diagnosis, not a model).

It prints the median |error| of the latency rows by shape (``THR``: every throughput row), the
whole median and p90, and the signed medians of ShareGPT's and the ``random`` runs' latency
metrics; ``--verbose`` each run's signed errors (predicted / measured - 1, %).

    .venv/bin/python scripts/sglang_eager_probe.py                  # the committed model
    .venv/bin/python scripts/sglang_eager_probe.py --eager-us 300
    .venv/bin/python scripts/sglang_eager_probe.py --eager-us 300 --hide
    .venv/bin/python scripts/sglang_eager_probe.py --eager-us 300 --oracle-wave

About 10 s of CPU a pass (20 s with ``--oracle-wave``).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import Any

import numpy as np
from sglang_sharegpt_probes import SlowPrefill  # run from scripts/: the sibling probe

from inferplan.perf import oneoff, overlap, roofline, step_seconds
from inferplan.perf.batch import StepBatch
from inferplan.perf.cudagraph import decode_graph
from inferplan.plan import published_runs
from inferplan.plan.published import (
    LATENCY_METRICS,
    PublishedRow,
    bundled_published,
    skip_reason,
)

HIDDEN: dict[int, roofline.RooflineModel] = {}  # id(model.eff) -> model, with ``--hide``


def set_costs(**seconds: float) -> None:
    """SGLang's ``Efficiency`` fields set to ``seconds`` (every run here is SGLang's; the step
    model's constructor wrapped, so fitted constants would get them too)."""
    build = published_runs.build_step_model

    def build_step_model(plan: Any, efficiency: Any = None, **kwargs: Any) -> Any:
        return build(plan, efficiency=replace(efficiency, **seconds), **kwargs)

    published_runs.build_step_model = build_step_model


def _is_eager(model: roofline.RooflineModel, batch: StepBatch) -> bool:
    if batch.prefill_tokens or batch.num_prefill_seqs:
        return True
    return decode_graph(model.graphs, model.cuda_graphs, batch, model.par.attention_dp)[1]


def hide_launches() -> None:
    """``--hide``: SGLang's eager launches counted in the host work that hides behind the GPU's
    (every caller of ``overlap.host_s`` sees them), and no longer added on top of it."""
    plain = overlap.host_s

    def host_s(eff: Any, batch: StepBatch, ranks: int) -> float:
        seconds = plain(eff, batch, ranks)
        model = HIDDEN.get(id(eff))
        if model is not None and _is_eager(model, batch):
            seconds += eff.eager_layer_overhead_s * model.stage_layers
        return seconds

    def overhead(self: Any, batch: StepBatch, eager: bool) -> float:
        seconds = host_s(self.eff, batch, self.par.attention_dp)
        seconds += self.eff.layer_overhead_s * self.stage_layers
        counted = HIDDEN.get(id(self.eff)) is not None and _is_eager(self, batch)
        if eager and not counted:  # not in ``host_s`` already
            seconds += self.eff.eager_layer_overhead_s * self.stage_layers
        return seconds / self.pipeline_factor(batch)

    for module in (roofline, oneoff, step_seconds):
        module.host_s = host_s  # type: ignore[attr-defined]
    roofline.RooflineModel._overhead = overhead  # type: ignore[method-assign]
    build = published_runs.run_step_model

    def run_step_model(first: PublishedRow, *args: Any) -> Any:
        model = build(first, *args)
        if first.engine == "sglang" and isinstance(model, roofline.RooflineModel):
            HIDDEN[id(model.eff)] = model
        return model

    published_runs.run_step_model = run_step_model  # type: ignore[assignment]


def scaled_prefill(run: list[PublishedRow], scale: float) -> dict[str, float | None]:
    """``predict_run`` with every prefill-only step ``scale`` times as long."""
    build = published_runs.run_step_model
    published_runs.run_step_model = lambda *a: SlowPrefill(build(*a), scale)
    try:
        return published_runs.predict_run(run, None, False)
    finally:
        published_runs.run_step_model = build


def predict(run: list[PublishedRow], oracle: bool) -> dict[str, float | None]:
    values = published_runs.predict_run(run, None, False)
    measured = {row.metric: row.value for row in run}
    simulated = values.get("ttft_p99")
    if not oracle or run[0].dataset != "sharegpt" or not simulated or "ttft_p99" not in measured:
        return values
    return scaled_prefill(run, measured["ttft_p99"] / simulated)


def shape(first: PublishedRow) -> str:
    return "sharegpt" if first.dataset == "sharegpt" else f"{first.input_len}/{first.output_len}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eager-us", type=float, default=None, help="SGLang's eager us a layer")
    parser.add_argument("--per-seq-us", type=float, default=None, help="host us a sequence")
    parser.add_argument("--hide", action="store_true", help="launches hide behind the GPU")
    parser.add_argument("--oracle-wave", action="store_true", help="ShareGPT's wave as measured")
    parser.add_argument("--verbose", action="store_true", help="each run's signed errors")
    args = parser.parse_args()
    costs = {}
    for name, us in (
        ("eager_layer_overhead_s", args.eager_us),
        ("per_seq_overhead_s", args.per_seq_us),
    ):
        if us is not None and us < 0:
            parser.error("--eager-us and --per-seq-us must be >= 0")
        if us is not None:
            costs[name] = us * 1e-6
    if costs:
        set_costs(**costs)
    if args.hide:
        hide_launches()
    rows = [r for r in bundled_published() if r.engine == "sglang" and skip_reason(r) is None]
    errors: dict[str, list[float]] = {}
    signed: dict[tuple[bool, str], list[float]] = {}
    for run in published_runs.group_runs(rows).values():
        values = predict(run, args.oracle_wave)
        cells = []
        for row in run:
            value = values.get(row.metric)
            if value is None:
                continue
            err = value / row.value - 1
            cells.append(f"{row.metric} {err * 100:+.0f}")
            if row.family == "throughput":
                errors.setdefault("THR", []).append(abs(err))
            if row.metric in LATENCY_METRICS:
                errors.setdefault(shape(run[0]), []).append(abs(err))
                signed.setdefault((run[0].dataset == "sharegpt", row.metric), []).append(err)
        if args.verbose:
            name = run[0].case_id.removeprefix("gpustack-")
            print(f"{name:36s} {shape(run[0]):10s} " + " ".join(cells), flush=True)
    latency = np.concatenate([v for k, v in errors.items() if k != "THR"])
    by_shape = " ".join(f"{k} {np.median(v) * 100:.1f}" for k, v in sorted(errors.items()))
    print(
        f"median |error| %: {by_shape} | latency {np.median(latency) * 100:.1f}"
        f" p90 {np.percentile(latency, 90) * 100:.1f}"
    )
    for is_sharegpt, name in ((True, "sharegpt"), (False, "random")):
        cells = [
            f"{m} {np.median(signed[(is_sharegpt, m)]) * 100:+.0f}"
            for m in LATENCY_METRICS
            if (is_sharegpt, m) in signed
        ]
        print(f"{name} signed median %: " + " ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
