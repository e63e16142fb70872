"""Element types, spelled as in NumPy (``string`` for byte strings, as in TensorFlow)."""

from __future__ import annotations

from typing import Any

bool_ = "bool"
uint8 = "uint8"
uint16 = "uint16"
int8 = "int8"
int16 = "int16"
int32 = "int32"
int64 = "int64"
float16 = "float16"
bfloat16 = "bfloat16"
float32 = "float32"
float64 = "float64"
string = "string"

_ALIASES = {"bytes": string, "str": string, "object": string, "bool_": bool_}


def dtype_name(d: Any) -> str:
    """The stoker name of a dtype given as a string, a NumPy dtype/type, or a TF DType."""
    if isinstance(d, str):
        return _ALIASES.get(d, d)
    if d is bytes or d is str:
        return string
    name = getattr(d, "name", None)
    if isinstance(name, str) and not isinstance(d, type):
        return _ALIASES.get(name, name)
    import numpy as np

    return _ALIASES.get(np.dtype(d).name, np.dtype(d).name)
