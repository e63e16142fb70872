"""W4 mnist-small with stoker: rescale /255 → batch(128) → cache → prefetch; the second epoch
is served from the cache (read-only arrays, no copies).

    python examples/w4_mnist.py

The pipeline itself is `stoker.workloads.mnist_pipeline`:

    ds = (stoker.Dataset.from_tensor_slices((x, y))
            .map(stoker.ops.rescale("0", divisor=255.0))   # moved after batch by the planner
            .batch(128).cache().prefetch(stoker.AUTOTUNE))
"""

from __future__ import annotations

import time

import numpy as np
import stoker
from stoker import workloads


def build_pipeline(x: np.ndarray, y: np.ndarray, threads: int | None = None) -> stoker.Dataset:
    return workloads.mnist_pipeline(x, y, threads=threads)


def main() -> None:
    x, y = stoker.datasets.make_mnist_like(60_000, seed=0)
    ds = build_pipeline(x, y)
    print(ds.explain())
    for epoch in range(3):
        t, n = time.perf_counter(), 0
        for _images, labels in ds:
            n += len(labels)
        secs = time.perf_counter() - t
        print(f"epoch {epoch + 1}: {n} examples in {secs * 1e3:.1f} ms, {n / secs:,.0f} examples/s")


if __name__ == "__main__":
    main()
