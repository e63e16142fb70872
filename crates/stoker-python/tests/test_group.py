"""group_by_window and bucket_by_sequence_length against tf.data (tests/golden/group_expected.json,
made by make_group_golden.py, whose generator of sequences this test uses)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import stoker as sk

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "golden"))
from make_group_golden import sequences  # noqa: E402


class Spec:
    def __init__(self, shape: tuple, dtype: str) -> None:
        self.shape, self.dtype = shape, dtype


@pytest.fixture(scope="module")
def want(golden):
    return json.loads((golden / "group_expected.json").read_text())


def pairs(ds: sk.Dataset) -> list:
    return [[int(k), b.tolist()] for k, b in ds]


def test_group_by_window_equals_tf(want):
    values = sk.Dataset.from_tensor_slices(np.array(want["values"], dtype=np.int64))
    fixed = values.group_by_window(lambda x: x % 3, lambda k, w: w.batch(10).map(lambda b: (k, b)), window_size=2)
    assert pairs(fixed) == want["fixed"]
    by_key = values.group_by_window(lambda x: x % 4, lambda k, w: w.batch(10).map(lambda b: (k, b)),
                                    window_size_func=lambda k: k + 1)
    assert pairs(by_key) == want["window_size_func"]


def test_bucket_by_sequence_length_equals_tf(want):
    seqs = sk.Dataset.from_generator(sequences, output_signature=Spec((None,), "int64"))
    longest = seqs.bucket_by_sequence_length(lambda s: len(s), [4, 8, 12], [2, 2, 2, 1], padding_values=np.int64(-1))
    assert [b.tolist() for b in longest] == want["bucket_longest"]
    boundary = seqs.bucket_by_sequence_length(lambda s: len(s), [5, 10, 16], [3, 2, 2, 1], pad_to_bucket_boundary=True)
    assert [b.tolist() for b in boundary] == want["bucket_boundary"]


def test_group_by_window_resumes_and_checks(want):
    ds = sk.Dataset.range(30).shuffle(7, seed=5).group_by_window(
        lambda v: v % 4, lambda k, w: w.batch(3), window_size=3
    )
    full = [b.tolist() for b in ds.iterator(epoch=0)]
    it = ds.iterator(epoch=0)
    head = [next(it).tolist() for _ in range(4)]
    assert head + [b.tolist() for b in ds.iterator(state=it.state())] == full
    with pytest.raises(sk.InvalidArgumentError, match="window_size or window_size_func"):
        sk.Dataset.range(3).group_by_window(lambda v: v, lambda k, w: w)
    with pytest.raises(TypeError, match="integer scalar"):
        list(sk.Dataset.range(3).group_by_window(lambda v: 0.5, lambda k, w: w, window_size=1))
    with pytest.raises(TypeError, match="stoker.Dataset"):
        list(sk.Dataset.range(3).group_by_window(lambda v: v, lambda k, w: 3, window_size=1))
    with pytest.raises(sk.InvalidArgumentError, match="one more than the boundaries"):
        sk.Dataset.range(3).bucket_by_sequence_length(len, [2, 4], [1, 1])
    with pytest.raises(sk.InvalidArgumentError, match="shorter than max"):
        seqs = sk.Dataset.from_generator(sequences, output_signature=Spec((None,), "int64"))
        list(seqs.bucket_by_sequence_length(len, [5], [1, 1], pad_to_bucket_boundary=True))
