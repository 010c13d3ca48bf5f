"""Where evaluations run: this process, local worker processes, or a Ray cluster.

Every executor has one verb, ``run(items, on_done)``: run ``(kind, config, replicas)`` tasks
(``capacity.run_task``: an estimate from a lower bound, or a fleet confirmation) and return
their results in the items' order (so the search's outcome never
depends on which worker finished first), calling ``on_done(index, result)`` as each one ends.

- ``workers=1``: in this process (no start-up cost; what tests use).
- ``workers=N``: ``concurrent.futures.ProcessPoolExecutor``; each worker receives the search
  context once, at start-up.
- ``ray_address``: Ray tasks (``pip install 'inferplan[ray]'``); ``"local"`` starts a Ray
  instance on this machine, anything else is passed to ``ray.init(address=...)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

from inferplan.errors import InferplanError
from inferplan.plan.capacity import SearchContext, run_task
from inferplan.plan.space import ReplicaConfig

Item = tuple[str, ReplicaConfig, int]
OnDone = Callable[[int, dict[str, Any]], None]

_WORKER_CONTEXT: list[SearchContext] = []


def _init_worker(ctx: SearchContext) -> None:
    _WORKER_CONTEXT[:] = [ctx]


def _task_in_worker(kind: str, cfg: ReplicaConfig, n: int) -> dict[str, Any]:
    return run_task(_WORKER_CONTEXT[0], kind, cfg, n)


class InlineExecutor:
    def __init__(self, ctx: SearchContext) -> None:
        self.ctx = ctx

    def run(self, items: Sequence[Item], on_done: OnDone) -> list[dict[str, Any]]:
        out = []
        for i, (kind, cfg, n) in enumerate(items):
            result = run_task(self.ctx, kind, cfg, n)
            on_done(i, result)
            out.append(result)
        return out

    def close(self) -> None:
        pass


class ProcessExecutor:
    def __init__(self, ctx: SearchContext, workers: int) -> None:
        self.pool = ProcessPoolExecutor(workers, initializer=_init_worker, initargs=(ctx,))

    def run(self, items: Sequence[Item], on_done: OnDone) -> list[dict[str, Any]]:
        futures: dict[Future[dict[str, Any]], int] = {
            self.pool.submit(_task_in_worker, kind, cfg, n): i
            for i, (kind, cfg, n) in enumerate(items)
        }
        results: dict[int, dict[str, Any]] = {}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in sorted(done, key=futures.__getitem__):
                index = futures[future]
                results[index] = future.result()
                on_done(index, results[index])
        return [results[i] for i in range(len(items))]

    def close(self) -> None:
        self.pool.shutdown(cancel_futures=True)


class RayExecutor:
    def __init__(self, ctx: SearchContext, address: str) -> None:
        try:
            import ray
        except ImportError:
            raise InferplanError(
                "--ray-address: Ray is not installed; pip install 'inferplan[ray]'"
            ) from None
        self.ray = ray
        self.owns = not ray.is_initialized()
        if self.owns:
            ray.init(address=None if address == "local" else address, log_to_driver=False)
        self.ctx_ref = ray.put(ctx)
        self.remote = ray.remote(run_task)

    def run(self, items: Sequence[Item], on_done: OnDone) -> list[dict[str, Any]]:
        refs = [self.remote.remote(self.ctx_ref, kind, cfg, n) for kind, cfg, n in items]
        index = {ref: i for i, ref in enumerate(refs)}
        results: dict[int, dict[str, Any]] = {}
        pending = list(refs)
        while pending:
            done, pending = self.ray.wait(pending, num_returns=1)
            for ref in done:
                results[index[ref]] = self.ray.get(ref)
                on_done(index[ref], results[index[ref]])
        return [results[i] for i in range(len(items))]

    def close(self) -> None:
        if self.owns:
            self.ray.shutdown()


Executor = InlineExecutor | ProcessExecutor | RayExecutor


def make_executor(ctx: SearchContext, workers: int, ray_address: str | None) -> Executor:
    if workers < 1:
        raise InferplanError(f"--workers: must be >= 1, got {workers}")
    if ray_address is not None:
        return RayExecutor(ctx, ray_address)
    if workers == 1:
        return InlineExecutor(ctx)
    return ProcessExecutor(ctx, workers)
