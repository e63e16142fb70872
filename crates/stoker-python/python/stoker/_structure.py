"""Nested structures (dicts, tuples, single arrays) over the engine's flat named fields.

The engine sees an element as flat ``(name, tensor)`` pairs; names are paths: ``"image"``,
``"0"``, ``"1/label"``. A *template* is the user's structure with field names at its leaves.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Union

from .errors import ArgumentTypeError

Template = Union[str, dict[str, "Template"], tuple["Template", ...]]


def is_namedtuple(value: Any) -> bool:
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


def like(original: tuple[Any, ...], parts: Any) -> tuple[Any, ...]:
    """``parts`` as a tuple of ``original``'s kind: a namedtuple stays one (as in tf.nest)."""
    return type(original)(*parts) if is_namedtuple(original) else tuple(parts)


def apply(fn: Callable[..., Any], element: Any) -> Any:
    """``fn`` called on an element as tf.data calls it: a plain tuple is unpacked into
    arguments, a namedtuple (or anything else) is one argument."""
    return fn(*element) if type(element) is tuple else fn(element)


def as_args(element: Any) -> tuple[Any, ...]:
    """The positional arguments ``apply`` passes for ``element``."""
    return element if type(element) is tuple else (element,)


def flatten(value: Any, prefix: str = "") -> tuple[Template, list[tuple[str, Any]]]:
    """Splits a structure into its template and its ``(name, leaf)`` pairs."""
    if isinstance(value, dict):
        items: list[tuple[str, Any]] = []
        tmpl: dict[str, Template] = {}
        for k, v in value.items():
            if not isinstance(k, str) or "/" in k:
                raise ArgumentTypeError(f"dict keys must be strings without '/', got {k!r}")
            t, sub = flatten(v, f"{prefix}{k}/")
            tmpl[k] = t
            items.extend(sub)
        return tmpl, items
    if isinstance(value, tuple):
        items = []
        parts = []
        for i, v in enumerate(value):
            t, sub = flatten(v, f"{prefix}{i}/")
            parts.append(t)
            items.extend(sub)
        return like(value, parts), items
    name = prefix[:-1] if prefix else "value"
    return name, [(name, value)]


def leaves(template: Template) -> list[str]:
    if isinstance(template, str):
        return [template]
    if isinstance(template, dict):
        return [n for t in template.values() for n in leaves(t)]
    return [n for t in template for n in leaves(t)]


def pack(template: Template, by_name: dict[str, Any]) -> Any:
    if isinstance(template, str):
        return by_name[template]
    if isinstance(template, dict):
        return {k: pack(t, by_name) for k, t in template.items()}
    return like(template, [pack(t, by_name) for t in template])


def prefixed(template: Template, prefix: str) -> Template:
    if isinstance(template, str):
        return prefix + template
    if isinstance(template, dict):
        return {k: prefixed(t, prefix) for k, t in template.items()}
    return like(template, [prefixed(t, prefix) for t in template])


def after_native_ops(template: Template, names: Sequence[str]) -> Template:
    """The structure after native ops changed the field set to ``names``.

    Unchanged fields keep their place; a dict structure drops removed fields and gains new ones
    as keys; any other structure becomes a flat dict of the fields.
    """
    old = leaves(template)
    if list(old) == list(names):
        return template
    if isinstance(template, dict) and all("/" not in n for n in names):
        kept: dict[str, Template] = {k: v for k, v in template.items() if isinstance(v, str) and v in names}
        if len(kept) == len(template):
            for n in names:
                if n not in old:
                    kept[n] = n
            return kept
    flat: dict[str, Template] = {n: n for n in names}
    return flat


class Dynamic:
    """The structure after a Python function: known once the function has run. ``derive``
    makes it from other structures (a zip of such a dataset), once they are known."""

    def __init__(self, derive: Callable[[], Template | None] | None = None) -> None:
        self._template: Template | None = None
        self._derive = derive

    @property
    def template(self) -> Template | None:
        if self._template is None and self._derive is not None:
            self._template = self._derive()
        return self._template

    @template.setter
    def template(self, value: Template | None) -> None:
        self._template = value


class Windows(Dynamic):
    """The structure of ``window()``'s elements: each component of a window is handed out as
    a dataset of its elements (as tf.data does), made by ``make`` from the stacked array."""

    def __init__(self, template: Template | None, make: Callable[[Any], Any]) -> None:
        super().__init__()
        self.template = template
        self.make = make


def known_template(structure: Template | Dynamic) -> Template | None:
    """The template of a structure, ``None`` while a Python function's is not known yet."""
    return structure.template if isinstance(structure, Dynamic) else structure


def pack_element(template: Template | Dynamic, names: Sequence[str], arrays: list[Any]) -> Any:
    if isinstance(template, Windows):
        arrays = [template.make(a) for a in arrays]
    tmpl = template.template if isinstance(template, Dynamic) else template
    by_name = dict(zip(names, arrays))
    if tmpl is not None and sorted(leaves(tmpl)) == sorted(names):
        return pack(tmpl, by_name)
    if len(names) == 1 and names[0] == "value":
        return arrays[0]
    return by_name
