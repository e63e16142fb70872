"""Spans in the frameworks' profilers for the time a training loop waits for stoker's next
batch, named ``stoker:next#<where>``: ``stoker analyze`` counts them as waiting for input, as
it counts a ``DataLoader``'s ``__next__`` spans. PyTorch's: a ``record_function`` while
``torch.profiler`` records (nothing otherwise); JAX's: a ``TraceAnnotation`` (a TraceMe, which
does nothing unless a JAX trace is being recorded). Neither framework is imported here: a span
is made only in a process that imported it already."""

from __future__ import annotations

import contextlib
import sys
from typing import Any

NAME = "stoker:next"


def next_span(where: str) -> Any:
    """A context manager around one wait for the next batch."""
    prof = sys.modules.get("torch.autograd.profiler")
    if prof is not None and getattr(prof, "_is_profiler_enabled", False):
        return prof.record_function(f"{NAME}#{where}")
    jax_profiler = sys.modules.get("jax.profiler")
    if jax_profiler is not None:
        return jax_profiler.TraceAnnotation(f"{NAME}#{where}")
    return contextlib.nullcontext()
