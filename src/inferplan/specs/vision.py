"""A multimodal model's vision tower, read from its ``vision_config`` (``specs/model.py``).

SigLIP-style towers (Gemma-3) state ``image_size`` and the text config's
``mm_tokens_per_image``; Qwen-VL towers take any resolution, their position table fixing the
native grid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from inferplan.limits import MAX_CONFIG_LAYERS
from inferplan.specs.config_fields import ConfigFields


@dataclass(frozen=True)
class VisionSpec:
    """A ViT-style vision tower (SigLIP) and its projector, for multimodal configs."""

    hidden_size: int
    intermediate_size: int
    num_layers: int
    patch_size: int
    image_size: int
    tokens_per_image: int


def parse_vision(top: ConfigFields) -> VisionSpec | None:
    vision = top.get_dict("vision_config")
    if vision is None:
        return None
    f = ConfigFields(vision, f"{top.source} (vision_config)")
    patch = f.get_int("patch_size")
    if f.has("image_size"):
        image = f.get_int("image_size")
        tokens = top.get_int("mm_tokens_per_image", 256)
    else:
        # Qwen-VL towers take any resolution; their position table fixes the native grid
        # (num_position_embeddings patches), and spatial_merge_size^2 patches make one token.
        grid = math.isqrt(f.get_int("num_position_embeddings"))
        image = grid * patch
        tokens = (grid // f.get_int("spatial_merge_size", 1)) ** 2
    layers_key = "depth" if f.has("depth") else "num_hidden_layers"
    return VisionSpec(
        hidden_size=f.get_int("hidden_size"),
        intermediate_size=f.get_int("intermediate_size"),
        num_layers=f.get_int(layers_key, maximum=MAX_CONFIG_LAYERS),
        patch_size=patch,
        image_size=image,
        tokens_per_image=tokens,
    )
