#!/usr/bin/env python3
"""Regenerates ``unbatch_expected.npz``: ``tf.data.Dataset.unbatch`` over elements with a
leading dimension of different sizes (0 included), an int64 matrix and a uint8 image stack per
element, and over ``batch(3).unbatch()`` of scalars.

    .venv-bench/bin/python tests/golden/make_unbatch_golden.py

Deterministic (``np.random.default_rng(2032)``; fixed zip timestamps via ``make_golden``).
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
    rng = np.random.default_rng(2032)
    rows = [2, 0, 3, 1]
    mats = [rng.integers(-9, 9, (n, 2)).astype(np.int64) for n in rows]
    imgs = [rng.integers(0, 256, (n, 2, 3), dtype=np.uint8) for n in rows]
    arrays: dict[str, np.ndarray] = {}
    for i, (m, g) in enumerate(zip(mats, imgs)):
        arrays[f"in/mat/{i}"], arrays[f"in/img/{i}"] = m, g
    ds = tf.data.Dataset.from_generator(
        lambda: ({"mat": m, "img": g} for m, g in zip(mats, imgs)),
        output_signature={
            "mat": tf.TensorSpec([None, 2], tf.int64),
            "img": tf.TensorSpec([None, 2, 3], tf.uint8),
        },
    )
    for k, e in enumerate(ds.unbatch().as_numpy_iterator()):
        arrays[f"out/{k}/mat"], arrays[f"out/{k}/img"] = e["mat"], e["img"]
    scalars = list(tf.data.Dataset.range(7).batch(3).unbatch().as_numpy_iterator())
    arrays["range7_batch3_unbatch"] = np.array(scalars, dtype=np.int64)
    save_npz(out("unbatch_expected.npz"), **arrays)
    print(f"tensorflow {tf.__version__}: unbatch_expected.npz, {len(arrays)} arrays")
    return 0


if __name__ == "__main__":
    sys.exit(main())
