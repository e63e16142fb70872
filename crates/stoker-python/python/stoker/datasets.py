"""Deterministic sample data for the reference workloads (W1 chess-tfrecord, W4 mnist-small).

Nothing is downloaded: the data is generated from a seed, so every run (tests, benchmarks,
the demo) sees the same bytes.
"""

from __future__ import annotations

import os

import numpy as np

from .io import TFRecordWriter, serialize_example

CHESS_BYTES = 194  # 1552 packed bits: 1536 board bits, 10 flags, 1 mate bit, 5 spare
MATE_BIT = 1546


def chess_examples(num_examples: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(d, s)``: packed boards (n, 194) uint8 and int64 scores. Mate positions (bit 1546 set)
    get small signed move counts, others centipawn scores."""
    rng = np.random.default_rng(seed)
    d = rng.integers(0, 256, size=(num_examples, CHESS_BYTES), dtype=np.uint8)
    is_mate = (d[:, MATE_BIT // 8] >> (7 - MATE_BIT % 8)) & 1
    s = np.where(is_mate == 1, rng.integers(-40, 41, size=num_examples), rng.integers(-3000, 3001, size=num_examples))
    return d, s.astype(np.int64)


def write_chess_tfrecords(out_dir: str, num_files: int = 8, num_examples: int = 400_000, seed: int = 0) -> list[str]:
    """Writes W1's data: ``num_examples`` Examples ``{d: bytes(194), s: int64}`` over
    ``num_files`` TFRecord files. Returns the paths."""
    os.makedirs(out_dir, exist_ok=True)
    d, s = chess_examples(num_examples, seed)
    paths = []
    bounds = np.linspace(0, num_examples, num_files + 1).astype(int)
    for f in range(num_files):
        path = os.path.join(out_dir, f"chess-{f:05d}-of-{num_files:05d}.tfrecord")
        with TFRecordWriter(path) as w:
            for i in range(bounds[f], bounds[f + 1]):
                w.write(serialize_example({"d": d[i].tobytes(), "s": int(s[i])}))
        paths.append(path)
    return paths


def make_mnist_like(n: int = 60_000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """W4's data: ``(x, y)``, x (n, 28, 28) uint8 strokes on a dark background, y (n,) int64."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 10, size=n).astype(np.int64)
    yy, xx = np.mgrid[0:28, 0:28]
    x = np.zeros((n, 28, 28), dtype=np.uint8)
    # A ring whose radius depends on the label, plus noise: cheap, deterministic, not flat.
    for label in range(10):
        ring = np.abs(np.hypot(yy - 14, xx - 14) - (4 + label)) < 1.5
        x[y == label] = (ring * 200).astype(np.uint8)
    noise = rng.integers(0, 56, size=x.shape, dtype=np.uint8)
    return x + noise, y


def write_mnist_npz(path: str, n: int = 60_000, seed: int = 0) -> str:
    x, y = make_mnist_like(n, seed)
    np.savez(path, x=x, y=y)
    return path


__all__ = ["chess_examples", "write_chess_tfrecords", "make_mnist_like", "write_mnist_npz"]
