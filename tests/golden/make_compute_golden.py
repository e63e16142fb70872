#!/usr/bin/env python3
"""Regenerates ``compute_expected.npz``: TensorFlow's float32 element-wise math on fixed inputs,
for ``stoker.ops.compute``: ``tanh``, ``exp``, ``log``, ``sign``, ``floor``/``ceil``/``round``,
``minimum``/``maximum``, ``where`` over comparisons, ``tf.cast`` of int64 to float32 and of
float32 to int8, and W1's score formula (as ``bench/w1_peers.py`` writes it in TensorFlow).

    .venv/bin/python tests/golden/make_compute_golden.py

Deterministic (fixed inputs; fixed zip timestamps via ``make_golden``).
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import out, save_npz  # noqa: E402

A, K, B = 0.75, 600.0, 30.0


def main() -> int:
    f32 = np.float32
    # Dense in [-10, 10] (tanh's whole curve and its saturation), plus zeros, tiny values and
    # the clamp's neighbourhood.
    x = np.concatenate([
        np.linspace(-10, 10, 20_001, dtype=f32),
        np.array([0.0, -0.0, 1e-8, -1e-8, 3e-4, 7.9, 7.9074, 7.91, 9.0, 50.0, -50.0], dtype=f32),
    ]).astype(f32)
    y = np.linspace(-3, 3, x.size, dtype=f32)[::-1].copy()
    pos = np.geomspace(1e-6, 1e6, 4001, dtype=np.float64).astype(f32)
    s = np.arange(-3000, 3001, dtype=np.int64)
    m = (np.arange(s.size) % 3 == 0).astype(f32)
    tx, ty, tpos, ts, tm = (tf.constant(v) for v in (x, y, pos, s, m))
    arrays = {
        "in/x": x, "in/y": y, "in/pos": pos, "in/s": s, "in/m": m,
        "tanh": tf.math.tanh(tx).numpy(),
        "exp": tf.math.exp(tx).numpy(),
        "log": tf.math.log(tpos).numpy(),
        "sign": tf.math.sign(tx).numpy(),
        "round": tf.math.round(tx * 2.5).numpy(),
        "floor_ceil": (tf.math.floor(tx * 3.0) - tf.math.ceil(ty)).numpy(),
        "min_max": tf.math.minimum(tf.math.maximum(tx, ty), 1.5).numpy(),
        "where": tf.where(tf.logical_and(tx > ty, tf.not_equal(tx, 0.0)), tx / ty, tf.square(ty) - 1.0).numpy(),
        "cast_s": (tf.cast(ts, tf.float32) / 7.0).numpy(),
        "cast_int8": tf.cast(tf.cast(tx * 20.0, tf.int8), tf.float32).numpy(),
    }
    sf = tf.cast(ts, tf.float32)
    one, zero = tf.constant(1.0), tf.constant(0.0)
    a, k, b = tf.constant(A), tf.constant(K), tf.constant(B)
    slope = (one - a) / (b - one)
    arrays["w1_score"] = ((one - tm) * a * tf.math.tanh(sf / k)
                          + tm * tf.math.sign(sf) * (a + slope * tf.math.maximum(zero, b - tf.math.abs(sf)))).numpy()
    save_npz(out("compute_expected.npz"), **arrays)
    print(f"tensorflow {tf.__version__}: compute_expected.npz, {len(arrays)} arrays")
    return 0


if __name__ == "__main__":
    sys.exit(main())
