#!/usr/bin/env python3
"""Benchmark data: W1 TFRecord files and W4 arrays, generated once into a data directory.

    python bench/bench_data.py w1 OUT_DIR --num-files 8 --num-examples 400000
    python bench/bench_data.py w4 OUT_DIR --n 60000

Uses stoker's own generators (``stoker.datasets.write_chess_tfrecords`` and
``stoker.datasets.make_mnist_like``), so every contender reads the same bytes.
``OUT_DIR/meta.json`` records what was generated; run.py reuses a directory whose meta matches.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys

import numpy as np


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
    import stoker.datasets as sd

    if args.workload == "w1":
        for old in glob.glob(os.path.join(args.out_dir, "*.tfrecord")):
            os.remove(old)
        files = sd.write_chess_tfrecords(
            args.out_dir, num_files=args.num_files, num_examples=args.num_examples, seed=args.seed
        )
        gen = "stoker.datasets.write_chess_tfrecords"
        meta = {"workload": "w1", "generator": gen, "num_files": args.num_files,
                "num_examples": args.num_examples, "seed": args.seed,
                "files": [os.path.basename(f) for f in files]}
    else:
        x, y = sd.make_mnist_like(n=args.n, seed=args.seed)
        gen = "stoker.datasets.make_mnist_like"
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
