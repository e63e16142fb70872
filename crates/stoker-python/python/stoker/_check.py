"""Argument checks shared by the Python API: wrong arguments are InvalidArgumentErrors that
name the argument (not an OverflowError from the conversion to Rust, nor a spec dump)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .errors import ArgumentTypeError, InvalidArgumentError


def whole(what: str, value: Any, minimum: int, meaning: str = "") -> int:
    """``value`` as an int: a whole number (a NumPy integer, a 0-d array of one, or an eager
    TensorFlow scalar, as tf.data takes; not a bool), at least ``minimum``. ``meaning`` says
    what the smallest values mean, for the message."""
    if type(value).__module__.startswith("tensorflow") and hasattr(value, "numpy"):
        value = value.numpy()
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise InvalidArgumentError(f"{what} must be a whole number, got {value!r}")
    v = int(value)
    if v < minimum:
        raise InvalidArgumentError(f"{what} must be at least {minimum}{meaning}, got {v}")
    return v


def path(p: Any) -> str:
    """A path given as ``str``, ``bytes`` (what a file-name element holds), ``os.PathLike``
    or a NumPy scalar or 0-d array of those, as ``str``."""
    if isinstance(p, np.ndarray) and p.ndim == 0:
        p = p.item()
    if isinstance(p, (str, bytes, os.PathLike)):
        return os.fsdecode(os.fspath(p))
    raise ArgumentTypeError(f"a path must be str, bytes or os.PathLike, got {type(p).__name__}")
