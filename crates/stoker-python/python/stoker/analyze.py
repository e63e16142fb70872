"""``stoker.analyze``: why did the accelerator sit idle? Reads the traces PyTorch (Kineto, also
the 2021 schema and ROCm), TensorFlow (1.x timeline) and the TensorFlow and JAX profilers (XSpace
``*.xplane.pb``, and the trace viewer JSON they export) write; ``stoker analyze TRACE…`` on the
command line does the same.

    a = stoker.analyze("resnet50.pt.trace.json.gz")
    print(a)                      # the summary and the recommendations
    a.input_percent, a.verdict    # 39.8, "highly input-bound"
    stoker.analyze(path, html="why.html")  # and the HTML report
    stoker.analyze([before, after], compare=True)  # two runs side by side
"""

from __future__ import annotations

import os
from typing import Any, overload

from . import _stoker
from .errors import InvalidArgumentError


class TraceAnalysis:
    """What :func:`analyze` found. ``raw`` holds everything (per step, gaps, copies, kernels)."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw
        self.verdict: str = raw["verdict"]
        """TensorFlow Profiler's bands: highly (≥ 20 %), moderately (≥ 5 %) or not input-bound;
        "cannot tell ..." for a trace without step markers."""
        self.input_percent: float = raw["input_percent"]
        self.step_ms: float = raw["step_ms"]
        self.busy_percent: float = raw["busy_percent"]
        """The device's compute over the steps' time (xprof's window)."""
        self.busy_percent_device_span: float | None = raw.get("busy_percent_device_span")
        """The device's compute from its first event to its last (HTA's and TraceLens'
        window); ``None`` without device activity."""
        self.idle_ms_per_step_by_cause: dict[str, float] = raw["gaps_ms_per_step"]
        """The device's idle time per step by what the device and the host were doing: ``input``,
        ``communication`` (collectives), ``h2d``, ``copies`` (device-to-host / device-to-device),
        ``queued`` (the next kernel was launched but had not started: the device held it back),
        ``sync``, ``launch``, ``host_ops``, ``python`` (inside a step, no traced op), ``untraced``.
        Each idle moment is credited to the first present, so they add up to the idle time."""
        self.idle_by_cause: list[dict[str, Any]] = raw["idle_by_cause"]
        """The causes with idle time, each with ``ms_per_step``, ``share_of_idle`` and its
        evidence: ``top`` (what overlapped it: host spans, device work with its device and
        stream) and a ``note``."""
        self.steps: list[dict[str, Any]] = raw["steps"]
        self.recommendations: list[dict[str, str]] = raw["recommendations"]
        self.memory: list[dict[str, Any]] = raw.get("memory", [])
        """Per device, from the allocator's events (``profile_memory=True``): peak allocated
        and reserved bytes, when the peak was reached (``peak_at_ms``, ``peak_step``), and per
        step what was allocated at its start, its peak and its end. ``in_use`` names what
        "allocated" counts (from an XSpace: the heap plus the stack, ``peak_stack_bytes`` of it
        at the peak, as xprof's memory profile; ``device`` is xprof's key, the device where the
        events name one, with the ``allocator``'s name beside it)."""
        self.warnings: list[str] = raw.get("warnings", [])
        """Values in the trace that cannot be true, left out of the analysis (a duration over a
        day, a time beyond any clock's, a copy or an allocator total over a petabyte): per
        kind, how many and the first. Also printed with the summary."""

    def to_dict(self) -> dict[str, Any]:
        return self.raw

    def __str__(self) -> str:
        return str(self.raw["text"])

    def __repr__(self) -> str:
        return f"<TraceAnalysis {self.verdict}: {self.input_percent:.1f} % input, {self.step_ms:.1f} ms/step>"


class TraceComparison:
    """Two runs side by side (:func:`analyze` with ``compare=True``): ``rows`` (each figure
    before and after, its change, in points for shares), ``summary`` (what changed most), the
    verdicts. ``raw`` holds everything; ``str()`` is the text report."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw
        self.verdict_before: str = raw["verdict_before"]
        self.verdict_after: str = raw["verdict_after"]
        self.rows: list[dict[str, Any]] = raw["rows"]
        self.summary: list[str] = raw["summary"]

    def row(self, metric: str) -> dict[str, Any]:
        """The row of ``metric`` (e.g. ``"step time"``, ``"input share"``)."""
        return next(r for r in self.rows if r["metric"] == metric)

    def to_dict(self) -> dict[str, Any]:
        return self.raw

    def __str__(self) -> str:
        return str(self.raw["text"])


@overload
def analyze(path: str | os.PathLike[str], html: str | os.PathLike[str] | None = None) -> TraceAnalysis: ...
@overload
def analyze(
    path: list[str | os.PathLike[str]] | tuple[str | os.PathLike[str], str | os.PathLike[str]],
    html: str | os.PathLike[str] | None = None,
    *,
    compare: bool = ...,
) -> TraceComparison: ...
def analyze(path: Any, html: str | os.PathLike[str] | None = None, *, compare: bool = False) -> Any:
    """Analyses one trace file (``.json``, ``.json.gz`` or ``.xplane.pb``); with ``html``, also writes the
    self-contained HTML report there (step time by cause, idle-gap breakdown, a timeline of the
    longest step, step and kernel tables). Raises ``FileNotFoundError``, or ``ValueError`` naming
    the file and the place (line and column, or byte offset) for a trace it cannot read.

    ``analyze([before, after], compare=True)`` compares two runs (``stoker analyze --compare``):
    step time and its breakdown side by side, what changed and by how much
    (:class:`TraceComparison`; with ``html``, the comparison's report)."""
    out = None if html is None else os.fspath(html)
    if compare:
        if isinstance(path, (str, os.PathLike)) or len(path) != 2:
            raise InvalidArgumentError("analyze: compare=True takes two traces, [before, after]")
        before, after = (os.fspath(p) for p in path)
        return TraceComparison(_stoker.compare_traces(before, after, out))
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidArgumentError("analyze: path must be one trace (or two with compare=True)")
    return TraceAnalysis(_stoker.analyze_trace(os.fspath(path), out))


__all__ = ["TraceAnalysis", "TraceComparison", "analyze"]
