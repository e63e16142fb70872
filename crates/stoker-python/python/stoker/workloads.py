"""The reference workloads as stoker pipelines (see ``examples/`` and ``bench/``).

W1 chess-tfrecord: packed chess positions in TFRecord → shuffle → batch → parse → unpack bits
→ board planes with signed channel reordering, flags and a tanh score, all native.
W4 mnist-small: 28x28 uint8 images → /255 → batch(128) → cache → prefetch.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import ops
from ._dtypes import float32, int64, string, uint8
from .dataset import AUTOTUNE, Dataset, TFRecordDataset
from .ops import FixedLenFeature

#: W1's board channel order; ``-c`` means channel ``c`` negated (the opponent's pieces).
CHESS_CHANNELS = [0, 4, 8, 12, 16, 20, -1, -5, -9, -13, -17, -21, 2, 6, 10, 14, 18, 22, -3, -7, -11, -15, -19, -23]
SCORE_A, SCORE_K, SCORE_B = 0.75, 600.0, 30.0


def chess_ops() -> list[ops.NativeOp]:
    """W1's parsing and unpacking, all native: parse → decode_raw → board (8, 8, 24) with
    signed channels, flags (10,), is_mate (1,), each straight from the packed bytes
    (``bit_planes``: what unpack_bits → slice → unflatten → gather_channels give), and s."""
    indices, signs = ops.signed_channels(CHESS_CHANNELS)
    return [
        ops.parse_example({"d": FixedLenFeature([], string), "s": FixedLenFeature([], int64)}),
        ops.decode_raw("d", uint8),
        ops.bit_planes("d", 0, (8, 8, 24), indices, signs, dtype=float32, output="board"),
        ops.bit_planes("d", 1536, (10,), dtype=float32, output="flags"),
        ops.bit_planes("d", 1546, (1,), dtype=float32, output="is_mate"),
        ops.select(["board", "flags", "is_mate", "s"]),
    ]


def chess_score_ops() -> list[ops.NativeOp]:
    """W1's combined score, native (after :func:`chess_ops`): ``score`` from ``s`` and
    ``is_mate`` in TensorFlow's float32 arithmetic, in the order W1's TensorFlow code writes
    it, then the fields W1 hands out (``board``, ``flags``, ``score``)."""
    f = np.float32
    a, k, b = SCORE_A, SCORE_K, SCORE_B
    slope = float((f(1) - f(a)) / (f(b) - f(1)))  # a float32 division, as TensorFlow's
    s = ops.field("s")
    m = ops.field("is_mate", shape=[-1])
    score = (1 - m) * a * ops.tanh(s / k) + m * ops.sign(s) * (a + slope * ops.maximum(0, b - abs(s)))
    return [ops.compute("score", score), ops.select(["board", "flags", "score"])]


def chess_score(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """W1's combined score in NumPy, vectorised over a batch, in float32 (numpy's ``tanh``;
    :func:`chess_score_ops` is the native one)."""
    a, k, b = np.float32(SCORE_A), np.float32(SCORE_K), np.float32(SCORE_B)
    s = batch["s"].astype(np.float32)
    mate = batch["is_mate"].reshape(s.shape).astype(np.float32)
    plain = a * np.tanh(s / k)
    mate_score = np.sign(s) * (a + (np.float32(1) - a) / (b - np.float32(1)) * np.maximum(np.float32(0), b - np.abs(s)))
    score = (np.float32(1) - mate) * plain + mate * mate_score
    return {"board": batch["board"], "flags": batch["flags"], "score": score.astype(np.float32)}


def chess_pipeline(
    files: Sequence[str],
    seed: int | None = 0,
    batch_size: int = 512,
    shuffle_buffer: int = 10_000,
    threads: int | None = None,
    num_parallel_reads: int = AUTOTUNE,
) -> Dataset:
    """W1 end to end. ``shuffle_buffer=0`` leaves the order as read (for golden tests)."""
    ds = TFRecordDataset(list(files), num_parallel_reads=num_parallel_reads)
    if threads is not None:
        ds = ds.with_options(threads=threads)
    if shuffle_buffer:
        ds = ds.shuffle(shuffle_buffer, seed=seed)
    ds = ds.batch(batch_size, drop_remainder=True)
    ds = ds.map(chess_ops() + chess_score_ops(), num_parallel_calls=AUTOTUNE)
    return ds.prefetch(AUTOTUNE)


def mnist_pipeline(x: np.ndarray, y: np.ndarray, batch_size: int = 128, threads: int | None = None) -> Dataset:
    """W4: rescale to float32 / 255 → batch → cache → prefetch. The second epoch on is served
    from the cache."""
    ds = Dataset.from_tensor_slices((x, y))
    if threads is not None:
        ds = ds.with_options(threads=threads)
    ds = ds.map(ops.rescale("0", divisor=255.0))
    return ds.batch(batch_size).cache().prefetch(AUTOTUNE)


def segmentation_pipeline(
    images: Sequence[str],
    labels: Sequence[str],
    colors: Sequence[Sequence[int]],
    size: tuple[int, int] = (512, 512),
    batch_size: int = 3,
    threads: int | None = None,
) -> Dataset:
    """W2: read both PNGs → decode → ``resize_with_crop_or_pad`` to ``size`` for both → image
    to float32 / 255 → label one-hot over the colours → batch → prefetch.

    The image is cropped while still uint8 (the same result as TF's order, /255 then crop,
    as padding is 0 either way) so that only the crop is converted.
    The label is cropped/padded before the one-hot (cheaper on a 960x720 map). Where that pads,
    the padding is black, so pass a class for black (``one_hot_colors(..., fallback=)``) or
    one-hot first if black must become an all-zero row as in TF's ``equal``-based one-hot.
    """
    h, w = size
    ds = Dataset.from_tensor_slices({"image": np.array(images, dtype=object), "label": np.array(labels, dtype=object)})
    if threads is not None:
        ds = ds.with_options(threads=threads)
    ds = ds.map(
        [
            ops.read_file("image"),
            ops.decode_image("image", channels=3),
            ops.resize_with_crop_or_pad("image", h, w),
            ops.read_file("label"),
            ops.decode_image("label", channels=3),
            ops.resize_with_crop_or_pad("label", h, w),
            # The planner runs each inside its field's fused decode-and-crop (explain():
            # decode_crop_or_pad+rescale, +one_hot_colors): each crop row is converted as the
            # decoder hands it over, and the 12x larger float32 output is written once,
            # straight into the batch rows.
            ops.rescale("image", divisor=255.0),
            ops.one_hot_colors("label", colors),
        ],
        num_parallel_calls=AUTOTUNE,
    )
    return ds.batch(batch_size).prefetch(AUTOTUNE)


IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def imagenet_ops(size: int = 224, seed: int = 0, chw: bool = False) -> list[ops.NativeOp]:
    """W3's per-image chain on ``{"filename"}``: read → decode JPEG (RGB) → random resized crop
    to ``size`` (scale 0.08-1, ratio 3/4-4/3) → random horizontal flip → float32 / 255 →
    brightness (±0.2) and contrast (0.8-1.2) jitter → normalise with ImageNet's mean/std."""
    chain = [
        ops.read_file("filename", output="image"),
        ops.decode_image("image", channels=3),
        ops.random_resized_crop("image", size, seed=seed),
        ops.random_flip_left_right("image", seed=seed + 1),
        ops.convert_image_dtype("image"),
        ops.color_jitter("image", brightness=0.2, contrast=0.2, seed=seed + 2),
        ops.normalize("image", IMAGENET_MEAN, IMAGENET_STD),
    ]
    if chw:
        chain.append(ops.hwc_to_chw("image"))
    return chain + [ops.select(["image", "label"])]


def imagenet_pipeline(
    root: str,
    size: int = 224,
    batch_size: int = 256,
    seed: int = 0,
    chw: bool = False,
    threads: int | None = None,
) -> Dataset:
    """W3: an ImageFolder of JPEGs → shuffle → :func:`imagenet_ops` in parallel → batch → prefetch.
    Elements: ``image`` (B, size, size, 3) float32 (or (B, 3, size, size) with ``chw``), ``label``."""
    ds = Dataset.image_folder(root)
    if threads is not None:
        ds = ds.with_options(threads=threads)
    ds = ds.shuffle(10_000, seed=seed).map(imagenet_ops(size, seed, chw), num_parallel_calls=AUTOTUNE)
    return ds.batch(batch_size).prefetch(AUTOTUNE)


__all__ = [
    "CHESS_CHANNELS",
    "chess_ops",
    "chess_score_ops",
    "chess_score",
    "chess_pipeline",
    "mnist_pipeline",
    "segmentation_pipeline",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "imagenet_ops",
    "imagenet_pipeline",
]
