#!/usr/bin/env python3
"""Regenerates ``flat_map_expected.npz``: ``flat_map`` (each element to a dataset of its own
length, the empty one included), ``rebatch`` (batches of 3 rebatched to 2 and to 4, with and
without ``drop_remainder``) and ``reduce`` (a sum and a count over ``range``).

    .venv/bin/python tests/golden/make_flat_map_golden.py

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
    flat = tf.data.Dataset.range(5).flat_map(lambda v: tf.data.Dataset.range(v).map(lambda w: v * 10 + w))
    arrays["flat_map"] = np.array(list(flat.as_numpy_iterator()), dtype=np.int64)
    batches = tf.data.Dataset.range(11).batch(3)
    for size in (2, 4):
        for drop in (False, True):
            got = list(batches.rebatch(size, drop_remainder=drop).as_numpy_iterator())
            arrays[f"rebatch_{size}_{int(drop)}/count"] = np.array(len(got))
            for k, b in enumerate(got):
                arrays[f"rebatch_{size}_{int(drop)}/{k}"] = b
    r = tf.data.Dataset.range(1, 8)
    arrays["reduce_sum"] = np.array(int(r.reduce(np.int64(0), lambda s, v: s + v)))
    arrays["reduce_count"] = np.array(int(r.reduce(np.int64(0), lambda s, _: s + 1)))
    save_npz(out("flat_map_expected.npz"), **arrays)
    print(f"tensorflow {tf.__version__}: flat_map_expected.npz, {len(arrays)} arrays")
    return 0


if __name__ == "__main__":
    sys.exit(main())
