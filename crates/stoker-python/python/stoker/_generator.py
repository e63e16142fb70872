"""``Dataset.from_generator``'s Python side: the output signature as engine fields, and each
yielded element checked against it and converted (as tf.data's ``from_generator`` does)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Optional

import numpy as np

from ._dtypes import dtype_name
from ._structure import Template, flatten, like
from .errors import ArgumentTypeError, InvalidArgumentError

# Optional, not `int | None`: a module-level alias is evaluated at import, and Python 3.9 has no
# `|` between types.
Field = tuple[str, str, list[Optional[int]]]


class _Leaf:
    """A spec at a leaf of the signature (so that ``flatten`` does not walk into it)."""

    def __init__(self, spec: Any) -> None:
        self.spec = spec


def _is_spec(x: Any) -> bool:
    return hasattr(x, "dtype") and hasattr(x, "shape")


def _wrap(sig: Any) -> Any:
    if _is_spec(sig):
        return _Leaf(sig)
    if isinstance(sig, Mapping):
        return {k: _wrap(v) for k, v in sig.items()}
    if isinstance(sig, tuple):
        return like(sig, [_wrap(v) for v in sig])
    if isinstance(sig, list):
        return tuple(_wrap(v) for v in sig)
    raise InvalidArgumentError(
        "from_generator: output_signature must be a TensorSpec (tf.TensorSpec or one with .dtype and "
        f".shape) or a dict/tuple of them, got {type(sig).__name__}"
    )


def _shape(spec: Any) -> list[int | None]:
    shape = spec.shape
    if hasattr(shape, "as_list"):  # tf.TensorShape
        if getattr(shape, "rank", 0) is None:
            raise InvalidArgumentError(
                "from_generator: a shape of unknown rank is not supported; give each dimension, None where it varies"
            )
        shape = shape.as_list()
    dims = list(shape)
    if not all(d is None or (isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0) for d in dims):
        raise InvalidArgumentError(f"from_generator: a shape's dimensions must be whole numbers or None, got {shape!r}")
    return [None if d is None else int(d) for d in dims]


def signature_fields(output_signature: Any) -> tuple[Template, list[Field]]:
    """The signature's template and its fields: ``(name, dtype, shape)``."""
    template, pairs = flatten(_wrap(output_signature))
    if not pairs:
        raise InvalidArgumentError("from_generator: output_signature declares no component")
    return template, [(name, dtype_name(leaf.spec.dtype), _shape(leaf.spec)) for name, leaf in pairs]


def signature_from_types(output_types: Any, output_shapes: Any) -> Any:
    """tf.data's older form: ``output_types`` (and ``output_shapes``) as one signature."""

    class Spec:
        def __init__(self, dtype: Any, shape: Any) -> None:
            self.dtype, self.shape = dtype, shape

    def pair(types: Any, shapes: Any) -> Any:
        if isinstance(types, Mapping):
            return {k: pair(v, shapes[k] if shapes is not None else None) for k, v in types.items()}
        if isinstance(types, (tuple, list)):
            parts = [pair(t, shapes[i] if shapes is not None else None) for i, t in enumerate(types)]
            return like(types, parts) if isinstance(types, tuple) else tuple(parts)
        if shapes is None:
            raise InvalidArgumentError(
                "from_generator: without output_shapes the shapes are unknown; give output_signature, or "
                "output_shapes with None where a dimension varies"
            )
        return Spec(types, shapes)

    return pair(output_types, output_shapes)


def _numpy_dtype(name: str) -> Any:
    return object if name == "string" else np.dtype(name)


def _leaves(value: Any, template: Template, where: str) -> list[Any]:
    if isinstance(template, str):
        return [value]
    if isinstance(template, dict):
        if not isinstance(value, Mapping) or set(value) != set(template):
            raise ArgumentTypeError(f"{where}: did not match the expected structure {template!r}, got {value!r}")
        return [x for k, t in template.items() for x in _leaves(value[k], t, where)]
    if not isinstance(value, (tuple, list)) or len(value) != len(template):
        raise ArgumentTypeError(f"{where}: did not match the expected structure {template!r}, got {value!r}")
    return [x for v, t in zip(value, template) for x in _leaves(v, t, where)]


def _text(s: Any) -> bytes:
    """A string component's value: text or bytes, as TensorFlow takes them (a number is an
    error there, not the zero bytes ``bytes(n)`` makes)."""
    if isinstance(s, str):
        return s.encode()
    if isinstance(s, (bytes, bytearray, memoryview)):
        return bytes(s)
    raise TypeError(f"a string component takes str or bytes, got {type(s).__name__} {s!r}")


def _convert(value: Any, name: str, dtype: str, shape: list[int | None], where: str) -> np.ndarray:
    try:
        if dtype == "string":
            arr = np.asarray(value, dtype=object)
            arr = np.vectorize(_text, otypes=[object])(arr) if arr.size else arr
        else:
            arr = np.asarray(value, dtype=_numpy_dtype(dtype), order="C")
    except (TypeError, ValueError) as e:
        raise ArgumentTypeError(f"{where}: component '{name}' could not be converted to {dtype}: {e}") from None
    if arr.ndim != len(shape) or any(d is not None and d != n for d, n in zip(shape, arr.shape)):
        want = tuple("None" if d is None else d for d in shape)
        raise InvalidArgumentError(
            f"{where}: component '{name}' has shape {arr.shape} where shape ({', '.join(map(str, want))}) was expected"
        )
    return arr


def runs(
    generator: Callable[..., Any], args: tuple[Any, ...], template: Template, fields: list[Field]
) -> Callable[[], Iterator[list[tuple[str, np.ndarray]]]]:
    """What the engine calls to start the generator: an iterator of ``[(name, array), ...]``."""

    def start() -> Iterator[list[tuple[str, np.ndarray]]]:
        for i, value in enumerate(generator(*args)):
            where = f"from_generator: the generator's element {i}"
            leaves = _leaves(value, template, where)
            yield [(n, _convert(v, n, d, s, where)) for v, (n, d, s) in zip(leaves, fields)]

    return start
