#!/usr/bin/env python3
"""Regenerates ``concatenate_expected.npz``: ``tf.data.Dataset.concatenate`` (scalars; dicts of a
float vector whose length differs between the two datasets and a byte string; its cardinality
with an unknown and an infinite part), ``from_tensors``, and the edges of ``take``/``skip``.

    .venv/bin/python tests/golden/make_concatenate_golden.py

Deterministic (fixed values; fixed zip timestamps via ``make_golden``).
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import out, save_npz  # noqa: E402


def main() -> int:
    arrays: dict[str, np.ndarray] = {}
    ranges = tf.data.Dataset.range(3).concatenate(tf.data.Dataset.range(10, 12))
    arrays["ranges"] = np.array(list(ranges.as_numpy_iterator()), dtype=np.int64)
    arrays["ranges_cardinality"] = np.array(int(ranges.cardinality()))
    infinite = tf.data.Dataset.range(3).concatenate(tf.data.Dataset.range(2).repeat())
    unknown = tf.data.Dataset.range(3).filter(lambda v: v > 0).concatenate(tf.data.Dataset.range(2))
    arrays["infinite_cardinality"] = np.array(int(infinite.cardinality()))
    arrays["unknown_cardinality"] = np.array(int(unknown.cardinality()))

    x1 = np.arange(6, dtype=np.float32).reshape(2, 3)
    x2 = np.arange(4, dtype=np.float32).reshape(1, 4) + 100
    s1, s2 = np.array([b"a", b"bb"]), np.array([b"ccc"])
    arrays["in/x1"], arrays["in/x2"], arrays["in/s1"], arrays["in/s2"] = x1, x2, s1, s2
    dicts = tf.data.Dataset.from_tensor_slices({"x": x1, "s": s1}).concatenate(
        tf.data.Dataset.from_tensor_slices({"x": x2, "s": s2})
    )
    arrays["dicts_x_shape"] = np.array([-1 if d is None else d for d in dicts.element_spec["x"].shape.as_list()])
    for k, e in enumerate(dicts.as_numpy_iterator()):
        arrays[f"dicts/{k}/x"], arrays[f"dicts/{k}/s"] = e["x"], np.array(e["s"])

    a = np.array([[1, 2], [3, 4]], dtype=np.int64)
    one = list(tf.data.Dataset.from_tensors({"a": a, "b": b"x"}).as_numpy_iterator())
    arrays["from_tensors_count"] = np.array(len(one))
    arrays["from_tensors/a"], arrays["from_tensors/b"] = one[0]["a"], np.array(one[0]["b"])

    r = tf.data.Dataset.range(5)
    for name, ds in {
        "take_-1": r.take(-1),
        "skip_-1": r.skip(-1),
        "take_0": r.take(0),
        "skip_0": r.skip(0),
        "take_10": r.take(10),
        "skip_10": r.skip(10),
        "skip_2_take_2": r.skip(2).take(2),
    }.items():
        arrays[f"edges/{name}"] = np.array(list(ds.as_numpy_iterator()), dtype=np.int64)
        arrays[f"edges/{name}/cardinality"] = np.array(int(ds.cardinality()))
    save_npz(out("concatenate_expected.npz"), **arrays)
    print(f"tensorflow {tf.__version__}: concatenate_expected.npz, {len(arrays)} arrays")
    return 0


if __name__ == "__main__":
    sys.exit(main())
