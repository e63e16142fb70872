#!/usr/bin/env python3
"""Regenerates ``from_generator_expected.npz``: tf.data's ``from_generator`` with a dict
``output_signature`` (int64 scalar from Python ints, float32 vectors of varying length from
float64 arrays, strings from ``str``), with a tuple signature (int32 from Python floats
truncated, float32 pairs), and with the older ``output_types``/``output_shapes`` form.

    .venv/bin/python tests/golden/make_from_generator_golden.py

Deterministic (fixed generators; fixed zip timestamps via ``make_golden``).
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import out, save_npz  # noqa: E402


def records(n: int):  # the generator the test uses too
    for i in range(n):
        yield {"i": i * 7 - 3, "v": np.arange(i % 3, dtype=np.float64) / 3, "s": "ab" * i}


def pairs():
    for i in range(5):
        yield (i * 1.75, [i / 3, -i])


def main() -> int:
    arrays: dict[str, np.ndarray] = {}
    sig = {"i": tf.TensorSpec((), tf.int64), "v": tf.TensorSpec((None,), tf.float32), "s": tf.TensorSpec((), tf.string)}
    for k, e in enumerate(tf.data.Dataset.from_generator(records, args=(6,), output_signature=sig).as_numpy_iterator()):
        for name, v in e.items():
            arrays[f"dict/{k}/{name}"] = np.frombuffer(v, dtype=np.uint8) if name == "s" else v
    tsig = (tf.TensorSpec((), tf.int32), tf.TensorSpec((2,), tf.float32))
    for k, (a, b) in enumerate(tf.data.Dataset.from_generator(pairs, output_signature=tsig).as_numpy_iterator()):
        arrays[f"tuple/{k}/0"], arrays[f"tuple/{k}/1"] = a, b
    old = tf.data.Dataset.from_generator(pairs, output_types=(tf.int32, tf.float32), output_shapes=((), (2,)))
    for k, (a, b) in enumerate(old.as_numpy_iterator()):
        arrays[f"types/{k}/0"], arrays[f"types/{k}/1"] = a, b
    save_npz(out("from_generator_expected.npz"), **arrays)
    print(f"tensorflow {tf.__version__}: from_generator_expected.npz, {len(arrays)} arrays")
    return 0


if __name__ == "__main__":
    sys.exit(main())
