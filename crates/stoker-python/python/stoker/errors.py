"""Exception classes of stoker. Each engine error kind has its own class.

I/O errors are raised as the built-in ``OSError`` family (``FileNotFoundError`` for a missing
file), with ``filename`` set. Errors raised by your own Python functions come back unchanged.
"""

from __future__ import annotations


class StokerError(Exception):
    """Base class of stoker's own errors."""


class CorruptRecordError(StokerError, ValueError):
    """A TFRecord's framing is damaged: bad CRC, truncated record, impossible length.

    ``file``, ``record`` (index in the file, from 0) and ``offset`` (byte offset of the
    record's header in the decompressed file) say where.
    """

    file: str | None = None
    record: int | None = None
    offset: int | None = None


class InvalidRecordError(StokerError, ValueError):
    """A record's content is not what an op expected (not an Example, wrong feature type,
    missing required feature, wrong length). ``op``, ``file``, ``record`` and ``offset`` say
    where, when the record came from a file."""

    op: str | None = None
    file: str | None = None
    record: int | None = None
    offset: int | None = None


class SchemaError(StokerError, ValueError):
    """The pipeline cannot work; raised when it is built. ``step`` names the step."""

    step: str | None = None


class InvalidArgumentError(StokerError, ValueError):
    """An op got data it cannot handle at run time. ``op`` names it."""

    op: str | None = None


class WorkerPanicError(StokerError, RuntimeError):
    """A worker thread panicked (a bug in stoker). ``step`` names the stage."""

    step: str | None = None


class SpecError(StokerError, ValueError):
    """A pipeline spec file could not be read, or a pipeline cannot be saved as one."""


class InternalError(StokerError, RuntimeError):
    """An internal invariant does not hold (a bug in stoker)."""


__all__ = [
    "StokerError",
    "CorruptRecordError",
    "InvalidRecordError",
    "SchemaError",
    "InvalidArgumentError",
    "WorkerPanicError",
    "SpecError",
    "InternalError",
]
