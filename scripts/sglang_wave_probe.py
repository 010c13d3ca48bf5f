"""SGLang's first wave with decode steps inside it: a probe over every SGLang run (``sglwave16``).

The question (docs/validation.md, ``sgl15``): GPUStack's SGLang ShareGPT runs have a first
wave 1.1-1.6x longer than simulated whose requests do not wait out the whole wave for their
second token, so decode steps run inside the wave. SGLang 0.5's scheduler runs a decode step
only when no prefill batch forms (``get_next_batch_to_run``: an empty waiting queue, or
``batch_is_full``), so decodes inside a wave need requests to reach it in bursts with gaps
longer than a prefill step, which its one-process intake (``TokenizerManager``: HTTP, chat
template, tokenise, send; the same event loop streams every output chunk) could make. This
probe does not build that intake; it asks what the rows would say if it existed, by forcing
its outcome on the simulated scheduler:

- ``--decode-every K``: after K prefill steps in a row, one decode step of the running
  requests (where any decode): a wave paced by bursts, at most K prefill steps between decodes.
- ``--intake-s S``: SGLang's per-request intake (``FrontEnd.per_request_s``, committed 6 ms).
- ``--intake-stream-s T``: the intake slowed by the streams it shares its process with
  (``FrontEnd.intake_stream_s``, seconds a streamed token; ``engine/stream_intake.py``, one
  replica only): with decodes inside the wave, the feedback the brief names.
- ``--pool-scale F``: the KV pool F times as many blocks (every run; the admission, retraction
  and decode stalls a smaller pool gives).
- ``--token-s T``: the output stream's cost a token (``FrontEnd.per_token_s``, committed 25 us;
  the pass after the engine, ``engine/frontend.py``).

It prints, per run, the signed errors (predicted / measured - 1, %) of the latency metrics and
the output throughput, then the median |error| of the latency rows by dataset and overall
(every SGLang run: ShareGPT and ``random``, every GPU). ``K = 0``: the committed scheduler.

    .venv/bin/python scripts/sglang_wave_probe.py
    .venv/bin/python scripts/sglang_wave_probe.py --decode-every 1
    .venv/bin/python scripts/sglang_wave_probe.py --decode-every 2 --intake-s 0.009

About 20 s of CPU a pass.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import Any

import numpy as np
from sglang_sharegpt_probes import METRICS as SHOWN  # run from scripts/: the sibling probe

from inferplan.engine import sglang
from inferplan.engine.frontend import FrontEnd
from inferplan.plan import published_runs
from inferplan.plan.published import PublishedRow, bundled_published, skip_reason

LATENCY = tuple(m for m in SHOWN if m != "output_throughput")


def force_decodes(every: int) -> None:
    """Wrap ``SglangScheduler.schedule``: after ``every`` prefill steps in a row, one decode
    step of the requests already decoding (the chunked request waits for the next prefill)."""
    original = sglang.SglangScheduler.schedule

    def schedule(self: Any, now: float) -> Any:
        run = self.running
        streak = getattr(self, "_probe_streak", 0)
        decoding = (run.num_tokens - run.num_computed == 1) & (run.num_generated > 0)
        if streak >= every and len(run) and bool(decoding.all()):
            self._probe_streak = 0
            self.scheduled = True
            return self._decode_step()
        decision = original(self, now)
        self._probe_streak = streak + 1 if decision.prefill_only else 0
        return decision

    sglang.SglangScheduler.schedule = schedule  # type: ignore[method-assign]


def scale_pool(scale: float) -> None:
    """Wrap ``published_runs.memory_plan``: the replica's KV pool ``scale`` times as many blocks
    (the weights and the budget as modelled)."""
    build = published_runs.memory_plan

    def plan(setup: Any) -> Any:
        built = build(setup)
        stages = tuple(replace(st, kv_bytes=st.kv_bytes * scale) for st in built.stages)
        return replace(built, stages=stages, num_blocks=max(1, int(built.num_blocks * scale)))

    published_runs.memory_plan = plan  # type: ignore[assignment]


def sglang_runs() -> list[list[PublishedRow]]:
    rows = [r for r in bundled_published() if r.engine == "sglang" and skip_reason(r) is None]
    return list(published_runs.group_runs(rows).values())


def shape(run: list[PublishedRow]) -> str:
    first = run[0]
    if first.dataset == "sharegpt":
        return "sharegpt"
    return f"{first.input_len}/{first.output_len}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decode-every", type=int, default=0, help="K prefill steps, 1 decode")
    parser.add_argument("--intake-s", type=float, default=None, help="SGLang's per_request_s")
    parser.add_argument(
        "--intake-stream-s", type=float, default=0.0, help="intake_stream_s (s a streamed token)"
    )
    parser.add_argument("--token-s", type=float, default=None, help="SGLang's per_token_s")
    parser.add_argument("--pool-scale", type=float, default=1.0, help="KV pool x F (a probe)")
    parser.add_argument("--sharegpt-only", action="store_true")
    args = parser.parse_args()
    if args.decode_every < 0:
        parser.error("--decode-every must be >= 0")
    if args.decode_every:
        force_decodes(args.decode_every)
    if not 0 < args.pool_scale <= 1:
        parser.error("--pool-scale must lie in (0, 1]")
    if args.pool_scale != 1.0:
        scale_pool(args.pool_scale)
    errors: dict[str, list[float]] = {}
    print("run | signed %: " + " ".join(SHOWN))
    for run in sglang_runs():
        if args.sharegpt_only and run[0].dataset != "sharegpt":
            continue
        fe: FrontEnd = published_runs.row_frontend(run[0])
        if args.intake_s is not None:
            fe = replace(fe, per_request_s=args.intake_s)
        if args.token_s is not None:
            fe = replace(fe, per_token_s=args.token_s)
        if args.intake_stream_s:
            fe = replace(fe, intake_stream_s=args.intake_stream_s)
        values = published_runs.predict_run(run, None, False, fe)
        cells = []
        for row in run:
            value = values.get(row.metric)
            if value is None or row.metric not in SHOWN:
                continue
            err = value / row.value - 1
            cells.append(f"{row.metric[:4]}{row.metric.split('_')[-1][:3]} {err * 100:+.0f}")
            if row.metric in LATENCY:
                errors.setdefault(shape(run), []).append(err)
        name = run[0].case_id.removeprefix("gpustack-")
        print(f"{name:36s} {shape(run):10s} " + " ".join(cells), flush=True)
    every = np.abs(np.concatenate(list(errors.values())))
    for key, errs in sorted(errors.items()):
        arr = np.abs(errs)
        print(f"{key:10s} n={arr.size:3d} median |error| {np.median(arr) * 100:5.1f} %")
    print(
        f"all latency rows n={every.size} median {np.median(every) * 100:.1f} %"
        f" p90 {np.percentile(every, 90) * 100:.1f} %"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
