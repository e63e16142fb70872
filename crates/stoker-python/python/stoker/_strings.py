"""String fields as a Python function receives them.

A string field reaches a Python function as ``bytes`` (a scalar) or an object array of
``bytes`` (batched), as tf.data's ``numpy_function`` hands them. Real code compares them with
``str`` (``label == "yes"``, ``label == np.array(["yes", "no"])``), which TensorFlow's strings
answer and plain ``bytes`` silently answer with ``False``. So the values are :class:`Text`:
``bytes`` that also equal the ``str`` of the same UTF-8 text.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class Text(bytes):
    """``bytes`` that equal the ``str`` with the same UTF-8 text, as a ``tf.string`` does
    (``Text(b"yes") == "yes"``). Hashed as ``bytes``, so a dict keyed by ``str`` does not find
    it: look up ``key.decode()``."""

    __slots__ = ()

    def __eq__(self, other: object) -> Any:
        if isinstance(other, str):
            return bytes.__eq__(self, other.encode())
        if isinstance(other, np.ndarray):  # elementwise, against str or bytes
            return other == (self.decode() if other.dtype.kind == "U" else bytes(self))
        return bytes.__eq__(self, other)

    def __ne__(self, other: object) -> Any:
        same = self.__eq__(other)
        return same if same is NotImplemented else ~same if isinstance(same, np.ndarray) else not same

    __hash__ = bytes.__hash__

    def __add__(self, other: Any) -> Any:
        """Joined with a ``str`` (as UTF-8) or bytes, as ``x + "_s"`` joins a ``tf.string``;
        anything else (an array, a tensor) answers with its own ``__radd__``."""
        if isinstance(other, str):
            return Text(bytes(self) + other.encode())
        if isinstance(other, (bytes, bytearray, memoryview)):
            return Text(bytes(self) + bytes(other))
        if isinstance(other, np.ndarray) and other.dtype.kind in "SUO":  # elementwise
            return _joined(lambda v: self + v, other)
        return NotImplemented

    def __radd__(self, other: Any) -> Any:
        if isinstance(other, str):
            return Text(other.encode() + bytes(self))
        if isinstance(other, (bytes, bytearray, memoryview)):
            return Text(bytes(other) + bytes(self))
        if isinstance(other, np.ndarray) and other.dtype.kind in "SUO":
            return _joined(lambda v: v + self, other)
        return NotImplemented


def _joined(join: Any, strings: np.ndarray) -> np.ndarray:
    """``join`` of each of ``strings`` (as :class:`Text`), as an object array of their shape."""
    out = np.empty(strings.shape, dtype=object)
    for i, v in np.ndenumerate(strings):
        out[i] = join(Text(v.encode() if isinstance(v, str) else bytes(v)))
    return out


_as_text = np.frompyfunc(Text, 1, 1)


def texts(values: list[Any]) -> list[Any]:
    """``values`` with their strings as :class:`Text`."""
    out: list[Any] = []
    for v in values:
        if type(v) is bytes:
            out.append(Text(v))
        elif isinstance(v, np.ndarray) and v.dtype == object and v.size and isinstance(v.flat[0], bytes):
            out.append(_as_text(v))
        else:
            out.append(v)
    return out


def plain(value: Any) -> Any:
    """A value a function returned, its :class:`Text` scalar as ``bytes`` (NumPy does not
    take a ``bytes`` subclass as a string)."""
    return bytes(value) if isinstance(value, Text) else value
