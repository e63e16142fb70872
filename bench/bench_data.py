#!/usr/bin/env python3
"""Benchmark data: W1 TFRecord files, W2 PNG pairs, W3 JPEGs and W4 arrays, generated once into
a data directory.

    python bench/bench_data.py w1 OUT_DIR --num-files 8 --num-examples 400000
    python bench/bench_data.py w2 OUT_DIR --n 240        # pairs of 960x720 PNG photo + label map
    python bench/bench_data.py w3 OUT_DIR --n 3000       # ~500x375 JPEGs, ImageFolder layout
    python bench/bench_data.py w3 OUT_DIR --n 600 --size-scale 2   # ~1000x750 (run.py's W3L)
    python bench/bench_data.py w4 OUT_DIR --n 60000

Uses stoker's own generators (``stoker.datasets.write_chess_tfrecords``,
``write_segmentation_pairs``, ``write_image_folder`` and ``make_mnist_like``), so every
contender reads the same bytes.
``OUT_DIR/meta.json`` records what was generated; run.py reuses a directory whose meta matches.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import sys

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", choices=["w1", "w2", "w3", "w4"])
    ap.add_argument("out_dir")
    ap.add_argument("--num-files", type=int, default=8)
    ap.add_argument("--num-examples", type=int, default=400_000)
    ap.add_argument("--n", type=int, default=None, help="W2 pairs (240), W3 files (3000), W4 examples (60000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--size-scale", type=int, default=1, help="W3: image sizes × this (a power of two)")
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
    elif args.workload == "w2":
        n = args.n or 240
        for sub in ("images", "labels"):
            shutil.rmtree(os.path.join(args.out_dir, sub), ignore_errors=True)
        images, labels, class_dict = sd.write_segmentation_pairs(args.out_dir, n=n, seed=args.seed)
        gen = "stoker.datasets.write_segmentation_pairs"
        rel = [os.path.relpath(p, args.out_dir) for p in images + labels + [class_dict]]
        meta = {"workload": "w2", "generator": gen, "n": n, "seed": args.seed,
                "images": rel[:n], "labels": rel[n:2 * n], "class_dict": rel[-1], "files": rel,
                "height": 720, "width": 960, "num_classes": 32,
                "bytes": sum(os.path.getsize(p) for p in images + labels)}
    elif args.workload == "w3":
        n = args.n or 3000
        for old in glob.glob(os.path.join(args.out_dir, "class*")):
            shutil.rmtree(old, ignore_errors=True)
        from PIL import Image

        paths = sd.write_image_folder(args.out_dir, n=n, seed=args.seed, size_scale=args.size_scale)
        gen = "stoker.datasets.write_image_folder"
        classes = sorted(e.name for e in os.scandir(args.out_dir) if e.is_dir())
        shapes = []
        for p in paths:
            with Image.open(p) as im:
                shapes.append([im.height, im.width])
        meta = {"workload": "w3", "generator": gen, "n": n, "seed": args.seed, "size_scale": args.size_scale,
                "classes": classes,
                "files": [os.path.relpath(p, args.out_dir) for p in paths], "shapes": shapes,
                "labels": [classes.index(os.path.basename(os.path.dirname(p))) for p in paths],
                "bytes": sum(os.path.getsize(p) for p in paths)}
    else:
        args.n = args.n or 60_000
        x, y = sd.make_mnist_like(n=args.n, seed=args.seed)
        gen = "stoker.datasets.make_mnist_like"
        np.save(os.path.join(args.out_dir, "x.npy"), np.ascontiguousarray(x))
        np.save(os.path.join(args.out_dir, "y.npy"), np.ascontiguousarray(y))
        meta = {"workload": "w4", "generator": gen, "n": args.n, "seed": args.seed,
                "x": [list(x.shape), str(x.dtype)], "y": [list(y.shape), str(y.dtype)]}
    with open(os.path.join(args.out_dir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps({k: v for k, v in meta.items() if not isinstance(v, list)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
