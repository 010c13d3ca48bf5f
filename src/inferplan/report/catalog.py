"""What is bundled: models and GPUs, as JSON rows and terminal tables."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from inferplan.specs.catalog import BUNDLED_MODELS, hf_id, load_model
from inferplan.specs.hardware import GIB, SHORT_NAMES, GpuSpec, bundled_gpus
from inferplan.specs.model import ModelSpec
from inferplan.specs.params import count_params


def _model_row(spec: ModelSpec) -> dict[str, Any]:
    counts = count_params(spec)
    return {
        "id": spec.name,
        "model_type": spec.model_type,
        "num_layers": spec.num_layers,
        "params_total": counts.total,
        "params_active": counts.active,
        "is_moe": spec.is_moe,
        "max_position_embeddings": spec.max_position_embeddings,
        "weights": spec.quantization.method if spec.quantization else spec.dtype,
    }


def models_json() -> list[dict[str, Any]]:
    return [_model_row(load_model(hf_id(short))) for short in BUNDLED_MODELS]


def models_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="bundled models (--model takes the id, the part after '/', or a path)")
    for col in ("id", "type", "layers", "total (B)", "active (B)", "weights", "max len"):
        table.add_column(col, justify="left" if col in ("id", "type", "weights") else "right")
    for row in rows:
        table.add_row(
            row["id"],
            row["model_type"],
            str(row["num_layers"]),
            f"{row['params_total'] / 1e9:,.2f}",
            f"{row['params_active'] / 1e9:,.2f}",
            row["weights"],
            f"{row['max_position_embeddings']:,}",
        )
    return table


def _short_names() -> dict[str, str]:
    out: dict[str, str] = {}
    for short, key in SHORT_NAMES.items():
        out.setdefault(key, short)
    return out


def _gpu_row(gpu: GpuSpec, short: str | None) -> dict[str, Any]:
    return {
        "key": gpu.key,
        "short_name": short,
        "name": gpu.name,
        "memory_bytes": gpu.memory_bytes,
        "memory_bandwidth_bytes_s": gpu.memory_bandwidth_bytes_s,
        "peak_flops": gpu.peak_flops,
        "scale_up_bytes_s": gpu.scale_up_bytes_s,
        "tdp_w": gpu.tdp_w,
        "price_usd_per_hour": gpu.price_usd_per_hour,
    }


def gpus_json() -> list[dict[str, Any]]:
    shorts = _short_names()
    return [_gpu_row(gpu, shorts.get(key)) for key, gpu in bundled_gpus().items()]


def _tflops(peaks: dict[str, float], dtype: str) -> str:
    return f"{peaks[dtype] / 1e12:,.0f}" if dtype in peaks else "-"


def gpus_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="bundled GPUs (dense peaks; sources in the catalog file)")
    for col in ("--gpu", "key", "memory GiB", "HBM TB/s", "bf16 TFLOPS", "fp8 TFLOPS", "$/h"):
        table.add_column(col, justify="left" if col in ("--gpu", "key") else "right")
    for row in rows:
        price = row["price_usd_per_hour"]
        table.add_row(
            row["short_name"] or row["key"],
            row["key"],
            f"{row['memory_bytes'] / GIB:.1f}",
            f"{row['memory_bandwidth_bytes_s'] / 1e12:.2f}",
            _tflops(row["peak_flops"], "bf16"),
            _tflops(row["peak_flops"], "fp8"),
            f"{price:.2f}" if price else "-",
        )
    return table
