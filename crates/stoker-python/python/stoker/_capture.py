"""What a function handed to a dataset method captures: the values its free variables have
when the method is called, as tf.data's tracing captures them.

tf.data traces ``ds.map(lambda ex: labeler(ex, i))`` when ``map`` is called, so the ``i`` of a
loop is the one of that turn. stoker calls the function later, on worker threads; without a
snapshot every dataset built in the loop would see the loop's last ``i``. So the function is
copied with its bindings frozen: each closure cell's value, and each module global it reads.
The values are not copied: a list it uses is the same list, so changes to its contents are
seen. A name not bound yet when the method is called is looked up when the function runs, and
a function that assigns a global (``global x``) keeps the module's globals as they are.
"""

from __future__ import annotations

import builtins
import dis
import functools
import types
from collections.abc import Iterator
from typing import Any, Callable, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_WRITES = frozenset({"STORE_GLOBAL", "DELETE_GLOBAL"})


class _Globals(dict):  # type: ignore[type-arg]
    """A snapshot of a module's globals that looks a name it lacks up in the module."""

    def __init__(self, snapshot: dict[str, Any], module: dict[str, Any]) -> None:
        super().__init__(snapshot)
        self.module = module

    def __missing__(self, name: str) -> Any:
        return self.module[name]


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    """``code`` and the code of the functions, lambdas and comprehensions inside it."""
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _codes(c)


def _frozen(cell: Any) -> Any:
    try:
        return types.CellType(cell.cell_contents)
    except ValueError:  # not bound yet: looked up when the function runs
        return cell


def _globals_now(fn: types.FunctionType) -> dict[str, Any]:
    module = fn.__globals__
    instructions = [i for c in _codes(fn.__code__) for i in dis.get_instructions(c)]
    if any(i.opname in _WRITES for i in instructions):
        return module
    read = {i.argval for i in instructions if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    snapshot = {n: module[n] for n in read if n in module}
    snapshot["__builtins__"] = module.get("__builtins__", builtins)
    for n in ("__name__", "__package__", "__spec__", "__file__"):
        if n in module:
            snapshot.setdefault(n, module[n])
    later = [n for n in read if n not in snapshot and not hasattr(builtins, n)]
    return _Globals(snapshot, module) if later else snapshot


def bound_now(fn: F) -> F:
    """``fn`` with the values its free variables have now (see the module's documentation).
    Plain functions, lambdas, methods and ``functools.partial`` s of them are copied; other
    callables are returned as they are."""
    if isinstance(fn, functools.partial):
        return functools.partial(bound_now(fn.func), *fn.args, **fn.keywords)  # type: ignore[return-value]
    if isinstance(fn, types.MethodType):
        return types.MethodType(bound_now(fn.__func__), fn.__self__)  # type: ignore[return-value]
    if not isinstance(fn, types.FunctionType):
        return fn
    cells = None if fn.__closure__ is None else tuple(_frozen(c) for c in fn.__closure__)
    copy = types.FunctionType(fn.__code__, _globals_now(fn), fn.__name__, fn.__defaults__, cells)
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__qualname__ = fn.__qualname__
    copy.__module__ = fn.__module__
    copy.__doc__ = fn.__doc__
    copy.__dict__.update(fn.__dict__)
    return copy  # type: ignore[return-value]
