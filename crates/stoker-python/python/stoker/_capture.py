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


def code_key(*fns: Any) -> str:
    """A name for functions that changes with what they compute: their code (with the
    functions and lambdas inside it), defaults, and the values of the closure variables and
    module globals they read, the functions among them followed a few levels down. The same
    in every run of the same code and values (objects without a value of their own count by
    their type). ``snapshot`` tells pipelines apart by it, as tf.data by its graph."""
    import hashlib

    h = hashlib.blake2b(digest_size=8)
    seen: set[int] = set()
    for fn in fns:
        _feed(h, fn, 3, seen)
    return h.hexdigest()


# Containers longer than this count by their length and first items: a key is made for every
# function handed to a dataset, and must stay cheap.
_ITEMS = 1000


def _feed(h: Any, value: Any, depth: int, seen: set[int]) -> None:
    """Adds ``value`` to the hash ``h`` (see ``code_key``); a value that cannot be read
    counts by its type."""
    try:
        _feed_value(h, value, depth, seen)
    except Exception:  # noqa: BLE001 - an object whose attributes raise: its type only
        h.update(f"unread:{type(value).__qualname__}".encode() + b"\0")


def _feed_value(h: Any, value: Any, depth: int, seen: set[int]) -> None:
    import itertools

    import numpy as np

    def text(s: str) -> None:
        h.update(s.encode("utf-8", "replace") + b"\0")

    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        text(f"{type(value).__name__}:{value!r}")
        return
    if isinstance(value, (np.ndarray, np.generic)) or (
        hasattr(value, "__array__") and not isinstance(value, (dict, list, tuple, type))
    ):
        _feed_array(h, np.asarray(value), depth, seen)
        return
    if id(value) in seen or depth < 0:
        text(f"seen:{type(value).__qualname__}")
        return
    seen.add(id(value))
    if isinstance(value, functools.partial):
        for part in (value.func, value.args, value.keywords):
            _feed(h, part, depth, seen)
    elif isinstance(value, types.MethodType):
        text(f"method:{type(value.__self__).__qualname__}")
        _feed(h, value.__func__, depth, seen)
        _feed(h, value.__self__, depth - 1, seen)
    elif isinstance(value, types.FunctionType):
        for code in _codes(value.__code__):
            text(f"code:{code.co_name}")
            h.update(code.co_code)
            for c in code.co_consts:
                if not isinstance(c, types.CodeType):
                    _feed(h, c, 0, seen)
            text(repr(code.co_names))
        _feed(h, (value.__defaults__, value.__kwdefaults__), depth, seen)
        for cell in value.__closure__ or ():
            try:
                _feed(h, cell.cell_contents, depth - 1, seen)
            except ValueError:  # not bound yet
                text("unbound")
        read = {i.argval for c in _codes(value.__code__) for i in dis.get_instructions(c) if i.opname == "LOAD_GLOBAL"}
        for name in sorted(read):
            if name in value.__globals__:
                text(f"global:{name}")
                _feed(h, value.__globals__[name], depth - 1, seen)
    elif isinstance(value, (list, tuple, set, frozenset)):
        text(f"{type(value).__name__}:{len(value)}")
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) and len(value) <= _ITEMS else value
        for v in itertools.islice(items, _ITEMS):
            _feed(h, v, depth, seen)
    elif isinstance(value, dict):
        text(f"dict:{len(value)}")
        for k, v in itertools.islice(value.items(), _ITEMS):
            _feed(h, k, depth, seen)
            _feed(h, v, depth, seen)
    elif isinstance(value, types.ModuleType):
        text(f"module:{value.__name__}")
    else:
        # An object: its type, and its attributes' values where it has them
        text(f"object:{type(value).__module__}.{type(value).__qualname__}")
        attributes = getattr(value, "__dict__", None)
        if isinstance(attributes, dict) and depth > 0:
            _feed(h, attributes, depth - 1, seen)


# Arrays larger than this count by their shape, dtype and a sample of their bytes: read whole,
# a key would cost a pass over them each time a function captures them.
_WHOLE_BYTES = 256 << 20


def _feed_array(h: Any, a: Any, depth: int, seen: set[int]) -> None:
    """An array's dtype, shape and values; a memory-mapped file's name and modification time
    (not its bytes); an object array's items as values."""
    import os

    import numpy as np

    h.update(f"array:{a.dtype}:{a.shape}".encode() + b"\0")
    if a.dtype == object:
        _feed(h, a.ravel().tolist(), depth, seen)
        return
    base = a
    while isinstance(base, np.ndarray) and not isinstance(base, np.memmap) and base.base is not None:
        base = base.base
    name = getattr(base, "filename", None)
    if isinstance(base, np.memmap) and name:
        stat = os.stat(name)
        start = a.__array_interface__["data"][0] - np.asarray(base).__array_interface__["data"][0]
        h.update(f"memmap:{name}:{stat.st_size}:{stat.st_mtime_ns}:{start}:{a.strides}".encode())
        return
    flat = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    if flat.nbytes <= _WHOLE_BYTES:
        h.update(flat.data)
    else:
        step = flat.nbytes // (_WHOLE_BYTES // 4096)
        h.update(np.ascontiguousarray(flat[::step]).data)
