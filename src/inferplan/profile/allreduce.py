"""Tensor-parallel all-reduce times, measured with ``torch.distributed`` over real devices.

One process per rank (``torch.multiprocessing.spawn``), NCCL on CUDA. Each rank all-reduces a
``[tokens, hidden]`` activation tensor (what a TP layer reduces after attention and after the
FFN); every timed run starts after a barrier, and the time recorded for a size is the slowest
rank's median. The profiler only calls this with at least ``tp`` CUDA devices: one device
cannot stand in for a link. The ``gloo`` backend on the CPU runs the same code in tests, with
forked workers (CUDA needs spawned ones, which import torch afresh: seconds each).
"""

from __future__ import annotations

import json
import socket
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _rank_times(
    device: torch.device, dtype: torch.dtype, hidden: int, tokens: list[int], runs: tuple[int, int]
) -> dict[int, float]:
    warmup, repeats = runs
    out = {}
    for count in tokens:
        x = torch.ones(count, hidden, dtype=dtype, device=device)
        for _ in range(warmup):
            dist.all_reduce(x)
        samples = []
        for _ in range(repeats):
            dist.barrier()
            _synchronize(device)
            start = time.perf_counter()
            dist.all_reduce(x)
            _synchronize(device)
            samples.append(time.perf_counter() - start)
        slowest = torch.tensor([statistics.median(samples)], dtype=torch.float64, device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        out[count] = float(slowest.item())
    return out


def _worker(
    rank: int,
    world: int,
    backend: str,
    port: int,
    hidden: int,
    tokens: list[int],
    runs: tuple[int, int],
    result: str,
) -> None:
    dist.init_process_group(
        backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        if backend == "nccl":
            torch.cuda.set_device(rank)
            device, dtype = torch.device("cuda", rank), torch.bfloat16
        else:
            device, dtype = torch.device("cpu"), torch.float32
        times = _rank_times(device, dtype, hidden, tokens, runs)
        if rank == 0:
            Path(result).write_text(json.dumps(times))
    finally:
        dist.destroy_process_group()


def measure_allreduce(
    hidden: int, tokens: list[int], *, world: int, backend: str, warmup: int, repeats: int
) -> dict[int, float]:
    """Seconds per all-reduce of ``[n, hidden]`` activations over ``world`` ranks, by ``n``."""
    with tempfile.TemporaryDirectory() as folder:
        result = Path(folder) / "allreduce.json"
        args = (world, backend, _free_port(), hidden, tokens, (warmup, repeats), str(result))
        method = "spawn" if backend == "nccl" else "fork"
        mp.start_processes(_worker, args=args, nprocs=world, join=True, start_method=method)
        return {int(n): float(t) for n, t in json.loads(result.read_text()).items()}
