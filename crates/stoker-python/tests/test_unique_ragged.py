"""``unique``, ``ragged_batch`` and the dtypes Python values become, against tf.data."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import stoker as sk


def _plain(x: Any) -> Any:
    if isinstance(x, tuple):
        return tuple(_plain(v) for v in x)
    a = np.asarray(x)
    return (a.dtype.name if a.dtype.kind != "O" else "object", a.tolist())


@pytest.mark.parametrize(
    "data", [[1, 2, 1, 3, 2, 5, 3], np.array([7, 7, 2**40, 7, 2**40]), [b"a", b"b", b"a", b"c", b"b"]]
)
def test_unique_equals_tf_data(data: Any) -> None:
    tf = pytest.importorskip("tensorflow")
    ours = [_plain(x) for x in sk.data.Dataset.from_tensor_slices(data).unique()]
    theirs = [_plain(x) for x in tf.data.Dataset.from_tensor_slices(data).unique().as_numpy_iterator()]
    assert ours == theirs


def test_unique_resumes_with_what_it_had_seen() -> None:
    ds = sk.Dataset.from_tensor_slices(np.array([3, 1, 3, 2, 1, 4, 2, 5])).unique()
    it = iter(ds)
    head = [int(next(it)) for _ in range(2)]
    state = it.state()
    rest = [int(x) for x in it]
    assert head + rest == [3, 1, 2, 4, 5]
    assert [int(x) for x in ds.iterator(state=state)] == rest  # 3 and 1 are still known


def test_unique_refuses_what_tf_refuses() -> None:
    with pytest.raises(sk.InvalidArgumentError, match="unique: the elements must be scalars"):
        sk.Dataset.from_tensor_slices(np.zeros((4, 2), np.int64)).unique()
    with pytest.raises(sk.InvalidArgumentError, match="unique"):
        sk.Dataset.from_tensor_slices(np.zeros(4, np.float32)).unique()


def test_ragged_batch_is_padded_values_and_row_lengths_of_tf_s_ragged_batch() -> None:
    tf = pytest.importorskip("tensorflow")
    ours = list(sk.Dataset.range(1, 8).map(lambda x: (np.arange(x) * 2, np.int64(x))).ragged_batch(3))
    theirs = list(tf.data.Dataset.range(1, 8).map(lambda x: (tf.range(x) * 2, x)).ragged_batch(3))
    assert len(ours) == len(theirs) == 3
    for ((values, lengths), (scalars, _)), (ragged, plain) in zip(ours, theirs):
        again = tf.RaggedTensor.from_tensor(values, lengths=lengths)
        assert again.to_list() == ragged.to_list()
        assert lengths.dtype == np.int64 and scalars.tolist() == plain.numpy().tolist()
    (_, lengths), _ = next(
        iter(sk.Dataset.range(1, 3).map(lambda x: (np.arange(x), x)).ragged_batch(2, row_splits_dtype="int32"))
    )
    assert lengths.dtype == np.int32
    with pytest.raises(sk.InvalidArgumentError, match="row_splits_dtype"):
        sk.Dataset.range(3).ragged_batch(2, row_splits_dtype="float32")
