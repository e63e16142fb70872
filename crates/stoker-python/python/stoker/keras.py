"""Keras 3: a stoker pipeline as a ``PyDataset``, and the step timer as a callback.

    model.fit(stoker.keras.PyDataset(ds), epochs=10)   # JAX, PyTorch or TensorFlow backend
    model.fit(ds.to_tf(), epochs=10)                   # TensorFlow backend: a tf.data.Dataset

:class:`PyDataset` hands Keras the pipeline's batches in the pipeline's order, one epoch of the
pipeline per Keras epoch (epoch ``n`` of ``fit`` is the pipeline's epoch ``n``: its reshuffles
and random ops draw from it). Keras asks a ``PyDataset`` for batches by index, and shuffles
those indexes when ``fit(shuffle=True)``; a pipeline is a stream, so the index is not used: the
i-th batch asked for is the pipeline's next one (shuffle in the pipeline). The elements must be
``(inputs, targets)`` or ``(inputs, targets, sample_weights)`` tuples, or dicts. The number of
batches per epoch is the pipeline's cardinality; when it is unknown, give ``fit`` a
``steps_per_epoch`` and the batches go on across the pipeline's epochs.

    timer = stoker.keras.StepTimer()
    model.fit(timer.wrap(ds), epochs=1, callbacks=[timer])
    print(timer.report())

Keras takes each batch inside its train step, where a callback cannot see it, so the data goes
through :meth:`StepTimer.wrap`, which times every ``next``; the callback marks where steps end.
A step is the time from one ``on_train_batch_end`` to the next (from ``on_train_begin`` for the
first); its input wait is the time spent in ``next`` within it. When Keras reads the wrapped
data ahead on another thread the wait overlaps the step and is not a stall; the report then
overstates the input share, so use this callback where Keras reads on the training thread (a
``PyDataset``/generator with ``workers=1``, or the JAX and PyTorch backends).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from .dataset import Dataset, DatasetIterator
from .errors import ArgumentTypeError, InvalidArgumentError
from .timing import StepReport
from .timing import StepTimer as _Timer

T = TypeVar("T")

try:  # Subclass Keras' Callback when Keras is there; Keras also accepts this duck-typed form.
    from keras.callbacks import Callback as _Base  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - depends on the environment

    class _Base:  # type: ignore[no-redef]
        def set_model(self, model: Any) -> None:
            self.model = model

        def set_params(self, params: Any) -> None:
            self.params = params


class StepTimer(_Base):  # type: ignore[misc]
    """A Keras callback that reports the input share of each training step."""

    def __init__(self, warmup: int = 5, synchronize: Callable[[], Any] | None = None) -> None:
        super().__init__()
        self.timer = _Timer(warmup=warmup, synchronize=synchronize)
        self._wait = 0.0
        self._last_end: float | None = None

    def wrap(self, data: Iterable[T]) -> Iterator[T]:
        """``data`` as a generator whose waits are counted."""
        clock = time.perf_counter
        for_each = iter(data)
        while True:
            t = clock()
            try:
                item = next(for_each)
            except StopIteration:
                return
            self._wait += clock() - t
            yield item

    def on_train_begin(self, logs: Any = None) -> None:
        self._last_end = time.perf_counter()
        self._wait = 0.0

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        # Evaluation and epoch-end work between epochs are not part of a training step.
        self._last_end = time.perf_counter()

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        if self._last_end is None:
            self._last_end = time.perf_counter()

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if self.timer.synchronize is not None:
            self.timer.synchronize()
        now = time.perf_counter()
        start = self._last_end if self._last_end is not None else now
        wait, self._wait = self._wait, 0.0
        wait = min(wait, now - start)
        self.timer.add_step(wait, now - start - wait)
        self._last_end = now

    def report(self) -> StepReport:
        return self.timer.report()


try:
    from keras.utils import PyDataset as _PyDatasetBase  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - depends on the environment

    class _PyDatasetBase:  # type: ignore[no-redef]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise ImportError("stoker.keras.PyDataset needs Keras 3: pip install keras")


class PyDataset(_PyDatasetBase):  # type: ignore[misc]
    """A stoker pipeline as a Keras 3 ``PyDataset``; see the module's documentation. Keras
    reads it on the training thread (``workers=1``): stoker has its own threads."""

    def __init__(self, dataset: Dataset) -> None:
        if not isinstance(dataset, Dataset):
            raise InvalidArgumentError(f"dataset must be a stoker.Dataset, got {type(dataset).__name__}")
        super().__init__(workers=1, use_multiprocessing=False)
        self._dataset = dataset
        self._epoch = 0
        self._it: DatasetIterator | None = None

    @property
    def num_batches(self) -> int | None:
        n = self._dataset.cardinality()
        return n if n >= 0 else None

    def __len__(self) -> int:
        n = self.num_batches
        if n is None:
            raise ArgumentTypeError("the pipeline's number of batches is not known")
        return n

    def __getitem__(self, index: int) -> Any:
        if self._it is None:
            self._it = self._dataset.iterator(epoch=self._epoch)
        try:
            return next(self._it)
        except StopIteration:
            if self.num_batches is not None:
                raise IndexError(f"batch {index}: the epoch has {self.num_batches} batches") from None
        # Length unknown: Keras counts the steps; the batches go on with the next epoch.
        self._epoch += 1
        self._it = self._dataset.iterator(epoch=self._epoch)
        return next(self._it)

    def on_epoch_begin(self) -> None:
        # Batches read before the first epoch (Keras may look at a few to learn their
        # shapes) do not count: the epoch starts over.
        self._close()
        self._it = None

    def on_epoch_end(self) -> None:
        self._close()
        self._epoch += 1

    def _close(self) -> None:
        if self._it is not None:
            self._it.close()
            self._it = None


__all__ = ["PyDataset", "StepTimer"]
