#!/usr/bin/env python3
"""How much of W2's time beyond the decode-only limit is its one-hot output.

    taskset -c 1 python bench/w2_one_hot_cost.py [--data /tmp/stoker-bench-data/w2-240] [--pairs 60]

On one thread, times the decode-only pass over the pairs' bytes, W2's map without its last op
(`one_hot_colors`), and W2's map as the workload has it: their epochs alternate, one warm-up
each, then the median of `--epochs`.
The one-hot writes 512x512x32 float32 (33.5 MB) per pair, which the decode-only limit does
not, so the middle line is the pipeline's own overhead and the gap to the last is that output.
Data: run.py's W2 directory (`bench_data.py w2`).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import stoker
import w2_peers
from stoker import AUTOTUNE, ops


def epoch_seconds(ds: stoker.Dataset) -> float:
    t = time.perf_counter()
    for _ in ds.as_numpy_iterator():
        pass
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "stoker-bench-data", "w2-240"))
    ap.add_argument("--pairs", type=int, default=60)
    ap.add_argument("--epochs", type=int, default=7, help="timed epochs of each, alternating (median)")
    args = ap.parse_args()
    with open(os.path.join(args.data, "meta.json")) as f:
        meta = json.load(f)
    images = [os.path.join(args.data, p) for p in meta["images"]][: args.pairs]
    labels = [os.path.join(args.data, p) for p in meta["labels"]][: args.pairs]
    colors = w2_peers.read_colors(os.path.join(args.data, meta["class_dict"]))
    n = len(images)
    blobs = []
    for pair in zip(images, labels):
        for path in pair:
            with open(path, "rb") as f:
                blobs.append(f.read())
    decode_only = (stoker.Dataset.from_tensor_slices(np.array(blobs, dtype=object)).with_options(threads=1)
                   .map(ops.decode_image("value", channels=3)))

    def w2(one_hot: bool) -> stoker.Dataset:
        chain = [ops.read_file("image"), ops.decode_image("image", channels=3),
                 ops.resize_with_crop_or_pad("image", 512, 512), ops.read_file("label"),
                 ops.decode_image("label", channels=3), ops.resize_with_crop_or_pad("label", 512, 512),
                 ops.rescale("image", divisor=255.0)] + ([ops.one_hot_colors("label", colors)] if one_hot else [])
        columns = {"image": np.array(images, dtype=object), "label": np.array(labels, dtype=object)}
        return (stoker.Dataset.from_tensor_slices(columns).with_options(threads=1)
                .map(chain, num_parallel_calls=AUTOTUNE).batch(3).prefetch(AUTOTUNE))

    contenders = {"decode-only (the limit)": decode_only, "W2 without the one-hot": w2(False), "W2": w2(True)}
    # Epochs of the three alternate, so that a noisy neighbour slows them alike.
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for epoch in range(args.epochs + 1):
        for name, ds in contenders.items():
            t = epoch_seconds(ds)
            if epoch:  # the first is the warm-up
                times[name].append(t)
    ms = {name: float(np.median(t)) / n * 1e3 for name, t in times.items()}
    limit = ms["decode-only (the limit)"]
    for name, v in ms.items():
        print(f"{name:<24} {v:6.2f} ms/pair  {limit / v:4.0%} of the limit")


if __name__ == "__main__":
    main()
