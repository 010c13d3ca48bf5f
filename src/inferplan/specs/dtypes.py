"""Numeric formats: bytes per stored value, with the scale overhead each format carries.

Weight formats (``--quantization``) and KV-cache formats (``--kv-cache-dtype``) are named as in
vLLM. Scale overheads follow the formats' published layouts:

- ``fp8``: e4m3 values; DeepSeek-V3/R1 checkpoints carry one fp32 scale per 128x128 weight block
  (their ``quantization_config.weight_block_size``); per-tensor or per-channel scales elsewhere.
- ``int8``: one fp32 scale per output channel (W8A8 / SmoothQuant-style); negligible per value.
- ``int4``: AWQ/GPTQ style, group size 128 with an fp16 scale and an fp16 zero point per group.
- ``mxfp4``: OCP Microscaling: 32 fp4 (e2m1) values share one 8-bit e8m0 scale
  (OCP MX specification v1.0, 2023).
- ``nvfp4``: 16 fp4 values share one fp8 (e4m3) scale, plus a per-tensor fp32 scale
  (NVIDIA Blackwell NVFP4 format description).
- KV ``int8``: one fp16 scale per 64 values; KV ``int4``: an fp16 scale and zero per 64 values
  (KIVI-style group quantisation, Liu et al. 2024).

Which tensor-core peak a format runs at (``compute_dtype``) matters for the step-time model:
weight-only formats (int4 AWQ, mxfp4 on Hopper) dequantise to bf16 and run at the bf16 peak.
"""

from __future__ import annotations

from dataclasses import dataclass

from inferplan.errors import InferplanError


@dataclass(frozen=True)
class NumberFormat:
    """How one stored value of a tensor is laid out in memory."""

    name: str
    bytes_per_value: float  # including the amortised scale overhead
    compute_dtype: str  # peak-FLOPs key in the GPU catalog this format's matmuls run at

    def bytes_for(self, num_values: float) -> float:
        return num_values * self.bytes_per_value


WEIGHT_FORMATS: dict[str, NumberFormat] = {
    "bf16": NumberFormat("bf16", 2.0, "bf16"),
    "fp16": NumberFormat("fp16", 2.0, "fp16"),
    "fp32": NumberFormat("fp32", 4.0, "tf32"),
    "fp8": NumberFormat("fp8", 1.0 + 4.0 / (128 * 128), "fp8"),
    "int8": NumberFormat("int8", 1.0, "int8"),
    "int4": NumberFormat("int4", 0.5 + 4.0 / 128, "bf16"),  # W4A16: dequantised to bf16
    "mxfp4": NumberFormat("mxfp4", 0.5 + 1.0 / 32, "fp4"),
    "nvfp4": NumberFormat("nvfp4", 0.5 + 1.0 / 16, "fp4"),
}

KV_FORMATS: dict[str, NumberFormat] = {
    "bf16": NumberFormat("bf16", 2.0, "bf16"),
    "fp16": NumberFormat("fp16", 2.0, "fp16"),
    "fp8": NumberFormat("fp8", 1.0, "fp8"),
    "fp8_e4m3": NumberFormat("fp8_e4m3", 1.0, "fp8"),
    "fp8_e5m2": NumberFormat("fp8_e5m2", 1.0, "fp8"),
    "int8": NumberFormat("int8", 1.0 + 2.0 / 64, "int8"),
    "int4": NumberFormat("int4", 0.5 + 4.0 / 64, "int4"),
}

# Hugging Face ``torch_dtype`` / ``dtype`` values -> our format names.
TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "half": "fp16"}


def weight_format(name: str, *, flag: str = "--quantization") -> NumberFormat:
    """The weight format called ``name``; an error lists the valid names."""
    key = name.lower()
    if key not in WEIGHT_FORMATS:
        valid = "|".join(WEIGHT_FORMATS)
        raise InferplanError(f"{flag}: unknown format {name!r}; valid: {valid}")
    return WEIGHT_FORMATS[key]


def kv_format(name: str, *, model_dtype: str) -> NumberFormat:
    """The KV-cache format for ``--kv-cache-dtype``; ``auto`` means the model's activation dtype
    (vLLM: ``auto`` follows the model dtype even for fp8 checkpoints)."""
    key = name.lower()
    if key == "auto":
        key = model_dtype if model_dtype in KV_FORMATS else "bf16"
    if key not in KV_FORMATS:
        valid = "|".join(["auto", *KV_FORMATS])
        raise InferplanError(f"--kv-cache-dtype: unknown format {name!r}; valid: {valid}")
    return KV_FORMATS[key]
