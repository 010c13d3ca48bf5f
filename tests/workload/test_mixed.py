"""``--dataset-name mixed``: chat and reasoning classes in one stream."""

from __future__ import annotations

import numpy as np
import pytest

from inferplan.errors import InferplanError
from inferplan.workload.dataset import build_workload
from inferplan.workload.mixed import CHAT_INPUT_MEAN_TOKENS, CHAT_OUTPUT_MEAN_TOKENS


def test_classes_shares_and_lengths() -> None:
    wl = build_workload("mixed", num_prompts=20_000, reasoning_share=0.3, seed=1)
    assert wl.class_names == ("chat", "reasoning")
    is_reasoning = wl.class_ids == 1
    assert is_reasoning.mean() == pytest.approx(0.3, abs=0.01)
    chat_in, chat_out = wl.input_tokens[~is_reasoning], wl.output_tokens[~is_reasoning]
    assert chat_in.mean() == pytest.approx(CHAT_INPUT_MEAN_TOKENS, rel=0.03)
    assert np.median(chat_in) == pytest.approx(1020, rel=0.03)  # Azure conv median
    assert chat_out.mean() == pytest.approx(CHAT_OUTPUT_MEAN_TOKENS, rel=0.05)
    assert np.median(chat_out) == pytest.approx(129, rel=0.05)
    r_in, r_out = wl.input_tokens[is_reasoning], wl.output_tokens[is_reasoning]
    assert r_in.min() >= 50 and r_in.max() <= 150
    assert (r_out > 5000).mean() == pytest.approx(0.45, abs=0.03)


def test_default_share_determinism_and_edges() -> None:
    one = build_workload("mixed", num_prompts=500, request_rate=5.0, seed=3)
    two = build_workload("mixed", num_prompts=500, request_rate=5.0, seed=3)
    for name in ("arrival_s", "input_tokens", "output_tokens", "class_ids"):
        np.testing.assert_array_equal(getattr(one, name), getattr(two, name))
    assert 0.2 < (one.class_ids == 1).mean() < 0.4  # default share 0.3
    assert not np.any(build_workload("mixed", num_prompts=50, reasoning_share=0.0).class_ids)
    assert np.all(build_workload("mixed", num_prompts=50, reasoning_share=1.0).class_ids == 1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"reasoning_share": 1.5}, "--reasoning-share: must be in"),
        ({"random_input_len": 100}, "--random-input-len does not apply"),
        ({"dataset_path": "x.csv"}, "--dataset-path does not apply"),
    ],
)
def test_bad_options(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InferplanError, match=message):
        build_workload("mixed", num_prompts=10, **kwargs)  # type: ignore[arg-type]
