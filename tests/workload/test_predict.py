"""Output-length predictors (``workload/predict.py``): each one's error model by hand."""

from __future__ import annotations

import numpy as np
import pytest

from inferplan.errors import InferplanError
from inferplan.limits import MAX_TOKENS
from inferplan.workload.predict import PredictorSpec, predict_output_tokens

TRUE = np.array([100, 200, 300, 400, 5000, 6000, 7000, 8000], dtype=np.int64)
CLASSES = np.array([0, 0, 0, 0, 1, 1, 1, 1], dtype=np.int64)


def test_oracle_is_the_true_length_at_every_quantile() -> None:
    pred = predict_output_tokens(PredictorSpec("oracle"), TRUE, CLASSES, 0.9)
    np.testing.assert_array_equal(pred.point_tokens, TRUE)
    np.testing.assert_array_equal(pred.quantile_tokens, TRUE)


def test_class_predictor_uses_each_class_distribution() -> None:
    pred = predict_output_tokens(PredictorSpec("class"), TRUE, CLASSES, 0.75)
    # "higher" quantiles of [100, 200, 300, 400]: median 300, 0.75 -> 400.
    np.testing.assert_array_equal(pred.point_tokens, [300] * 4 + [7000] * 4)
    np.testing.assert_array_equal(pred.quantile_tokens, [400] * 4 + [8000] * 4)


def test_noisy_without_spread_is_the_bias() -> None:
    pred = predict_output_tokens(PredictorSpec("noisy", sigma=0.0, bias=0.5), TRUE, CLASSES, 0.9)
    np.testing.assert_array_equal(pred.point_tokens, np.ceil(TRUE * 0.5))
    np.testing.assert_array_equal(pred.quantile_tokens, pred.point_tokens)


def test_unbiased_noisy_quantile_covers_its_share() -> None:
    """With bias 1 the true length exceeds the q-quantile with probability 1 - q."""
    true = np.full(20000, 1000, dtype=np.int64)
    classes = np.zeros(len(true), dtype=np.int64)
    pred = predict_output_tokens(PredictorSpec("noisy", sigma=0.5, seed=3), true, classes, 0.9)
    assert np.mean(true > pred.quantile_tokens) == pytest.approx(0.1, abs=0.01)
    assert np.median(pred.point_tokens / true) == pytest.approx(1.0, abs=0.02)
    again = predict_output_tokens(PredictorSpec("noisy", sigma=0.5, seed=3), true, classes, 0.9)
    np.testing.assert_array_equal(pred.quantile_tokens, again.quantile_tokens)  # seeded
    biased = predict_output_tokens(
        PredictorSpec("noisy", sigma=0.5, bias=0.5, seed=3), true, classes, 0.9
    )
    assert np.mean(true > biased.quantile_tokens) > 0.4  # under-prediction outgrows more


@pytest.mark.parametrize(
    ("spec", "quantile", "flag"),
    [
        (PredictorSpec("psychic"), 0.5, "--length-predictor"),
        (PredictorSpec("noisy", sigma=-1.0), 0.5, "--predictor-sigma"),
        (PredictorSpec("noisy", bias=0.0), 0.5, "--predictor-bias"),
        (PredictorSpec("oracle"), 1.0, "--admission-quantile"),
    ],
)
def test_bad_predictor_settings_name_the_flag(
    spec: PredictorSpec, quantile: float, flag: str
) -> None:
    with pytest.raises(InferplanError, match=flag):
        predict_output_tokens(spec, TRUE, CLASSES, quantile)


def test_wide_noisy_predictions_stay_whole_positive_and_bounded() -> None:
    """Draws of e^(sigma z) far above int64 were cast to negative lengths (SPF served them
    first); they are clipped to [1, MAX_TOKENS] before the cast."""
    true = np.full(2_000, 50_000, dtype=np.int64)
    classes = np.zeros(2_000, dtype=np.int64)
    spec = PredictorSpec("noisy", sigma=10.0, bias=1e6, seed=1)
    with np.errstate(all="raise"):
        pred = predict_output_tokens(spec, true, classes, 0.99)
    for column in (pred.point_tokens, pred.quantile_tokens):
        assert column.min() >= 1 and column.max() == MAX_TOKENS
