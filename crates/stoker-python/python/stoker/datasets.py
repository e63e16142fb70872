"""Deterministic sample data for the reference workloads (W1 chess, W2 segmentation, W3 imagenet-jpeg, W4 mnist).

Nothing is downloaded: the data is generated from a seed, so every run (tests, benchmarks,
the demo) sees the same bytes.
"""

from __future__ import annotations

import os

import numpy as np

from .errors import InvalidArgumentError
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


def natural_photo(
    rng: np.random.Generator, height: int, width: int, regions: int = 10, octaves: int = 7
) -> np.ndarray:
    """A photo-like uint8 RGB image: Voronoi "objects" with their own colours and lighting,
    textured by multi-octave (1/f-like) noise, plus sensor noise. It compresses like a photo
    (a 500x375 JPEG at quality 90 is ~50-65 kB), unlike white noise or flat colour. The finest
    texture is ``min(height, width) / 2**octaves`` pixels across: add an octave per doubling of
    the size to keep the same fine detail."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    seeds = rng.uniform(0, 1, (regions, 2)) * [height, width]
    region = np.stack([(yy - sy) ** 2 + (xx - sx) ** 2 for sy, sx in seeds]).argmin(axis=0)
    img = rng.uniform(20, 235, (regions, 3)).astype(np.float32)[region]
    img += ((yy / height - 0.5) * rng.uniform(-60, 60))[..., None]  # lighting gradient
    texture = np.zeros((height, width), np.float32)
    for octave in range(1, octaves + 1):  # coarse to fine, amplitude falling slowly with frequency
        step = max(1, min(height, width) >> octave)
        grid = rng.normal(0, 1, (height // step + 2, width // step + 2)).astype(np.float32)
        texture += _upsample_linear(grid, height, width, step) * (24.0 / np.sqrt(octave))
    amplitude = rng.uniform(0.3, 1.2, regions).astype(np.float32)[region]
    img += (texture * amplitude)[..., None] * rng.uniform(0.6, 1.0, 3).astype(np.float32)
    img += rng.normal(0, 4, img.shape).astype(np.float32)
    return np.clip(img, 0, 255).astype(np.uint8)


def _upsample_linear(grid: np.ndarray, height: int, width: int, step: int) -> np.ndarray:
    """``grid`` stretched by ``step`` with bilinear interpolation, cut to ``height x width``."""
    ty, tx = np.arange(height, dtype=np.float32) / step, np.arange(width, dtype=np.float32) / step
    iy, ix = ty.astype(int), tx.astype(int)
    fy, fx = (ty - iy)[:, None], tx - ix
    rows = grid[iy] * (1 - fy) + grid[iy + 1] * fy
    return rows[:, ix] * (1 - fx) + rows[:, ix + 1] * fx


IMAGENET_SHAPES = [(375, 500), (333, 500), (500, 375), (375, 500), (400, 500), (500, 333)]


def write_image_folder(
    out_dir: str,
    n: int = 3000,
    num_classes: int = 10,
    quality: int = 90,
    seed: int = 0,
    size_scale: int = 1,
) -> list[str]:
    """W3's data: ``n`` JPEGs (quality 90, ImageNet-like sizes around 500x375) in an ImageFolder
    layout ``out_dir/classNN/NNNNN.jpg``. Returns the paths, sorted. ``size_scale`` (a power of
    two) multiplies the sizes, with the same fine detail: 2 gives ~1000x750 photos."""
    if size_scale < 1 or size_scale & (size_scale - 1):
        raise InvalidArgumentError(f"size_scale must be a power of two >= 1, got {size_scale}")
    from .io import encode_jpeg

    rng = np.random.default_rng(seed)
    paths = []
    for i in range(n):
        folder = os.path.join(out_dir, f"class{i % num_classes:02d}")
        os.makedirs(folder, exist_ok=True)
        h, w = IMAGENET_SHAPES[int(rng.integers(len(IMAGENET_SHAPES)))]
        photo = natural_photo(rng, h * size_scale, w * size_scale, octaves=6 + size_scale.bit_length())
        path = os.path.join(folder, f"{i:05d}.jpg")
        with open(path, "wb") as f:
            f.write(encode_jpeg(photo, quality))
        paths.append(path)
    return sorted(paths)


__all__ = [
    "chess_examples",
    "write_chess_tfrecords",
    "make_mnist_like",
    "write_mnist_npz",
    "class_colors",
    "segmentation_pair",
    "write_segmentation_pairs",
    "natural_photo",
    "write_image_folder",
]
