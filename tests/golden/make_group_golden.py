#!/usr/bin/env python3
"""Regenerates ``group_expected.json``: tf.data's ``group_by_window`` (a fixed window size and
a ``window_size_func``; windows left at the end) and ``bucket_by_sequence_length`` (padded to
the batch's longest, and to the bucket boundary) over fixed inputs.

    .venv/bin/python tests/golden/make_group_golden.py

Deterministic.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
VALUES = [5, 1, 7, 2, 9, 4, 6, 3, 8, 12, 10, 11, 13]
LENGTHS = [3, 7, 1, 12, 5, 9, 2, 15, 4, 8, 6, 11]


def sequences():  # shared with the test
    for i, n in enumerate(LENGTHS):
        yield np.arange(1, n + 1, dtype=np.int64) + 100 * i


def main() -> int:
    values = tf.data.Dataset.from_tensor_slices(tf.constant(VALUES, tf.int64))
    fixed = values.group_by_window(lambda x: x % 3, lambda k, w: w.batch(10).map(lambda b: (k, b)), window_size=2)
    by_key = values.group_by_window(lambda x: x % 4, lambda k, w: w.batch(10).map(lambda b: (k, b)),
                                    window_size_func=lambda k: k + 1)
    seqs = tf.data.Dataset.from_generator(sequences, output_signature=tf.TensorSpec((None,), tf.int64))
    longest = seqs.bucket_by_sequence_length(lambda s: tf.shape(s)[0], [4, 8, 12], [2, 2, 2, 1],
                                             padding_values=np.int64(-1))
    boundary = seqs.bucket_by_sequence_length(lambda s: tf.shape(s)[0], [5, 10, 16], [3, 2, 2, 1],
                                              pad_to_bucket_boundary=True)
    out = {
        "tensorflow": tf.__version__,
        "values": VALUES,
        "lengths": LENGTHS,
        "fixed": [[int(k), b.tolist()] for k, b in fixed.as_numpy_iterator()],
        "window_size_func": [[int(k), b.tolist()] for k, b in by_key.as_numpy_iterator()],
        "bucket_longest": [b.tolist() for b in longest.as_numpy_iterator()],
        "bucket_boundary": [b.tolist() for b in boundary.as_numpy_iterator()],
    }
    with open(os.path.join(HERE, "group_expected.json"), "w") as f:
        json.dump(out, f)
        f.write("\n")
    print(f"tensorflow {tf.__version__}: group_expected.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
