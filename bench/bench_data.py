#!/usr/bin/env python3
"""Benchmark data: W1 TFRecord files and W4 arrays, generated once into a data directory.

    python bench/bench_data.py w1 OUT_DIR --num-files 8 --num-examples 400000
    python bench/bench_data.py w4 OUT_DIR --n 60000

Prefers stoker's own generators (``stoker.datasets.write_chess_tfrecords`` and
``stoker.datasets.make_mnist_like``); if stoker can't be imported it falls back to an identical
generator here (same RNG draws) that writes the TFRecords with TensorFlow. ``OUT_DIR/meta.json``
records which generator ran; run.py reuses a directory whose meta matches.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys

import numpy as np

CHESS_BYTES, MATE_BIT = 194, 1546


def chess_examples(num_examples: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Same draws as stoker.datasets.chess_examples."""
    rng = np.random.default_rng(seed)
    d = rng.integers(0, 256, size=(num_examples, CHESS_BYTES), dtype=np.uint8)
    is_mate = (d[:, MATE_BIT // 8] >> (7 - MATE_BIT % 8)) & 1
    s = np.where(is_mate == 1, rng.integers(-40, 41, size=num_examples), rng.integers(-3000, 3001, size=num_examples))
    return d, s.astype(np.int64)


def write_chess_tfrecords_tf(out_dir: str, num_files: int, num_examples: int, seed: int = 0) -> list[str]:
    """Fallback for stoker.datasets.write_chess_tfrecords, written with tf.io.TFRecordWriter."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    os.makedirs(out_dir, exist_ok=True)
    d, s = chess_examples(num_examples, seed)
    bounds = np.linspace(0, num_examples, num_files + 1).astype(int)
    paths = []
    for f in range(num_files):
        path = os.path.join(out_dir, f"chess-{f:05d}-of-{num_files:05d}.tfrecord")
        with tf.io.TFRecordWriter(path) as w:
            for i in range(bounds[f], bounds[f + 1]):
                ex = tf.train.Example(features=tf.train.Features(feature={
                    "d": tf.train.Feature(bytes_list=tf.train.BytesList(value=[d[i].tobytes()])),
                    "s": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(s[i])])),
                }))
                w.write(ex.SerializeToString())
        paths.append(path)
    return paths


def make_mnist_like(n: int = 60_000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Same draws as stoker.datasets.make_mnist_like."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 10, size=n).astype(np.int64)
    yy, xx = np.mgrid[0:28, 0:28]
    x = np.zeros((n, 28, 28), dtype=np.uint8)
    for label in range(10):
        ring = np.abs(np.hypot(yy - 14, xx - 14) - (4 + label)) < 1.5
        x[y == label] = (ring * 200).astype(np.uint8)
    noise = rng.integers(0, 56, size=x.shape, dtype=np.uint8)
    return x + noise, y


def stoker_datasets():
    try:
        import stoker.datasets as sd
        return sd
    except Exception as e:  # noqa: BLE001 - any import problem means "use the fallback"
        print(f"stoker not importable ({type(e).__name__}: {e}); using the fallback generator", file=sys.stderr)
        return None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", choices=["w1", "w4"])
    ap.add_argument("out_dir")
    ap.add_argument("--num-files", type=int, default=8)
    ap.add_argument("--num-examples", type=int, default=400_000)
    ap.add_argument("--n", type=int, default=60_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    sd = stoker_datasets()
    if args.workload == "w1":
        for old in glob.glob(os.path.join(args.out_dir, "*.tfrecord")):
            os.remove(old)
        if sd is not None:
            files = sd.write_chess_tfrecords(args.out_dir, num_files=args.num_files,
                                             num_examples=args.num_examples, seed=args.seed)
            gen = "stoker.datasets.write_chess_tfrecords"
        else:
            files = write_chess_tfrecords_tf(args.out_dir, args.num_files, args.num_examples, args.seed)
            gen = "bench_data.write_chess_tfrecords_tf (fallback)"
        meta = {"workload": "w1", "generator": gen, "num_files": args.num_files,
                "num_examples": args.num_examples, "seed": args.seed,
                "files": [os.path.basename(f) for f in files]}
    else:
        if sd is not None:
            x, y = sd.make_mnist_like(n=args.n, seed=args.seed)
            gen = "stoker.datasets.make_mnist_like"
        else:
            x, y = make_mnist_like(args.n, args.seed)
            gen = "bench_data.make_mnist_like (fallback)"
        np.save(os.path.join(args.out_dir, "x.npy"), np.ascontiguousarray(x))
        np.save(os.path.join(args.out_dir, "y.npy"), np.ascontiguousarray(y))
        meta = {"workload": "w4", "generator": gen, "n": args.n, "seed": args.seed,
                "x": [list(x.shape), str(x.dtype)], "y": [list(y.shape), str(y.dtype)]}
    with open(os.path.join(args.out_dir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps(meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
