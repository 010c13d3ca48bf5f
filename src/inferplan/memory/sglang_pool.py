"""SGLang's KV pool for models with sliding-window layers: one full-length pool for every layer.

SGLang 0.5.3 and 0.5.4 (read in the PyPI wheels: ``srt/server_args.py``
``_handle_model_specific_adjustments``, ``srt/model_executor/model_runner.py``,
``srt/configs/model_config.py``) build their hybrid SWA pool (``SWAKVPool``: windowed layers in
a smaller pool of their own) only for a model whose class reports a window
(``get_attention_sliding_window_size``) and whose ``disable_hybrid_swa_memory`` is clear. The
classes that report one are gpt-oss's and Gemma-2/3/3n's (and Olmo-2's in 0.5.4), and the server
sets the flag for every one of them ("not yet supported"; gpt-oss with its triton_kernels MXFP4
MoE); Llama-4's chunked attention gets a hybrid pool only with ``--hybrid-kvcache-ratio``, off
by default. So by default every model keeps one token-to-KV index for all layers: each token of
a sequence holds its KV in every layer, windowed or not, for as long as the sequence runs; the
pool holds ``kv_bytes / full bytes per token`` tokens and a windowed layer frees nothing.

gpt-oss's and Gemma's attention kernels still apply the window (FA3 on Hopper, Triton on Ampere,
both with gpt-oss's sinks), so only the pool changes and the step-time model keeps the windows.
Not modelled: models whose SGLang class reads no window at all (Mistral-7B-v0.1's 4,096) run
full attention there too, not only a full pool.

``--engine trtllm`` runs the same pool (``engine/session.py``): TensorRT-LLM's KV manager sizes
every layer at ``max_seq_len`` unless ``kv_cache_config.max_attention_window`` lists the
windows (``plan/trtllm_serve.py``). A model with both windowed layers and a per-sequence
linear state would lose the state's group here; no bundled model has both.
"""

from __future__ import annotations

from inferplan.memory.blockpool import FULL_ATTENTION, PoolLayout
from inferplan.memory.plan import MemoryPlan
from inferplan.specs.kv import kv_values_per_token


def full_length_pool(plan: MemoryPlan) -> PoolLayout | None:
    """SGLang's (and TensorRT-LLM's) pool of ``plan``'s replica, windowed layers at full
    length (a one-group layout, a block holding ``block_size`` tokens of every layer), or None
    where the model has no windowed layer (its shared layout stands). As ``pool_layout``, the
    pool holds the stage's paged bytes (less its indexer keys); a per-sequence linear state has
    no place in it (SGLang keeps it in a pool of its own, which ``simulation_config`` refuses;
    a model with one keeps its shared layout there)."""
    if all(g.attention.window_tokens is None for g in plan.spec.layers):
        return None
    block_size, tp = plan.config.block_size, plan.parallelism.tp
    best: tuple[int, float] | None = None
    for stage in plan.stages:
        values = sum(kv_values_per_token(att, tp) * count for att, count in stage.layers)
        if not values:
            continue
        block_bytes = values * plan.kv_format.bytes_per_value * block_size
        blocks = int(max(stage.paged_kv_bytes, 0) // block_bytes)  # less any index keys
        if best is None or blocks < best[0]:
            best = (blocks, block_bytes)
    if best is None:
        return None
    blocks, block_bytes = best
    return PoolLayout(blocks * plan.parallelism.attention_dp, FULL_ATTENTION, block_bytes)
