"""W2 segmentation-png: the contenders (stoker, tf.data, PyTorch DataLoader with OpenCV).

Every contender returns a ``Contender``: ``epoch()`` gives a fresh iterator over one pass of
``(image, label)`` NumPy batches: image (3, 512, 512, 3) float32 in [0, 1], label
(3, 512, 512, 32) float32 one-hot over the ``class_dict.csv`` colours (the last batch is smaller
if the number of pairs isn't a multiple of 3). No shuffling (the pipeline in the workloads doc
has none).

The pipeline, for every contender: read both PNGs → decode (RGB) → image to float32 / 255 →
``resize_with_crop_or_pad`` to 512x512 (TensorFlow's semantics: centre crop, zero pad) for the
image and the label → label one-hot by colour equality → batch(3) → prefetch. The label is
cropped before the one-hot (the cheaper order; the same values, as stoker does too).

The peers' one-hot compares a packed colour code ``r << 16 | g << 8 | b`` against the 32 class
codes: the same result as ``tf.stack([tf.reduce_all(tf.equal(label, c), -1) for c in colors], -1)``
(the usual CamVid formulation, ``onehot="per-colour"`` here), but ~15x faster in TF on a 512x512
label (5.5 ms vs 89 ms on one core here), so the peers are in their fast form.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

BATCH = 3
SIZE = (512, 512)

Batch = tuple[np.ndarray, np.ndarray]


class Contender(NamedTuple):
    epoch: Callable[[], Iterator[Batch]]
    versions: dict
    notes: str


def color_codes(colors: Sequence[Sequence[int]]) -> np.ndarray:
    c = np.asarray(colors, dtype=np.int32).reshape(-1, 3)
    return (c[:, 0] << 16) | (c[:, 1] << 8) | c[:, 2]


def read_colors(class_dict: str) -> list[list[int]]:
    """The class colours of a CamVid-style ``class_dict.csv`` (``name,r,g,b``), in file order
    (what ``stoker.ops.read_class_colors`` returns; read here so the peers don't need stoker)."""
    import csv

    with open(class_dict, newline="") as f:
        return [[int(r["r"]), int(r["g"]), int(r["b"])] for r in csv.DictReader(f)]


# --------------------------------------------------------------------------------------------
# NumPy reference pieces (used by the torch peer and by the output checks)
# --------------------------------------------------------------------------------------------

def crop_or_pad(a: np.ndarray, height: int, width: int) -> np.ndarray:
    """``tf.image.resize_with_crop_or_pad`` on one HWC array: centre crop (offset
    ``(size - target) // 2``) where larger, centre zero-pad (offset ``(target - size) // 2``)
    where smaller. A view when it only crops."""
    h, w = a.shape[:2]
    cy, cx = max((h - height) // 2, 0), max((w - width) // 2, 0)
    a = a[cy:cy + min(height, h), cx:cx + min(width, w)]
    if a.shape[:2] == (height, width):
        return a
    py, px = max((height - h) // 2, 0), max((width - w) // 2, 0)
    out = np.zeros((height, width) + a.shape[2:], a.dtype)
    out[py:py + a.shape[0], px:px + a.shape[1]] = a
    return out


def one_hot_np(label: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """RGB uint8 (H, W, 3) → float32 (H, W, len(codes)), 1 where the pixel's colour is the
    class's (an unknown colour gives an all-zero row, as TF's equality one-hot does)."""
    lab = label.astype(np.int32)
    key = (lab[..., 0] << 16) | (lab[..., 1] << 8) | lab[..., 2]
    return (key[..., None] == codes).astype(np.float32)


def reference_pair(image_path: str, label_path: str, codes: np.ndarray, size: tuple[int, int] = SIZE) -> Batch:
    """One example computed with PIL + NumPy (PNG is lossless, so every decoder must agree)."""
    from PIL import Image

    h, w = size
    img = np.asarray(Image.open(image_path).convert("RGB")).astype(np.float32) / np.float32(255.0)
    lab = np.asarray(Image.open(label_path).convert("RGB"))
    return np.ascontiguousarray(crop_or_pad(img, h, w)), one_hot_np(crop_or_pad(lab, h, w), codes)


# --------------------------------------------------------------------------------------------
# tf.data
# --------------------------------------------------------------------------------------------

def build_tf(images: Sequence[str], labels: Sequence[str], colors: Sequence[Sequence[int]], threads: int,
             size: tuple[int, int] = SIZE, batch: int = BATCH, onehot: str = "packed") -> Contender:
    import tensorflow as tf

    h, w = size
    codes = tf.constant(color_codes(colors))
    rgb = tf.constant(np.asarray(colors, dtype=np.uint8).reshape(-1, 3))

    def one_hot(lab: Any) -> Any:
        if onehot == "per-colour":
            return tf.cast(tf.stack([tf.reduce_all(tf.equal(lab, rgb[i]), axis=-1) for i in range(len(colors))],
                                    axis=-1), tf.float32)
        lab = tf.cast(lab, tf.int32)
        key = lab[..., 0] * 65536 + lab[..., 1] * 256 + lab[..., 2]
        return tf.cast(tf.equal(key[..., None], codes), tf.float32)

    def load(image_path: Any, label_path: Any) -> dict:
        img = tf.io.decode_png(tf.io.read_file(image_path), channels=3)
        img = tf.image.resize_with_crop_or_pad(tf.cast(img, tf.float32) / 255.0, h, w)
        lab = tf.io.decode_png(tf.io.read_file(label_path), channels=3)
        lab = tf.image.resize_with_crop_or_pad(lab, h, w)
        return {"image": img, "label": one_hot(lab)}

    opts = tf.data.Options()
    opts.threading.private_threadpool_size = threads
    ds = (tf.data.Dataset.from_tensor_slices((list(images), list(labels)))
          .map(load, num_parallel_calls=tf.data.AUTOTUNE)
          .batch(batch)
          .prefetch(tf.data.AUTOTUNE)
          .with_options(opts))

    def epoch() -> Iterator[Batch]:
        for b in ds.as_numpy_iterator():
            yield b["image"], b["label"]

    how = ("packed colour code r<<16|g<<8|b == the 32 class codes" if onehot == "packed"
           else "tf.stack([reduce_all(equal(label, c), -1) for c in colors], -1)")
    return Contender(epoch, {"tensorflow": tf.__version__},
                     "from_tensor_slices((image paths, label paths)) → map(read_file → decode_png(3) → "
                     f"cast/255 → resize_with_crop_or_pad({h},{w}); label: read_file → decode_png(3) → "
                     f"resize_with_crop_or_pad → one-hot ({how}) → float32, AUTOTUNE) → batch({batch}) → "
                     "prefetch(AUTOTUNE)")


# --------------------------------------------------------------------------------------------
# PyTorch DataLoader + OpenCV in the worker processes
# --------------------------------------------------------------------------------------------

def _cv2_worker_init(_worker_id: int) -> None:
    import cv2

    cv2.setNumThreads(1)


def make_torch_dataset(images: Sequence[str], labels: Sequence[str], colors: Sequence[Sequence[int]],
                       size: tuple[int, int] = SIZE) -> Any:
    import cv2
    import torch
    from torch.utils.data import Dataset

    codes = color_codes(colors)
    h, w = size

    def imread_rgb(path: str) -> np.ndarray:
        a = cv2.imread(path, cv2.IMREAD_COLOR)
        if a is None:
            raise OSError(f"cv2.imread failed on {path}")
        return cv2.cvtColor(a, cv2.COLOR_BGR2RGB)

    class SegmentationPairs(Dataset):
        """Map-style: ``__getitem__(i)`` decodes pair i with OpenCV and returns
        (image (H, W, 3) float32, one-hot (H, W, C) float32) tensors; default collate stacks."""

        def __len__(self) -> int:
            return len(images)

        def __getitem__(self, i: int) -> tuple[Any, Any]:
            img = crop_or_pad(imread_rgb(images[i]).astype(np.float32) / np.float32(255.0), h, w)
            lab = crop_or_pad(imread_rgb(labels[i]), h, w)
            return torch.from_numpy(img), torch.from_numpy(one_hot_np(lab, codes))

    return SegmentationPairs()


def build_torch(images: Sequence[str], labels: Sequence[str], colors: Sequence[Sequence[int]], threads: int,
                size: tuple[int, int] = SIZE, batch: int = BATCH, num_workers: int = -1) -> Contender:
    import cv2
    import torch
    from torch.utils.data import DataLoader

    cv2.setNumThreads(1)
    nw = threads if num_workers < 0 else num_workers
    loader = DataLoader(make_torch_dataset(images, labels, colors, size), batch_size=batch, shuffle=False,
                        num_workers=nw, persistent_workers=nw > 0, worker_init_fn=_cv2_worker_init)

    def epoch() -> Iterator[Batch]:
        for img, lab in loader:
            yield img.numpy(), lab.numpy()

    return Contender(epoch, {"torch": torch.__version__, "opencv": cv2.__version__},
                     f"DataLoader(map-style Dataset, batch_size={batch}, shuffle=False, num_workers=cores, "
                     "persistent_workers=True); in the workers (cv2.setNumThreads(1)): cv2.imread(IMREAD_COLOR) → "
                     "cvtColor(BGR2RGB) → float32/255 → NumPy centre crop/pad (TF semantics); label: imread → "
                     "cvtColor → crop/pad → NumPy one-hot (packed colour code == class codes); default collate")


# --------------------------------------------------------------------------------------------
# stoker
# --------------------------------------------------------------------------------------------

def build_stoker(images: Sequence[str], labels: Sequence[str], class_dict: str, threads: int) -> Contender:
    import stoker

    from examples.w2_segmentation import build_pipeline

    ds = build_pipeline(list(images), list(labels), class_dict, threads=threads)

    def epoch() -> Iterator[Batch]:
        for b in ds.as_numpy_iterator():
            yield np.asarray(b["image"]), np.asarray(b["label"])

    return Contender(epoch, {"stoker": getattr(stoker, "__version__", "?")},
                     "examples.w2_segmentation.build_pipeline(images, labels, class_dict, threads=cores), "
                     "as_numpy_iterator()")


# Builders: (image paths, label paths, class_dict.csv path, threads) → Contender.
CONTENDERS: dict[str, Callable[[Sequence[str], Sequence[str], str, int], Contender]] = {
    "stoker": build_stoker,
    "tf.data": lambda i, lab, cd, t: build_tf(i, lab, read_colors(cd), t),
    "torch DataLoader (OpenCV, workers=cores)": lambda i, lab, cd, t: build_torch(i, lab, read_colors(cd), t),
}
