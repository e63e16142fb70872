"""``stoker.analyze``: why did the accelerator sit idle? Reads the traces PyTorch (Kineto, also
the 2021 schema and ROCm), TensorFlow (1.x timeline) and the TensorFlow and JAX profilers (XSpace
``*.xplane.pb``, and the trace viewer JSON they export) write; ``stoker analyze TRACE…`` on the
command line does the same.

    a = stoker.analyze("resnet50.pt.trace.json.gz")
    print(a)                      # the summary and the recommendations
    a.input_percent, a.verdict    # 39.8, "highly input-bound"
    stoker.analyze(path, html="why.html")  # and the HTML report
"""

from __future__ import annotations

import os
from typing import Any

from . import _stoker


class TraceAnalysis:
    """What :func:`analyze` found. ``raw`` holds everything (per step, gaps, copies, kernels)."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw
        self.verdict: str = raw["verdict"]
        """TensorFlow Profiler's bands: highly (≥ 20 %), moderately (≥ 5 %) or not input-bound."""
        self.input_percent: float = raw["input_percent"]
        self.step_ms: float = raw["step_ms"]
        self.busy_percent: float = raw["busy_percent"]
        self.idle_ms_per_step_by_cause: dict[str, float] = raw["gaps_ms_per_step"]
        self.steps: list[dict[str, Any]] = raw["steps"]
        self.recommendations: list[dict[str, str]] = raw["recommendations"]
        self.memory: list[dict[str, Any]] = raw.get("memory", [])
        """Per device, from the allocator's events (``profile_memory=True``): peak allocated
        and reserved bytes, when the peak was reached (``peak_at_ms``, ``peak_step``), and per
        step what was allocated at its start, its peak and its end."""

    def to_dict(self) -> dict[str, Any]:
        return self.raw

    def __str__(self) -> str:
        return str(self.raw["text"])

    def __repr__(self) -> str:
        return f"<TraceAnalysis {self.verdict}: {self.input_percent:.1f} % input, {self.step_ms:.1f} ms/step>"


def analyze(path: str | os.PathLike[str], html: str | os.PathLike[str] | None = None) -> TraceAnalysis:
    """Analyses one trace file (``.json``, ``.json.gz`` or ``.xplane.pb``); with ``html``, also writes the
    self-contained HTML report there (step time by cause, idle-gap breakdown, a timeline of the
    longest step, step and kernel tables). Raises ``FileNotFoundError``, or ``ValueError`` naming
    the file and the place (line and column, or byte offset) for a trace it cannot read."""
    return TraceAnalysis(_stoker.analyze_trace(os.fspath(path), None if html is None else os.fspath(html)))


__all__ = ["TraceAnalysis", "analyze"]
