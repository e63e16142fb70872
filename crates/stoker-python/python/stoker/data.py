"""tf.data's namespace on stoker's classes: ``tf.data.X`` is ``sk.data.X`` for the names real
tf.data code spells (``Dataset``, ``AUTOTUNE``, ``Options``, the file datasets, and
``experimental``)."""

from __future__ import annotations

from . import experimental
from .dataset import (
    AUTOTUNE,
    INFINITE,
    UNKNOWN,
    Dataset,
    FixedLengthRecordDataset,
    Options,
    TextLineDataset,
    TFRecordDataset,
    ThreadingOptions,
)

INFINITE_CARDINALITY = INFINITE
UNKNOWN_CARDINALITY = UNKNOWN

__all__ = [
    "AUTOTUNE",
    "INFINITE_CARDINALITY",
    "UNKNOWN_CARDINALITY",
    "Dataset",
    "FixedLengthRecordDataset",
    "Options",
    "TFRecordDataset",
    "TextLineDataset",
    "ThreadingOptions",
    "experimental",
]
