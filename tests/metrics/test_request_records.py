"""RequestRecords: column checks, the engine's blank allocation, contract checks."""

from collections.abc import Callable

import numpy as np
import pytest

from inferplan.metrics.records import RequestRecords, RequestStatus


def test_blank_records_are_aborted_with_nan_times() -> None:
    records = RequestRecords.empty(3, class_names=("a", "b"))
    assert records.num_requests == 3
    assert np.all(records.status == RequestStatus.ABORTED)
    assert np.all(np.isnan(records.first_token_s))
    assert records.requested_tokens.tolist() == [0, 0, 0]
    records.check()  # a never-finished request is a valid aborted one


def test_column_length_mismatch_is_rejected(make_records: Callable[..., RequestRecords]) -> None:
    with pytest.raises(ValueError, match="input_tokens"):
        make_records(input_tokens=[1, 2, 3])


def test_requested_tokens_fall_back_to_generated(
    make_records: Callable[..., RequestRecords],
) -> None:
    records = make_records()
    assert records.requested_tokens.tolist() == [11, 300, 1, 2000, 20000]
    bare = RequestRecords(**{**records.__dict__, "requested_output_tokens": None})
    assert bare.requested_tokens.tolist() == [11, 21, 1, 0, 5]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"status": [0, 0, 0, 1, 7]}, "status"),
        ({"class_ids": [0, 1, 0, 2, 0]}, "class id"),
        ({"first_token_s": [0.5, float("nan"), 3.0, float("nan"), 3.5]}, "first_token_s"),
        ({"output_tokens": [11, 21, 0, 0, 5]}, "no tokens"),
        ({"finish_s": [0.4, 5.3, 3.0, float("nan"), float("nan")]}, "end before"),
    ],
)
def test_check_finds_engine_bugs(
    make_records: Callable[..., RequestRecords], override: dict[str, list[float]], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        make_records(**override).check()
