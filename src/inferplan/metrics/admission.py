"""The ``admission`` section of a run's summary (``engine/admission.py``; ``docs/reasoning.md``).

Present only when a run used an admission policy, a length predictor or SPF aging, so a default
run's summary is unchanged. Keys:

- ``policy``, ``quantile``, ``headroom`` (fraction), ``headroom_blocks`` (per replica),
  ``headroom_peak_blocks`` (the most blocks running requests of one replica held beyond their
  reservations at once), ``on_exhaustion``, ``token_budget``, ``max_tokens``, ``spf_aging_s``.
- ``predictor``: its name and error model, and what its errors cost: ``point_over_true``
  (spread of point estimate / true length), ``under_reserved_fraction`` (requests whose
  quantile prediction was below their true output: they outgrow their reservation),
  ``over_reserved_tokens`` (sum of quantile - true where positive: reserved, never used) and
  ``under_reserved_tokens`` (sum of true - quantile where positive: drawn from the headroom).
- ``rejected``, ``truncated``, ``queued``: ``total`` and ``by_reason``. ``rejected`` counts
  every rejected request; those refused at arrival by the engine's own checks (longer than
  ``max_model_len``, a KV that can never fit) have reason ``at_arrival``. ``truncated`` also
  gives ``lost_output_tokens`` (requested - generated). ``queued`` counts requests the policy
  held back at least once although on-demand allocation would have admitted them.
- ``by_bucket``: per requested-output-length bucket (``metrics/buckets.py``): counts, and
  ``completion_rate`` (finished with their whole output), ``rejection_rate``,
  ``truncation_rate``, ``preemption_rate`` (preempted at least once) over the bucket's
  requests, and ``mean_preemptions`` / ``max_preemptions``: times the same request was
  preempted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from inferplan.metrics.buckets import assign_buckets, bucket_labels, check_bucket_edges
from inferplan.metrics.records import RequestRecords, RequestStatus
from inferplan.metrics.stats import json_number, ratio, spread

if TYPE_CHECKING:
    from inferplan.engine.admission import AdmissionLedger

_REASON_POLICIES = ("quantile", "token-budget")


def admission_summary(
    records: RequestRecords, ledger: AdmissionLedger, output_buckets: Sequence[int]
) -> dict[str, Any]:
    """The ``admission`` section (module doc)."""
    from inferplan.engine.admission import END_REASONS, QUEUE_REASONS

    cfg = ledger.cfg
    rejected = records.status == RequestStatus.REJECTED
    truncated = (records.status == RequestStatus.COMPLETED) & (ledger.end_reason > 0)
    queued = ledger.queued_reason > 0
    lost = records.requested_tokens[truncated] - records.output_tokens[truncated]
    reject_reasons = {"at_arrival": int(np.count_nonzero(rejected & (ledger.end_reason == 0)))}
    for code, name in enumerate(END_REASONS[1:], start=1):
        reject_reasons[name] = int(np.count_nonzero(rejected & (ledger.end_reason == code)))
    return {
        "policy": cfg.policy,
        "quantile": cfg.quantile if cfg.policy in _REASON_POLICIES else None,
        "headroom": json_number(cfg.headroom),
        "headroom_blocks": ledger.headroom_blocks,
        "headroom_peak_blocks": ledger.peak_headroom_blocks,
        "on_exhaustion": cfg.on_exhaustion if cfg.policy is not None else None,
        "token_budget": cfg.token_budget,
        "max_tokens": cfg.max_tokens,
        "spf_aging_s": cfg.spf_aging_s,
        "predictor": _predictor_keys(records, ledger),
        "rejected": {"total": int(rejected.sum()), "by_reason": reject_reasons},
        "truncated": {
            "total": int(truncated.sum()),
            "by_reason": _by_reason(truncated, ledger.end_reason, END_REASONS),
            "lost_output_tokens": int(lost.sum()),
        },
        "queued": {
            "total": int(queued.sum()),
            "by_reason": _by_reason(queued, ledger.queued_reason, QUEUE_REASONS),
        },
        "by_bucket": _by_bucket(records, truncated, queued, output_buckets),
    }


def _by_reason(mask: np.ndarray, codes: np.ndarray, names: Sequence[str]) -> dict[str, int]:
    return {
        name: int(np.count_nonzero(mask & (codes == code)))
        for code, name in enumerate(names)
        if code
    }


def _predictor_keys(records: RequestRecords, ledger: AdmissionLedger) -> dict[str, Any]:
    spec, pred = ledger.cfg.predictor, ledger.predictions
    true = records.requested_tokens
    has_rows = len(true) > 0
    gap = pred.quantile_tokens - true
    return {
        "name": spec.name,
        "sigma": json_number(spec.sigma) if spec.name == "noisy" else None,
        "bias": json_number(spec.bias) if spec.name == "noisy" else None,
        "point_over_true": spread(pred.point_tokens / np.maximum(true, 1)) if has_rows else None,
        "under_reserved_fraction": ratio(int(np.count_nonzero(gap < 0)), len(true)),
        "over_reserved_tokens": int(np.maximum(gap, 0).sum()),
        "under_reserved_tokens": int(np.maximum(-gap, 0).sum()),
    }


def _by_bucket(
    records: RequestRecords,
    truncated: np.ndarray,
    queued: np.ndarray,
    output_buckets: Sequence[int],
) -> dict[str, dict[str, Any]]:
    edges = check_bucket_edges(output_buckets)
    index = assign_buckets(records.requested_tokens, edges)
    completed = (records.status == RequestStatus.COMPLETED) & ~truncated
    rejected = records.status == RequestStatus.REJECTED
    preemptions = records.num_preemptions
    rows: dict[str, dict[str, Any]] = {}
    for k, label in enumerate(bucket_labels(edges)):
        mask = index == k
        n = int(mask.sum())
        counts = preemptions[mask]
        rows[label] = {
            "num_requests": n,
            "completed": int(np.count_nonzero(mask & completed)),
            "rejected": int(np.count_nonzero(mask & rejected)),
            "truncated": int(np.count_nonzero(mask & truncated)),
            "queued": int(np.count_nonzero(mask & queued)),
            "preempted": int(np.count_nonzero(counts)),
            "completion_rate": ratio(int(np.count_nonzero(mask & completed)), n),
            "rejection_rate": ratio(int(np.count_nonzero(mask & rejected)), n),
            "truncation_rate": ratio(int(np.count_nonzero(mask & truncated)), n),
            "preemption_rate": ratio(int(np.count_nonzero(counts)), n),
            "mean_preemptions": json_number(float(counts.mean())) if n else None,
            "max_preemptions": int(counts.max()) if n else None,
        }
    return rows
