"""DeepSeek sparse attention (DSA): the lightning indexer a DeepSeek-V3.2 MLA layer carries.

DeepSeek-V3.2 (``model_type`` ``deepseek_v32``; DeepSeek-AI, "DeepSeek-V3.2-Exp: Boosting
Long-Context Efficiency with DeepSeek Sparse Attention", 2025, section 2.1) keeps V3's MLA and
adds to every layer a lightning indexer: ``index_n_heads`` heads of ``index_head_dim`` (64 x
128 in its ``config.json``) that score each query against every earlier token in FP8, after
which the MLA core attends to the ``index_topk`` (2,048) best-scored tokens only, in MLA's
absorbed (MQA) form. The indexer caches one FP8 key of ``index_head_dim`` per token and layer
with one fp32 scale per 128 values (SGLang's ``NSATokenToKVPool`` index buffer; DeepSeek's
``inference/model.py`` ``Indexer``), beside the MLA latent. Its projections are replicated on
every tensor-parallel rank, not split (SGLang ``nsa_indexer.py`` ``ReplicatedLinear``).
"""

from __future__ import annotations

from dataclasses import dataclass

from inferplan.specs.config_fields import ConfigFields

# One fp32 scale per this many FP8 index-key values (DeepSeek's ``act_quant`` block size).
INDEX_SCALE_BLOCK = 128


@dataclass(frozen=True)
class IndexerSpec:
    """One layer's lightning indexer: its heads, their width, and the tokens kept per query."""

    topk: int
    num_heads: int
    head_dim: int

    @property
    def key_bytes_per_token(self) -> float:
        """Cached index-key bytes one token adds to one layer: FP8 values and a 4-byte scale
        per whole block of them, as SGLang (``NSATokenToKVPool``) and vLLM
        (``DeepseekV32IndexerCache``) lay the key out."""
        return float(self.head_dim + self.head_dim // INDEX_SCALE_BLOCK * 4)


def indexer_spec(f: ConfigFields) -> IndexerSpec | None:
    """The config's indexer (``index_topk``, ``index_n_heads``, ``index_head_dim``), or None
    for dense attention."""
    if not f.has("index_topk"):
        return None
    return IndexerSpec(
        topk=f.get_int("index_topk"),
        num_heads=f.get_int("index_n_heads"),
        head_dim=f.get_int("index_head_dim"),
    )
