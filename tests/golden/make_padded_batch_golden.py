#!/usr/bin/env python3
"""Regenerates ``padded_batch_expected.npz``: ``tf.data.Dataset.padded_batch`` on elements of
varying shapes (an int64 sequence and a small uint8 image), once padding to the batch's
largest with zeros and once with a fixed padded shape and per-field padding values.

    /opt/venvs/bench/bin/python tests/golden/make_padded_batch_golden.py

Deterministic (``np.random.default_rng(2031)``; fixed zip timestamps via ``make_golden``).
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
    rng = np.random.default_rng(2031)
    lengths = [3, 1, 4, 2, 5]
    seqs = [rng.integers(-50, 50, n).astype(np.int64) for n in lengths]
    imgs = [rng.integers(0, 256, (h, w, 2), dtype=np.uint8) for h, w in [(2, 3), (4, 1), (1, 5), (3, 3), (2, 2)]]
    arrays: dict[str, np.ndarray] = {}
    for i, (s, m) in enumerate(zip(seqs, imgs)):
        arrays[f"in/seq/{i}"], arrays[f"in/img/{i}"] = s, m

    def ds() -> tf.data.Dataset:
        return tf.data.Dataset.from_generator(
            lambda: ({"seq": s, "img": m} for s, m in zip(seqs, imgs)),
            output_signature={
                "seq": tf.TensorSpec([None], tf.int64),
                "img": tf.TensorSpec([None, None, 2], tf.uint8),
            },
        )

    for k, b in enumerate(ds().padded_batch(2).as_numpy_iterator()):
        arrays[f"largest/{k}/seq"], arrays[f"largest/{k}/img"] = b["seq"], b["img"]
    fixed = ds().padded_batch(
        2,
        padded_shapes={"seq": [6], "img": [None, 6, 2]},
        padding_values={"seq": np.int64(-1), "img": np.uint8(7)},
        drop_remainder=True,
    )
    for k, b in enumerate(fixed.as_numpy_iterator()):
        arrays[f"fixed/{k}/seq"], arrays[f"fixed/{k}/img"] = b["seq"], b["img"]
    save_npz(out("padded_batch_expected.npz"), **arrays)
    print(f"tensorflow {tf.__version__}: padded_batch_expected.npz, {len(arrays)} arrays")
    return 0


if __name__ == "__main__":
    sys.exit(main())
