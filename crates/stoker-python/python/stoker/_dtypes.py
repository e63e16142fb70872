"""Element types, spelled as in NumPy (``string`` for byte strings, as in TensorFlow)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .errors import InvalidArgumentError


class DType(str):
    """A stoker dtype: its name as a string (``sk.int32 == "int32"``), and recognisable as a
    dtype where a value could be meant too (``CsvDataset``'s ``record_defaults``, where the
    string ``"int32"`` is a default value and ``sk.int32`` a required int32 column)."""

    __slots__ = ()

    @property
    def name(self) -> str:
        return str(self)


bool_ = DType("bool")
uint8 = DType("uint8")
uint16 = DType("uint16")
int8 = DType("int8")
int16 = DType("int16")
int32 = DType("int32")
int64 = DType("int64")
float16 = DType("float16")
bfloat16 = DType("bfloat16")
float32 = DType("float32")
float64 = DType("float64")
string = DType("string")

_ALIASES = {"bytes": string, "str": string, "object": string, "bool_": bool_}


def dtype_name(d: Any) -> str:
    """The stoker name of a dtype given as a string, a NumPy dtype/type, or a TF DType."""
    if isinstance(d, str):
        name = str(d)
    elif d is bytes or d is str:
        name = string
    elif isinstance(getattr(d, "name", None), str) and not isinstance(d, type):
        name = d.name
    else:
        import numpy as np

        name = np.dtype(d).name
    return str(_ALIASES.get(name, name))


def as_tf_converts(value: Any) -> Any:
    """A Python number or (nested) list as tf.data converts it to a tensor (its
    ``normalize_element``). A list whose items are all arrays or tensors (or such lists) of
    one dtype keeps that dtype; else a list holding a tensor takes the first tensor's; else
    the dtype is read from the first scalar (looking into arrays too; a 0-d array is its
    scalar): a Python or NumPy int gives int32 when all values fit (else int64), a Python
    float float32, a NumPy float its own width, a bool bool, a string a string. A value that
    type does not hold (``[np.float32(1), 1e300]``, ``[True, 2]``, an int past int64) is an
    error, as in TensorFlow. NumPy values and anything else are returned as they are."""
    import numpy as np

    if isinstance(value, (np.ndarray, np.generic, str, bytes)) or not isinstance(value, (int, float, list)):
        return value
    if isinstance(value, list):
        common = _common_dtype(value)
        if common is None:
            common = _packed_dtype(value)
        if common is not None:
            try:
                return np.asarray(value, dtype=_numpy_dtype(common))
            except OverflowError as e:
                raise InvalidArgumentError(f"Can't convert Python sequence to a {common} tensor: {e}") from None
            except (ValueError, TypeError):  # ragged lists: the engine says what is wrong
                return value
    first = _first_scalar(value)
    try:
        a = np.asarray(value)
    except (ValueError, TypeError, OverflowError):
        return value
    if a.dtype.kind in "fO" and isinstance(first, (int, np.integer)) and _whole_numbers(value):
        # NumPy made floats (or objects) of integers past int64 (or of int64 and uint64 mixed)
        raise InvalidArgumentError("Can't convert Python sequence with out-of-range integer to Tensor.")
    if a.dtype.kind in "SU":
        # NumPy's fixed-width strings drop trailing NUL bytes (a serialized record may end in
        # one); TensorFlow keeps each string whole
        return np.array(value, dtype=object)
    if a.dtype.kind == "O" and isinstance(first, (int, float, np.number)) and _numbers(value):
        a = np.asarray(value, dtype=np.float64)  # an int past int64 among floats: floats, as TF
    if a.dtype.kind == "O":
        return value
    if isinstance(first, (bool, np.bool_)):
        if a.dtype.kind != "b":
            raise InvalidArgumentError("Can't convert Python sequence with mixed types to Tensor.")
        return a
    if isinstance(first, np.floating):
        return _narrowed(a, first.dtype)
    if a.dtype.kind in "iu" and isinstance(first, (int, np.integer)):
        if a.size == 0 or (a.min() >= -(2**31) and a.max() < 2**31):
            return a.astype(np.int32)
        if a.min() >= -(2**63) and a.max() < 2**63:
            return a.astype(np.int64)
        raise InvalidArgumentError("Can't convert Python sequence with out-of-range integer to Tensor.")
    if a.dtype.kind in "biuf":
        return _narrowed(a, np.dtype(np.float32))
    return value


def _narrowed(a: Any, dtype: Any) -> Any:
    """``a`` in the float ``dtype``: a finite value beyond its range is an error, as in
    TensorFlow's conversion (which does not make it an infinity)."""
    import numpy as np

    if a.dtype.kind == "b":
        raise InvalidArgumentError("Can't convert Python sequence with mixed types to Tensor.")
    with np.errstate(over="ignore"):
        out = a.astype(dtype)
    if (np.isinf(out) & np.isfinite(a)).any():
        raise InvalidArgumentError(
            f"Can't convert Python sequence with a value out of range for {np.dtype(dtype).name} to Tensor."
        )
    return out


def _spec_dtype(item: Any) -> Any:
    """The dtype tf.data's ``type_spec_from_value`` gives ``item`` (an array or a tensor, or a
    list of them), ``None`` where it gives none (numbers, mixed lists)."""
    import numpy as np

    tensor = hasattr(item, "dtype") and hasattr(item, "shape") and not isinstance(item, np.generic)
    if type(item) is np.ndarray or tensor:
        return np.dtype(_numpy_dtype(item.dtype))
    if isinstance(item, list):
        return _common_dtype(item)
    return None


def _common_dtype(items: list[Any]) -> Any:
    """The one dtype of a non-empty list's items whose specs all have it (and one rank)."""
    if not items or _spec_dtype(items[0]) is None:  # a list of numbers, most often: no spec
        return None
    dtypes = [_spec_dtype(x) for x in items]
    if any(d != dtypes[0] for d in dtypes):
        return None
    ranks = {len(getattr(x, "shape", ())) if not isinstance(x, list) else _rank(x) for x in items}
    return dtypes[0] if len(ranks) == 1 else None


def _rank(x: Any) -> int:
    return len(getattr(x, "shape", ())) if not isinstance(x, list) else 1 + (_rank(x[0]) if x else 0)


def _packed_dtype(items: list[Any]) -> Any:
    """The dtype of the tensors in nested lists, as TensorFlow's autopacking takes it (the
    first one's; tensors of another dtype cannot be packed with it); None without tensors."""
    import numpy as np

    def tensors(xs: list[Any]) -> Iterator[Any]:
        for x in xs:
            if isinstance(x, list):
                yield from tensors(x)
            elif hasattr(x, "dtype") and hasattr(x, "numpy") and not isinstance(x, (np.ndarray, np.generic)):
                yield x

    dtypes = {t.dtype for t in tensors(items)}
    if len(dtypes) > 1:
        names = sorted(getattr(d, "name", str(d)) for d in dtypes)
        raise InvalidArgumentError(
            f"Can't convert a list of tensors of different dtypes ({', '.join(names)}) to a tensor."
        )
    return next(iter(dtypes), None)


def _numbers(value: Any) -> bool:
    """Whether every leaf of nested lists and tuples is a Python or NumPy number (not a bool)."""
    import numpy as np

    if isinstance(value, (list, tuple)):
        return all(_numbers(x) for x in value)
    return isinstance(value, (int, float, np.number)) and not isinstance(value, bool)


def _whole_numbers(value: Any) -> bool:
    """Whether every leaf of nested lists and tuples is a Python or NumPy integer."""
    import numpy as np

    if isinstance(value, (list, tuple)):
        return all(_whole_numbers(x) for x in value)
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _first_scalar(value: Any) -> Any:
    """The value TensorFlow infers a sequence's dtype from: its first item's first item, ...
    down through lists, tuples and arrays (a 0-d array is its scalar)."""
    import numpy as np

    while True:
        if isinstance(value, np.ndarray):
            if value.ndim == 0:
                return value[()]
            if value.size == 0:
                return value.dtype.type(0)
            value = value[0]
        elif isinstance(value, (list, tuple)) and value:
            value = value[0]
        else:
            return value


def _numpy_dtype(d: Any) -> Any:
    """A NumPy dtype, or a TensorFlow one (a tensor's), as NumPy's."""
    return getattr(d, "as_numpy_dtype", d)
