"""Keras 3: a stoker pipeline as a ``PyDataset``, and the step timer as a callback.

    model.fit(stoker.keras.PyDataset(ds), epochs=10)   # JAX, PyTorch or TensorFlow backend
    model.fit(ds.to_tf(), epochs=10)                   # TensorFlow backend: a tf.data.Dataset

:class:`PyDataset` hands Keras the pipeline's batches in the pipeline's order, one pass of the
pipeline per Keras epoch: pass ``n`` is the pipeline's epoch ``n`` (its reshuffles and random
ops draw from it; a pass Keras starts only to look at a first batch, to build the model, does
not count). It is its own Keras data adapter, so Keras takes each pass as an iterator (not
batches by index, which ``fit(shuffle=True)`` would shuffle: shuffle in the pipeline), on any
backend. An epoch ends where the pass ends, also when the number of batches is not known;
with ``steps_per_epoch`` Keras takes that many per epoch, going on through the pass, and a
pass that ends first ends its epoch early (as with a tf.data dataset; ``.repeat()`` the
pipeline to go on across passes). The elements must be ``(inputs, targets)`` or ``(inputs,
targets, sample_weights)`` tuples (``ops.select([...], as_tuple=True)`` makes one of a dict's
fields), or dicts of inputs. Keras hands ``fit(class_weight=...)`` to its own adapters only:
give weights as ``sample_weights`` in the elements. Keras without data adapters reads it by
index, from several threads: that works too (the i-th batch asked for is the next one), and
an epoch of unknown length then needs ``steps_per_epoch``, the batches going on across the
pipeline's epochs.

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

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from .dataset import Dataset, DatasetIterator, tf_signature
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


try:
    # Keras 3 takes an object that is its own data adapter as it is, and then asks it for each
    # epoch's batches as an iterator, which ends where the pipeline's pass ends. Through
    # Keras' PyDataset adapter an epoch of unknown length could not end, and Keras would read
    # a pass ahead on another thread while closing the last.
    from keras.src.trainers.data_adapters import data_adapter_utils as _utils  # type: ignore[import-not-found]
    from keras.src.trainers.data_adapters.data_adapter import (  # type: ignore[import-not-found]
        DataAdapter as _AdapterBase,
    )
except ImportError:  # pragma: no cover - depends on the environment
    _utils = None

    class _AdapterBase:  # type: ignore[no-redef]
        pass


def _for_keras(element: Any) -> Any:
    """An element as Keras takes a batch: ``(inputs,)``, ``(inputs, targets)``,
    ``(inputs, targets, sample_weights)`` or a dict of inputs."""
    if isinstance(element, dict):
        return element
    if not isinstance(element, tuple):
        return (element,)
    if not 1 <= len(element) <= 3:
        raise InvalidArgumentError(
            f"stoker.keras.PyDataset: an element is a tuple of {len(element)}; Keras takes (inputs,), "
            "(inputs, targets) or (inputs, targets, sample_weights), or a dict of inputs "
            "(ops.select([...], as_tuple=True) makes such a tuple of a dict's fields)"
        )
    return element


class PyDataset(_PyDatasetBase, _AdapterBase):  # type: ignore[misc]
    """A stoker pipeline as a Keras 3 ``PyDataset``; see the module's documentation. Keras
    reads it on the training thread (``workers=1``): stoker has its own threads."""

    def __init__(self, dataset: Dataset) -> None:
        if not isinstance(dataset, Dataset):
            raise InvalidArgumentError(f"dataset must be a stoker.Dataset, got {type(dataset).__name__}")
        super().__init__(workers=1, use_multiprocessing=False)
        self._dataset = dataset
        # Keras calls in from several threads (its epoch loop, tf.data's threads).
        self._lock = threading.Lock()
        self._epoch = 0
        self._it: DatasetIterator | None = None
        # The pipeline's epoch of the next pass Keras starts.
        self._next_pass = 0

    @property
    def num_batches(self) -> int | None:
        n = self._dataset.cardinality()
        return n if n >= 0 else None

    def __len__(self) -> int:
        n = self.num_batches
        if n is None:
            raise ArgumentTypeError("the pipeline's number of batches is not known")
        return n

    # ------------------------------------------------ Keras' data adapter: a pass per epoch
    def _pass(self) -> Iterator[Any]:
        """One pass: the pipeline's next epoch, to its end."""
        with self._lock:
            epoch = self._next_pass
            self._next_pass += 1
        it = self._dataset.iterator(epoch=epoch)
        handed_out = 0
        ended = False
        try:
            for element in it:
                handed_out += 1
                yield _for_keras(element)
            ended = True
        finally:
            it.close()
            # Keras may start a pass only to look at its first batch (to build the model):
            # that does not use up the epoch.
            if not ended and handed_out <= 1:
                with self._lock:
                    if self._next_pass == epoch + 1:
                        self._next_pass = epoch

    def get_numpy_iterator(self) -> Any:
        return _utils.get_numpy_iterator(self._pass())

    def get_jax_iterator(self) -> Any:
        return _utils.get_jax_iterator(self._pass())

    def get_torch_dataloader(self) -> Any:
        return _utils.get_torch_dataloader(self._pass())

    def get_tf_dataset(self) -> Any:
        import tensorflow as tf  # noqa: PLC0415 - the TensorFlow backend only

        spec = self._dataset.element_spec
        if spec is None:
            raise InvalidArgumentError("stoker.keras.PyDataset: a run of the pipeline handed out no element")
        return tf.data.Dataset.from_generator(self._pass, output_signature=tf_signature(_for_keras(spec)))

    @property
    def batch_size(self) -> int | None:
        return None

    @property
    def has_partial_batch(self) -> bool | None:
        return None

    @property
    def partial_batch_size(self) -> int | None:
        return None

    # ------------------------------------ Keras' PyDataset protocol (Keras without adapters)
    def __getitem__(self, index: int) -> Any:
        with self._lock:
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
        with self._lock:
            self._close()

    def on_epoch_end(self) -> None:
        with self._lock:
            self._close()
            self._epoch += 1

    def _close(self) -> None:
        if self._it is not None:
            self._it.close()
            self._it = None


__all__ = ["PyDataset", "StepTimer"]
