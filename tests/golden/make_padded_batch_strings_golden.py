#!/usr/bin/env python3
"""Regenerates ``padded_batch_strings_expected.npz``: ``tf.data.Dataset.padded_batch`` over
elements with an int64 sequence of varying length and a scalar byte string, with tf.data-style
``padded_shapes`` for every component (``[]`` for the string) and ``padding_values`` for every
component (``b""`` for the string), and with neither.

    .venv/bin/python tests/golden/make_padded_batch_strings_golden.py

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
    seqs = [np.arange(n, dtype=np.int64) + 10 * n for n in (2, 0, 3, 1, 4)]
    names = [b"a", b"bb", b"", b"dddd", b"e"]
    arrays: dict[str, np.ndarray] = {"in/names": np.array(names)}
    for i, s in enumerate(seqs):
        arrays[f"in/seq/{i}"] = s

    def ds() -> tf.data.Dataset:
        return tf.data.Dataset.from_generator(
            lambda: ({"seq": s, "name": n} for s, n in zip(seqs, names)),
            output_signature={"seq": tf.TensorSpec([None], tf.int64), "name": tf.TensorSpec([], tf.string)},
        )

    every = ds().padded_batch(
        2, padded_shapes={"seq": [None], "name": []}, padding_values={"seq": np.int64(-1), "name": b""}
    )
    for k, b in enumerate(every.as_numpy_iterator()):
        arrays[f"every/{k}/seq"], arrays[f"every/{k}/name"] = b["seq"], np.array(list(b["name"]), dtype="S")
    for k, b in enumerate(ds().padded_batch(2).as_numpy_iterator()):
        arrays[f"default/{k}/seq"], arrays[f"default/{k}/name"] = b["seq"], np.array(list(b["name"]), dtype="S")
    save_npz(out("padded_batch_strings_expected.npz"), **arrays)
    print(f"tensorflow {tf.__version__}: padded_batch_strings_expected.npz, {len(arrays)} arrays")
    return 0


if __name__ == "__main__":
    sys.exit(main())
