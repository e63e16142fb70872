#!/usr/bin/env python3
"""Regenerates ``window_expected.json``: tf.data's ``window`` over ``range(10)`` for several
``(size, shift, stride, drop_remainder)``, each window read with ``flat_map(lambda w:
w.batch(size))``, with the cardinalities; and a dict dataset's windows
(``flat_map(lambda w: Dataset.zip(w).batch(2))``).

    .venv/bin/python tests/golden/make_window_golden.py

Deterministic.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = [(3, 2, 1, False), (3, 1, 3, False), (2, 4, 1, False), (3, 2, 1, True), (4, None, 2, True), (5, 3, 1, False)]


def main() -> int:
    out: dict = {"tensorflow": tf.__version__, "range10": []}
    for size, shift, stride, drop in CASES:
        ds = tf.data.Dataset.range(10).window(size, shift, stride, drop)
        windows = [w.tolist() for w in ds.flat_map(lambda w, n=size: w.batch(n)).as_numpy_iterator()]
        out["range10"].append({"size": size, "shift": shift, "stride": stride, "drop_remainder": drop,
                               "windows": windows, "cardinality": int(ds.cardinality())})
    d = tf.data.Dataset.from_tensor_slices({"a": [1, 2, 3, 4, 5], "b": [5.0, 4.0, 3.0, 2.0, 1.0]}).window(2)
    out["dict"] = [{k: v.tolist() for k, v in e.items()}
                   for e in d.flat_map(lambda w: tf.data.Dataset.zip(w).batch(2)).as_numpy_iterator()]
    with open(os.path.join(HERE, "window_expected.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"tensorflow {tf.__version__}: window_expected.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
