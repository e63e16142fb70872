"""`color_index` and `one_hot`: the class-index label W2 stores offline and the one-hot made
online (tf.one_hot's output in tests/golden/one_hot_expected.json, made by
make_one_hot_golden.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import stoker as sk
from stoker import ops


def test_one_hot_equals_tensorflow(golden):
    want = json.loads((golden / "one_hot_expected.json").read_text())
    for key, dtype, depth in [("indices", np.int64, want["depth"]), ("uint8_indices", np.uint8, want["uint8_depth"])]:
        x = np.array(want[key], dtype=dtype)
        got = next(iter(sk.Dataset.from_tensors({"c": x}).map(ops.one_hot("c", depth))))["c"]
        expected = want["one_hot" if key == "indices" else "uint8_one_hot"]
        assert got.dtype == np.float32 and np.array_equal(got, np.array(expected, dtype=np.float32)), key


def test_color_index_then_one_hot_is_one_hot_colors(tmp_path):
    images, labels, class_dict = sk.datasets.write_segmentation_pairs(
        str(tmp_path), n=3, height=40, width=56, num_classes=6, seed=9)
    colors = ops.read_class_colors(class_dict)
    ds = sk.Dataset.from_tensor_slices({"label": np.array(labels, dtype=object)}).map(
        [ops.read_file("label"), ops.decode_image("label", channels=3)])
    index = ds.map(ops.color_index("label", colors))
    assert index.element_spec["label"].dtype == "uint8" and index.element_spec["label"].shape == (None, None)
    two_step = index.map(ops.one_hot("label", len(colors[1]))).batch(3)
    direct = ds.map(ops.one_hot_colors("label", colors)).batch(3)
    a, b = next(iter(two_step))["label"], next(iter(direct))["label"]
    assert a.shape == (3, 40, 56, 6) and np.array_equal(a, b)
    # The classes themselves, against a NumPy lookup.
    rgb = next(iter(ds))["label"]
    table = {tuple(c): i for i, c in enumerate(colors[1])}
    want = np.array([[table[tuple(p)] for p in row] for row in rgb], dtype=np.uint8)
    assert np.array_equal(next(iter(index))["label"], want)


def test_color_index_errors_and_wide_tables(tmp_path):
    px = np.array([[[1, 2, 3], [9, 9, 9]]], dtype=np.uint8)
    ds = sk.Dataset.from_tensors({"m": px})
    with pytest.raises(sk.InvalidArgumentError, match=r"color_index.*pixel 1 has colour \[9, 9, 9\]"):
        next(iter(ds.map(ops.color_index("m", [[1, 2, 3]]))))
    got = next(iter(ds.map(ops.color_index("m", [[1, 2, 3]], fallback=0))))["m"]
    assert got.tolist() == [[0, 0]]
    wide = [[i // 256, i % 256, 7] for i in range(300)] + [[1, 2, 3]]
    got = next(iter(ds.map(ops.color_index("m", wide, fallback=5))))["m"]
    assert got.dtype == np.int32 and got.tolist() == [[300, 5]]
    with pytest.raises(sk.InvalidArgumentError, match="depth"):
        ops.one_hot("m", 0)
