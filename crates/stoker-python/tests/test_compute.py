"""ops.compute: element-wise math over fields, natively, equal to TensorFlow's float32 results
(tests/golden/compute_expected.npz, made by make_compute_golden.py)."""

from __future__ import annotations

import numpy as np
import pytest
import stoker as sk
from stoker import ops, workloads


def run(inputs: dict[str, np.ndarray], expr: ops.Expr | float, dtype: str = "float32", batch: int = 1000) -> np.ndarray:
    ds = sk.Dataset.from_tensor_slices(inputs).batch(batch).map([ops.compute("out", expr, dtype)])
    return np.concatenate([b["out"] for b in ds])


def test_functions_equal_tensorflow_within_two_ulp(golden):
    want = np.load(golden / "compute_expected.npz")
    xy = {"x": want["in/x"], "y": want["in/y"]}
    x, y = ops.field("x"), ops.field("y")
    cases = {
        "tanh": (xy, ops.tanh(x)),
        "exp": (xy, ops.exp(x)),
        "log": ({"pos": want["in/pos"]}, ops.log(ops.field("pos"))),
        "sign": (xy, ops.sign(x)),
        "round": (xy, round(x * 2.5)),
        "floor_ceil": (xy, ops.floor(x * 3.0) - ops.ceil(y)),
        "min_max": (xy, ops.minimum(ops.maximum(x, y), 1.5)),
        "where": (xy, ops.where((x > y) & (x != 0), x / y, ops.square(y) - 1)),
        "cast_s": ({"s": want["in/s"]}, ops.field("s") / 7),
    }
    for name, (inputs, expr) in cases.items():
        got = run(inputs, expr)
        assert got.dtype == np.float32, name
        np.testing.assert_array_max_ulp(got, want[name], maxulp=2, dtype=np.float32)
    # Casts to int8 agree in range; beyond it TF's result is C++'s undefined conversion (on x86
    # it wraps), stoker's saturates, as its cast op does.
    got = run(xy, (x * 20.0).cast("int8"))
    inside = np.abs(want["in/x"] * np.float32(20)) < 128
    np.testing.assert_array_equal(got[inside], want["cast_int8"][inside])
    assert np.all(np.abs(got) <= 128) and inside.sum() > 10_000
    # TF's float32 tanh is its own approximation: the native one is that approximation.
    assert run(xy, ops.tanh(x)).tobytes() == want["tanh"].tobytes()


def test_w1_score_equals_tensorflow(golden):
    want = np.load(golden / "compute_expected.npz")
    inputs = {"s": want["in/s"], "is_mate": want["in/m"].reshape(-1, 1)}
    score_op = workloads.chess_score_ops()[0]  # then a select of board, flags and score
    ds = sk.Dataset.from_tensor_slices(inputs).batch(512).map([score_op])
    got = np.concatenate([b["score"] for b in ds])
    np.testing.assert_array_max_ulp(got, want["w1_score"], maxulp=2, dtype=np.float32)
    # The NumPy score (numpy's tanh) differs from TF's by a few ULP at most.
    numpy_score = np.concatenate([workloads.chess_score({**b, "board": 0, "flags": 0})["score"]
                                  for b in sk.Dataset.from_tensor_slices(inputs).batch(512)])
    np.testing.assert_array_max_ulp(numpy_score, want["w1_score"], maxulp=8, dtype=np.float32)


def test_casts_and_output_dtypes():
    v = np.array([-300.7, -2.5, -0.5, 0.0, 0.5, 1.5, 2.5, 127.9, 300.2], dtype=np.float32)
    x = ops.field("v")
    np.testing.assert_array_equal(run({"v": v}, x.cast("int8")), v.astype(np.float64).clip(-128, 127).astype(np.int8))
    np.testing.assert_array_equal(run({"v": v}, x, dtype="int32"), np.trunc(v).astype(np.int32))
    np.testing.assert_array_equal(run({"v": v}, x, dtype="uint8"), np.trunc(v).clip(0, 255).astype(np.uint8))
    np.testing.assert_array_equal(run({"v": v}, x > 0, dtype="bool"), v > 0)
    np.testing.assert_array_equal(run({"v": v}, round(x)), np.round(v))  # half to even
    # Computed in float64 for a float64 output: exact for int64 beyond float32's 24 bits.
    big = np.array([2**40 + 1, -(2**33) - 3], dtype=np.int64)
    np.testing.assert_array_equal(run({"b": big}, ops.field("b") + 1, dtype="int64"), big + 1)
    np.testing.assert_array_equal(run({"b": big}, ops.field("b") * 0.5, dtype="float64"), big * 0.5)


def test_broadcasting_views_and_structure():
    rng = np.random.default_rng(0)
    img = rng.random((6, 5, 4, 3), dtype=np.float32)
    mean = np.array([0.5, 0.4, 0.3], dtype=np.float32)
    ds = sk.Dataset.from_tensor_slices({"img": img, "w": np.arange(6, dtype=np.float32)}).map(
        lambda e: {**e, "mean": mean}
    )
    # Per element: (5, 4, 3) - (3,) * () — a channel vector and a scalar broadcast.
    out = ds.map([ops.compute("c", (ops.field("img") - ops.field("mean")) * ops.field("w"))])
    got = np.stack([e["c"] for e in out])
    np.testing.assert_allclose(got, (img - mean) * np.arange(6, dtype=np.float32)[:, None, None, None], rtol=1e-6)
    # A (batch, 1) field viewed 1-D against a (batch,) field.
    col = {"a": np.arange(8, dtype=np.float32).reshape(8, 1), "b": np.arange(8, dtype=np.float32)}
    flat = ops.compute("c", ops.field("a", shape=[-1]) * ops.field("b"))
    ds2 = sk.Dataset.from_tensor_slices(col).batch(4).map([flat])
    assert ds2.element_spec["c"].shape == (None,)
    np.testing.assert_array_equal(np.concatenate([b["c"] for b in ds2]), np.arange(8.0) ** 2)
    # Without the view, (4, 1) * (4,) broadcasts to (4, 4), as NumPy does.
    square = ops.compute("c", ops.field("a") * ops.field("b"))
    ds3 = sk.Dataset.from_tensor_slices(col).batch(4, drop_remainder=True).map([square])
    assert ds3.element_spec["c"].shape == (4, 4)
    np.testing.assert_array_equal(next(iter(ds3))["c"], col["a"][:4] * col["b"][:4])


def test_errors_name_the_argument_or_field():
    ds = sk.Dataset.from_tensor_slices({"a": np.zeros((4, 3), np.float32), "b": np.zeros((4, 2), np.float32),
                                        "s": np.array([b"x"] * 4)})
    with pytest.raises(sk.InvalidArgumentError, match=r"'a' \[3\].*'b' \[2\]"):
        list(ds.map(lambda e: e).map([ops.compute("c", ops.field("a") + ops.field("b"))]))
    with pytest.raises(sk.SchemaError, match="broadcast"):
        ds.map([ops.compute("c", ops.field("a") + ops.field("b"))])
    with pytest.raises(sk.SchemaError, match="'s'.*numeric"):
        ds.map([ops.compute("c", ops.field("s") + 1)])
    with pytest.raises(sk.SchemaError, match="'nope'"):
        ds.map([ops.compute("c", ops.field("nope") + 1)])
    with pytest.raises(sk.InvalidArgumentError, match="cannot be viewed"):
        ds.map([ops.compute("c", ops.field("a", shape=[5, -1]))])
    with pytest.raises(sk.InvalidArgumentError, match="finite"):
        ops.field("a") + float("nan")
    with pytest.raises(sk.InvalidArgumentError, match="expression"):
        ops.field("a") + "1"  # type: ignore[operator]
    with pytest.raises(sk.InvalidArgumentError, match="shape"):
        ops.field("a", shape=[-1, -1])
    with pytest.raises(TypeError, match="truth value"):
        bool(ops.field("a") < 1)
    # An expression of constants only: a scalar of that value in every element.
    constant = next(iter(ds.map([ops.compute("c", ops.maximum(3.0, 2.0) * 2, "int32")])))
    assert constant["c"].dtype == np.int32 and constant["c"].shape == () and int(constant["c"]) == 6


def test_a_native_pipeline_saves_and_loads(tmp_path, chess_files):
    ds = workloads.chess_pipeline(chess_files, seed=0, batch_size=64)
    path = tmp_path / "w1.json"
    ds.save_spec(path)  # no Python function left: the whole of W1 is native
    loaded = sk.Dataset.load_spec(path)
    for a, b in zip(ds, loaded):
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])
