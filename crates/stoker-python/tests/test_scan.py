"""Dataset.scan against tf.data (tests/golden/scan_expected.json, made by make_scan_golden.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import stoker as sk


def test_scan_equals_tf(golden):
    want = json.loads((golden / "scan_expected.json").read_text())
    sums = sk.Dataset.range(8).scan(np.int64(0), lambda s, v: (s + v, s * 10 + v))
    assert [int(v) for v in sums] == want["sums"]

    def running(s, v):
        new = {"max": max(s["max"], int(v)), "n": s["n"] + 1}
        return new, {"max": np.int64(new["max"]), "mean_so_far": np.float32(new["max"]) / np.float32(new["n"])}

    maxes = sk.Dataset.from_tensor_slices(np.array(want["values"])).scan({"max": -100, "n": 0}, running)
    got = [{k: float(v) for k, v in e.items()} for e in maxes]
    assert got == want["running"]
    assert maxes.element_spec["mean_so_far"].dtype == "float32"
    # Each pass starts from the initial state (it is not changed by a pass).
    assert [{k: float(v) for k, v in e.items()} for e in maxes] == want["running"]


def test_scan_resumes_by_running_the_pass_again():
    calls = []

    def step(s, v):
        calls.append(int(v))
        return s + int(v), np.int64(s * 2 + int(v))

    ds = sk.Dataset.range(20).shuffle(5, seed=3).scan(0, step)
    full = [int(v) for v in ds.iterator(epoch=0)]
    it = ds.iterator(epoch=0)
    head = [int(next(it)) for _ in range(7)]
    state = it.state()
    it.close()  # (its thread may have run the function on an element ahead)
    calls.clear()
    rest = [int(v) for v in ds.iterator(state=state)]
    assert head + rest == full
    assert len(calls) == 20, "the 7 before the position are run again, then the 13 after"


def test_scan_errors():
    with pytest.raises(sk.InvalidArgumentError, match="callable"):
        sk.Dataset.range(3).scan(0, 5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"\(new_state, output\)"):
        list(sk.Dataset.range(3).scan(0, lambda s, v: v))
    with pytest.raises(sk.SpecError, match="scan"):
        sk.Dataset.range(3).scan(0, lambda s, v: (s, v)).save_spec("/tmp/never.json")


def test_a_tuple_element_is_one_argument_as_in_tf_data():
    tf = pytest.importorskip("tensorflow")

    def total(s, x):
        return s + x[0] * x[1], s

    def make(lib):
        return lib.Dataset.from_tensor_slices(([1, 2, 3], [4, 5, 6]))

    want = [int(v) for v in make(tf.data).scan(np.int32(0), total).as_numpy_iterator()]
    got = list(make(sk.data).scan(np.int32(0), total))
    assert [int(v) for v in got] == want == [0, 4, 14]
    assert all(np.asarray(v).dtype == np.int32 for v in got)
    # reduce too: the element one argument.
    assert int(make(sk.data).reduce(np.int32(0), lambda s, x: s + x[0] * x[1])) == 32
    # With TensorFlow in the function: traced, the element one argument too.
    traced = make(sk.data).scan(np.int32(0), lambda s, x: (s + tf.reduce_prod(tf.stack(x)), s))
    assert [int(v) for v in traced] == want
    assert "traced graph" in traced.explain()
    assert int(make(sk.data).reduce(np.int32(0), lambda s, x: s + tf.reduce_prod(tf.stack(x)))) == 32
