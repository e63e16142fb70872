"""W2 segmentation-png with stoker: PNG photo + PNG label map (960x720) → decode →
resize_with_crop_or_pad 512x512 → image float32/255, label one-hot over the class_dict.csv
colours → batch(3).

    python examples/w2_segmentation.py --data /tmp/w2      # generates 240 pairs once, then runs

The pipeline itself is `stoker.workloads.segmentation_pipeline`.
"""

from __future__ import annotations

import argparse
import glob
import os
import time
from collections.abc import Sequence

import stoker
from stoker import workloads


def build_pipeline(images: Sequence[str], labels: Sequence[str], class_dict: str, threads: int | None = None):
    _, colors = stoker.ops.read_class_colors(class_dict)
    return workloads.segmentation_pipeline(images, labels, colors, threads=threads)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="data/w2")
    p.add_argument("--pairs", type=int, default=240)
    p.add_argument("--epochs", type=int, default=2)
    args = p.parse_args()
    class_dict = os.path.join(args.data, "class_dict.csv")
    if not os.path.exists(class_dict):
        print(f"generating {args.pairs} pairs in {args.data} ...")
        stoker.datasets.write_segmentation_pairs(args.data, n=args.pairs, seed=0)
    images = sorted(glob.glob(os.path.join(args.data, "images", "*.png")))
    labels = sorted(glob.glob(os.path.join(args.data, "labels", "*.png")))
    ds = build_pipeline(images, labels, class_dict)
    for epoch in range(args.epochs):
        t, n = time.perf_counter(), 0
        for batch in ds:
            n += len(batch["image"])
        print(f"epoch {epoch + 1}: {n} pairs, {n / (time.perf_counter() - t):.1f} pairs/s")
    for s in ds.stats():
        print(f"  {s['name'][:70]:<70} busy {s['busy_s']:.2f}s")


if __name__ == "__main__":
    main()
