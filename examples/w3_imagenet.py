"""W3 imagenet-jpeg with stoker: an ImageFolder of ~500x375 JPEGs → decode → random resized crop
224x224 → random horizontal flip → float32 → brightness/contrast jitter → normalise → batch(256).

    python examples/w3_imagenet.py --data /tmp/w3      # generates 3,000 JPEGs once, then runs

The pipeline itself is `stoker.workloads.imagenet_pipeline`.
"""

from __future__ import annotations

import argparse
import os
import time

import stoker
from stoker import workloads


def build_pipeline(root: str, threads: int | None = None, batch_size: int = 256, seed: int = 0):
    return workloads.imagenet_pipeline(root, batch_size=batch_size, seed=seed, threads=threads)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="data/w3")
    p.add_argument("--files", type=int, default=3000)
    p.add_argument("--epochs", type=int, default=2)
    args = p.parse_args()
    if not os.path.isdir(args.data):
        print(f"generating {args.files} JPEGs in {args.data} ...")
        stoker.datasets.write_image_folder(args.data, n=args.files, seed=0)
    ds = build_pipeline(args.data)
    for epoch in range(args.epochs):
        t, n = time.perf_counter(), 0
        for batch in ds:
            n += len(batch["image"])
        print(f"epoch {epoch + 1}: {n} images, {n / (time.perf_counter() - t):.1f} images/s")
    for s in ds.stats():
        print(f"  {s['name'][:70]:<70} busy {s['busy_s']:.2f}s")


if __name__ == "__main__":
    main()
