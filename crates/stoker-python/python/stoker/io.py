"""Writing TFRecord files and ``tf.train.Example`` s that TensorFlow reads back."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from . import _stoker

TFRecordWriter = _stoker.TFRecordWriter


def serialize_example(features: Mapping[str, Any]) -> bytes:
    """Serialises ``{name: value}`` as a ``tf.train.Example``.

    Values: ``bytes``/``str`` or lists of them → ``bytes_list``; ints, bools or integer arrays →
    ``int64_list``; floats or float arrays → ``float_list``. Use :func:`int64_feature` (etc.)
    for an empty list or to force a type.
    """
    return _stoker.serialize_example(dict(features))


def parse_example_proto(data: bytes) -> dict[str, tuple[str, list]]:
    """Decodes one serialized Example into ``{name: (kind, values)}`` (kind: bytes/int64/float)."""
    return _stoker.parse_example_proto(data)


def bytes_feature(values: Sequence[Any]) -> tuple[str, Sequence[Any]]:
    return ("bytes", list(values))


def int64_feature(values: Sequence[int]) -> tuple[str, Sequence[int]]:
    return ("int64", [int(v) for v in values])


def float_feature(values: Sequence[float]) -> tuple[str, Sequence[float]]:
    return ("float", [float(v) for v in values])


def encode_png(image: Any, fast: bool = False) -> bytes:
    """A uint8 ``[H, W, C]`` array (C = 1, 2, 3, 4) as PNG bytes (``fast``: less compression)."""
    return _stoker.encode_png(image, fast)


def encode_jpeg(image: Any, quality: int = 90) -> bytes:
    """Baseline JPEG of a uint8 ``[H, W, 1|3]`` array (4:2:0 chroma for colour, like libjpeg)."""
    return _stoker.encode_jpeg(image, quality)


def tf_record_iterator(path: str, compression_type: str | None = None) -> Iterator[bytes]:
    """The records of one TFRecord file, CRC-checked."""
    from .dataset import TFRecordDataset

    return iter(TFRecordDataset(path, compression_type=compression_type))


__all__ = [
    "TFRecordWriter",
    "serialize_example",
    "parse_example_proto",
    "bytes_feature",
    "int64_feature",
    "float_feature",
    "tf_record_iterator",
    "encode_png",
    "encode_jpeg",
]
