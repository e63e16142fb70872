"""The decode-only limit of W2/W3: every file already in memory, decoded alone, one at a time,
on one thread (the child is pinned to one core). The limit for N cores is that rate × N.

Decoders (each returns uint8 RGB ``(H, W, 3)`` arrays):

- ``stoker``: ``Dataset.from_tensor_slices(np.array(blobs, dtype=object)).with_options(threads=1)
  .map(stoker.ops.decode_image("value", channels=3))``, iterated (this is the limit the stoker
  pipelines are measured against);
- ``PIL``: ``np.asarray(Image.open(BytesIO(b)).convert("RGB"))`` (libjpeg-turbo / zlib);
- ``OpenCV``: ``cv2.imdecode(np.frombuffer(b, np.uint8), IMREAD_COLOR_RGB)`` (or IMREAD_COLOR
  + cvtColor where that flag is missing), ``cv2.setNumThreads(1)``;
- ``tf.io``: ``tf.io.decode_jpeg`` / ``tf.io.decode_png(channels=3)``, eagerly, on string
  tensors made up front, with 1 intra-/inter-op thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

import numpy as np

PREFIX = "decode-only: "
DECODERS = ["stoker", "PIL", "OpenCV", "tf.io"]
#: The decoder whose rate is "the" decode-only limit stoker's pipelines are compared with.
LIMIT_DECODER = PREFIX + "stoker"


class Decoder(NamedTuple):
    epoch: Callable[[], Iterator[np.ndarray]]
    versions: dict
    notes: str


def names() -> list[str]:
    return [PREFIX + d for d in DECODERS]


def build(name: str, blobs: Sequence[bytes], fmt: str, threads: int = 1) -> Decoder:
    """``name``: one of ``names()``; ``fmt``: "png" or "jpeg" (for tf.io's op)."""
    kind = name[len(PREFIX):] if name.startswith(PREFIX) else name
    if kind == "stoker":
        import stoker

        ds = (stoker.Dataset.from_tensor_slices(np.array(list(blobs), dtype=object))
              .with_options(threads=threads)
              .map(stoker.ops.decode_image("value", channels=3)))

        def epoch() -> Iterator[np.ndarray]:
            return ds.as_numpy_iterator()

        return Decoder(epoch, {"stoker": getattr(stoker, "__version__", "?")},
                       f"Dataset.from_tensor_slices(bytes).with_options(threads={threads})"
                       ".map(ops.decode_image('value', channels=3)), as_numpy_iterator()")
    if kind == "PIL":
        from io import BytesIO

        import PIL
        from PIL import Image

        def epoch() -> Iterator[np.ndarray]:
            for b in blobs:
                yield np.asarray(Image.open(BytesIO(b)).convert("RGB"))

        return Decoder(epoch, {"pillow": PIL.__version__},
                       'np.asarray(Image.open(BytesIO(b)).convert("RGB"))')
    if kind == "OpenCV":
        import cv2

        cv2.setNumThreads(threads)
        rgb_flag = getattr(cv2, "IMREAD_COLOR_RGB", None)

        def epoch() -> Iterator[np.ndarray]:
            for b in blobs:
                buf = np.frombuffer(b, np.uint8)
                if rgb_flag is not None:
                    a = cv2.imdecode(buf, rgb_flag)
                else:
                    a = cv2.imdecode(buf, cv2.IMREAD_COLOR)
                    a = None if a is None else cv2.cvtColor(a, cv2.COLOR_BGR2RGB)
                if a is None:
                    raise ValueError("cv2.imdecode failed")
                yield a

        how = "IMREAD_COLOR_RGB" if rgb_flag is not None else "IMREAD_COLOR) + cvtColor(BGR2RGB"
        return Decoder(epoch, {"opencv": cv2.__version__},
                       f"cv2.imdecode(np.frombuffer(b, np.uint8), {how}), cv2.setNumThreads({threads})")
    if kind == "tf.io":
        import tensorflow as tf

        tensors = [tf.constant(b) for b in blobs]
        op_name = "decode_png" if fmt == "png" else "decode_jpeg"
        op = getattr(tf.io, op_name)

        def epoch() -> Iterator[np.ndarray]:
            for t in tensors:
                yield op(t, channels=3).numpy()

        return Decoder(epoch, {"tensorflow": tf.__version__},
                       f"tf.io.{op_name}(t, channels=3).numpy() eagerly, on tf.constant(bytes) made up front")
    raise KeyError(f"unknown decoder {name!r} (known: {names()})")
