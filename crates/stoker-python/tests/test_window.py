"""Dataset.window against tf.data (tests/golden/window_expected.json, made by
make_window_golden.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import stoker as sk


def test_windows_equal_tf(golden):
    want = json.loads((golden / "window_expected.json").read_text())
    for case in want["range10"]:
        size, shift, stride, drop = case["size"], case["shift"], case["stride"], case["drop_remainder"]
        ds = sk.Dataset.range(10).window(size, shift, stride, drop)
        got = [b.tolist() for b in ds.flat_map(lambda w, n=size: w.batch(n))]
        assert got == case["windows"], case
        assert ds.cardinality() == case["cardinality"], case
        # Each window is a dataset of its elements, as in tf.data.
        first = next(iter(ds))
        assert isinstance(first, sk.Dataset)
        assert [int(v) for v in first] == case["windows"][0]
    d = sk.Dataset.from_tensor_slices({"a": np.array([1, 2, 3, 4, 5]), "b": np.array([5.0, 4.0, 3.0, 2.0, 1.0])})
    got = [{k: v.tolist() for k, v in e.items()} for e in d.window(2).flat_map(lambda w: sk.Dataset.zip(w).batch(2))]
    assert got == want["dict"]


def test_windows_of_a_pipeline_resume(tmp_path):
    ds = sk.Dataset.range(40).shuffle(8, seed=1).map(lambda v: v * 2).window(5, shift=3, stride=2)
    full = [[int(x) for x in w] for w in ds.iterator(epoch=0)]
    for cut in (0, 1, 4, 7, len(full) - 1):
        it = ds.iterator(epoch=0)
        head = [[int(x) for x in next(it)] for _ in range(cut)]
        rest = [[int(x) for x in w] for w in ds.iterator(state=it.state())]
        assert head + rest == full, cut
    # A shift past the window: the elements between are passed over, also after a restore.
    gaps = sk.Dataset.range(20).window(2, shift=5)
    it = gaps.iterator()
    next(it)
    assert [[int(x) for x in w] for w in gaps.iterator(state=it.state())] == [[5, 6], [10, 11], [15, 16]]


def test_window_arguments_are_checked():
    for kw, name in (({"size": 0}, "size"), ({"size": 2, "shift": 0}, "shift"), ({"size": 2, "stride": -1}, "stride")):
        with pytest.raises(sk.InvalidArgumentError, match=name):
            sk.Dataset.range(3).window(**kw)
