"""The one front door to workloads, shaped like ``vllm bench serve --dataset-name``.

Owns ``build_workload``: a dataset name (``random``, ``trace``, ``servegen``, ``reasoning``,
``mixed``) and vLLM-named options -> a ``Workload``. One small builder per dataset, in a
name -> function dict.

Defaults and rules:

- ``random``: vLLM's defaults, 1,000 prompts, input 1,024, output 128, range ratio 0.
- ``trace``: ``dataset_path`` is a file or a bundled trace name (``bundled.BUNDLED_TRACES``).
  ``num_prompts`` keeps the first N requests in arrival order. The trace keeps its own arrival
  times unless ``request_rate`` is given; then it is re-timed by vLLM's rule (``inf``: all at 0).
- ``servegen``: lengths from a ServeGen folder or pooled JSON at ``dataset_path``, else the
  bundled DeepSeek-R1 pool; input and output drawn independently.
- ``reasoning``: inputs UniformInt around ``random_input_len`` (default 100, range ratio 0.5,
  i.e. 50-150 tokens: 77 % of Natural Reasoning prompts are 50-150 tokens, arXiv 2605.19775).
  Outputs: the long/short mix (``reasoning_long_fraction``, default 0.45 above 5,000 tokens), or,
  when ``random_output_len`` is given instead, a lognormal with that mean and ``output_sigma``;
  both are capped at ``max_output_tokens``.
- ``reasoning-burst``: ``reasoning`` plus a tenth of the requests with long outputs arriving
  together mid-run (``burst.py``: the "long outputs coincide" case of admission control).
- ``mixed``: chat and reasoning classes, ``reasoning_share`` (default 0.3) of them reasoning
  (``workload/mixed.py``: Azure-conversation-like chat, the ``reasoning`` dataset's lengths).
- Synthetic arrivals default to ``request_rate=inf`` (all at 0), as in vLLM.

Seeds: lengths come from ``numpy.random.default_rng(seed)``, the stream vLLM's random dataset
uses, drawn in vLLM's order (inputs, then outputs); arrivals come from a second stream spawned
from the same seed, so changing the rate never changes the lengths.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from inferplan.errors import InferplanError
from inferplan.workload import mixed, synthetic
from inferplan.workload.bundled import resolve_trace_path
from inferplan.workload.burst import add_burst, burst_size
from inferplan.workload.request import IntArray, Workload
from inferplan.workload.servegen import load_servegen, sample_servegen
from inferplan.workload.streams import stream
from inferplan.workload.traces import load_trace


@dataclass(frozen=True)
class DatasetOptions:
    """``build_workload``'s options; ``None`` means the dataset's default."""

    dataset_path: str | Path | None
    num_prompts: int | None
    random_input_len: int | None
    random_output_len: int | None
    random_range_ratio: float | None
    request_rate: float | None
    burstiness: float
    seed: int
    reasoning_long_fraction: float | None
    max_output_tokens: int
    output_sigma: float
    reasoning_share: float | None = None


def build_workload(
    dataset_name: str = "random",
    *,
    dataset_path: str | Path | None = None,
    num_prompts: int | None = None,
    random_input_len: int | None = None,
    random_output_len: int | None = None,
    random_range_ratio: float | None = None,
    request_rate: float | None = None,
    burstiness: float = 1.0,
    seed: int = 0,
    reasoning_long_fraction: float | None = None,
    max_output_tokens: int = 32768,
    output_sigma: float = 1.0,
    reasoning_share: float | None = None,
) -> Workload:
    """The workload ``vllm bench serve --dataset-name <dataset_name>`` would send (module doc)."""
    builder = DATASETS.get(dataset_name)
    if builder is None:
        raise InferplanError(
            f"--dataset-name {dataset_name!r} is not one of: {', '.join(DATASETS)}"
        )
    options = DatasetOptions(
        dataset_path=dataset_path,
        num_prompts=num_prompts,
        random_input_len=random_input_len,
        random_output_len=random_output_len,
        random_range_ratio=random_range_ratio,
        request_rate=request_rate,
        burstiness=burstiness,
        seed=seed,
        reasoning_long_fraction=reasoning_long_fraction,
        max_output_tokens=max_output_tokens,
        output_sigma=output_sigma,
        reasoning_share=reasoning_share,
    )
    if reasoning_share is not None and dataset_name != "mixed":
        raise InferplanError(f"--reasoning-share does not apply to --dataset-name {dataset_name}")
    return builder(options)


def _streams(seed: int) -> tuple[np.random.Generator, np.random.Generator]:
    """(lengths, arrivals) generators from one seed; see the module doc."""
    lengths = synthetic.make_rng(seed)  # validates the seed
    arrivals = stream(seed, "arrivals")
    return lengths, arrivals


def _reject(options: DatasetOptions, dataset_name: str, *names: str) -> None:
    """Refuse options that this dataset would otherwise silently ignore."""
    for name in names:
        if getattr(options, name) is not None:
            flag = "--" + name.replace("_", "-")
            raise InferplanError(f"{flag} does not apply to --dataset-name {dataset_name}")


def _synthetic_workload(
    options: DatasetOptions, lengths: tuple[IntArray, IntArray], source: str, note: str
) -> Workload:
    input_tokens, output_tokens = lengths
    _, arrivals_rng = _streams(options.seed)
    rate = math.inf if options.request_rate is None else options.request_rate
    arrival_s = synthetic.arrival_times_s(len(input_tokens), rate, options.burstiness, arrivals_rng)
    return Workload(
        arrival_s=arrival_s,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        class_ids=np.zeros(len(input_tokens), dtype=np.int64),
        source=source,
        notes=(note, f"request rate {rate} req/s, burstiness {options.burstiness}"),
    )


def _random(options: DatasetOptions) -> Workload:
    _reject(options, "random", "dataset_path", "reasoning_long_fraction")
    lengths_rng, _ = _streams(options.seed)
    num_prompts = 1000 if options.num_prompts is None else options.num_prompts
    input_len = 1024 if options.random_input_len is None else options.random_input_len
    output_len = 128 if options.random_output_len is None else options.random_output_len
    ratio = 0.0 if options.random_range_ratio is None else options.random_range_ratio
    lengths = synthetic.random_lengths(num_prompts, input_len, output_len, ratio, lengths_rng)
    note = f"random: input {input_len}, output {output_len}, range ratio {ratio}"
    return _synthetic_workload(options, lengths, "random", note)


def _reasoning(options: DatasetOptions) -> Workload:
    _reject(options, "reasoning", "dataset_path")
    if options.random_output_len is not None and options.reasoning_long_fraction is not None:
        raise InferplanError(
            "give --random-output-len (lognormal mean) or --reasoning-long-fraction (mix), not both"
        )
    lengths_rng, _ = _streams(options.seed)
    num_prompts = 1000 if options.num_prompts is None else options.num_prompts
    input_len = 100 if options.random_input_len is None else options.random_input_len
    ratio = 0.5 if options.random_range_ratio is None else options.random_range_ratio
    input_tokens = synthetic.uniform_lengths(
        num_prompts, input_len, ratio, lengths_rng, "--random-input-len"
    )
    cap = synthetic.check_count(options.max_output_tokens, "--max-output-tokens")
    if options.random_output_len is not None:
        mean = synthetic.check_count(options.random_output_len, "--random-output-len")
        output_tokens = synthetic.lognormal_lengths(
            num_prompts, mean, options.output_sigma, cap, lengths_rng
        )
        note = f"reasoning: lognormal outputs, mean {mean}, sigma {options.output_sigma}"
    else:
        share = 0.45 if options.reasoning_long_fraction is None else options.reasoning_long_fraction
        output_tokens = synthetic.reasoning_mix_lengths(
            num_prompts, lengths_rng, long_fraction=share, max_tokens=cap
        )
        note = f"reasoning: {share:.0%} of outputs above 5000 tokens"
    note += f", cap {cap}; inputs {input_len} +/- {ratio:.0%}"
    return _synthetic_workload(options, (input_tokens, output_tokens), "reasoning", note)


def _reasoning_burst(options: DatasetOptions) -> Workload:
    """``reasoning`` for the background plus a burst of long outputs (``burst.py``)."""
    if options.random_output_len is not None:
        raise InferplanError("--random-output-len does not apply to --dataset-name reasoning-burst")
    num_prompts = 1000 if options.num_prompts is None else options.num_prompts
    if num_prompts < 2:
        raise InferplanError("--num-prompts: reasoning-burst needs at least 2 requests")
    k = burst_size(num_prompts)
    background = _reasoning(replace(options, num_prompts=num_prompts - k))
    return add_burst(background, k, options.seed, options.max_output_tokens)


def _mixed(options: DatasetOptions) -> Workload:
    """Chat and reasoning classes in one stream (``workload/mixed.py``)."""
    _reject(options, "mixed", "dataset_path", "random_input_len", "random_output_len")
    _reject(options, "mixed", "random_range_ratio")
    lengths_rng, _ = _streams(options.seed)
    num_prompts = synthetic.check_count(
        1000 if options.num_prompts is None else options.num_prompts, "--num-prompts"
    )
    share = (
        mixed.DEFAULT_REASONING_SHARE
        if options.reasoning_share is None
        else mixed.check_share(options.reasoning_share)
    )
    long_share = options.reasoning_long_fraction
    long_share = 0.45 if long_share is None else long_share
    cap = synthetic.check_count(options.max_output_tokens, "--max-output-tokens")
    inputs, outputs, class_ids = mixed.mixed_lengths(
        num_prompts, share, lengths_rng, long_fraction=long_share, max_tokens=cap
    )
    note = f"mixed: {share:.0%} reasoning ({long_share:.0%} of them above 5000 tokens), chat"
    workload = _synthetic_workload(options, (inputs, outputs), "mixed", note)
    return replace(workload, class_ids=class_ids, class_names=mixed.CLASS_NAMES)


def _servegen(options: DatasetOptions) -> Workload:
    unused = ("random_input_len", "random_output_len", "random_range_ratio")
    _reject(options, "servegen", *unused, "reasoning_long_fraction")
    lengths_rng, _ = _streams(options.seed)
    num_prompts = 1000 if options.num_prompts is None else options.num_prompts
    pool = None if options.dataset_path is None else load_servegen(options.dataset_path)
    lengths = sample_servegen(num_prompts, lengths_rng, pool)
    source = "servegen" if pool is None else f"servegen:{Path(pool.source).name}"
    note = "servegen: input and output lengths drawn independently from pooled pmfs"
    return _synthetic_workload(options, lengths, source, note)


def _trace(options: DatasetOptions) -> Workload:
    unused = ("random_input_len", "random_output_len", "random_range_ratio")
    _reject(options, "trace", *unused, "reasoning_long_fraction")
    if options.dataset_path is None:
        raise InferplanError("--dataset-name trace needs --dataset-path (a file or bundled name)")
    workload = load_trace(resolve_trace_path(options.dataset_path))
    if options.num_prompts is not None:
        workload = first_requests(workload, options.num_prompts)
    if options.request_rate is not None:
        _, arrivals_rng = _streams(options.seed)
        workload = synthetic.re_time(
            workload, options.request_rate, options.burstiness, arrivals_rng
        )
    return workload


def first_requests(workload: Workload, num_requests: int) -> Workload:
    """The first ``num_requests`` requests in arrival order."""
    num_requests = synthetic.check_count(num_requests, "--num-prompts")
    if num_requests > workload.num_requests:
        raise InferplanError(
            f"--num-prompts {num_requests} is more than the {workload.num_requests} requests "
            f"in {workload.source}"
        )
    hashes = workload.prefix_hashes
    priorities = workload.priorities
    return Workload(
        arrival_s=workload.arrival_s[:num_requests],
        input_tokens=workload.input_tokens[:num_requests],
        output_tokens=workload.output_tokens[:num_requests],
        class_ids=workload.class_ids[:num_requests],
        class_names=workload.class_names,
        priorities=None if priorities is None else priorities[:num_requests],
        prefix_hashes=None if hashes is None else hashes[:num_requests],
        prefix_block_tokens=workload.prefix_block_tokens,
        source=workload.source,
        notes=(*workload.notes, f"first {num_requests} requests"),
        prefix_hashes_cover_output=workload.prefix_hashes_cover_output,
    )


DATASETS: dict[str, Callable[[DatasetOptions], Workload]] = {
    "random": _random,
    "trace": _trace,
    "servegen": _servegen,
    "reasoning": _reasoning,
    "reasoning-burst": _reasoning_burst,
    "mixed": _mixed,
}
