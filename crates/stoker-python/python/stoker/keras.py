"""The step timer as a Keras callback.

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


__all__ = ["StepTimer"]
