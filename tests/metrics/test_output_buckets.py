"""Output-length buckets: labels from edges, assignment at the edges."""

import numpy as np
import pytest

from inferplan.errors import InferplanError
from inferplan.metrics.buckets import (
    assign_buckets,
    bucket_labels,
    check_bucket_edges,
    tokens_label,
)


def test_labels_from_edges() -> None:
    assert bucket_labels((256, 1024, 4096, 16384)) == ("<=256", "<=1k", "<=4k", "<=16k", ">16k")
    assert bucket_labels((100, 3000, 1 << 20)) == ("<=100", "<=3000", "<=1M", ">1M")
    assert bucket_labels(()) == ("all",)
    assert tokens_label(1536) == "1536"


def test_assignment_at_edges() -> None:
    edges = (256, 1024, 4096, 16384)
    requested = np.asarray([1, 256, 257, 1024, 1025, 4096, 4097, 16384, 16385, 10**6])
    assert assign_buckets(requested, edges).tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert assign_buckets(requested, ()).tolist() == [0] * len(requested)


@pytest.mark.parametrize("edges", [(256, 256), (0,), (-5, 10), (1024, 512), (2.5,)])
def test_bad_edges(edges: tuple) -> None:
    with pytest.raises(InferplanError):
        check_bucket_edges(edges)


def test_whole_float_edges_are_accepted() -> None:
    assert check_bucket_edges((256.0, 1024)) == (256, 1024)
