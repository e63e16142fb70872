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
    they all fit (else int64), floats as float32, bools as bool, strings whole (as objects). NumPy
    values and anything else are returned as they are."""
    import numpy as np

    if isinstance(value, (np.ndarray, np.generic, str, bytes)) or not isinstance(value, (int, float, list)):
        return value
    try:
        a = np.asarray(value)
    except ValueError:  # ragged lists: the engine says what is wrong
        return value
    if a.dtype == np.int64 and (a.size == 0 or (a.min() >= -(2**31) and a.max() < 2**31)):
        return a.astype(np.int32)
    if a.dtype == np.float64:
        return a.astype(np.float32)
    if a.dtype.kind in "SU":
        # NumPy's fixed-width strings drop trailing NUL bytes (a serialized record may end in
        # one); TensorFlow keeps each string whole
        return np.array(value, dtype=object)
    return a if a.dtype.kind in "biuf" else value
