"""Exception classes of stoker.

Every error stoker raises derives from :class:`StokerError`, and each engine and analyzer error
kind has its own class. The classes are made by the extension module when it is imported (so
raising one never depends on importing Python code) and re-exported here. Each also derives from
the built-in class that fits it, so ``except ValueError`` and ``except OSError`` keep working:

- ``CorruptRecordError``, ``InvalidRecordError``, ``SchemaError``, ``InvalidArgumentError``,
  ``SpecError``, ``TraceError``: also ``ValueError``; ``ArgumentTypeError`` (an argument of the
  wrong type) is an ``InvalidArgumentError`` and a ``TypeError``.
- ``FileError`` (``errno``, ``strerror``, ``filename`` set): also ``OSError``;
  ``MissingFileError`` is also a ``FileNotFoundError``, ``FilePermissionError`` a
  ``PermissionError``.
- ``WorkerPanicError``, ``InternalError`` (bugs in stoker), ``ResourceError`` (a thread could
  not be started): also ``RuntimeError``.

Every one has ``stage`` (the pipeline stage it came from) and ``op`` (the op), ``None`` where
not known; the record errors also ``file``, ``record`` and ``offset``.

Errors raised by your own Python functions come back unchanged, with a note (PEP 678) naming the
stage they came from. Python's protocols keep their own exceptions: ``StopIteration`` at the end
of an iterator, ``IndexError`` past the end of a Keras ``PyDataset``, ``ImportError`` when an
optional framework is not installed.
"""

from __future__ import annotations

from ._stoker import (
    ArgumentTypeError,
    CorruptRecordError,
    FileError,
    FilePermissionError,
    InternalError,
    InvalidArgumentError,
    InvalidRecordError,
    MissingFileError,
    ResourceError,
    SchemaError,
    SpecError,
    StokerError,
    TraceError,
    WorkerPanicError,
)

__all__ = [
    "StokerError",
    "ArgumentTypeError",
    "CorruptRecordError",
    "FileError",
    "FilePermissionError",
    "InternalError",
    "InvalidArgumentError",
    "InvalidRecordError",
    "MissingFileError",
    "ResourceError",
    "SchemaError",
    "SpecError",
    "TraceError",
    "WorkerPanicError",
]
