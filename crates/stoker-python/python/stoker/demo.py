"""``python -m stoker.demo``: runs the reference workloads W1, W3 and W4 on sample data it
generates (in a temporary folder), and prints throughput and per-stage counters."""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

from . import datasets, workloads
from .dataset import Dataset


def _epoch(ds: Dataset) -> tuple[int, float]:
    t = time.perf_counter()
    n = 0
    for batch in ds:
        first = next(iter(batch.values())) if isinstance(batch, dict) else batch[0]
        n += len(first)
    return n, time.perf_counter() - t


def _table(stats: list[dict[str, Any]]) -> str:
    rows = [f"    {'stage (sink first)':<58} {'elements':>9} {'busy s':>8} {'wait s':>8} {'python s':>8}"]
    for s in stats:
        name = s["name"] if len(s["name"]) <= 58 else s["name"][:55] + "..."
        rows.append(
            f"    {name:<58} {s['elements']:>9} {s['busy_s']:>8.3f} {s['wait_input_s']:>8.3f} {s['python_s']:>8.3f}"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--examples", type=int, default=200_000, help="W1 examples to generate")
    p.add_argument("--files", type=int, default=4)
    p.add_argument("--jpegs", type=int, default=256, help="W3 JPEG files to generate")
    args = p.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="stoker-demo-") as tmp:
        print(f"W1 chess-tfrecord: writing {args.examples} examples in {args.files} files ...")
        files = datasets.write_chess_tfrecords(os.path.join(tmp, "chess"), args.files, args.examples, seed=0)
        ds = workloads.chess_pipeline(files, seed=0)
        print(ds.explain())
        for epoch in (1, 2):
            n, secs = _epoch(ds)
            print(f"  epoch {epoch}: {n} examples in {secs:.2f} s = {n / secs:,.0f} examples/s")
        print(_table(ds.stats()))

        print(f"\nW3 imagenet-jpeg: writing {args.jpegs} JPEGs (~500x375, quality 90) ...")
        root = os.path.join(tmp, "w3")
        datasets.write_image_folder(root, n=args.jpegs, seed=0)
        w3 = workloads.imagenet_pipeline(root, batch_size=64)
        print(w3.explain())
        for epoch in (1, 2):
            n, secs = _epoch(w3)
            print(f"  epoch {epoch}: {n} images in {secs:.2f} s = {n / secs:,.0f} images/s")
        print(_table(w3.stats()))

        print("\nW4 mnist-small: 60000 images, batch 128, cached after the first epoch ...")
        x, y = datasets.make_mnist_like(60_000, seed=0)
        w4 = workloads.mnist_pipeline(x, y)
        for epoch in (1, 2, 3):
            n, secs = _epoch(w4)
            label = "fills the cache" if epoch == 1 else "from the cache"
            print(f"  epoch {epoch} ({label}): {n} examples in {secs * 1000:.1f} ms = {n / secs:,.0f} examples/s")
        print(_table(w4.stats()))


if __name__ == "__main__":
    main()
