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


def _imbalanced() -> sk.Dataset:
    labels = (np.arange(4000) % 10 == 0).astype(np.int64)  # 90 % class 0
    return sk.Dataset.from_tensor_slices({"x": np.arange(4000), "label": labels})


@pytest.mark.parametrize("initial", [[0.9, 0.1], None])
def test_rejection_resample_follows_the_target_distribution(initial: Any) -> None:
    ds = _imbalanced().rejection_resample(lambda e: e["label"], [0.5, 0.5], initial_dist=initial, seed=4)
    out = list(ds)
    classes = np.array([int(c) for c, _ in out])
    assert 600 < len(out) < 1000  # the 400 of class 1 kept, about as many of class 0
    assert abs(classes.mean() - 0.5) < 0.06
    assert all(int(c) == int(e["label"]) for c, e in out)
    assert len({int(e["x"]) for _, e in out}) == len(out)  # each element at most once
    again = [int(e["x"]) for _, e in ds]
    assert again == [int(e["x"]) for _, e in out]  # a seed: the same draws each pass


def test_rejection_resample_has_tf_data_s_structure_and_resumes() -> None:
    tf = pytest.importorskip("tensorflow")
    source = tf.data.Dataset.from_tensor_slices(
        {"x": np.arange(4000), "label": (np.arange(4000) % 10 == 0).astype(np.int64)}
    )
    # the class in class_func's dtype: int64 as the label, a Python int's int32
    for mine, tfs in ((lambda e: e["label"], lambda e: e["label"]),
                      (lambda e: int(e["label"]), lambda e: tf.cast(e["label"], tf.int32))):  # fmt: skip
        ours = _imbalanced().rejection_resample(mine, [0.5, 0.5], seed=1)
        theirs = source.rejection_resample(tfs, [0.5, 0.5], seed=1)
        a, b = ours.element_spec, theirs.element_spec
        tf.nest.assert_same_structure(a, b)
        assert [s.dtype for s in tf.nest.flatten(a)] == [s.dtype.name for s in tf.nest.flatten(b)]
        assert next(iter(ours))[0].dtype == a[0].dtype
    it = iter(ours)
    for _ in range(50):
        next(it)
    state = it.state()
    rest = [int(e["x"]) for _, e in it]
    assert [int(e["x"]) for _, e in ours.iterator(state=state)] == rest


def test_rejection_resample_names_wrong_arguments() -> None:
    with pytest.raises(sk.InvalidArgumentError, match="target_dist must be probabilities"):
        _imbalanced().rejection_resample(lambda e: e["label"], [0.7, 0.7])
    with pytest.raises(sk.InvalidArgumentError, match="initial_dist has 3 classes"):
        _imbalanced().rejection_resample(lambda e: e["label"], [0.5, 0.5], initial_dist=[0.2, 0.3, 0.5])
    bad = _imbalanced().rejection_resample(lambda e: e["label"] + 5, [0.5, 0.5])
    with pytest.raises(sk.InvalidArgumentError, match="outside"):
        list(bad)
