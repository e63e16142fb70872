"""``Dataset.save`` / ``Dataset.load`` / ``Dataset.snapshot``: tf.data's semantics on stoker's
format.

A saved dataset is a directory holding one pass of the elements in a disk-cache file
(``elements.cache``: CRC-checked records, a completion record last) and ``dataset.json`` (the
element structure, the fields' dtypes and shapes, the element count). ``load`` replays the
file; ``snapshot`` is a cache whose file is named after the pipeline, so a run of the same
pipeline reads what an earlier run wrote, and a changed one writes anew.
"""

from __future__ import annotations

import collections
import json
import os
import zlib
from typing import TYPE_CHECKING, Any

import numpy as np

from ._dtypes import dtype_name
from ._structure import Dynamic, Template, flatten, is_namedtuple
from .errors import InvalidArgumentError, MissingFileError

if TYPE_CHECKING:
    from .dataset import Dataset

ELEMENTS = "elements.cache"
META = "dataset.json"
FORMAT = "stoker saved dataset 1"


def _uncompressed(op: str, compression: Any) -> None:
    if compression not in (None, "", "NONE", "AUTO"):
        raise InvalidArgumentError(
            f"{op}: compression={compression!r}: stoker's saved datasets are uncompressed (give None)"
        )


def _dtype(value: Any) -> str:
    kind = np.asarray(value).dtype
    return "string" if kind.kind in "SUO" else kind.name


def _encode(t: Template) -> Any:
    if isinstance(t, str):
        return t
    if isinstance(t, dict):
        return {"dict": [[k, _encode(v)] for k, v in t.items()]}
    if is_namedtuple(t):
        # By its name and fields, as tf.data saves one: loaded, a namedtuple of that shape.
        fields = list(t._fields)  # type: ignore[attr-defined]
        return {"namedtuple": type(t).__name__, "fields": fields, "tuple": [_encode(v) for v in t]}
    return {"tuple": [_encode(v) for v in t]}


def _decode(j: Any) -> Template:
    if isinstance(j, str):
        return j
    if "dict" in j:
        return {k: _decode(v) for k, v in j["dict"]}
    parts = [_decode(v) for v in j["tuple"]]
    if "namedtuple" in j:
        return collections.namedtuple(j["namedtuple"], j["fields"])(*parts)  # type: ignore[misc]
    return tuple(parts)


def save(ds: Dataset, path: str, compression: Any = None) -> None:
    """Runs one pass of ``ds`` into ``path`` (a directory, made if missing)."""
    from .dataset import _known

    _uncompressed("save", compression)
    os.makedirs(path, exist_ok=True)
    meta_path = os.path.join(path, META)
    if os.path.exists(meta_path):
        try:
            with open(meta_path) as f:
                ours = json.load(f).get("format") == FORMAT
        except (OSError, ValueError, AttributeError):
            ours = False
        if not ours:
            raise InvalidArgumentError(f"save: {meta_path} is not a file stoker wrote; it is left as it is")
        os.remove(meta_path)  # a new save replaces the old one
    cached = ds.cache(os.path.join(path, ELEMENTS))
    count = 0
    first: Any = None
    it = iter(cached)
    try:
        for element in it:
            first = element if count == 0 else first
            count += 1
    finally:
        it.close()
    schema = cached._plan.schema()
    if schema is None:  # after a Python function: the first element's dtypes
        schema = [(n, _dtype(v), [None] * np.ndim(v)) for n, v in flatten(first)[1]] if count else []
    meta = {
        "format": FORMAT,
        "structure": _encode(_known(cached, learn=True)),
        "fields": [[n, d, s] for n, d, s in schema],
        "elements": count,
    }
    with open(meta_path + ".tmp", "w") as f:
        json.dump(meta, f)
    os.replace(meta_path + ".tmp", meta_path)


def load(path: str, element_spec: Any = None, compression: Any = None) -> Dataset:
    """The elements ``save`` wrote to ``path``, with their structure and count."""
    from .dataset import Dataset

    _uncompressed("load", compression)
    meta_path = os.path.join(path, META)
    if not os.path.exists(meta_path):
        raise MissingFileError(2, "load: no saved dataset here (no dataset.json; save writes it last)", path)
    with open(meta_path) as f:
        meta = json.load(f)
    structure = _decode(meta["structure"])
    fields = {n: (d, s) for n, d, s in meta["fields"]}
    if element_spec is not None:
        given = {n: dtype_name(spec.dtype) for n, spec in flatten(element_spec)[1]}
        if given != {n: d for n, (d, _) in fields.items()}:
            raise InvalidArgumentError(
                f"load: element_spec {element_spec!r} does not match the saved fields {meta['fields']}"
            )

    elements = os.path.join(path, ELEMENTS)

    def missing(_: Any) -> Any:
        raise InvalidArgumentError(f"load: {elements} is not a complete saved pass")

    # The cache replays a complete file without running its input; where the file is not
    # complete, its input (one element, whose map raises) fails the pass, writing nothing.
    replay = Dataset.range(1).filter(lambda _: True).map(missing).cache(elements)  # count unknown
    return Dataset(replay._plan, structure).assert_cardinality(int(meta["elements"]))


def fingerprint(ds: Dataset) -> str:
    """A name for ``ds``'s pipeline: of its spec, or where it has Python functions (no spec),
    of its description and of what its functions compute (their code and the values they
    capture, see ``_capture.code_key``)."""
    from .dataset import function_keys

    try:
        text = json.dumps(ds.spec(), sort_keys=True)
    except Exception:  # noqa: BLE001 - a Python function: no spec
        text = ds.explain().split("thread budget")[0] + "\n".join(function_keys(ds._plan))
    return f"{zlib.crc32(text.encode()):08x}"


def snapshot(ds: Dataset, path: str, compression: Any = None) -> Dataset:
    """``ds`` cached in ``path/<fingerprint>.snapshot``: the first complete pass writes it, and
    later passes, of this run or of a later one with the same pipeline, read it."""
    from .dataset import Dataset

    _uncompressed("snapshot", compression)
    os.makedirs(path, exist_ok=True)
    file = os.path.join(path, f"{fingerprint(ds)}.snapshot")
    cached = ds.cache(file)
    if not isinstance(ds._structure, Dynamic):
        return cached
    # The structure a Python function gives is known once it has run; a later run reading the
    # snapshot runs no function, so the structure is kept beside the file.
    made = ds._structure

    def structure() -> Template | None:
        if made.template is not None:
            if not os.path.exists(file + ".json"):
                with open(file + ".json", "w") as f:
                    json.dump(_encode(made.template), f)
            return made.template
        if os.path.exists(file + ".json"):
            with open(file + ".json") as f:
                return _decode(json.load(f))
        return None

    return Dataset(cached._plan, Dynamic(structure))._rows_of(cached)
