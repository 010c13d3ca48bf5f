"""Prompt-block hashes for workloads that share prefixes: synthetic system prompts and sessions.

The prefix cache (``memory/prefixcache.py``) reuses KV where two prompts' block hashes are
equal; a hash stands for the block *and everything before it* (vLLM v1 chains each block's hash
to its parent's), so equal ids mean equal prefixes. This module gives workloads such hashes, in
blocks of ``HASH_BLOCK_TOKENS`` tokens (vLLM's default KV block on CUDA; the engine regroups
them into its own block size, ``prefixcache.regroup_hashes``):

- ``with_shared_prefix``: ``vllm bench serve --random-prefix-len N`` (vLLM 0.11
  ``benchmarks/datasets.py`` ``RandomDataset.sample``): one prefix of N random tokens is drawn
  once and prepended to every prompt, so each prompt is N + its drawn input length tokens
  (``total_input_len = prefix_len + input_lens[i]``). ``num_groups`` K > 1 (not a vLLM flag)
  draws K distinct prefixes of N tokens and assigns each request one uniformly at random from a
  stream spawned from the seed (``streams.py``), so lengths and arrivals
  do not change with K. The prefix's full blocks are shared within a group; every later full
  block of a prompt (the one that straddles the prefix's end included) is unique to its request.
- ``session_hashes``: multi-turn conversations. A turn's prompt is the previous turn's prompt +
  its output + the new message, so the first ``prev_input + prev_output`` tokens are the previous
  turn's context: its full blocks keep the previous turn's ids. A turn whose prompt is shorter
  than that context (history cut or rewritten) shares nothing and starts the session afresh,
  since which tokens were dropped is unknown. Turns are taken in arrival order. A turn's hashes
  go on past its prompt over the full blocks of its output (``Workload.
  prefix_hashes_cover_output``): vLLM v1 hashes and caches generated blocks too, so the next turn
  hits the previous turn's prompt *and* output.

Every full prompt block carries an id (unique blocks too), so the cache's LRU list holds them as
vLLM's does; memory is one Python int per 16 prompt tokens (prompt + output tokens in sessions).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from inferplan.errors import InferplanError
from inferplan.workload.request import IntArray, Workload
from inferplan.workload.streams import stream

HASH_BLOCK_TOKENS = 16  # vLLM's default KV block size on CUDA (engines.md 1.2)
# Hash ids one workload may hold (one Python int each, ~40 bytes in a tuple: ~0.4 GB).
MAX_HASHED_BLOCKS = 10_000_000


def prefix_groups(num_requests: int, num_groups: int, seed: int) -> IntArray:
    """Each request's prefix group, uniform over ``num_groups`` from the seed's prefix stream."""
    if num_groups == 1:
        return np.zeros(num_requests, dtype=np.int64)
    rng = stream(seed, "prefixes")
    return rng.integers(0, num_groups, size=num_requests).astype(np.int64)


def with_shared_prefix(
    workload: Workload, prefix_tokens: int, num_groups: int = 1, seed: int = 0
) -> Workload:
    """``workload`` with a shared prefix of ``prefix_tokens`` prepended to every prompt (one of
    ``num_groups`` prefixes per request) and its prompt-block hashes (module doc)."""
    if prefix_tokens < 0:
        raise InferplanError(f"--random-prefix-len must be >= 0, not {prefix_tokens}")
    if num_groups < 1:
        raise InferplanError(f"--prefix-groups must be >= 1, not {num_groups}")
    if workload.prefix_hashes is not None:
        raise InferplanError(
            f"--random-prefix-len: {workload.source} already carries prefix hashes"
        )
    if prefix_tokens == 0:
        if num_groups > 1:
            raise InferplanError("--prefix-groups needs --random-prefix-len > 0")
        return workload
    block = HASH_BLOCK_TOKENS
    total_blocks = int((workload.input_tokens + prefix_tokens).sum()) // block
    _check_size(total_blocks, f"--random-prefix-len {prefix_tokens}")
    groups = prefix_groups(workload.num_requests, num_groups, seed)
    input_tokens = workload.input_tokens + prefix_tokens
    shared_blocks = prefix_tokens // block
    next_id = num_groups * shared_blocks  # ids below are the groups' shared blocks
    hashes: list[tuple[int, ...]] = []
    for group, tokens in zip(groups.tolist(), input_tokens.tolist(), strict=True):
        shared = range(group * shared_blocks, (group + 1) * shared_blocks)
        unique = int(tokens) // block - shared_blocks
        hashes.append((*shared, *range(next_id, next_id + unique)))
        next_id += unique
    note = f"shared prefix of {prefix_tokens} tokens ({num_groups} distinct) on every prompt"
    return replace(
        workload,
        input_tokens=input_tokens,
        prefix_hashes=tuple(hashes),
        prefix_block_tokens=block,
        notes=(*workload.notes, note),
    )


def session_hashes(
    session_ids: list[str | None], input_tokens: IntArray, output_tokens: IntArray
) -> tuple[tuple[int, ...], ...]:
    """Block hashes (``HASH_BLOCK_TOKENS`` tokens) of each request's prompt + output, in
    arrival order, where requests of one session are its turns (module doc); ``None`` is a
    request of its own. The ids past the prompt name the blocks its output fills, which the
    engine caches as vLLM does and the session's next turn reuses."""
    block = HASH_BLOCK_TOKENS
    _check_size(int((input_tokens + output_tokens).sum()) // block, "session_id")
    chains: dict[str, tuple[int, ...]] = {}  # session -> ids of its last turn's prompt + output
    context_tokens: dict[str, int] = {}  # session -> last turn's prompt + output tokens
    next_id = 0
    hashes: list[tuple[int, ...]] = []
    for session, prompt, output in zip(
        session_ids, input_tokens.tolist(), output_tokens.tolist(), strict=True
    ):
        kept: tuple[int, ...] = ()
        if session is not None and prompt >= context_tokens.get(session, 0):
            kept = chains.get(session, ())
        num_blocks = (prompt + output) // block
        fresh = num_blocks - len(kept)  # >= 0: the prompt holds the kept context
        ids = kept + tuple(range(next_id, next_id + fresh))
        next_id += fresh
        hashes.append(ids)
        if session is not None:
            chains[session] = ids
            context_tokens[session] = prompt + output
    return tuple(hashes)


def _check_size(num_blocks: int, what: str) -> None:
    if num_blocks > MAX_HASHED_BLOCKS:
        raise InferplanError(
            f"{what}: the prompts hold {num_blocks} blocks of {HASH_BLOCK_TOKENS} tokens to "
            f"hash, more than {MAX_HASHED_BLOCKS} (MAX_HASHED_BLOCKS); use fewer or shorter "
            "prompts"
        )


def with_own_blocks(workload: Workload, *, hashed: bool = False) -> Workload:
    """``workload`` with every request's own blocks over its prompt and output, shared with no
    other request, where it has no hashes: distinct prompts (``vllm bench serve``'s random and
    ShareGPT prompts) under vLLM v1's prefix caching. vLLM hashes and caches every full block it
    computes, prompt and output, and keeps the hashes of a preempted request's freed blocks
    until they are evicted, so the request hits its own KV when it is admitted again instead of
    recomputing it (``v1/core/kv_cache_manager.py`` ``get_computed_blocks``, ``block_pool.py``
    ``free_blocks``; notes in ``memory/prefixcache.py``). The blocks are marked, not hashed
    (``Workload.own_blocks``: the engine counts them, ``memory/ownblocks.py``); ``hashed`` gives
    them ids instead (``own_block_hashes``; pools whose cache needs ids). Too many blocks
    (``MAX_HASHED_BLOCKS``, the bound of the hashed form, kept for both so that results do not
    depend on the form): the workload is returned as it is."""
    if workload.prefix_hashes is not None or workload.own_blocks:
        return workload
    total = int((workload.input_tokens + workload.output_tokens).sum()) // HASH_BLOCK_TOKENS
    if total > MAX_HASHED_BLOCKS:
        return workload
    if not hashed:
        return replace(
            workload,
            prefix_block_tokens=HASH_BLOCK_TOKENS,
            prefix_hashes_cover_output=True,
            own_blocks=True,
        )
    return replace(
        workload,
        prefix_hashes=own_block_hashes(workload),
        prefix_block_tokens=HASH_BLOCK_TOKENS,
        prefix_hashes_cover_output=True,
    )


def own_block_hashes(workload: Workload) -> tuple[tuple[int, ...], ...]:
    """Ids of each request's ``HASH_BLOCK_TOKENS``-token blocks over its prompt and output,
    every id its own (``with_own_blocks``' blocks, one id each)."""
    none: list[str | None] = [None] * workload.num_requests
    return session_hashes(none, workload.input_tokens, workload.output_tokens)
