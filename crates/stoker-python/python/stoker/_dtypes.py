"""Element types, spelled as in NumPy (``string`` for byte strings, as in TensorFlow)."""

from __future__ import annotations

from typing import Any


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
    """A Python number or (nested) list of them as TensorFlow converts it: ints as int32 when
    they all fit (else int64), floats as float32, bools as bool, strings whole (as objects); a
    list whose first value is a NumPy array, a tensor or a NumPy float in that one's dtype.
    NumPy values and anything else are returned as they are."""
    import numpy as np

    if isinstance(value, (np.ndarray, np.generic, str, bytes)) or not isinstance(value, (int, float, list)):
        return value
    # TensorFlow takes a list's dtype from its first value: an array's (or a tensor's), or a
    # NumPy float's, is kept (float64 too); NumPy integers count as Python ints
    first = value
    while isinstance(first, list) and first:
        first = first[0]
    kept = getattr(first, "dtype", None)
    if isinstance(first, np.generic) and not isinstance(first, np.floating):
        kept = None
    try:
        a = np.asarray(value) if kept is None else np.asarray(value, dtype=_numpy_dtype(kept))
    except (ValueError, TypeError):  # ragged lists: the engine says what is wrong
        return value
    if kept is not None and a.dtype.kind in "biuf":
        return a
    if a.dtype.kind in "iu":  # Python ints and NumPy integer scalars
        fits = a.size == 0 or (a.min() >= -(2**31) and a.max() < 2**31)
        return a.astype(np.int32 if fits else np.int64)
    if a.dtype == np.float64:
        return a.astype(np.float32)
    if a.dtype.kind in "SU":
        # NumPy's fixed-width strings drop trailing NUL bytes (a serialized record may end in
        # one); TensorFlow keeps each string whole
        return np.array(value, dtype=object)
    return a if a.dtype.kind in "biuf" else value


def _numpy_dtype(d: Any) -> Any:
    """A NumPy dtype, or a TensorFlow one (a tensor's), as NumPy's."""
    return getattr(d, "as_numpy_dtype", d)
