"""W4 mnist-small: the contenders (tf.data, PyTorch DataLoader with 0 and 2 workers, stoker).

Every contender returns a ``Contender``: ``epoch()`` gives a fresh iterator over one epoch of
``(x, y)`` NumPy batches (x (128, 28, 28) float32 in [0, 1], y (128,) int64; the last batch
of an epoch has 60000 % 128 = 96 examples). Epoch 1 fills the cache; the timed epochs are the
ones after it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np

BATCH = 128

Batch = tuple[np.ndarray, np.ndarray]


class Contender(NamedTuple):
    epoch: Callable[[], Iterator[Batch]]
    versions: dict
    notes: str


def build_tf(x: np.ndarray, y: np.ndarray, threads: int, batch: int = BATCH) -> Contender:
    import tensorflow as tf

    opts = tf.data.Options()
    opts.threading.private_threadpool_size = threads
    ds = (tf.data.Dataset.from_tensor_slices((x, y))
          .map(lambda a, b: (tf.cast(a, tf.float32) / 255.0, b), num_parallel_calls=tf.data.AUTOTUNE)
          .batch(batch)
          .cache()
          .prefetch(tf.data.AUTOTUNE)
          .with_options(opts))

    def epoch() -> Iterator[Batch]:
        return ds.as_numpy_iterator()

    return Contender(epoch, {"tensorflow": tf.__version__},
                     "from_tensor_slices((x, y)).map(/255, AUTOTUNE).batch(128).cache().prefetch(AUTOTUNE)")


def _torch_loader(x: np.ndarray, y: np.ndarray, num_workers: int, batch: int) -> Any:
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Arrays(Dataset):
        """Map-style dataset over in-memory arrays. The rescale to float32 / 255 is done once,
        up front (this is the "cache": the timed epochs serve already-rescaled examples, as
        tf.data's cache does); ``__getitem__`` returns one example, default collate stacks."""

        def __init__(self) -> None:
            self.x = torch.from_numpy(x).to(torch.float32).div_(255.0)
            self.y = torch.from_numpy(y)

        def __len__(self) -> int:
            return len(self.y)

        def __getitem__(self, i: int) -> tuple[Any, Any]:
            return self.x[i], self.y[i]

    return DataLoader(Arrays(), batch_size=batch, shuffle=False, num_workers=num_workers,
                      persistent_workers=num_workers > 0)


def build_torch(x: np.ndarray, y: np.ndarray, threads: int, num_workers: int = 0, batch: int = BATCH) -> Contender:
    import torch

    loader = _torch_loader(x, y, num_workers, batch)

    def epoch() -> Iterator[Batch]:
        for bx, by in loader:
            yield bx.numpy(), by.numpy()

    return Contender(epoch, {"torch": torch.__version__},
                     f"DataLoader(map-style Dataset over float32 arrays, batch_size=128, num_workers={num_workers}"
                     f", persistent_workers={num_workers > 0})")


def _stoker_fields(elem: Any) -> Batch:
    if isinstance(elem, dict):
        keys = ("x", "y") if "x" in elem else ("0", "1") if "0" in elem else tuple(elem)[:2]
        return elem[keys[0]], elem[keys[1]]
    bx, by = elem[:2]
    return bx, by


def build_stoker(x: np.ndarray, y: np.ndarray, threads: int) -> Contender:
    import stoker

    from examples.w4_mnist import build_pipeline

    ds = build_pipeline(x, y, threads=threads)

    def epoch() -> Iterator[Batch]:
        for b in ds.as_numpy_iterator():
            bx, by = _stoker_fields(b)
            yield np.asarray(bx), np.asarray(by)

    return Contender(epoch, {"stoker": getattr(stoker, "__version__", "?")},
                     "examples.w4_mnist.build_pipeline(x, y, threads=cores), as_numpy_iterator()")


CONTENDERS = {
    "stoker": build_stoker,
    "tf.data": build_tf,
    "torch DataLoader (0 workers)": lambda x, y, threads: build_torch(x, y, threads, num_workers=0),
    "torch DataLoader (2 workers)": lambda x, y, threads: build_torch(x, y, threads, num_workers=2),
}
