#!/usr/bin/env python3
"""Regenerates ``mix_expected.json``: tf.data's ``choose_from_datasets`` (with and without
``stop_on_empty_dataset``) on fixed choices, and ``sample_from_datasets`` runs whose draws
are TensorFlow's own (compared by their properties: every element of each dataset in its
order; where a run stops with ``stop_on_empty_dataset``), with each result's cardinality.

    .venv/bin/python tests/golden/make_mix_golden.py

Deterministic (fixed inputs and seeds).
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import out  # noqa: E402

CHOICES = [0, 1, 2, 2, 2, 1, 0, 0, 0, 1, 1, 1, 1, 2, 0, 1]


def values(ds: tf.data.Dataset) -> list[int]:
    return [int(v) for v in ds.as_numpy_iterator()]


def main() -> int:
    parts = lambda: [tf.data.Dataset.range(0, 3), tf.data.Dataset.range(10, 15), tf.data.Dataset.range(20, 22)]  # noqa: E731
    choices = tf.data.Dataset.from_tensor_slices(tf.constant(CHOICES, tf.int64))
    result: dict = {"tensorflow": tf.__version__, "choices": CHOICES, "choose": {}, "sample": {}}
    for stop in (True, False):
        ds = tf.data.Dataset.choose_from_datasets(parts(), choices, stop_on_empty_dataset=stop)
        result["choose"][str(stop)] = {"values": values(ds), "cardinality": int(ds.cardinality())}
    for stop in (True, False):
        runs = []
        for seed in range(20):
            ds = tf.data.Dataset.sample_from_datasets(
                [tf.data.Dataset.range(0, 5), tf.data.Dataset.range(100, 105)], seed=seed,
                stop_on_empty_dataset=stop)
            runs.append(values(ds))
        ds = tf.data.Dataset.sample_from_datasets(
            [tf.data.Dataset.range(0, 5), tf.data.Dataset.range(100, 105)], seed=0, stop_on_empty_dataset=stop)
        result["sample"][str(stop)] = {"runs": runs, "cardinality": int(ds.cardinality())}
    infinite = tf.data.Dataset.sample_from_datasets([tf.data.Dataset.range(3).repeat(), tf.data.Dataset.range(2)])
    result["sample_infinite_cardinality"] = int(infinite.cardinality())
    with open(out("mix_expected.json"), "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print(f"tensorflow {tf.__version__}: mix_expected.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
