"""Expressions over an element's numeric fields, evaluated natively by :func:`compute`.

    from stoker import ops
    s = ops.field("s")
    m = ops.field("is_mate", shape=[-1])
    score = (1 - m) * A * ops.tanh(s / K) + m * ops.sign(s) * (A + slope * ops.maximum(0, B - abs(s)))
    ds = ds.map([..., ops.compute("score", score)])

Python's operators build the expression (``+ - * / ** -x abs() round()``, ``< <= > >=``,
``== !=``, ``&`` and ``|`` for logical and/or, ``~`` for not; comparisons give 1 or 0), and
the functions here add ``tanh``, ``exp``, ``log``, ``sqrt``, ``square``, ``sign``, ``floor``,
``ceil``, ``minimum``, ``maximum``, ``where`` and ``.cast(dtype)``. Numbers mix in as
constants. Fields broadcast against each other as NumPy arrays do.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Union

from ._dtypes import dtype_name
from .errors import ArgumentTypeError, InvalidArgumentError

Operand = Union["Expr", int, float, bool]


def _node(x: Operand, what: str) -> dict[str, Any]:
    if isinstance(x, Expr):
        return x.node
    if isinstance(x, (bool, int, float)):
        value = float(x)
        if not math.isfinite(value):
            raise InvalidArgumentError(f"{what}: constants must be finite numbers, got {x!r}")
        return {"e": "const", "value": value}
    raise InvalidArgumentError(
        f"{what}: expected a stoker.ops expression (ops.field(...)) or a number, got {type(x).__name__}"
    )


def _unary(f: str, x: Operand) -> Expr:
    return Expr({"e": "unary", "f": f, "x": _node(x, f)})


def _binary(f: str, a: Operand, b: Operand) -> Expr:
    return Expr({"e": "binary", "f": f, "a": _node(a, f), "b": _node(b, f)})


class Expr:
    """A numeric expression over an element's fields (see the module's documentation)."""

    __slots__ = ("node",)
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, node: dict[str, Any]) -> None:
        self.node = node

    def __repr__(self) -> str:
        return f"stoker.ops.Expr({self.node})"

    def __bool__(self) -> bool:
        raise ArgumentTypeError(
            "a stoker.ops expression has no truth value (it is computed per element): use & | ~ "
            "for and/or/not, ops.where() to choose, and write a < b < c as (a < b) & (b < c)"
        )

    def __add__(self, o: Operand) -> Expr:
        return _binary("add", self, o)

    def __radd__(self, o: Operand) -> Expr:
        return _binary("add", o, self)

    def __sub__(self, o: Operand) -> Expr:
        return _binary("sub", self, o)

    def __rsub__(self, o: Operand) -> Expr:
        return _binary("sub", o, self)

    def __mul__(self, o: Operand) -> Expr:
        return _binary("mul", self, o)

    def __rmul__(self, o: Operand) -> Expr:
        return _binary("mul", o, self)

    def __truediv__(self, o: Operand) -> Expr:
        return _binary("div", self, o)

    def __rtruediv__(self, o: Operand) -> Expr:
        return _binary("div", o, self)

    def __pow__(self, o: Operand) -> Expr:
        return _binary("pow", self, o)

    def __rpow__(self, o: Operand) -> Expr:
        return _binary("pow", o, self)

    def __neg__(self) -> Expr:
        return _unary("neg", self)

    def __pos__(self) -> Expr:
        return self

    def __abs__(self) -> Expr:
        return _unary("abs", self)

    def __round__(self, ndigits: int | None = None) -> Expr:
        if ndigits is not None:
            raise InvalidArgumentError("round: ndigits is not supported (rounds to whole numbers, half to even)")
        return _unary("round", self)

    def __lt__(self, o: Operand) -> Expr:
        return _binary("less", self, o)

    def __le__(self, o: Operand) -> Expr:
        return _binary("less_equal", self, o)

    def __gt__(self, o: Operand) -> Expr:
        return _binary("greater", self, o)

    def __ge__(self, o: Operand) -> Expr:
        return _binary("greater_equal", self, o)

    def __eq__(self, o: Operand) -> Expr:  # type: ignore[override]
        return _binary("equal", self, o)

    def __ne__(self, o: Operand) -> Expr:  # type: ignore[override]
        return _binary("not_equal", self, o)

    def __and__(self, o: Operand) -> Expr:
        return _binary("and", self, o)

    def __rand__(self, o: Operand) -> Expr:
        return _binary("and", o, self)

    def __or__(self, o: Operand) -> Expr:
        return _binary("or", self, o)

    def __ror__(self, o: Operand) -> Expr:
        return _binary("or", o, self)

    def __invert__(self) -> Expr:
        return _unary("not", self)

    def cast(self, dtype: Any) -> Expr:
        """The value as ``dtype`` holds it (``tf.cast``: integers truncate toward zero,
        bool is ``x != 0``), computed on."""
        return Expr({"e": "cast", "dtype": dtype_name(dtype), "x": self.node})


def field(name: str, shape: Sequence[int] | None = None) -> Expr:
    """Field ``name`` of the element, optionally viewed with ``shape`` (as many values; ``-1``
    once for the rest: ``field("is_mate", shape=[-1])`` makes a ``(batch, 1)`` field 1-D)."""
    if not isinstance(name, str):
        raise InvalidArgumentError(f"field: name must be a string, got {type(name).__name__}")
    node: dict[str, Any] = {"e": "field", "name": name}
    if shape is not None:
        dims = list(shape)
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= -1 for d in dims) or dims.count(-1) > 1:
            raise InvalidArgumentError(f"field: shape must be whole numbers >= 0 and at most one -1, got {shape!r}")
        node["shape"] = dims
    return Expr(node)


def tanh(x: Operand) -> Expr:
    """Hyperbolic tangent (in float32, TensorFlow's own approximation)."""
    return _unary("tanh", x)


def exp(x: Operand) -> Expr:
    return _unary("exp", x)


def log(x: Operand) -> Expr:
    """Natural logarithm."""
    return _unary("log", x)


def sqrt(x: Operand) -> Expr:
    return _unary("sqrt", x)


def square(x: Operand) -> Expr:
    return _unary("square", x)


def sign(x: Operand) -> Expr:
    """-1, 0 or 1 (NaN for NaN), as ``tf.math.sign``."""
    return _unary("sign", x)


def floor(x: Operand) -> Expr:
    return _unary("floor", x)


def ceil(x: Operand) -> Expr:
    return _unary("ceil", x)


def minimum(a: Operand, b: Operand) -> Expr:
    return _binary("minimum", a, b)


def maximum(a: Operand, b: Operand) -> Expr:
    return _binary("maximum", a, b)


def where(cond: Operand, a: Operand, b: Operand) -> Expr:
    """``a`` where ``cond`` is not 0, else ``b``."""
    return Expr({"e": "where", "cond": _node(cond, "where"), "a": _node(a, "where"), "b": _node(b, "where")})


__all__ = [
    "Expr",
    "field",
    "tanh",
    "exp",
    "log",
    "sqrt",
    "square",
    "sign",
    "floor",
    "ceil",
    "minimum",
    "maximum",
    "where",
]
