#!/usr/bin/env python3
"""Regenerates ``one_hot_expected.json``: ``tf.one_hot(indices, depth)`` for fixed int64 and
uint8 indices, indices outside ``0..depth`` (negative, equal to depth, far past it) included.

    .venv/bin/python tests/golden/make_one_hot_golden.py

Deterministic.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
INDICES = [[0, 4, -1], [2, 5, 3], [1, 1, 900]]
SMALL = [0, 7, 3, 255]


def main() -> int:
    out = {
        "tensorflow": tf.__version__,
        "indices": INDICES,
        "depth": 5,
        "one_hot": tf.one_hot(tf.constant(INDICES, tf.int64), 5).numpy().tolist(),
        "uint8_indices": SMALL,
        "uint8_depth": 8,
        "uint8_one_hot": tf.one_hot(tf.constant(SMALL, tf.uint8), 8).numpy().tolist(),
    }
    with open(os.path.join(HERE, "one_hot_expected.json"), "w") as f:
        json.dump(out, f, sort_keys=True)
        f.write("\n")
    print("wrote one_hot_expected.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
