"""A step timer for any training loop: how much of each step is spent waiting for input.

    timer = stoker.timed(loader, synchronize=torch.cuda.synchronize)
    for batch in timer:
        train_step(batch)
    print(timer.report())

A step is the wait for its batch (the time inside the iterable's ``next``) plus the rest (from
the moment the batch is handed over until the loop asks for the next one). The verdict uses the
TensorFlow Profiler's bands: input ≥ 20 % of step time is *highly* input-bound, ≥ 5 %
*moderately*, else not input-bound.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np

T = TypeVar("T")

HIGHLY_INPUT_BOUND_PERCENT = 20.0
"""Input share of step time from which a run is *highly* input-bound (TensorFlow Profiler)."""
MODERATELY_INPUT_BOUND_PERCENT = 5.0
"""Input share of step time from which a run is *moderately* input-bound."""


def input_bound_verdict(input_percent: float) -> str:
    """``"highly input-bound"``, ``"moderately input-bound"`` or ``"not input-bound"``."""
    if input_percent >= HIGHLY_INPUT_BOUND_PERCENT:
        return "highly input-bound"
    if input_percent >= MODERATELY_INPUT_BOUND_PERCENT:
        return "moderately input-bound"
    return "not input-bound"


@dataclass(frozen=True)
class StepReport:
    """What a :class:`StepTimer` measured. Times in seconds, one entry per measured step."""

    input_s: list[float]
    """Per step: time blocked waiting for the batch."""
    compute_s: list[float]
    """Per step: the rest of the step (after ``synchronize``, when given)."""
    warmup_steps: int
    """Steps measured but left out (the first ones: compilation, caches filling)."""

    @property
    def steps(self) -> int:
        return len(self.input_s)

    @property
    def step_s(self) -> list[float]:
        return [a + b for a, b in zip(self.input_s, self.compute_s)]

    @property
    def input_percent(self) -> float:
        """Input wait as a share of total step time, in percent (0 with no steps)."""
        total = sum(self.step_s)
        return 100.0 * sum(self.input_s) / total if total > 0 else 0.0

    @property
    def verdict(self) -> str:
        return input_bound_verdict(self.input_percent)

    def percentile_ms(self, values: list[float], q: float) -> float:
        return float(np.percentile(values, q) * 1e3) if values else float("nan")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (times in milliseconds)."""
        step = self.step_s
        return {
            "steps": self.steps,
            "warmup_steps": self.warmup_steps,
            "input_percent": self.input_percent,
            "verdict": self.verdict,
            "step_ms_p50": self.percentile_ms(step, 50),
            "step_ms_p90": self.percentile_ms(step, 90),
            "input_ms_p50": self.percentile_ms(self.input_s, 50),
            "input_ms_p90": self.percentile_ms(self.input_s, 90),
            "compute_ms_p50": self.percentile_ms(self.compute_s, 50),
            "total_input_s": sum(self.input_s),
            "total_step_s": sum(step),
        }

    def __str__(self) -> str:
        if not self.steps:
            return f"no steps measured yet (the first {self.warmup_steps} are warm-up)"
        d = self.to_dict()
        return (
            f"{d['verdict']}: {d['input_percent']:.1f} % of step time waiting for input "
            f"({d['steps']} steps after {d['warmup_steps']} warm-up; step p50 "
            f"{d['step_ms_p50']:.1f} ms, p90 {d['step_ms_p90']:.1f} ms; input wait p50 "
            f"{d['input_ms_p50']:.1f} ms, p90 {d['input_ms_p90']:.1f} ms)"
        )


@dataclass
class StepTimer:
    """Collects per-step input wait and the rest of each step. Feed it with :meth:`fetched`
    (a batch arrived after waiting ``wait_s``) and :meth:`step_done` (the step that used it
    ended), or let :func:`timed` or :class:`stoker.keras.StepTimer` do it."""

    warmup: int = 5
    synchronize: Callable[[], Any] | None = None
    _input: list[float] = field(default_factory=list)
    _compute: list[float] = field(default_factory=list)
    _seen: int = 0

    def add_step(self, input_s: float, compute_s: float) -> None:
        """Records one whole step (warm-up steps are counted, then left out)."""
        self._seen += 1
        if self._seen > self.warmup:
            self._input.append(max(input_s, 0.0))
            self._compute.append(max(compute_s, 0.0))

    def report(self) -> StepReport:
        return StepReport(list(self._input), list(self._compute), min(self._seen, self.warmup))


class timed(Generic[T]):  # noqa: N801 - used like a function: `for b in stoker.timed(loader)`
    """Wraps any iterable (a stoker dataset, a PyTorch ``DataLoader``, a generator) and times
    each training step. ``synchronize`` (e.g. ``torch.cuda.synchronize``) is called when the
    loop asks for the next batch, before the step's end is taken, so that device work queued
    by the step is counted in it. The first ``warmup`` steps are left out. The last step is
    counted when the loop asks for another batch; a step the loop leaves with ``break`` is not.
    """

    def __init__(
        self,
        iterable: Iterable[T],
        warmup: int = 5,
        synchronize: Callable[[], Any] | None = None,
    ) -> None:
        self.iterable = iterable
        self.timer = StepTimer(warmup=warmup, synchronize=synchronize)

    def __iter__(self) -> Iterator[T]:
        it = iter(self.iterable)
        handed_over: float | None = None  # when the previous batch went to the loop
        wait = 0.0
        clock = time.perf_counter
        while True:
            if handed_over is not None and self.timer.synchronize is not None:
                self.timer.synchronize()
            asked = clock()
            if handed_over is not None:
                self.timer.add_step(wait, asked - handed_over)
            try:
                item = next(it)
            except StopIteration:
                return
            handed_over = clock()
            wait = handed_over - asked
            yield item

    def report(self) -> StepReport:
        """The measurements so far (also usable while the loop runs)."""
        return self.timer.report()

    def __len__(self) -> int:
        return len(self.iterable)  # type: ignore[arg-type]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


@dataclass(frozen=True)
class Headspace:
    """What :func:`headspace` measured: the training step fed live, and fed from memory."""

    live: StepReport
    """Steps on batches as the iterable delivers them."""
    replayed: StepReport
    """The same steps on the same batches, replayed from memory (input costs nothing)."""

    @property
    def speedup(self) -> float:
        """How many times faster steps go when input is free (1.0: input costs nothing now)."""
        live, free = _mean(self.live.step_s), _mean(self.replayed.step_s)
        return live / free if free > 0 else float("inf")

    def __str__(self) -> str:
        return (
            f"with input free, steps would run {self.speedup:.2f}x as fast "
            f"({_mean(self.live.step_s) * 1e3:.1f} -> {_mean(self.replayed.step_s) * 1e3:.1f} ms "
            f"per step); live: {self.live}"
        )


def headspace(
    step: Callable[[T], Any],
    iterable: Iterable[T],
    steps: int = 50,
    warmup: int = 5,
    synchronize: Callable[[], Any] | None = None,
) -> Headspace:
    """Runs ``step`` on ``warmup + steps`` batches of ``iterable`` as they come, keeping the
    batches, then again on the kept batches replayed from memory: the headspace is how much
    faster the training step would go if input were free. The kept batches stay in memory
    until it returns."""
    kept: list[T] = []
    live = timed(iterable, warmup=warmup, synchronize=synchronize)
    for batch in live:
        step(batch)
        kept.append(batch)
        if len(kept) >= warmup + steps:
            break
    # The loop left with `break`, so its last step is not counted (means are compared).
    replay = timed(kept, warmup=warmup, synchronize=synchronize)
    for batch in replay:
        step(batch)
    return Headspace(live.report(), replay.report())


__all__ = [
    "Headspace",
    "headspace",
    "HIGHLY_INPUT_BOUND_PERCENT",
    "MODERATELY_INPUT_BOUND_PERCENT",
    "StepReport",
    "StepTimer",
    "input_bound_verdict",
    "timed",
]
