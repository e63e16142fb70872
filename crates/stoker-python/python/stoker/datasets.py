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


def class_colors(num_classes: int = 32, seed: int = 0) -> list[list[int]]:
    """Distinct RGB colours for ``num_classes`` classes (CamVid-style)."""
    rng = np.random.default_rng(seed)
    colors: list[list[int]] = []
    while len(colors) < num_classes:
        c = [int(v) for v in rng.integers(0, 256, 3)]
        if c not in colors:
            colors.append(c)
    return colors


def segmentation_pair(
    rng: np.random.Generator, height: int, width: int, colors: list[list[int]], regions: int = 12
) -> tuple[np.ndarray, np.ndarray]:
    """A photo-like RGB image and its RGB label map: Voronoi regions of random classes, each
    region shaded with its own gradient and texture, plus sensor noise."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    seeds = rng.uniform(0, 1, (regions, 2)) * [height, width]
    dist = np.stack([(yy - sy) ** 2 + (xx - sx) ** 2 for sy, sx in seeds])
    region = dist.argmin(axis=0)
    classes = rng.integers(0, len(colors), regions)
    label = np.asarray(colors, dtype=np.uint8)[classes[region]]
    base = rng.uniform(30, 220, (regions, 3)).astype(np.float32)[region]
    shade = (np.sin(xx / rng.uniform(20, 80)) + np.cos(yy / rng.uniform(20, 80)))[..., None] * 12
    photo = base + shade + (yy / height * 40)[..., None] + rng.normal(0, 4, base.shape)
    return np.clip(photo, 0, 255).astype(np.uint8), label


def write_segmentation_pairs(
    out_dir: str, n: int = 240, height: int = 720, width: int = 960, num_classes: int = 32, seed: int = 0
) -> tuple[list[str], list[str], str]:
    """W2's data: ``n`` pairs of PNG photo and PNG label map, and ``class_dict.csv``
    (``name,r,g,b``). Returns (image paths, label paths, class_dict path)."""
    from .io import encode_png

    os.makedirs(os.path.join(out_dir, "images"), exist_ok=True)
    os.makedirs(os.path.join(out_dir, "labels"), exist_ok=True)
    colors = class_colors(num_classes, seed)
    class_dict = os.path.join(out_dir, "class_dict.csv")
    with open(class_dict, "w") as f:
        f.write("name,r,g,b\n")
        for i, (r, g, b) in enumerate(colors):
            f.write(f"class{i:02d},{r},{g},{b}\n")
    rng = np.random.default_rng(seed)
    images: list[str] = []
    labels: list[str] = []
    for i in range(n):
        photo, label = segmentation_pair(rng, height, width, colors)
        for folder, array, paths in (("images", photo, images), ("labels", label, labels)):
            path = os.path.join(out_dir, folder, f"{i:05d}.png")
            with open(path, "wb") as f:
                f.write(encode_png(array))
            paths.append(path)
    return images, labels, class_dict


__all__ = [
    "chess_examples",
    "write_chess_tfrecords",
    "make_mnist_like",
    "write_mnist_npz",
    "class_colors",
    "segmentation_pair",
    "write_segmentation_pairs",
]
