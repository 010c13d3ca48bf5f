"""The workload's named random streams (``workload/streams.py``)."""

import numpy as np
import pytest

from inferplan.workload.streams import STREAM_KEYS, stream


def test_every_purpose_has_its_own_stream() -> None:
    assert len(set(STREAM_KEYS.values())) == len(STREAM_KEYS)
    draws = {name: stream(7, name).integers(0, 2**62, 4).tolist() for name in STREAM_KEYS}
    assert len({tuple(d) for d in draws.values()}) == len(STREAM_KEYS)


def test_arrivals_keep_the_first_spawned_child() -> None:
    """Arrival times (and every committed number built on them) stay what they were when the
    arrival stream was ``SeedSequence(seed).spawn(1)[0]``."""
    old = np.random.default_rng(np.random.SeedSequence(3).spawn(1)[0]).random(5)
    assert np.array_equal(stream(3, "arrivals").random(5), old)


def test_unknown_purpose_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        stream(0, "lengths")
