"""Output-length predictors with an explicit error model, for admission control and SPF.

A predictor turns a workload into two numbers per request, both in output tokens: a *point*
estimate (what shortest-predicted-first sorts by) and a *quantile* ``q`` of the predictor's
belief about the true length (what a quantile reservation reserves). Three predictors:

- ``oracle``: the true output length, for every quantile (the upper bound any predictor can
  reach; what ``--scheduling-policy spf`` used before predictors existed).
- ``class``: the empirical distribution of output lengths of the request's workload class;
  point = the class median, quantile ``q`` = the class's ``q``-quantile. The distribution is
  the workload's own (in-sample: as if the history the predictor was fitted on were this
  trace), so it is the best a predictor that only knows the class can do.
- ``noisy``: the oracle times a lognormal multiplicative error,
  ``estimate = true x bias x exp(sigma x Z)``, ``Z ~ N(0, 1)`` drawn from a seeded numpy
  Generator. ``bias`` is a systematic error the scheduler does not know (1.0: unbiased; 0.5:
  predicts half the true length); ``sigma`` is the spread the scheduler does know, so its
  ``q``-quantile is ``estimate x exp(sigma x z_q)``. With ``bias = 1`` a request's true length
  exceeds its ``q``-quantile with probability ``1 - q``. This is the error model of learned
  length predictors that regress log length (e.g. S3, Jin et al., arXiv 2306.06000; "Efficient
  LLM Scheduling by Learning to Rank", Fu et al., arXiv 2408.15792, which reports that exact
  lengths are hard to predict while their order is easier).

Every prediction is rounded up to whole tokens and is at least 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

from inferplan.errors import InferplanError
from inferplan.limits import MAX_TOKENS
from inferplan.workload.streams import stream

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class PredictorSpec:
    """Which predictor, and the noisy one's error model (``sigma`` of log error, ``bias``)."""

    name: str = "oracle"
    sigma: float = 0.5
    bias: float = 1.0
    seed: int = 0


@dataclass(frozen=True)
class Predictions:
    """Per-request output-length predictions (tokens): point and ``quantile``-quantile."""

    point_tokens: IntArray
    quantile_tokens: IntArray
    quantile: float


def _whole(tokens: FloatArray) -> IntArray:
    """Whole tokens, at least 1 and at most ``MAX_TOKENS``: a wide noisy predictor's draws can
    exceed int64 (or be inf), and no request is longer than the sanity bound anyway."""
    return np.clip(np.ceil(tokens), 1, MAX_TOKENS).astype(np.int64)


def _oracle(
    spec: PredictorSpec, output_tokens: IntArray, class_ids: IntArray, quantile: float
) -> tuple[FloatArray, FloatArray]:
    true = output_tokens.astype(np.float64)
    return true, true


def _class(
    spec: PredictorSpec, output_tokens: IntArray, class_ids: IntArray, quantile: float
) -> tuple[FloatArray, FloatArray]:
    point = np.zeros(len(output_tokens))
    upper = np.zeros(len(output_tokens))
    for cls in np.unique(class_ids):
        mask = class_ids == cls
        lengths = output_tokens[mask]
        point[mask] = np.quantile(lengths, 0.5, method="higher")
        upper[mask] = np.quantile(lengths, quantile, method="higher")
    return point, upper


def _noisy(
    spec: PredictorSpec, output_tokens: IntArray, class_ids: IntArray, quantile: float
) -> tuple[FloatArray, FloatArray]:
    # A stream of its own, spawned from the seed: the workload's streams are untouched.
    rng = stream(spec.seed, "predictor")
    error = spec.bias * np.exp(spec.sigma * rng.standard_normal(len(output_tokens)))
    estimate = output_tokens * error
    return estimate, estimate * math.exp(spec.sigma * NormalDist().inv_cdf(quantile))


PREDICTORS: dict[
    str, Callable[[PredictorSpec, IntArray, IntArray, float], tuple[FloatArray, FloatArray]]
] = {
    "oracle": _oracle,
    "class": _class,
    "noisy": _noisy,
}


def predict_output_tokens(
    spec: PredictorSpec, output_tokens: IntArray, class_ids: IntArray, quantile: float
) -> Predictions:
    """Point and ``quantile`` predictions of every request's output length (module doc)."""
    predictor = PREDICTORS.get(spec.name)
    if predictor is None:
        raise InferplanError(f"--length-predictor: valid: {', '.join(PREDICTORS)}")
    if not 0.0 < quantile < 1.0:
        raise InferplanError(f"--admission-quantile: must be in (0, 1), got {quantile}")
    if not (spec.sigma >= 0.0 and math.isfinite(spec.sigma)):
        raise InferplanError(f"--predictor-sigma: must be >= 0, got {spec.sigma}")
    if not (spec.bias > 0.0 and math.isfinite(spec.bias)):
        raise InferplanError(f"--predictor-bias: must be > 0, got {spec.bias}")
    if len(output_tokens) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return Predictions(empty, empty.copy(), quantile)
    point, upper = predictor(spec, np.asarray(output_tokens), np.asarray(class_ids), quantile)
    return Predictions(_whole(point), _whole(upper), quantile)
