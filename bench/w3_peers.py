"""W3 imagenet-jpeg: the contenders (stoker, tf.data with TF's ResNet preprocessing, PyTorch
DataLoader with torchvision transforms + PIL, and NVIDIA DALI's CPU pipeline for
``bench/torch_cpu.py``).

Every contender returns a ``Contender``: ``epoch()`` gives a fresh iterator over one pass (one
epoch: every file once, reshuffled each epoch) of ``(image, label)`` NumPy batches of 256 (the
last one smaller): image float32 normalised with ImageNet's mean/std, (B, 224, 224, 3) for
stoker and tf.data, (B, 3, 224, 224) for torchvision (``ToTensor`` is CHW); label (B,) int64,
the class index (class folders in sorted order, as ``ImageFolder`` numbers them).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

BATCH = 256
SIZE = 224
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)

Batch = tuple[np.ndarray, np.ndarray]


class Contender(NamedTuple):
    epoch: Callable[[], Iterator[Batch]]
    versions: dict
    notes: str


def image_folder(root: str) -> tuple[list[str], list[int], list[str]]:
    """(paths, class indices, class names) of an ImageFolder tree, as torchvision's
    ``ImageFolder`` lists it: class folders sorted, files sorted within each."""
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    paths, labels = [], []
    for i, c in enumerate(classes):
        for name in sorted(os.listdir(os.path.join(root, c))):
            if name.lower().endswith((".jpg", ".jpeg")):
                paths.append(os.path.join(root, c, name))
                labels.append(i)
    return paths, labels, classes


def expected_counts(labels: Sequence[int], num_classes: int) -> list[int]:
    return np.bincount(np.asarray(labels, dtype=np.int64), minlength=num_classes).tolist()


# --------------------------------------------------------------------------------------------
# tf.data: TF's official ResNet preprocessing
# --------------------------------------------------------------------------------------------

def build_tf(root: str, threads: int, batch: int = BATCH, size: int = SIZE, seed: int = 0) -> Contender:
    import tensorflow as tf

    paths, labels, _ = image_folder(root)
    mean = tf.constant(MEAN, tf.float32)
    std = tf.constant(STD, tf.float32)
    no_boxes = tf.zeros([1, 0, 4], tf.float32)

    def preprocess(path: Any, label: Any) -> dict:
        data = tf.io.read_file(path)
        shape = tf.image.extract_jpeg_shape(data)
        begin, crop, _ = tf.image.sample_distorted_bounding_box(
            shape, bounding_boxes=no_boxes, min_object_covered=0.1, aspect_ratio_range=(3 / 4, 4 / 3),
            area_range=(0.08, 1.0), max_attempts=10, use_image_if_no_bounding_boxes=True)
        oy, ox, _ = tf.unstack(begin)
        th, tw, _ = tf.unstack(crop)
        img = tf.image.decode_and_crop_jpeg(data, tf.stack([oy, ox, th, tw]), channels=3)
        img = tf.image.resize(img, [size, size], method=tf.image.ResizeMethod.BILINEAR)  # float32 0..255
        img = tf.image.random_flip_left_right(img)
        img = img / 255.0
        img = tf.image.random_brightness(img, 0.2)
        img = tf.image.random_contrast(img, 0.8, 1.2)
        return {"image": (img - mean) / std, "label": label}

    opts = tf.data.Options()
    opts.threading.private_threadpool_size = threads
    ds = (tf.data.Dataset.from_tensor_slices((paths, np.asarray(labels, dtype=np.int64)))
          .shuffle(len(paths), seed=seed, reshuffle_each_iteration=True)
          .map(preprocess, num_parallel_calls=tf.data.AUTOTUNE)
          .batch(batch)
          .prefetch(tf.data.AUTOTUNE)
          .with_options(opts))

    def epoch() -> Iterator[Batch]:
        for b in ds.as_numpy_iterator():
            yield b["image"], b["label"]

    return Contender(epoch, {"tensorflow": tf.__version__},
                     "from_tensor_slices((paths, labels)) → shuffle(all, reshuffle_each_iteration) → "
                     "map(read_file → extract_jpeg_shape → sample_distorted_bounding_box(no boxes, "
                     "min_object_covered=0.1, aspect_ratio_range=(3/4, 4/3), area_range=(0.08, 1), max_attempts=10, "
                     "use_image_if_no_bounding_boxes=True) → decode_and_crop_jpeg(channels=3) → "
                     f"resize({size}x{size}, bilinear) → random_flip_left_right → /255 → random_brightness(0.2) → "
                     "random_contrast(0.8, 1.2) → (x - mean) / std, AUTOTUNE) → "
                     f"batch({batch}) → prefetch(AUTOTUNE)")


# --------------------------------------------------------------------------------------------
# PyTorch DataLoader + torchvision transforms on PIL images in the worker processes
# --------------------------------------------------------------------------------------------

def torchvision_transform(size: int = SIZE) -> Any:
    from torchvision import transforms as T

    return T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(),
                      T.ColorJitter(brightness=0.2, contrast=0.2), T.ToTensor(), T.Normalize(MEAN, STD)])


def build_torch(root: str, threads: int, batch: int = BATCH, size: int = SIZE, num_workers: int = -1) -> Contender:
    import PIL
    import torch
    import torchvision
    from torch.utils.data import DataLoader
    from torchvision.datasets import ImageFolder

    nw = threads if num_workers < 0 else num_workers
    # ImageFolder's default loader: PIL Image.open(f).convert("RGB").
    dataset = ImageFolder(root, transform=torchvision_transform(size))
    loader = DataLoader(dataset, batch_size=batch, shuffle=True, num_workers=nw, persistent_workers=nw > 0,
                        generator=torch.Generator().manual_seed(0))

    def epoch() -> Iterator[Batch]:
        for img, lab in loader:
            yield img.numpy(), lab.numpy()

    return Contender(epoch, {"torch": torch.__version__, "torchvision": torchvision.__version__,
                             "pillow": PIL.__version__},
                     f"DataLoader(torchvision ImageFolder (PIL Image.open().convert('RGB')), batch_size={batch}, "
                     "shuffle=True, num_workers=cores, persistent_workers=True); transforms: "
                     f"RandomResizedCrop({size}) → RandomHorizontalFlip → ColorJitter(brightness=0.2, contrast=0.2) "
                     "→ ToTensor → Normalize(mean, std); output CHW")


# --------------------------------------------------------------------------------------------
# NVIDIA DALI, CPU only (device_id=None), handing PyTorch CPU tensors
# --------------------------------------------------------------------------------------------

def build_dali_torch(root: str, threads: int, batch: int = BATCH, size: int = SIZE, seed: int = 0) -> Any:
    """DALI's own pipeline for W3 on the CPU: file reader (shuffled), fused decode + random crop
    (``image_random_crop``, area 8-100 %, aspect 3/4-4/3), resize, brightness/contrast jitter,
    flip + normalise (``crop_mirror_normalize``), through ``DALIGenericIterator`` (torch
    tensors, the last batch partial). Returns ``(epoch, versions, notes)``; ``epoch()`` yields
    ``(image, label)`` torch tensors, HWC float32."""
    import nvidia.dali
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    @pipeline_def(batch_size=batch, num_threads=threads, device_id=None, seed=seed + 1)
    def pipe() -> Any:
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, pad_last_batch=True, name="reader")
        images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                               random_area=[0.08, 1.0], random_aspect_ratio=[0.75, 4 / 3])
        images = fn.resize(images, resize_x=size, resize_y=size)
        images = fn.brightness_contrast(images, brightness=fn.random.uniform(range=[0.8, 1.2]),
                                        contrast=fn.random.uniform(range=[0.8, 1.2]))
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="HWC",
                                          mean=[m * 255 for m in MEAN], std=[s * 255 for s in STD],
                                          mirror=fn.random.coin_flip())
        return images, labels

    loader = DALIGenericIterator(pipe(), ["image", "label"], reader_name="reader",
                                 last_batch_policy=LastBatchPolicy.PARTIAL, auto_reset=True)

    def epoch() -> Iterator[Any]:
        for out in loader:
            yield out[0]["image"], out[0]["label"]

    notes = (f"DALI pipeline_def(batch_size={batch}, num_threads=cores, device_id=None): readers.file(random_shuffle) "
             "→ decoders.image_random_crop(cpu) → resize(224x224) → brightness_contrast(0.8-1.2) → "
             "crop_mirror_normalize(coin-flip mirror, HWC float32); DALIGenericIterator(PARTIAL)")
    return epoch, {"nvidia-dali": nvidia.dali.__version__}, notes


# --------------------------------------------------------------------------------------------
# stoker
# --------------------------------------------------------------------------------------------

def build_stoker(root: str, threads: int, batch: int = BATCH) -> Contender:
    import stoker

    from examples.w3_imagenet import build_pipeline

    ds = build_pipeline(root, threads=threads, batch_size=batch, seed=0)

    def epoch() -> Iterator[Batch]:
        for b in ds.as_numpy_iterator():
            yield np.asarray(b["image"]), np.asarray(b["label"])

    return Contender(epoch, {"stoker": getattr(stoker, "__version__", "?")},
                     "examples.w3_imagenet.build_pipeline(root, threads=cores, batch_size=256, seed=0), "
                     "as_numpy_iterator()")


# Builders: (ImageFolder root, threads) → Contender.
CONTENDERS: dict[str, Callable[[str, int], Contender]] = {
    "stoker": build_stoker,
    "tf.data (ResNet preprocessing)": build_tf,
    "torch DataLoader (torchvision, workers=cores)": build_torch,
}
