#!/usr/bin/env python3
"""Regenerates ``scan_expected.json``: tf.data's ``scan`` with a scalar state (running sum,
output ``10 * state + element``) and with a dict state (running maximum and count) over
fixed inputs.

    .venv/bin/python tests/golden/make_scan_golden.py

Deterministic.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
VALUES = [3, -1, 4, 1, -5, 9, 2, 6]


def main() -> int:
    sums = tf.data.Dataset.range(8).scan(tf.constant(0, tf.int64), lambda s, v: (s + v, s * 10 + v))
    state = {"max": tf.constant(-100, tf.int64), "n": tf.constant(0, tf.int64)}

    def running(s, v):
        new = {"max": tf.maximum(s["max"], v), "n": s["n"] + 1}
        return new, {"max": new["max"], "mean_so_far": tf.cast(new["max"], tf.float32) / tf.cast(new["n"], tf.float32)}

    maxes = tf.data.Dataset.from_tensor_slices(tf.constant(VALUES, tf.int64)).scan(state, running)
    out = {
        "tensorflow": tf.__version__,
        "values": VALUES,
        "sums": [int(v) for v in sums.as_numpy_iterator()],
        "running": [{k: float(v) for k, v in e.items()} for e in maxes.as_numpy_iterator()],
    }
    with open(os.path.join(HERE, "scan_expected.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"tensorflow {tf.__version__}: scan_expected.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
