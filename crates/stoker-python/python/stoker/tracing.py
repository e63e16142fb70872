"""The timeline: ``stoker.trace(path)`` or ``STOKER_TRACE=path``.

    with stoker.trace("run.trace.json"):
        for batch in ds:
            ...

records, per engine thread, a span for each stage's work on an element, each op inside a map,
waits for input and waits on a full buffer, plus every buffer's fill level (the "queue graph"),
and writes them as Chrome Trace Event JSON that https://ui.perfetto.dev and chrome://tracing
open. Tracing off costs nothing measurable. Each thread keeps its last 131,072 spans; spans
shorter than 10 µs are counted, not kept; the file's ``otherData`` says what was dropped.
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Iterator
from contextlib import contextmanager

from . import _stoker


@contextmanager
def trace(path: str | os.PathLike[str]) -> Iterator[None]:
    """Records the timeline while the block runs, then writes it to ``path``."""
    _stoker.trace_start()
    try:
        yield
    finally:
        _stoker.trace_stop()
        _stoker.trace_write(path)


def _trace_from_environment() -> None:
    """``STOKER_TRACE=path``: trace the whole process, write the file when it exits."""
    path = os.environ.get("STOKER_TRACE")
    if not path:
        return
    _stoker.trace_start()

    def write() -> None:
        _stoker.trace_stop()
        _stoker.trace_write(path)

    atexit.register(write)


__all__ = ["trace"]
