"""SGLang's ``lpm`` schedule policy (longest prefix match): the waiting queue's order.

SGLang 0.5.4 ``srt/managers/schedule_policy.py`` ``SchedulePolicy.calc_priority``: before each
prefill round the waiting queue is sorted by its radix-cache match, longest first (a stable
sort: ties keep the queue's order). Two rules keep it cheap and let one request fill the cache
for the others:

- above ``LPM_MAX_WAITING`` waiting requests the sort is skipped (``_determine_active_policy``
  falls back to ``fcfs``) and the queue keeps its last order, new arrivals at its tail;
- *in-batch prefix caching* (``_compute_prefix_matches``): a request whose match is at most
  ``IN_BATCH_CHECK_TOKENS`` is looked up in a scratch tree of the waiting requests before it;
  if it shares at least ``IN_BATCH_DEPRIORITIZE_TOKENS`` with one of them it goes last this
  round (a request ahead will cache the shared prefix), else its prefix joins the scratch tree.

Matches are whole hash entries here (``memory/radixcache.py``), so the 32-token thresholds are
two 16-token entries (one 512-token Mooncake entry). The sort's lookups do not count as
accesses of the tree (SGLang's ``match_prefix`` also stamps the matched nodes).
"""

from __future__ import annotations

import math

LPM_MAX_WAITING = 128  # schedule_policy.py: lpm sorts only up to 128 waiting requests
IN_BATCH_CHECK_TOKENS = 32  # IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD
IN_BATCH_DEPRIORITIZE_TOKENS = 32  # IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD


def lpm_order(
    ids: list[int], hits: list[int], chains: list[tuple[int, ...]], entry_tokens: int
) -> list[int]:
    """The waiting requests ``ids`` (queue order) sorted for a round: longest cache hit
    (``hits``, tokens) first, in-batch duplicates last; ``chains`` are each request's
    matchable prefix entries."""
    seen: set[int] = set()  # the scratch tree: entry ids of the requests kept in front
    keys: list[float] = []
    for hit, chain in zip(hits, chains, strict=True):
        key = float(-hit)
        if hit <= IN_BATCH_CHECK_TOKENS:
            shared = 0
            for h in chain:
                if h not in seen:
                    break
                shared += 1
            if shared * entry_tokens >= IN_BATCH_DEPRIORITIZE_TOKENS:
                key = math.inf
            else:
                seen.update(chain)
        keys.append(key)
    order = sorted(range(len(ids)), key=keys.__getitem__)
    return [ids[i] for i in order]
