"""``Dataset``: tf.data's API over stoker's Rust engine."""

from __future__ import annotations

import atexit
import contextlib
import enum
import functools
import json
import os
import sys
import threading
import warnings
import weakref
from collections.abc import Iterator, Sequence
from typing import Any, Callable, NamedTuple, Union

import numpy as np

from . import _generator, _stoker, _tf_function
from ._capture import bound_now, code_key
from ._check import path as _path
from ._check import whole as _whole
from ._dtypes import DType, as_tf_converts, dtype_name
from ._profile import next_span
from ._strings import plain, texts
from ._structure import (
    Dynamic,
    Template,
    Windows,
    after_native_ops,
    apply,
    flatten,
    known_template,
    leaves,
    like,
    pack_element,
    prefixed,
)
from .diagnosis import Diagnosis
from .errors import ArgumentTypeError, InvalidArgumentError, MissingFileError
from .ops import NativeOp
from .ops import element_seed as _element_seed
from .ops import ensure_shape as _ensure_shape_op
from .ops import select as _select
from .timing import StepReport

AUTOTUNE: int = _stoker.AUTOTUNE
#: :meth:`Dataset.cardinality` of a pipeline that never ends.
INFINITE: int = -1
#: :meth:`Dataset.cardinality` of a pipeline whose length is not known before running it.
UNKNOWN: int = -2

PathLike = Union[str, "os.PathLike[str]"]


class TensorShape(tuple):  # type: ignore[type-arg]
    """A shape as a tuple of dimensions (``None`` where it varies) that code written for
    ``tf.TensorShape`` reads too: ``as_list()``, ``rank`` / ``ndims``, ``is_fully_defined()``,
    ``num_elements()``."""

    def as_list(self) -> list[int | None]:
        return list(self)

    @property
    def rank(self) -> int:
        return len(self)

    @property
    def ndims(self) -> int:
        return len(self)

    def is_fully_defined(self) -> bool:
        return all(d is not None for d in self)

    def num_elements(self) -> int | None:
        return int(np.prod(self, dtype=np.int64)) if self.is_fully_defined() else None


class TensorSpec:
    """What one component of every element looks like, as ``tf.TensorSpec``:
    ``TensorSpec(shape, dtype=float32, name=None)``. ``shape`` is a sequence of dimensions
    (``None`` where it varies) or one int for a vector of that size; ``dtype`` a stoker, NumPy
    or TensorFlow dtype, kept as its stoker name (``spec.dtype == sk.int64``). The specs
    :attr:`Dataset.element_spec` gives are named after their fields. Specs compare equal
    when shape, dtype and name are equal."""

    __slots__ = ("_shape", "_dtype", "_name")

    def __init__(self, shape: Any, dtype: Any = "float32", name: str | None = None) -> None:
        if isinstance(shape, (str, bytes)):
            raise ArgumentTypeError(
                f"TensorSpec(shape, dtype=float32, name=None) takes the shape first (as tf.TensorSpec), got {shape!r}"
            )
        if shape is None:
            raise InvalidArgumentError("TensorSpec: a shape of unknown rank is not supported; give each dimension")
        if hasattr(shape, "as_list"):  # tf.TensorShape
            shape = shape.as_list()
        dims = [shape] if isinstance(shape, (int, np.integer)) else list(shape)
        whole = (int, np.integer)
        if not all(d is None or (isinstance(d, whole) and not isinstance(d, bool) and d >= -1) for d in dims):
            raise InvalidArgumentError(f"TensorSpec: shape must be whole numbers or None, got {shape!r}")
        self._shape: tuple[int | None, ...] = tuple(None if d is None or d == -1 else int(d) for d in dims)
        self._dtype = dtype_name(dtype)
        if name is not None and not isinstance(name, str):
            raise ArgumentTypeError(f"TensorSpec: name must be a string or None, got {name!r}")
        self._name = name

    @property
    def shape(self) -> TensorShape:
        return TensorShape(self._shape)

    @property
    def dtype(self) -> DType:
        return DType(self._dtype)

    @property
    def name(self) -> str | None:
        return self._name

    def _key(self) -> tuple[Any, ...]:
        return (self._shape, self._dtype, self._name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TensorSpec) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"TensorSpec(shape={self._shape}, dtype={self._dtype!r}, name={self._name!r})"


def _paths(filenames: PathLike | Sequence[PathLike]) -> list[str]:
    if type(filenames).__module__.startswith("tensorflow") and hasattr(filenames, "numpy"):
        filenames = filenames.numpy()  # a string tensor of file names, as tf.data takes one
    if isinstance(filenames, (str, bytes, os.PathLike)) or (isinstance(filenames, np.ndarray) and filenames.ndim == 0):
        return [_path(filenames)]
    return [_path(f) for f in filenames]


def _is_tfrecord_factory(fn: Any) -> dict[str, Any] | None:
    """The keyword arguments if ``fn`` is ``TFRecordDataset`` (or a partial of it)."""
    if fn is TFRecordDataset:
        return {}
    if isinstance(fn, functools.partial) and fn.func is TFRecordDataset and not fn.args:
        return dict(fn.keywords)
    return None


class Dataset:
    """A pipeline of elements, built step by step like ``tf.data.Dataset``.

    Every step is checked when it is added (a wrong pipeline raises ``SchemaError`` naming the
    step); nothing runs until you iterate. Iterating yields the element structure (a dict, a
    tuple or a single value) of NumPy arrays that share the engine's buffers (no copy).
    """

    #: Class names, for datasets made by ``image_folder``.
    class_names: list[str] | None = None

    def __init__(self, plan: Any, structure: Template | Dynamic) -> None:
        self._plan = plan
        self._structure = structure
        # The first element of a run of its own, where the engine cannot tell the structure
        # before a Python function has run (see `element_spec`).
        self._first: dict[str, tuple[str, int]] | None = None
        # After a batch: (rows of a batch, rows of the pass's last batch, 0 if none), while
        # the steps after it keep them; None where not known.
        self._rows: tuple[int, int] | None = None
        # With `_rows`: whether a short batch can only be the pass's last element (not after
        # a step that reorders or repeats the batches).
        self._short_at_end = False
        # A batch whose element spec the engine cannot tell (after a Python function): its
        # input, the batch size (None where the last batch may be short) and the fixed
        # padded shapes, to make it from the input's as tf.data does.
        self._batch_of: tuple[Dataset, int | None, dict[str, list[int | None]]] | None = None
        # A dataset whose elements have this one's spec (this one's step keeps them as they
        # are: a shuffle, a take, a filter), to read it from where the engine cannot tell it.
        self._spec_of: Dataset | None = None
        # The static shapes a TensorFlow graph gives the fields it makes, by field (None
        # where TensorFlow does not know a dimension).
        self._static: dict[str, list[int | None]] = {}

    def _batched(
        self, source: Dataset, size: int, drop_remainder: bool, shapes: dict[str, list[int | None]] | None = None
    ) -> Dataset:
        self._batch_of = (source, size if drop_remainder else None, shapes or {})
        n = source.cardinality()
        if drop_remainder or n == INFINITE:
            self._rows = (size, 0)
        elif n >= 0:
            self._rows = (size, n % size)
        self._short_at_end = True
        return self

    def _rows_of(self, source: Dataset, kept: bool = True, order: bool = True, same: bool = True) -> Dataset:
        """This dataset with ``source``'s batch rows: where ``kept``, or where every batch of
        ``source`` is whole (a step that picks some of the batches keeps that). ``order``:
        the step keeps the batches' order, once each. ``same``: the step hands out
        ``source``'s elements as they are (its spec too)."""
        if same:
            self._spec_of = source
        if source._rows is not None and (kept or source._rows[1] == 0):
            self._rows = source._rows
            self._short_at_end = source._short_at_end and order
        return self

    # ---------------------------------------------------------------- sources
    @staticmethod
    def range(*args: int, output_type: Any = "int64", name: str | None = None) -> Dataset:
        """``range(stop)``, ``range(start, stop)`` or ``range(start, stop, step)``, as int64
        or ``output_type`` (a numeric dtype; values it does not hold wrap, as TF's cast)."""
        del name
        if len(args) == 1:
            start, stop, step = 0, args[0], 1
        elif len(args) == 2:
            start, stop, step = args[0], args[1], 1
        elif len(args) == 3:
            start, stop, step = args
        else:
            raise ArgumentTypeError("range takes 1 to 3 integers")

        def integer(name: str, v: Any) -> int:
            try:
                return int(v)
            except (TypeError, ValueError):
                raise ArgumentTypeError(f"range: {name} must be an integer, got {v!r}") from None

        ds = Dataset(
            _stoker.Plan.range(integer("start", start), integer("stop", stop), integer("step", step)), "value"
        )
        return ds._as_type("range", output_type)

    @staticmethod
    def counter(start: int = 0, step: int = 1, dtype: Any = "int64", name: str | None = None) -> Dataset:
        """``start, start + step, ...`` without end (as tf.data's ``counter``; its cardinality
        is ``INFINITE``), as int64 or ``dtype``."""
        del name
        first = _whole("counter: start", start, -(2**63))
        by = _whole("counter: step", step, -(2**63))
        if by == 0:
            return Dataset.from_tensors(np.int64(first)).repeat()._as_type("counter", dtype)
        # A range to int64's end (as far as TF's counter counts before it overflows), repeated
        # so that its cardinality is infinite, as TF's.
        end = 2**63 - 1 if by > 0 else -(2**63)
        ds = Dataset(_stoker.Plan.range(first, end, by), "value").repeat()
        return ds._as_type("counter", dtype)

    def _as_type(self, op: str, dtype: Any) -> Dataset:
        """This int64 dataset as ``dtype`` (a native cast)."""
        name = dtype_name(dtype)
        if name == "int64":
            return self
        if name not in ("int8", "int16", "int32", "uint8", "uint16", "float16", "float32", "float64"):
            raise InvalidArgumentError(f"{op}: the output dtype must be a numeric dtype, got {dtype!r}")
        from .ops import cast

        return self.map(cast("value", name))

    @staticmethod
    def from_tensor_slices(tensors: Any) -> Dataset:
        """Elements are the rows (first axis) of the given arrays: one array, or a dict/tuple
        of them. The arrays are copied once, into the engine."""
        template, pairs = flatten(tensors)
        if not pairs:
            raise InvalidArgumentError("from_tensor_slices needs at least one array")
        names = [n for n, _ in pairs]
        plan = _stoker.Plan.from_arrays(names, [as_tf_converts(a) for _, a in pairs])
        return Dataset(plan, template)

    @staticmethod
    def from_tensors(tensors: Any) -> Dataset:
        """One element: the given arrays (one array, or a dict/tuple of them) whole, as
        tf.data's ``from_tensors``."""
        template, pairs = flatten(tensors)
        if not pairs:
            raise InvalidArgumentError("from_tensors needs at least one array")
        rows = [
            np.asarray(as_tf_converts(a), dtype=object if isinstance(a, (str, bytes)) else None)[np.newaxis]
            for _, a in pairs
        ]
        plan = _stoker.Plan.from_arrays([n for n, _ in pairs], rows)
        return Dataset(plan, template)

    @staticmethod
    def from_generator(
        generator: Callable[..., Any],
        output_types: Any = None,
        output_shapes: Any = None,
        args: Sequence[Any] | None = None,
        output_signature: Any = None,
    ) -> Dataset:
        """The elements ``generator(*args)`` yields, as tf.data's ``from_generator``:
        ``output_signature`` is a ``TensorSpec`` (``tf.TensorSpec``, or any object with
        ``.dtype`` and ``.shape``) or a dict/tuple of them; each element is converted to
        those dtypes (``np.asarray``, as tf.data does) and must have those shapes (``None``
        where a dimension varies), else a ``TypeError`` (structure, dtype) or an
        ``InvalidArgumentError`` (shape) naming the element. ``output_types`` with
        ``output_shapes`` is tf.data's older form. The generator runs on the pipeline's
        thread, holding the GIL. Resuming from a saved state starts the generator again and
        skips the elements already handed out, so it must yield the same elements each time."""
        if not callable(generator):
            raise InvalidArgumentError(f"from_generator: generator must be callable, got {type(generator).__name__}")
        if output_signature is None:
            if output_types is None:
                raise InvalidArgumentError("from_generator: give output_signature (or output_types and output_shapes)")
            output_signature = _generator.signature_from_types(output_types, output_shapes)
        elif output_types is not None or output_shapes is not None:
            raise InvalidArgumentError("from_generator: give output_signature or output_types, not both")
        template, fields = _generator.signature_fields(output_signature)
        start = _generator.runs(generator, tuple(args or ()), template, fields)
        name = getattr(generator, "__name__", type(generator).__name__)
        return _keyed(Dataset(_stoker.Plan.from_generator(start, name, fields), template), generator, args)

    @staticmethod
    def from_npz(path: PathLike) -> Dataset:
        """The rows of every array of an ``.npz`` file, as a dict keyed by array name."""
        plan = _stoker.Plan.from_npz(_path(path))
        return Dataset(plan, {n: n for n, _, _ in plan.schema() or []})

    @staticmethod
    def from_npy(path: PathLike) -> Dataset:
        """The rows of a ``.npy`` array."""
        return Dataset(_stoker.Plan.from_npz(_path(path), "value"), "value")

    @staticmethod
    def image_folder(root: PathLike, extensions: Sequence[str] = (".jpg", ".jpeg", ".png")) -> Dataset:
        """Images laid out as ``root/<class>/<file>`` (torchvision's ImageFolder): elements
        ``{"filename", "label"}``, the label being the class's index among the sorted class
        folder names (``ds.class_names``). Files are sorted; add ``shuffle`` for training."""
        root = _path(root)
        classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
        if not classes:
            raise MissingFileError(2, "no class folders", root)
        paths: list[str] = []
        labels: list[int] = []
        exts = tuple(e.lower() for e in extensions)
        for label, name in enumerate(classes):
            folder = os.path.join(root, name)
            for f in sorted(os.listdir(folder)):
                if f.lower().endswith(exts):
                    paths.append(os.path.join(folder, f))
                    labels.append(label)
        if not paths:
            raise MissingFileError(2, f"no files ending in {', '.join(exts)}", root)
        import numpy as np

        ds = Dataset.from_tensor_slices(
            {"filename": np.array(paths, dtype=object), "label": np.array(labels, dtype=np.int64)}
        )
        ds.class_names = classes
        return ds

    @staticmethod
    def list_files(
        file_pattern: PathLike | Sequence[PathLike], shuffle: bool | None = None, seed: int | None = None
    ) -> Dataset:
        """File names matching the glob pattern(s). As in tf.data, shuffled by default (a new
        order each epoch; reproducible with ``seed``); ``shuffle=False`` gives sorted order."""
        plan = _stoker.Plan.list_files(_paths(file_pattern), True if shuffle is None else bool(shuffle), seed)
        return Dataset(plan, "filename")

    @staticmethod
    def zip(
        *args: Dataset | tuple[Dataset, ...] | dict[str, Dataset],
        datasets: tuple[Dataset, ...] | dict[str, Dataset] | None = None,
    ) -> Dataset:
        """One element from each dataset, as a tuple (or dict); ends with the shortest. As in
        tf.data, the datasets come as one tuple or dict (``zip((a, b))``, ``datasets=``) or as
        arguments (``zip(a, b)``); one dataset alone is itself."""
        if datasets is not None and args:
            raise InvalidArgumentError("zip: give the datasets as arguments or as datasets=, not both")
        if datasets is None:
            if not args:
                raise InvalidArgumentError("zip: no datasets given")
            if len(args) == 1 and isinstance(args[0], Dataset):
                return args[0]
            datasets = args[0] if len(args) == 1 else args  # type: ignore[assignment]
        assert datasets is not None
        keys: list[str] | None = None
        if isinstance(datasets, dict):
            names = list(datasets)
            keys = names
            parts = [datasets[k] for k in names]
            prefixes = [f"{k}/" for k in names]
        else:
            parts = list(datasets)
            prefixes = [f"{i}/" for i in range(len(parts))]
        # a nested tuple or dict of datasets zips into a nested element, as in tf.data
        parts = [Dataset.zip(p) if isinstance(p, (tuple, dict)) else p for p in parts]
        if not all(isinstance(p, Dataset) for p in parts):
            kinds = ", ".join(type(p).__name__ for p in parts if not isinstance(p, Dataset))
            raise InvalidArgumentError(f"zip: takes datasets (in tuples or dicts), got {kinds}")

        def derive() -> Template | None:
            templates = [_known_or_none(d) for d in parts]
            if any(t is None for t in templates):
                return None
            each = [prefixed(t, p) for t, p in zip(templates, prefixes)]  # type: ignore[arg-type]
            return dict(zip(keys, each)) if keys is not None else like(datasets, each)  # type: ignore[arg-type]

        plan = _stoker.Plan.zip([d._plan for d in parts], prefixes)
        return Dataset(plan, _lazy(derive))

    @staticmethod
    def sample_from_datasets(
        datasets: Sequence[Dataset],
        weights: Sequence[float] | None = None,
        seed: int | None = None,
        stop_on_empty_dataset: bool = False,
        rerandomize_each_iteration: bool | None = None,
    ) -> Dataset:
        """Elements drawn at random from ``datasets``, dataset ``i`` with probability
        ``weights[i]`` (equal by default), as tf.data's ``sample_from_datasets``. The datasets
        must have the same structure, dtypes and ranks. When a drawn dataset has ended: with
        ``stop_on_empty_dataset`` the mix ends, else it draws among the others; a dataset of
        weight 0 is never drawn, so the mix ends when every dataset of positive weight has
        ended (tf.data would wait forever). With a ``seed`` the draws are reproducible, the
        same in every epoch unless ``rerandomize_each_iteration``. Its resume state is the
        number of draws and each dataset's state."""
        parts = _datasets("sample_from_datasets", datasets)
        w = None
        if weights is not None:
            try:
                w = [float(x) for x in weights]
            except (TypeError, ValueError):
                raise InvalidArgumentError(f"sample_from_datasets: weights must be numbers, got {weights!r}") from None
        if seed is not None:
            seed = _whole("sample_from_datasets: seed", seed, 0)
        plan = _stoker.Plan.sample_from_datasets(
            [d._plan for d in parts], w, seed, bool(stop_on_empty_dataset), bool(rerandomize_each_iteration)
        )
        return Dataset(plan, parts[0]._structure)

    @staticmethod
    def choose_from_datasets(
        datasets: Sequence[Dataset], choice_dataset: Dataset, stop_on_empty_dataset: bool = True
    ) -> Dataset:
        """The next element of ``datasets[i]`` for each ``i`` (int64 scalars) that
        ``choice_dataset`` hands out, as tf.data's ``choose_from_datasets``. A choice of a
        dataset that has ended ends the whole with ``stop_on_empty_dataset`` (the default),
        else is skipped; a choice out of range is an ``InvalidArgumentError``."""
        parts = _datasets("choose_from_datasets", datasets)
        if not isinstance(choice_dataset, Dataset):
            raise InvalidArgumentError(
                f"choose_from_datasets: choice_dataset must be a stoker.Dataset, got {type(choice_dataset).__name__}"
            )
        plan = _stoker.Plan.choose_from_datasets(
            [d._plan for d in parts], choice_dataset._plan, bool(stop_on_empty_dataset)
        )
        return Dataset(plan, parts[0]._structure)

    @staticmethod
    def from_converted(
        out_dir: PathLike, decode_images: bool = True, num_parallel_reads: int | None = None
    ) -> Dataset:
        """The elements stored by :meth:`convert` in ``out_dir``, in their order, with the
        fields, dtypes and shapes its manifest lists (no feature spec to write). The shards
        are read with their record indexes: ``global_shuffle`` and fast resumes work on them.
        Images stored as PNG/JPEG are decoded unless ``decode_images=False`` (then they stay
        encoded strings, for a fused decode-and-crop op after). ``num_parallel_reads`` reads
        several shards at once (their records interleaved: another order)."""
        reads = _parallel_calls("from_converted", num_parallel_reads, "num_parallel_reads")
        plan = _stoker.from_converted(_path(out_dir), bool(decode_images), 1 if reads is None else reads)
        names = [n for n, _, _ in plan.schema() or []]
        # A tuple's fields are named by position: a tuple again.
        positional = len(names) > 1 and names == [str(i) for i in range(len(names))]
        structure: Template = tuple(names) if positional else _structure_of(plan)
        return Dataset(plan, structure)

    @staticmethod
    def load_spec(path: PathLike) -> Dataset:
        """A pipeline from a spec file written by ``save_spec`` (or by hand; JSON or TOML)."""
        plan = _stoker.Plan.load_spec(_path(path))
        return Dataset(plan, _structure_of(plan))

    # ------------------------------------------------------------- transforms
    def shuffle(self, buffer_size: int, seed: int | None = None, reshuffle_each_iteration: bool = True) -> Dataset:
        """Shuffles with a buffer of ``buffer_size`` elements (tf.data's algorithm). With a
        ``seed`` the order is reproducible; each epoch gets a new order unless
        ``reshuffle_each_iteration=False``."""
        size = _whole("shuffle: buffer_size", buffer_size, 1)
        return Dataset(self._plan.shuffle(size, seed, reshuffle_each_iteration), self._structure)._rows_of(
            self, order=False
        )

    def global_shuffle(self, seed: int | None = None, reshuffle_each_iteration: bool = True) -> Dataset:
        """Every element exactly once per epoch, in a seeded pseudo-random order of the whole
        pass (not a window of it, as ``shuffle``'s buffer), a new one each epoch unless
        ``reshuffle_each_iteration=False``. Each position's element is computed in O(1)
        memory (a Feistel permutation, as Grain's ``index_shuffle``) and read by random
        access, so the input must have it: uncompressed ``TFRecordDataset`` (with a record
        index from ``stoker index FILE...``, or one built by a scan of the file when the
        pipeline starts), ``from_tensor_slices``, ``from_npz``, ``list_files``,
        ``image_folder`` or ``range``, and element-wise maps over them. Its resume state is
        its position and seed."""
        plan = self._plan.global_shuffle(seed, bool(reshuffle_each_iteration))
        return Dataset(plan, self._structure)._rows_of(self, order=False)

    def map(
        self,
        map_func: NativeOp | Sequence[NativeOp] | Callable[..., Any],
        num_parallel_calls: int | None = None,
        deterministic: bool | None = None,
        synchronous: bool | None = None,
        use_unbounded_threadpool: bool = False,
        name: str | None = None,
    ) -> Dataset:
        """Applies native ops (``stoker.ops``; a list runs as one stage) or a Python function.

        A Python function receives NumPy arrays (a tuple element is passed as separate
        arguments, as in tf.data; a string field as ``bytes`` that also equal the ``str`` of
        the same text) and returns arrays; it runs on worker threads and holds the
        GIL only while it runs. ``num_parallel_calls`` (an int or ``AUTOTUNE``) runs it on
        several threads; results stay in order unless ``deterministic=False`` (``None``: the
        pipeline's option, see :class:`Options`, else in order).

        A function returning a list returns a tuple of components (as in tf.data). Like
        tf.data's tracing, the function captures the values its free variables (closure
        variables and the module globals it reads) have when ``map`` is called, so that
        ``ds.map(lambda x: f(x, i))`` in a loop keeps each turn's ``i``; objects are not
        copied (a list's later changes are seen). The same holds for the functions of
        ``filter``, ``interleave``, ``flat_map``, ``scan``, ``group_by_window`` and
        ``bucket_by_sequence_length``.

        A function that uses TensorFlow is traced when ``map`` is called, as tf.data traces
        it, and runs as native ops where each of its ops has one, else partly or wholly as its
        traced graph (see the README's "TensorFlow functions in map" and ``explain()``).

        ``synchronous`` and ``use_unbounded_threadpool`` (tf.data's) are accepted: stoker's
        threads are its budget's (``with_options(threads=...)``).
        """
        del synchronous, use_unbounded_threadpool, name
        det = None if deterministic is None else bool(deterministic)
        npc = _parallel_calls("map", num_parallel_calls)
        if isinstance(map_func, NativeOp) or (
            isinstance(map_func, (list, tuple)) and all(isinstance(o, NativeOp) for o in map_func)
        ):
            ops = [map_func] if isinstance(map_func, NativeOp) else list(map_func)
            if any(o.as_tuple is not None for o in ops[:-1]):
                raise InvalidArgumentError("map: select(..., as_tuple=True) must be the last op of its map")
            plan = self._plan.map([o.spec for o in ops], npc, det)
            schema = plan.schema()
            if ops and ops[-1].as_tuple is not None:
                structure: Template | Dynamic = ops[-1].as_tuple
            elif schema is None:
                structure = Dynamic()
            else:
                structure = after_native_ops(_known(self), [n for n, _, _ in schema])
            return Dataset(plan, structure)._rows_of(self, order=det is not False, same=False)
        if not callable(map_func):
            raise ArgumentTypeError("map takes stoker.ops native ops (or a list of them) or a Python function")
        if _tf_function.uses_tensorflow(map_func):
            return _keyed(self._map_tensorflow(map_func, npc, det), map_func)
        out = Dynamic()
        adapter = _adapter(bound_now(map_func), self._structure, out)
        return _keyed(Dataset(self._plan.map([adapter], npc, det), out), map_func)

    def _map_tensorflow(self, fn: Callable[..., Any], npc: int | None, det: bool | None) -> Dataset:
        """A function that uses TensorFlow, traced now as tf.data traces it: as native ops
        where each of its ops has one, else as its graph (see ``_tf_function``)."""
        name = getattr(fn, "__name__", "map_fn")
        known, schema = _known(self, learn=True), self._traced_schema()
        traced, translation = _TRACES.get(fn, known, schema, False)
        if isinstance(traced, str):  # not traceable: it runs as Python, as before
            out = Dynamic()
            plan = self._plan.map([_adapter(bound_now(fn), self._structure, out)], npc, det)
            _note(plan, f"map '{name}': TensorFlow function runs eagerly: tracing failed ({traced})")
            return Dataset(plan, out)
        traced, translation, seeding, seeds_note = _seeded(fn, known, schema, False, traced, translation)
        static = {
            path: t.shape.as_list()
            for path, t in traced.out_values
            if getattr(getattr(t, "shape", None), "rank", None) is not None
        }

        def shaped(ds: Dataset) -> Dataset:
            ds._static = static
            return ds
        if isinstance(translation, _tf_function.Untranslatable):
            why = translation
            out = Dynamic()
            call = _tf_function.graph_call(traced, out)
            plan = self._plan.map([*seeding, call], npc, det)
            each = f"map '{name}': TensorFlow function runs as its traced graph, per element: {why}"
            text = _random(each + seeds_note, _random_of(call))
            _note(plan, text)
            per_batch = _tf_function.batch_call(traced)
            if per_batch is None:
                return shaped(Dataset(plan, out))
            # Where a batch follows: the graph once per batch, on the batched inputs.
            fields = _select(traced.in_fields).spec
            every = f"map '{name}': TensorFlow function runs as its traced graph, once per batch (vectorized): {why}"
            note = every + text[len(each) :]
            deferred = _PerBatch(name, self, [*seeding, fields], per_batch, (npc, det), note, traced.out_template)
            return shaped(self._deferred(plan, out, deferred))
        specs = [*seeding, *(o.spec if isinstance(o, NativeOp) else o for o in translation.ops)]
        done = ", ".join(translation.done) or "nothing"
        if translation.rest is not None:
            plan = self._plan.map(specs, npc, det)
            head = f"map '{name}': TensorFlow function partly translated to native ops: {done}; "
            each = f"{head}the rest runs as its traced graph, per element, from {translation.rest}"
            text = _random(each + seeds_note, translation.random)
            _note(plan, text)
            out = Dynamic()
            out.template = translation.template
            if translation.batched is not None:
                native, rest = translation.batched
                deferred = _PerBatch(
                    name,
                    self,
                    [*seeding, *(o.spec for o in native)],
                    rest,
                    (npc, det),
                    f"{head}the rest runs as its traced graph once per batch (vectorized), from {translation.rest}"
                    + text[len(each) :],
                    translation.template,
                )
                return shaped(self._deferred(plan, out, deferred))
            return shaped(Dataset(plan, out))
        used = specs[:-1]  # without the last op, a `select`, if it keeps all
        plan = self._plan.map(used, npc, det)
        schema = plan.schema()
        if schema is None or sorted(n for n, _, _ in schema) != sorted(leaves(translation.template)):
            used = specs
            plan = self._plan.map(used, npc, det)
            schema = plan.schema()
        checks = _shape_checks(translation.template, static, schema)
        if checks:
            plan = self._plan.map([*used, *checks], npc, det)
        _note(plan, f"map '{name}': TensorFlow function translated to native ops: {done}")
        return Dataset(plan, translation.template)._rows_of(self, order=det is not False, same=False)

    @staticmethod
    def _deferred(plan: Any, out: Dynamic, deferred: _PerBatch) -> Dataset:
        """The map ``plan`` (handing out ``out``), which a ``batch`` after it runs as
        ``deferred`` says (see ``_PerBatch``)."""
        _PER_BATCH[plan.id()] = deferred
        mapped = Dataset(plan, out)
        weakref.finalize(mapped, _PER_BATCH.pop, plan.id(), None)
        return mapped

    def batch(
        self,
        batch_size: int,
        drop_remainder: bool = False,
        num_parallel_calls: int | None = None,
        deterministic: bool | None = None,
        name: str | None = None,
    ) -> Dataset:
        """Stacks ``batch_size`` consecutive elements; the last batch may be smaller unless
        ``drop_remainder``. Written straight into pooled buffers. ``num_parallel_calls`` and
        ``deterministic`` (tf.data's parallel copy into the batch) are accepted: stoker's
        batches are written by the stage that makes their elements, and keep their order."""
        del deterministic, name
        _parallel_calls("batch", num_parallel_calls)
        size = _whole("batch: batch_size", batch_size, 1)
        step = {"step": "batch", "batch_size": size, "drop_remainder": bool(drop_remainder)}
        deferred = _PER_BATCH.get(self._plan.id())
        if deferred is not None and not self._plan.skips_bad_records():
            # A TensorFlow function whose untranslated rest reads fields of one shape: its
            # native ops, the batch, then the rest once per batch. Not where bad records are
            # skipped: a bad element would drop its whole batch.
            npc, det = deferred.parallel
            plan = deferred.source._plan.map(deferred.native, npc, det).step(step).map([deferred.rest], npc, det)
            _note(plan, deferred.note)
            _PER_BATCH_RESTS[plan.id()] = deferred.name
            if self._plan.id() in _FUNCTION_KEYS:  # the function's map is not among its inputs
                _FUNCTION_KEYS[plan.id()] = _FUNCTION_KEYS[self._plan.id()]
            out = Dynamic()
            out.template = deferred.template
            return Dataset(plan, out)._batched(self, size, drop_remainder)
        batched = Dataset(self._plan.step(step), self._structure)
        return batched._batched(self, size, drop_remainder)

    def padded_batch(
        self,
        batch_size: int,
        padded_shapes: Any = None,
        padding_values: Any = None,
        drop_remainder: bool = False,
    ) -> Dataset:
        """Like :meth:`batch` for elements of different shapes, as ``tf.data``'s
        ``padded_batch``: every field is padded at the end of each axis to the largest
        size in the batch, or to ``padded_shapes`` (in the element's structure, as tf.data
        matches it: a dict of shapes for dict elements, a tuple of shapes for tuple elements,
        one shape for single values; a shape is a list or tuple of dimensions, or one int for
        a vector of that size; ``None`` or -1 in a dimension, or ``None`` for the whole shape,
        means "the batch's largest"). Numbers are padded with 0 and strings with ``b""``
        unless ``padding_values`` says otherwise: one value for every field, or a value per
        field in the element's structure (``None`` is the default). A value a padded field's
        dtype does not hold exactly (1.5 or 300 for uint8, a string for a number, a number for
        a string) is an error where it would be written (tf.data refuses it for every field,
        padded or not), not a conversion; int64 values are exact. A fixed padded size smaller
        than an element raises."""
        size = _whole("padded_batch: batch_size", batch_size, 1)
        shapes: dict[str, list[int | None]] = {}
        if padded_shapes is not None:
            shapes = _padded_shapes(_known(self, learn=True), padded_shapes)
        values: dict[str, Any] = {}
        default: Any = None
        if isinstance(padding_values, (int, float, str, bytes, np.generic)) or (
            (isinstance(padding_values, np.ndarray) or hasattr(padding_values, "numpy"))
            and np.ndim(padding_values) == 0
        ):
            # One value for every field of its kind (also those a Python function makes).
            default = _pad_value(padding_values)
        elif padding_values is not None:
            for name, v in flatten(padding_values)[1]:
                if v is not None:  # None: the default, as in tf.data
                    values[name] = _pad_value(v)
        padding = json.dumps({"shapes": shapes, "values": values, "default": default})
        padded = Dataset(self._plan.padded_batch(size, bool(drop_remainder), padding), self._structure)
        return padded._batched(self, size, drop_remainder, shapes)

    def unbatch(self) -> Dataset:
        """Splits each element along its first dimension into that many elements, as
        ``tf.data``'s ``unbatch``: every field needs a first dimension, the same for all of an
        element's fields (else an error naming the element). The rows are views, not copies."""
        return Dataset(self._plan.step({"step": "unbatch"}), self._structure)

    def interleave(
        self,
        map_func: Callable[..., Dataset],
        cycle_length: int | None = None,
        block_length: int | None = None,
        num_parallel_calls: int | None = None,
        deterministic: bool | None = None,
    ) -> Dataset:
        """Opens ``map_func(element)`` for ``cycle_length`` elements at a time and takes
        ``block_length`` elements from each in turn (tf.data's order). With
        ``num_parallel_calls`` every open dataset reads ahead on its own thread; the order
        stays the same. ``map_func=stoker.TFRecordDataset`` runs entirely in Rust. A
        ``map_func`` that uses TensorFlow is traced as tf.data traces it: its ops run as its
        graph, once per element, and the dataset it returns is made from their values; one
        that cannot be traced runs as Python, and ``explain()`` says why."""
        opened = self._interleave(map_func, cycle_length, block_length, num_parallel_calls, "interleave")
        return _keyed(opened, map_func)

    def _interleave(
        self,
        map_func: Callable[..., Dataset],
        cycle_length: int | None,
        block_length: int | None,
        num_parallel_calls: int | None,
        what: str,
    ) -> Dataset:
        block = 1 if block_length is None else _whole("interleave: block_length", block_length, 1)
        cycle = None
        if cycle_length is not None and cycle_length != AUTOTUNE:
            cycle = _whole("interleave: cycle_length", cycle_length, 1, " (or AUTOTUNE)")
        npc = _parallel_calls("interleave", num_parallel_calls)
        kwargs = _is_tfrecord_factory(map_func)
        if kwargs is not None:
            plan = self._plan.interleave_tfrecord(
                kwargs.get("compression_type") or "",
                bool(kwargs.get("verify_crc", True)),
                cycle,
                block,
                npc,
                _max_record_bytes(kwargs.get("max_record_bytes", MAX_RECORD_BYTES)),
            )
            return Dataset(plan, "record")
        one_at_a_time = cycle == 1 and block == 1
        map_func, note = self._dataset_function(bound_now(map_func), what, one_at_a_time)
        slices = getattr(map_func, "_stoker_slices", None)
        if slices is not None and one_at_a_time:
            # One dataset at a time of the slices of the graph's values: their rows, in order,
            # as a map then an unbatch hand them out, without a dataset made per element.
            mapped = self.map(slices)
            if note is not None:
                _note(mapped._plan, note)
            return mapped.unbatch()
        # The structure of the datasets opened: the first one's known (its own Python
        # function may not have run when it is opened, and the pipeline opens ahead).
        opened = _Opened()
        out = Dynamic(opened.template)
        structure = self._structure

        def open_dataset(flat: dict[str, Any]) -> Any:
            args = pack_element(structure, list(flat), list(flat.values()))
            with _inner():
                ds = apply(map_func, args)
            if not isinstance(ds, Dataset):
                raise ArgumentTypeError(f"interleave's function must return a stoker.Dataset, got {type(ds).__name__}")
            opened.add(ds)
            return ds._plan

        open_dataset.__name__ = getattr(map_func, "__name__", "interleave_fn")
        plan = self._plan.interleave(open_dataset, cycle, block, npc)
        if note is not None:
            _note(plan, note)
        return Dataset(plan, out)

    def flat_map(self, map_func: Callable[..., Dataset]) -> Dataset:
        """Maps each element to a dataset and hands out their elements, one dataset after the
        other (tf.data's ``flat_map``: an ``interleave`` with ``cycle_length=1``); a
        ``map_func`` that uses TensorFlow is traced as in :meth:`interleave`."""
        return _keyed(self._interleave(map_func, 1, 1, None, "flat_map"), map_func)

    def _dataset_function(
        self, fn: Callable[..., Dataset], what: str, one_at_a_time: bool = False
    ) -> tuple[Callable[..., Dataset], str | None]:
        """``fn`` (a function of this dataset's element that returns a dataset) traced where
        it uses TensorFlow (see ``_tf_function.dataset_call``), and what ``explain()`` says of
        it (``one_at_a_time``: its datasets are read one after the other); else ``fn``
        itself."""
        if not _tf_function.uses_tensorflow(fn):
            return fn, None
        name = f"{what} '{getattr(fn, '__name__', 'map_func')}'"
        if isinstance(self._structure, Windows):
            return fn, f"{name}: runs as Python (its argument is a window: datasets), TensorFlow ops in it eagerly"
        try:
            traced = _tf_function.dataset_call(fn, _known(self, learn=True), self._traced_schema(), Dataset)
        except Exception as e:  # noqa: BLE001 - not traceable: it runs as Python, as before
            return fn, f"{name}: TensorFlow function runs eagerly: tracing failed ({type(e).__name__}: {e})"
        text = f"{name}: TensorFlow ops run as its traced graph, per element; its dataset made of their values"
        if one_at_a_time and getattr(traced, "_stoker_slices", None) is not None:
            text = (
                f"{name}: TensorFlow ops run as its traced graph, per element; the rows of the values it slices "
                "(from_tensor_slices) handed out by a map and an unbatch, no dataset made per element"
            )
        return traced, _random(text, _random_of(traced))

    def window(
        self, size: int, shift: int | None = None, stride: int = 1, drop_remainder: bool = False
    ) -> Dataset:
        """tf.data's ``window``: window ``k`` holds elements ``k * shift + i * stride`` for
        ``i < size`` (``shift`` defaults to ``size``; the last windows are shorter unless
        ``drop_remainder``). As in tf.data, each component of a window is a dataset of its
        elements (a dict of them for dict elements), for the usual
        ``ds.window(n, shift).flat_map(lambda w: w.batch(n))``. The engine makes each window
        as one element (its elements stacked, so they must have one shape: tf.data's may
        differ), which the functions of ``flat_map``, ``interleave``, ``map`` and ``filter``
        then see as datasets. Its resume state is the
        input's state where the next window starts."""
        n = _whole("window: size", size, 1)
        sh = n if shift is None else _whole("window: shift", shift, 1)
        st = _whole("window: stride", stride, 1)
        template = _known_or_none(self)
        plan = self._plan.window(n, sh, st, bool(drop_remainder))
        return Dataset(plan, Windows(template, Dataset.from_tensor_slices))

    def scan(self, initial_state: Any, scan_func: Callable[..., tuple[Any, Any]]) -> Dataset:
        """tf.data's ``scan``: ``scan_func(state, element)`` returns ``(next_state, output)``
        (a tuple element is one argument, as in tf.data);
        the outputs are the elements, the state carried from one to the next (starting from
        ``initial_state`` each pass). It runs in Python on the pipeline's thread; a function
        that uses TensorFlow is traced as tf.data traces it (the state's signature that of
        ``initial_state``) and runs as its graph, one call per element, never eagerly. Resuming
        runs the pass again from its start through ``scan_func`` up to the saved position
        (the state is Python's), so ``scan_func`` must be a function of its arguments."""
        if not callable(scan_func):
            raise InvalidArgumentError(f"scan: scan_func must be callable, got {type(scan_func).__name__}")
        import copy

        note = None
        if _tf_function.uses_tensorflow(scan_func):
            scan_func, note = self._scan_tensorflow(initial_state, scan_func)
        scan_func = bound_now(scan_func)
        structure = self._structure
        out = Dynamic()

        def init() -> Any:
            return copy.deepcopy(initial_state)

        def step(state: Any, flat: dict[str, Any]) -> tuple[Any, list[tuple[str, Any]]]:
            args = pack_element(structure, list(flat), list(flat.values()))
            # As in tf.data, the element is one argument, a tuple element too.
            result = scan_func(state, args)
            if isinstance(result, list):  # as tf.data: a returned list is a tuple
                result = tuple(result)
            if not (isinstance(result, tuple) and len(result) == 2):
                raise ArgumentTypeError(f"scan_func must return (new_state, output), got {type(result).__name__}")
            template, pairs = flatten(result[1])
            out.template = template
            return result[0], pairs

        step.__name__ = getattr(scan_func, "__name__", "scan_fn")
        plan = self._plan.scan(init, step)
        if note is not None:
            _note(plan, note)
        return _keyed(Dataset(plan, out), scan_func, initial_state)

    def _traced_schema(self) -> list[tuple[str, str, list[int | None]]]:
        """The fields a traced function's signature gives: the plan's, else those of a run
        up to the first element (after a Python function), their dimensions unknown."""
        schema = self._plan.schema()
        if schema is None:
            schema = [(n, d, [None] * rank) for n, (d, rank) in self._first_element().items()]
        return schema

    def _element_function(self, fn: Callable[..., Any], what: str) -> tuple[Callable[..., Any], str | None]:
        """``fn`` (a function of this dataset's element) traced as its graph where it uses
        TensorFlow, and what ``explain()`` says of it; else ``fn`` itself."""
        if not _tf_function.uses_tensorflow(fn):
            return fn, None
        schema = self._traced_schema()
        try:
            traced = _tf_function.trace(fn, _known(self, learn=True), schema)
        except Exception as e:  # noqa: BLE001 - not traceable: it runs as Python, as before
            return fn, f"{what}: TensorFlow function runs eagerly: tracing failed ({type(e).__name__}: {e})"
        call = _tf_function.element_call(traced)
        return call, _random(f"{what}: TensorFlow function runs as its traced graph, per element", _random_of(call))

    def _scan_tensorflow(self, initial_state: Any, fn: Callable[..., Any]) -> tuple[Callable[..., Any], str]:
        """A scan function that uses TensorFlow, traced now (see ``_tf_function.scan_call``),
        and what ``explain()`` says of it."""
        name = getattr(fn, "__name__", "scan_fn")
        schema = self._traced_schema()
        try:
            traced = _tf_function.scan_call(fn, initial_state, _known(self, learn=True), schema)
        except Exception as e:  # noqa: BLE001 - not traceable: it runs as Python, as before
            return fn, f"scan '{name}': TensorFlow function runs eagerly: tracing failed ({type(e).__name__}: {e})"
        text = f"scan '{name}': TensorFlow function runs as its traced graph, per element"
        return traced, _random(text, _random_of(traced))

    def group_by_window(
        self,
        key_func: Callable[..., Any],
        reduce_func: Callable[[Any, Dataset], Dataset],
        window_size: int | None = None,
        window_size_func: Callable[[Any], Any] | None = None,
    ) -> Dataset:
        """tf.data's ``group_by_window``: elements gather into windows by ``key_func``'s int64
        key; when a key's window holds ``window_size`` (or ``window_size_func(key)``)
        elements, ``reduce_func(key, window)`` (the window a Dataset of its elements) makes a
        dataset whose elements are handed out. When the input ends, the windows left are
        reduced in ascending key order, as tf.data does. The functions run in Python on the
        pipeline's thread. Resuming runs the pass again from its start through the functions
        up to the saved position."""
        if (window_size is None) == (window_size_func is None):
            raise InvalidArgumentError("group_by_window: give window_size or window_size_func (one of them)")
        for name, f in (("key_func", key_func), ("reduce_func", reduce_func)):
            if not callable(f):
                raise InvalidArgumentError(f"group_by_window: {name} must be callable, got {type(f).__name__}")
        key_name = getattr(key_func, "__name__", "key_func")
        key_func, note = self._element_function(key_func, f"group_by_window '{key_name}'")
        key_func, reduce_func = bound_now(key_func), bound_now(reduce_func)
        if window_size_func is not None:
            window_size_func = bound_now(window_size_func)
        if window_size is not None:
            fixed = _whole("group_by_window: window_size", window_size, 1)

            def size(key: int) -> int:
                return fixed
        else:
            assert window_size_func is not None

            def size(key: int) -> int:
                return _whole("group_by_window: window_size_func's result", int(window_size_func(np.int64(key))), 1)

        structure = self._structure
        opened = _Opened()
        out = Dynamic(opened.template)

        def key(flat: dict[str, Any]) -> int:
            args = pack_element(structure, list(flat), list(flat.values()))
            k = apply(key_func, args)
            if np.ndim(k) != 0 or not np.issubdtype(np.asarray(k).dtype, np.integer):
                raise ArgumentTypeError(f"group_by_window: key_func must return an integer scalar, got {k!r}")
            return int(k)

        key.__name__ = key_name

        def reduce(k: int, window: Any) -> Any:
            with _inner():
                ds = reduce_func(np.int64(k), Dataset(window, structure))
            if not isinstance(ds, Dataset):
                raise ArgumentTypeError(
                    f"group_by_window: reduce_func must return a stoker.Dataset, got {type(ds).__name__}"
                )
            opened.add(ds)
            return ds._plan

        reduce.__name__ = getattr(reduce_func, "__name__", "reduce_fn")
        plan = self._plan.group_by_window(key, size, reduce)
        if note is not None:
            _note(plan, note)
        return _keyed(Dataset(plan, out), key_func, reduce_func, window_size_func)

    def bucket_by_sequence_length(
        self,
        element_length_func: Callable[..., Any],
        bucket_boundaries: Sequence[int],
        bucket_batch_sizes: Sequence[int],
        padded_shapes: Any = None,
        padding_values: Any = None,
        pad_to_bucket_boundary: bool = False,
        no_padding: bool = False,
        drop_remainder: bool = False,
    ) -> Dataset:
        """tf.data's ``bucket_by_sequence_length``: each element goes to the bucket whose
        ``[boundary[i-1], boundary[i])`` holds ``element_length_func(element)``, and each
        bucket is padded and batched by ``bucket_batch_sizes[i]`` (``padded_batch``, or
        ``batch`` with ``no_padding``), as tf.data builds it on ``group_by_window``. With
        ``pad_to_bucket_boundary`` the unknown dimensions pad to the bucket's boundary minus
        one (an element at or past the last boundary is then an error)."""
        bounds = [_whole(f"bucket_by_sequence_length: bucket_boundaries[{i}]", b, 0)
                  for i, b in enumerate(bucket_boundaries)]
        sizes = [_whole(f"bucket_by_sequence_length: bucket_batch_sizes[{i}]", b, 1)
                 for i, b in enumerate(bucket_batch_sizes)]
        if len(sizes) != len(bounds) + 1:
            raise InvalidArgumentError(
                f"bucket_by_sequence_length: {len(sizes)} bucket_batch_sizes for {len(bounds)} boundaries "
                f"(need one more than the boundaries)"
            )
        if any(b >= c for b, c in zip(bounds, bounds[1:])):
            raise InvalidArgumentError(f"bucket_by_sequence_length: bucket_boundaries must increase, got {bounds}")
        lows = [-(2**31)] + bounds
        highs = bounds + [2**31 - 1]
        name = getattr(element_length_func, "__name__", "element_length_func")
        element_length_func, note = self._element_function(element_length_func, f"bucket_by_sequence_length '{name}'")
        element_length_func = bound_now(element_length_func)

        def bucket(*args: Any) -> int:
            n = element_length_func(*args)
            if np.ndim(n) != 0 or not np.issubdtype(np.asarray(n).dtype, np.integer):
                raise ArgumentTypeError(
                    f"bucket_by_sequence_length: element_length_func must return an integer scalar, got {n!r}"
                )
            n = int(n)
            for i, (lo, hi) in enumerate(zip(lows, highs)):
                if lo <= n < hi:
                    return i
            raise InvalidArgumentError(f"bucket_by_sequence_length: element length {n} is in no bucket")

        bucket.__name__ = name

        def batching(bucket_id: Any, window: Dataset) -> Dataset:
            i = int(bucket_id)
            if no_padding:
                return window.batch(sizes[i], drop_remainder=drop_remainder)
            filler = None
            if pad_to_bucket_boundary:
                if i >= len(bounds):
                    raise InvalidArgumentError(
                        "bucket_by_sequence_length: with pad_to_bucket_boundary=True, elements must be "
                        "shorter than max(bucket_boundaries)"
                    )
                filler = bounds[i] - 1
            shapes = padded_shapes
            if filler is not None:
                # Fixed sizes need the structure: learnt from the window only then (a window
                # after a Python function has to run for it).
                shapes = _fill_dims(shapes if shapes is not None else _unknown_dims(window), filler)
            return window.padded_batch(sizes[i], shapes, padding_values, drop_remainder=drop_remainder)

        grouped = self.group_by_window(bucket, batching, window_size_func=lambda b: sizes[int(b)])
        if note is not None:
            _note(grouped._plan, note)
        return grouped

    def rebatch(self, batch_size: int, drop_remainder: bool = False) -> Dataset:
        """The same rows in batches of ``batch_size`` (tf.data's ``rebatch`` with one size:
        ``unbatch().batch(batch_size, drop_remainder)``, the rows views, not copies, until the
        new batch is written)."""
        size = _whole("rebatch: batch_size", batch_size, 1)
        return self.unbatch().batch(size, drop_remainder)

    def reduce(self, initial_state: Any, reduce_func: Callable[[Any, Any], Any]) -> Any:
        """Folds one iteration's elements into a state (tf.data's ``reduce``): ``reduce_func(
        state, element)`` returns the next state; the last one is returned. It runs in Python,
        on the calling thread; a function that uses TensorFlow is traced as ``scan``'s is and
        runs as its graph, one call per element, never eagerly."""
        if _tf_function.uses_tensorflow(reduce_func):
            try:
                reduce_func = _tf_function.scan_call(
                    reduce_func, initial_state, _known(self, learn=True), self._traced_schema(), with_output=False
                )
            except Exception:  # noqa: BLE001 - not traceable: it runs as Python, as before
                pass
        state = initial_state
        for element in self:
            state = reduce_func(state, element)
        return state

    def filter(self, predicate: Callable[..., Any]) -> Dataset:
        """Keeps the elements for which the Python ``predicate`` is true. A predicate that uses
        TensorFlow is traced as ``map``'s functions are (it must give a scalar bool): computed
        by native ops where its ops have them, else by its traced graph, never eagerly."""
        if _tf_function.uses_tensorflow(predicate):
            return _keyed(self._filter_tensorflow(predicate), predicate)
        kept = Dataset(self._plan.filter(self._test(predicate)), self._structure)
        kept._spec_of = self
        return _keyed(kept, predicate)

    def _filter_tensorflow(self, predicate: Callable[..., Any]) -> Dataset:
        name = getattr(predicate, "__name__", "predicate")
        known, schema = _known(self, learn=True), self._traced_schema()
        traced, translation = _TRACES.get(predicate, known, schema, True)
        if isinstance(traced, str):  # not traceable: it runs as Python, as before
            plan = self._plan.filter(self._test(predicate))
            _note(plan, f"filter '{name}': TensorFlow predicate runs eagerly: tracing failed ({traced})")
            return Dataset(plan, self._structure)
        if translation is None:
            outs = traced.out_values
            raise InvalidArgumentError(f"filter: predicate '{name}' must return a scalar bool tensor, got {outs!r}")
        traced, translation, seeding, seeds_note = _seeded(predicate, known, schema, True, traced, translation)
        inputs = [f for f in traced.in_fields if f != traced.seed_field]
        if isinstance(translation, _tf_function.Untranslatable):
            why = translation
            test = _tf_function.graph_test(traced)
            if seeding:
                plan = self._plan.map(seeding, None, None).filter(test).map([_select(inputs).spec], None, None)
            else:
                plan = self._plan.filter(test)
            text = f"filter '{name}': TensorFlow predicate runs as its traced graph, per element: {why}{seeds_note}"
            _note(plan, _random(text, _random_of(test)))
            return Dataset(plan, self._structure)
        keep = translation.template
        assert isinstance(keep, str)
        specs = [*seeding, *(o.spec if isinstance(o, NativeOp) else o for o in translation.ops)]
        plan = self._plan.map(specs, None, None)
        def kept(flat: dict[str, Any]) -> bool:
            return bool(flat[keep])

        kept.__name__ = f"{name}: {keep} (its native result)"
        plan = plan.filter(kept)
        plan = plan.map([_select(inputs).spec], None, None)
        done = ", ".join(translation.done) or "nothing"
        if translation.rest is not None:
            note = (
                f"partly translated to native ops: {done}; "
                f"the rest runs as its traced graph, per element, from {translation.rest}{seeds_note}"
            )
        else:
            note = f"translated to native ops: {done}"
        _note(plan, _random(f"filter '{name}': TensorFlow predicate {note}", translation.random))
        return Dataset(plan, self._structure)

    def unique(self) -> Dataset:
        """The elements not seen before in this pass, in order, as tf.data's ``unique``: the
        elements must be scalars of int32, int64 or string. The set of those seen is Python's:
        resuming runs the pass again from its start up to the saved position (as ``scan``)."""
        spec = self._element_spec(learn=True)
        if not isinstance(spec, TensorSpec) or spec.shape != () or spec.dtype not in ("int32", "int64", "string"):
            raise InvalidArgumentError(
                f"unique: the elements must be scalars of int32, int64 or string, got {spec!r}"
            )

        def first_time(seen: set[Any], x: Any) -> tuple[set[Any], tuple[Any, np.bool_]]:
            key = x.item() if isinstance(x, np.ndarray) else bytes(x) if isinstance(x, bytes) else x
            new = key not in seen
            seen.add(key)
            return seen, (x, np.bool_(new))

        # The set grows in place: scan copies the empty one at the start of each pass.
        marked = self.scan(set(), first_time).filter(lambda x, new: bool(new))
        kept = marked.map(NativeOp({"op": "select", "fields": ["0"]}))
        return Dataset(kept._plan, "0")

    def rejection_resample(
        self,
        class_func: Callable[..., Any],
        target_dist: Sequence[float],
        initial_dist: Sequence[float] | None = None,
        seed: int | None = None,
    ) -> Dataset:
        """tf.data's ``rejection_resample``: ``(class, element)`` pairs whose classes follow
        ``target_dist``, by keeping each element of class ``c`` with probability
        ``(target[c] / initial[c]) / max(target / initial)``. ``initial_dist`` is the input's
        class distribution; without it, the counts so far (the estimate tf.data makes too).
        The class is ``class_func(element)``, an integer in ``[0, len(target_dist))`` (handed
        out in its dtype, a Python int as int32). The
        draws come from ``seed`` (each pass draws the same; ``None``: new ones each pass);
        they are Python's, so a restore runs the pass again up to the saved position."""
        target = _distribution("target_dist", target_dist)
        initial = None if initial_dist is None else _distribution("initial_dist", initial_dist)
        if initial is not None and len(initial) != len(target):
            raise InvalidArgumentError(
                f"rejection_resample: initial_dist has {len(initial)} classes, target_dist {len(target)}"
            )
        class_func = bound_now(class_func)
        classes = len(target)

        def draw(state: dict[str, Any], element: Any) -> tuple[dict[str, Any], Any]:
            if state["rng"] is None:
                state["rng"] = np.random.default_rng(seed)
            given = apply(class_func, element)
            given = np.asarray(as_tf_converts(given))
            c = int(given)
            if not 0 <= c < classes:
                raise InvalidArgumentError(f"rejection_resample: class_func gave {c}, outside [0, {classes})")
            state["counts"][c] += 1
            dist = initial if initial is not None else state["counts"] / state["counts"].sum()
            ratio = np.divide(target, dist, out=np.zeros(classes), where=dist > 0)
            keep = state["rng"].random() < ratio[c] / ratio.max()
            # the class in class_func's dtype, as tf.data hands it out
            kind = given.dtype if given.dtype.kind in "iu" else np.dtype(np.int32)
            return state, (kind.type(c), element, np.bool_(keep))

        marked = self.scan({"rng": None, "counts": np.zeros(classes)}, draw)
        kept = marked.filter(lambda c, element, keep: bool(keep))
        # The fields scan names (class, element, keep) by, as flatten names them.
        template = _known(self, learn=True)
        shape, pairs = flatten((0, _nested(template, {n: 0 for n in leaves(template)}), 0))
        assert isinstance(shape, tuple)
        selected = kept.map(NativeOp({"op": "select", "fields": [n for n, _ in pairs[:-1]]}))
        return Dataset(selected._plan, (shape[0], shape[1]))

    def ragged_batch(self, batch_size: int, drop_remainder: bool = False, row_splits_dtype: Any = "int64") -> Dataset:
        """tf.data's ``ragged_batch``, with padded batches for ragged tensors: each component
        becomes ``(values, row_lengths)``, ``values`` padded with zeros to the batch's longest
        (as :meth:`padded_batch`) and ``row_lengths`` each row's length along the first axis,
        of ``row_splits_dtype`` (int64 or int32): what ``tf.RaggedTensor.from_tensor(values,
        lengths=row_lengths)`` makes the ragged batch of."""
        dtype = dtype_name(row_splits_dtype)
        if dtype not in ("int32", "int64"):
            raise InvalidArgumentError(f"ragged_batch: row_splits_dtype must be int32 or int64, got {dtype}")
        template = _known(self, learn=True)

        def with_lengths(*args: Any) -> Any:
            element = args[0] if len(args) == 1 else args
            _, pairs = flatten(element)
            by_name = {n: (v, np.asarray(len(v) if np.ndim(v) else 0, dtype=dtype)) for n, v in pairs}
            return _nested(template, by_name)

        size = _whole("ragged_batch: batch_size", batch_size, 1)
        return self.map(with_lengths).padded_batch(size, drop_remainder=drop_remainder)

    def take_while(self, predicate: Callable[..., Any]) -> Dataset:
        """The elements up to the first for which the Python ``predicate`` is false (tf.data's
        ``take_while``); the input is not read past it, so it ends an endless dataset."""
        return _keyed(Dataset(self._plan.take_while(self._test(predicate)), self._structure), predicate)

    def _test(self, predicate: Callable[..., Any]) -> Callable[[dict[str, Any]], Any]:
        """``predicate`` called on elements packed in this dataset's structure."""
        predicate = bound_now(predicate)
        structure = self._structure

        def test(flat: dict[str, Any]) -> Any:
            args = pack_element(structure, list(flat), texts(list(flat.values())))
            return apply(predicate, args)

        test.__name__ = getattr(predicate, "__name__", "predicate")
        return test

    def concatenate(self, dataset: Dataset) -> Dataset:
        """This dataset's elements, then ``dataset``'s (tf.data's ``concatenate``). Both must
        have the same structure, dtypes and ranks; a dimension they disagree on is unknown in
        the result's ``element_spec``. ``dataset`` starts when this one ends. A structure that
        a Python function gives and that is not known yet is learnt as ``element_spec``
        learns it (a run up to the first element)."""
        if not isinstance(dataset, Dataset):
            raise InvalidArgumentError(f"concatenate: dataset must be a stoker.Dataset, got {type(dataset).__name__}")
        mine, theirs = _known(self, learn=True), _known(dataset, learn=True)
        if _normalized(mine) != _normalized(theirs):
            raise InvalidArgumentError(
                f"concatenate: the datasets' structures differ: {mine!r} and {theirs!r}"
            )
        return Dataset(self._plan.concatenate(dataset._plan), self._structure)

    def take(self, count: int) -> Dataset:
        """The first ``count`` elements (all of them if ``count`` is -1)."""
        n = _whole("take: count", count, -1, " (-1: all)")
        if n == -1:
            return self
        whole = 0 <= self.cardinality() <= n
        return Dataset(self._plan.step({"step": "take", "count": n}), self._structure)._rows_of(self, whole)

    def skip(self, count: int) -> Dataset:
        """All but the first ``count`` elements (none if ``count`` is -1)."""
        n = _whole("skip: count", count, -1, " (-1: all)")
        if n == -1:
            return Dataset(self._plan.step({"step": "take", "count": 0}), self._structure)
        return Dataset(self._plan.step({"step": "skip", "count": n}), self._structure)._rows_of(self, False)

    def repeat(self, count: int | None = None) -> Dataset:
        """Repeats ``count`` times, or forever (``None`` or -1)."""
        c = None if count is None else _whole("repeat: count", count, -1, " (-1: forever)")
        plan = self._plan.step({"step": "repeat", "count": None if c == -1 else c})
        return Dataset(plan, self._structure)._rows_of(self, order=c == 1)

    def save(
        self,
        path: PathLike,
        compression: str | None = None,
        shard_func: Callable[..., Any] | None = None,
        checkpoint_args: Any = None,
    ) -> None:
        """Writes one pass of the elements to the directory ``path``, as tf.data's ``save``,
        in stoker's format: a disk-cache file of the elements (CRC-checked, its completion
        record last) and ``dataset.json`` (structure, fields, count), written last, so a
        directory with it holds a complete pass. Read it back with :meth:`Dataset.load`.
        stoker writes one file: ``shard_func`` (which only spreads tf.data's files) and
        ``checkpoint_args`` are accepted and not used; ``compression`` must be None."""
        del shard_func, checkpoint_args
        from . import _saved

        _saved.save(self, _path(path), compression)

    @staticmethod
    def load(
        path: PathLike,
        element_spec: Any = None,
        compression: str | None = None,
        reader_func: Any = None,
        wait: bool = False,
    ) -> Dataset:
        """The elements :meth:`save` wrote to ``path``, with their structure and their count
        (``len()`` works), as tf.data's ``load``. ``element_spec``, if given, must match the
        saved fields; ``reader_func`` is accepted and not used (one file), and so is ``wait``
        (tf.data's wait for a ``distributed_save`` still being written: stoker's ``save`` is
        complete when it returns, and a missing or incomplete one is an error)."""
        del reader_func, wait
        from . import _saved

        return _saved.load(_path(path), element_spec, compression)

    def snapshot(
        self, path: PathLike, compression: str | None = None, reader_func: Any = None, shard_func: Any = None
    ) -> Dataset:
        """tf.data's ``snapshot``: the first complete pass writes the elements under ``path``
        in a file named after this pipeline (its spec; with Python functions, their names and
        a key of their code and of the values they capture);
        later passes, in this process or a later one running the same pipeline, read it
        instead of running the pipeline. A pass cut short writes nothing (see ``cache``)."""
        del reader_func, shard_func
        from . import _saved

        return _saved.snapshot(self, _path(path), compression)

    def cache(self, filename: PathLike = "") -> Dataset:
        """Caches elements in memory (``filename=""``) or in a file. The first complete pass
        fills the cache; later passes are served from it — from memory without copying, as
        read-only arrays."""
        name = _path(filename)
        return Dataset(self._plan.step({"step": "cache", "filename": name or None}), self._structure)._rows_of(self)

    def prefetch(self, buffer_size: int) -> Dataset:
        """Runs the pipeline ahead on a thread into a buffer of ``buffer_size`` elements
        (``AUTOTUNE``: stoker chooses)."""
        size = _whole("prefetch: buffer_size", buffer_size, AUTOTUNE, " (AUTOTUNE)")
        return Dataset(self._plan.step({"step": "prefetch", "buffer_size": size}), self._structure)._rows_of(self)

    def apply(self, transformation_func: Callable[[Dataset], Dataset]) -> Dataset:
        """``transformation_func(self)``, as tf.data's ``apply``: for the transformations of
        :mod:`stoker.experimental` and for functions that chain several steps. A result that
        is not a :class:`Dataset` is an ``ArgumentTypeError``."""
        out = transformation_func(self)
        if not isinstance(out, Dataset):
            raise ArgumentTypeError(
                f"apply: transformation_func must return a stoker.Dataset, got {type(out).__name__}"
            )
        return out

    def get_single_element(self) -> Any:
        """The dataset's one element; an ``InvalidArgumentError`` when it has none or more than
        one (as tf.data's)."""
        first = list(self.take(2))
        if len(first) != 1:
            which = "no element" if not first else "more than one element"
            raise InvalidArgumentError(f"get_single_element: the dataset has {which}; it must have exactly one")
        return first[0]

    def assert_cardinality(self, expected_cardinality: int) -> Dataset:
        """The same elements, with ``expected_cardinality`` as :meth:`cardinality` (tf.data's
        ``experimental.assert_cardinality``): for a length the plan cannot know (after a
        ``filter``, or from a Python generator). Iterating checks it: an error names the step
        at the element past that count, or at the end when fewer came."""
        n = _whole("assert_cardinality: expected_cardinality", expected_cardinality, 0)
        plan = self._plan.step({"step": "assert_cardinality", "expected_cardinality": n})
        return Dataset(plan, self._structure)._rows_of(self)

    def shard(self, num_shards: int, index: int) -> Dataset:
        """Every ``num_shards``-th element, starting at ``index``. The planner makes only
        these where it can without changing them: it moves the shard below maps (their random
        ops still see each element's position in the whole stream) and prefetches, and into a
        ``global_shuffle``, which then reads only these positions of its permutation
        (``explain()`` says where it went). For the ranks of a data-parallel job, use the
        framework adapters' ``shard="auto"`` (see :func:`stoker.torch.loader`)."""
        n = _whole("shard: num_shards", num_shards, 1)
        i = _whole("shard: index", index, 0)
        if i >= n:
            raise InvalidArgumentError(f"shard: index must be in 0..num_shards={n}, got {i}")
        return Dataset(self._plan.shard(n, i), self._structure)._rows_of(self, False)

    def enumerate(self, start: int = 0) -> Dataset:
        """``(index, element)`` pairs."""
        first = _whole("enumerate: start", start, -(2**63))

        def derive() -> Template | None:
            t = _known_or_none(self)
            return None if t is None else ("0", prefixed(t, "1/"))

        return Dataset(self._plan.enumerate(first, "0", "1/"), _lazy(derive))

    def with_options(
        self,
        options: Options | None = None,
        *,
        on_bad_record: str | None = None,
        threads: int | None = None,
        optimizations: dict[str, bool] | None = None,
        deterministic: bool | None = None,
        autotune: bool | None = None,
        ram_budget: int | None = None,
    ) -> Dataset:
        """Pipeline-wide options, as keywords or as a tf.data-style :class:`Options`
        (``ds.with_options(options)``); the outermost setting wins.

        ``on_bad_record``: ``"raise"`` (default) stops with an error naming the file, record and
        offset; ``"skip"`` skips the bad record, counts it in ``stats()`` and goes on (what
        damage costs exactly: the README's promises).
        ``threads``: the CPU budget (worker threads), for the whole pipeline; default: the cores
        this process may run on, shared with the other ranks of a data-parallel job on this
        machine.
        ``optimizations``: the planner's rewrites switched on or off by name, e.g.
        ``{"map_after_batch": False}`` (all are on by default; ``explain()`` names those that
        changed the plan): ``fuse_decode_crop``, ``fuse_pixels``, ``fuse_maps``,
        ``map_after_batch``, ``map_and_batch``, ``shard_down`` (a shard moves towards the
        source). The elements are the same either way.
        ``deterministic``: whether parallel maps that do not say keep their input's order
        (default yes).
        ``autotune``: whether the stages left to ``AUTOTUNE`` are tuned while they run (default
        yes; ``stats()`` shows each knob's value and why); ``False`` keeps each at its share of
        the thread budget, for A/B checks. A number the user set is never moved.
        ``ram_budget``: bytes the buffers left to ``AUTOTUNE`` (``prefetch(AUTOTUNE)``) may hold
        together (default: half of the memory available to the process, its cgroup's limit
        respected; tf.data's ``autotune.ram_budget``). A buffer with no room left holds no more
        than the one element its producer made; ``stats()`` shows each buffer's bytes.
        """
        if options is not None:
            if type(options).__module__.startswith("tensorflow"):
                options = Options.from_tf(options)
            if not isinstance(options, Options):
                raise InvalidArgumentError(
                    f"with_options: options must be a stoker.Options or a tf.data.Options, got {type(options).__name__}"
                )
            o = options._as_keywords()
            on_bad_record = on_bad_record if on_bad_record is not None else o.get("on_bad_record")
            threads = threads if threads is not None else o.get("threads")
            deterministic = deterministic if deterministic is not None else o.get("deterministic")
            autotune = autotune if autotune is not None else o.get("autotune")
            ram_budget = ram_budget if ram_budget is not None else o.get("ram_budget")
            if o.get("optimizations"):
                optimizations = {**o["optimizations"], **(optimizations or {})}
        if threads is not None:
            threads = _whole("with_options: threads", threads, 1)
        if ram_budget is not None:
            ram_budget = _whole("with_options: ram_budget", ram_budget, 1)
        if on_bad_record == "skip" and (name := _per_batch_rest(self._plan)) is not None:
            raise InvalidArgumentError(
                f"with_options(on_bad_record='skip'): map '{name}' runs the TensorFlow part of its function once "
                "per batch (the batch follows it), where one bad element would drop its whole batch; skip bad "
                "records before that batch (ignore_errors() or with_options(on_bad_record='skip') on the "
                "dataset before .batch()), so that they are skipped one by one"
            )
        opts = None if optimizations is None else {str(k): bool(v) for k, v in optimizations.items()}
        det = None if deterministic is None else bool(deterministic)
        tune = None if autotune is None else bool(autotune)
        out = Dataset(self._plan.with_options(on_bad_record, threads, opts, det, tune, ram_budget), self._structure)
        # Records skipped before a batch change its last batch's rows; a parallel map after the
        # batch may hand it out early where order is not kept.
        return out._rows_of(self, out.cardinality() == self.cardinality(), order=det is not False)

    def ignore_errors(self, log_warning: bool = False, name: str | None = None) -> Dataset:
        """Skips bad records (``with_options(on_bad_record="skip")``); they are counted in
        ``stats()`` with the last reason (``log_warning`` is accepted: nothing is lost
        unseen either way)."""
        del log_warning, name
        return self.with_options(on_bad_record="skip")

    # -------------------------------------------------------------------- run
    def __iter__(self) -> DatasetIterator:
        return DatasetIterator(self)

    def iterator(self, state: bytes | dict[str, Any] | None = None, epoch: int | None = None) -> DatasetIterator:
        """An iterator over the dataset (what ``iter(ds)`` returns), or, given ``state``
        (``it.state()``'s bytes or ``it.state_dict()``), one that resumes where that iterator
        stood: it hands out exactly the elements the saved one would have handed out next,
        also in a new process, through shuffle buffers, parallel maps, random ops, interleave,
        repeat and caches. See :class:`DatasetIterator`.

        Each iteration over a dataset is its next epoch: reshuffles and random ops draw from
        it. ``epoch`` (0 for the first) starts that one instead, whatever iterations came
        before (as ``DistributedSampler.set_epoch`` does); the iterations after it go on from
        there. A state holds its epoch: one saved inside an epoch goes on there (``epoch``, if
        given, must be that one); one saved before an epoch's first element, or after the end
        of an epoch (which is the start of the next), starts ``epoch`` when given, with the
        state's seeds."""
        if epoch is not None:
            if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
                raise InvalidArgumentError(f"iterator: epoch must be a whole number, at least 0, got {epoch!r}")
        return DatasetIterator(self, _state_bytes(state), epoch)

    def cardinality(self) -> int:
        """How many elements one pass hands out, where the pipeline tells without running
        (tf.data's ``cardinality()``): the count, ``-1`` (:data:`INFINITE`) for a ``repeat()``
        without count, or ``-2`` (:data:`UNKNOWN`): after a ``filter``, an ``interleave``, an
        ``unbatch``, ``ignore_errors()``, or from TFRecord files (counting them means reading
        them)."""
        return int(self._plan.cardinality())

    def __len__(self) -> int:
        n = self.cardinality()
        if n == INFINITE:
            raise ArgumentTypeError("The dataset is infinite.")
        if n == UNKNOWN:
            raise ArgumentTypeError("The dataset length is unknown.")
        return n

    def to_tf(self, output_signature: Any = None) -> Any:
        """The pipeline as a ``tf.data.Dataset`` (``from_generator`` with the signature of
        :attr:`element_spec`), so that ``model.fit(ds.to_tf())`` and TensorFlow code take it
        unchanged. Each pass over it is the pipeline's next epoch; its cardinality is the
        pipeline's. The signature is :attr:`element_spec`'s (after a Python function, learnt by
        a run up to the first element); ``output_signature`` (``tf.TensorSpec`` s in the
        element's structure) sets it instead, e.g. for fixed dimensions where that spec has
        ``None``."""
        import tensorflow as tf  # noqa: PLC0415 - TensorFlow only for this bridge

        if output_signature is None:
            spec = self.element_spec
            if spec is None:
                raise InvalidArgumentError(
                    "to_tf: a run of this dataset handed out no element, so its structure is not known "
                    "(it comes from a Python function); pass output_signature="
                )
            output_signature = tf_signature(spec)
        ds = tf.data.Dataset.from_generator(lambda: iter(self), output_signature=output_signature)
        n = self.cardinality()
        return ds.apply(tf.data.experimental.assert_cardinality(n)) if n >= 0 or n == INFINITE else ds

    def as_numpy_iterator(self) -> Iterator[Any]:
        """Same as iterating (elements already are NumPy arrays); for tf.data users."""
        return iter(self)

    @property
    def element_spec(self) -> Any:
        """The structure of ``TensorSpec`` s every element has. After a Python function
        (``map``, ``interleave``, ``scan``, ...) the engine does not know it before the
        function has run: then the pipeline is run once, alone, up to its first element (a
        fresh run that is no epoch of this dataset's, and whose counters are its own), and the
        spec is that element's dtypes and ranks, its dimensions ``None``. ``None`` if that
        run hands out no element."""
        return self._element_spec(learn=True)

    def _element_spec(self, learn: bool) -> Any:
        schema = self._plan.schema()
        if schema is None and self._batch_of is not None:
            return self._batched_spec(learn)
        if schema is None and self._spec_of is not None:
            return self._spec_of._element_spec(learn)
        if schema is None:
            first = self._first_element() if learn else self._first
            if not first:
                return None
            schema = [(n, dtype, self._dims(n, rank)) for n, (dtype, rank) in first.items()]
        specs = {n: TensorSpec(tuple(s), d, n) for n, d, s in schema}
        structure = known_template(self._structure)
        if structure is None:
            return specs
        return pack_element(structure, list(specs), list(specs.values()))

    def _dims(self, name: str, rank: int) -> list[int | None]:
        """A field's dimensions where only its rank was learned: those its TensorFlow graph
        gives it statically, else ``None``."""
        static = self._static.get(name)
        return list(static) if static is not None and len(static) == rank else [None] * rank

    def _batched_spec(self, learn: bool) -> Any:
        """The spec of a batch of the input's elements, as tf.data's: the batch size first
        where every batch has it (``drop_remainder``), the fixed padded sizes, else the
        input's dimensions."""
        assert self._batch_of is not None
        source, rows, fixed = self._batch_of
        each = source._element_spec(learn)
        if each is None:
            return None
        _, pairs = flatten(each)
        specs = {
            n: TensorSpec(
                (rows, *(f if f is not None else d for f, d in zip(fixed.get(n, [None] * len(t.shape)), t.shape))),
                t.dtype,
                n,
            )
            for n, t in pairs
            if isinstance(t, TensorSpec)
        }
        structure = known_template(self._structure)
        if structure is None or len(specs) != len(pairs):
            return specs
        return pack_element(structure, list(specs), list(specs.values()))

    def _first_element(self) -> dict[str, tuple[str, int]]:
        """The dtype and rank of each field of this pipeline's first element, from a run of
        its own (made once; it also runs the Python functions whose results give the
        structure); ``{}`` if that run hands out nothing."""
        if self._first is None:
            it = self._plan.step({"step": "take", "count": 1}).iterate()
            try:
                item = next(it, None)
            finally:
                it.close()
            names, arrays = item if item is not None else ((), [])
            self._first = {n: (_dtype_of(a), np.ndim(a)) for n, a in zip(names, arrays)}
        return self._first

    def stats(self) -> Stats:
        """Per-stage counters, accumulated over every iteration: elements, busy time, time
        waiting for input, time blocked on a full buffer, buffer fill, Python time, skipped
        bad records (``skipped``: the records known lost; ``skipped_bytes``: bytes of record
        files passed over after damage, where records whose headers were destroyed lie
        uncounted; ``rest_lost``: files whose rest was lost to damage in a compressed stream;
        ``last_skip_reason``), and damaged input used anyway (``warnings``,
        ``last_warning``: a JPEG libjpeg recovered). ``budget`` is the thread budget and where it
        comes from (``(threads, source)``)."""
        return Stats(self._plan.stats(), self._plan.budget())

    def diagnose(self, seconds: float | None = 5.0, batches: int | None = None, warmup: int = 1) -> Diagnosis:
        """Runs the pipeline alone, as fast as it goes (for ``seconds``, or ``batches``
        elements, after ``warmup`` elements), on fresh counters, and says which stage limits
        its throughput and what to change, with the predicted gain and the evidence for each
        recommendation. ``str()`` of the result is the report ``stoker bench`` prints."""
        return Diagnosis(self._plan.diagnose(seconds, batches, warmup))

    def report(
        self,
        path: PathLike,
        seconds: float | None = 5.0,
        batches: int | None = None,
        warmup: int = 1,
        steps: StepReport | None = None,
        title: str | None = None,
    ) -> None:
        """Runs the pipeline alone like :meth:`diagnose` and writes a self-contained HTML
        report to ``path``: the verdict and recommendations, the step-time graph, throughput
        and buffer fill over time, and the per-stage table. ``steps`` (a step timer's
        ``report()``, see :func:`stoker.timed`) adds the training loop's steps and verdict."""
        step_data = None
        if steps is not None:
            ms = lambda xs: [x * 1e3 for x in xs]  # noqa: E731
            step_data = (ms(steps.input_s), ms(steps.compute_s), str(steps))
        self._plan.report(_path(path), title or repr(self), seconds, batches, warmup, step_data)

    def explain(self) -> str:
        """The pipeline as stoker runs it (after its rewrites), sink first, with schemas; then
        what became of the TensorFlow functions handed to ``map``: translated to native ops
        (which op became which), or run as their traced graph (and the op that kept them
        there)."""
        text = self._plan.explain()
        notes = []
        stack = [self._plan]
        while stack:
            plan = stack.pop()
            note = _NOTES.get(plan.id())
            if note is not None:
                notes.append(note)
            stack.extend(plan.inputs())
        if notes:
            text += "TensorFlow functions:\n" + "".join(f"  {n}\n" for n in reversed(notes))
        return text

    def convert(
        self,
        out_dir: PathLike,
        num_shards: int = 8,
        compression: str | None = None,
        images: str | None = None,
        jpeg_quality: int = 90,
        resize: int | None = None,
        epochs: int | None = None,
        threads: int | None = None,
        ray: bool | str | None = None,
        progress: bool = True,
    ) -> dict[str, Any]:
        """Preprocess once: runs the offline part of this pipeline (from the source up to the
        first shuffle, random op, batch, positional step or Python function; the rest stays
        online) and writes its elements as ``tf.train.Example`` records into ``num_shards``
        TFRecord shards in ``out_dir``, each with its record index, plus ``manifest.json``
        (fields, element count and sha256 per shard, the spec, stoker's version). Read them
        back with :meth:`from_converted`, or with TensorFlow (``stoker.convert.tf_parse_code``).

        - ``compression``: None, ``"GZIP"`` or ``"ZLIB"`` (compressed shards have no index).
        - ``images``: how uint8 ``[H, W, C]`` fields are stored: ``"raw"`` pixels (the
          default; left unset, a warning says up front what raw images will take), or
          re-encoded as ``"png"`` or ``"jpeg"`` (at ``jpeg_quality``): resize them in the
          offline part first to decode less online.
        - ``resize``: image fields whose shorter side is longer are resized (antialiased
          bilinear, aspect kept) so that it is ``resize`` long, like torchvision's
          ``Resize(resize)`` or FFCV's ``max_resolution``: the online part decodes less.
        - ``epochs``: instead of the deterministic part, materialise ``epochs`` epochs of the
          augmented part (random native maps and shuffles too, up to the first batch,
          positional step or Python function), each with the seeds the pipeline's own epoch
          would use: ``num_shards`` shards per epoch, its elements dealt round-robin, one job
          per epoch. ``from_converted`` then reads the epochs one after the other.
        - ``threads``: shards are written this many at a time (default: every core).
        - ``ray``: ``True`` (the Ray cluster ``ray.init()`` finds or starts) or an address:
          one Ray task per shard; the output is the same bytes as a local run. ``out_dir``
          must be on storage every worker sees.
        - ``progress``: a progress line on stderr (elements, MB/s, ETA).

        Re-running the same conversion into ``out_dir`` skips the shards already complete
        (listed in the manifest with a matching sha256); each shard is written under a
        temporary name and renamed when complete. Under ``ignore_errors()`` bad input is
        counted per shard in the manifest with the last reason; otherwise the first error
        stops the run, naming the file and record, and the shards finished stay usable.
        Returns the manifest."""
        from . import convert as _convert

        return _convert.convert(self, out_dir, num_shards=num_shards, compression=compression, images=images,
                                jpeg_quality=jpeg_quality, resize=resize, epochs=epochs, threads=threads, ray=ray,
                                progress=progress)

    def save_spec(self, path: PathLike) -> None:
        """Writes the pipeline as a spec file (TOML if the name ends in ``.toml``, else JSON)
        that ``stoker bench`` and ``Dataset.load_spec`` read. Python functions and in-memory
        arrays cannot be saved (``SpecError``)."""
        self._plan.save_spec(_path(path))

    def spec(self) -> dict[str, Any]:
        """The spec document ``save_spec`` would write."""
        return self._plan.spec()

    def __repr__(self) -> str:
        # Not learnt here: printing a dataset must not run it.
        return f"<stoker.Dataset element_spec={self._element_spec(learn=False)!r}>"


def _per_batch_rest(plan: Any) -> str | None:
    """The name of a function whose TensorFlow part a step of ``plan`` runs per batch."""
    stack = [plan]
    while stack:
        p = stack.pop()
        if p.id() in _PER_BATCH_RESTS:
            return _PER_BATCH_RESTS[p.id()]
        stack.extend(p.inputs())
    return None


# What became of each TensorFlow function handed to `map`, by the id of its map step.
_NOTES: dict[int, str] = {}
# Set while a running pipeline makes a dataset per element (the functions of `flat_map`,
# `interleave`, `group_by_window`'s reduce): notes of those are never read (`explain()` shows
# the pipeline's own steps), and are not kept, so that the notes stay bounded.
_INNER = threading.local()


@contextlib.contextmanager
def _inner() -> Iterator[None]:
    was = getattr(_INNER, "active", False)
    _INNER.active = True
    try:
        yield
    finally:
        _INNER.active = was


class _Traces:
    """A TensorFlow function's trace and translation (``_tf_function.trace``, ``translate``;
    the exception where either failed), by the function and the signature it was traced
    with. Kept only for the datasets a running pipeline makes per element (see ``_INNER``):
    their functions are the same objects each time (an inner ``map``'s), and tracing each
    element's again would cost more than running it (tf.data traces it once, with the
    function that makes the dataset). A few signatures are kept per function; the entries go
    with their function."""

    SIGNATURES = 8  # 0: none kept (each traced again, for A/B measurements)

    def __init__(self) -> None:
        self._by_fn: weakref.WeakKeyDictionary[Any, dict[Any, Any]] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def get(
        self,
        fn: Callable[..., Any],
        template: Template,
        schema: list[tuple[str, str, list[int | None]]],
        keep: bool,
        seed_field: str | None = None,
        all_random: bool = False,
    ) -> tuple[Any, Any]:
        """``(traced or why tracing failed, translation or Untranslatable)`` of ``fn`` called with
        ``template``'s structure of ``schema``'s fields (``keep``: a filter's predicate, the
        inputs kept; ``seed_field``, ``all_random``: its random ops seeded from that field,
        see ``_tf_function.trace``)."""
        if not getattr(_INNER, "active", False):
            return self._make(fn, template, schema, keep, seed_field, all_random)
        shapes = tuple((n, d, tuple(shape)) for n, d, shape in schema)
        key = (repr(template), shapes, keep, seed_field, all_random)
        with self._lock:
            try:
                table = self._by_fn.setdefault(fn, {})
            except TypeError:  # a callable that takes no weak reference: traced each time
                table = None
            if table is not None and key in table:
                return table[key]  # type: ignore[no-any-return]
        made = self._make(fn, template, schema, keep, seed_field, all_random)
        if table is not None and self.SIGNATURES > 0:
            with self._lock:
                while len(table) >= self.SIGNATURES:
                    table.pop(next(iter(table)))
                table[key] = made
        return made

    @staticmethod
    def _make(
        fn: Callable[..., Any],
        template: Template,
        schema: list[tuple[str, str, list[int | None]]],
        keep: bool,
        seed_field: str | None,
        all_random: bool,
    ) -> tuple[Any, Any]:
        # What failed is kept as its message: an exception would keep its traceback's frames
        # (the function, the element) alive with it.
        try:
            traced = _tf_function.trace(fn, template, schema, seed_field, all_random)
        except Exception as e:  # noqa: BLE001 - not traceable: the caller runs it as Python
            return f"{type(e).__name__}: {e}", None
        if keep and not _scalar_bool(traced.out_values):
            return traced, None  # not a predicate: the caller says so
        try:
            return traced, _tf_function.translate(traced, keep_inputs=keep)
        except _tf_function.Untranslatable as why:
            return traced, _tf_function.Untranslatable(str(why))


def _scalar_bool(outs: list[tuple[str, Any]]) -> bool:
    """Whether a traced function's outputs are one scalar bool tensor (a predicate's)."""
    if len(outs) != 1 or getattr(outs[0][1], "dtype", None) is None:
        return False
    return bool(outs[0][1].dtype.name == "bool" and outs[0][1].shape.rank in (None, 0))


_TRACES = _Traces()


def _note(plan: Any, text: str) -> None:
    """Keeps what became of a TensorFlow function for ``explain()`` (see ``_INNER``)."""
    if not getattr(_INNER, "active", False):
        _NOTES[plan.id()] = text


def _random(text: str, random: Sequence[str]) -> str:
    """``text`` (a note on a TensorFlow function), with what its ``random`` ops that run in
    TensorFlow unseeded mean (see ``_tf_function.unseeded``), said in a warning too (once for
    the datasets made per element): the values they give are not the pipeline's to repeat."""
    if not random:
        return text
    text = f"{text}; {_tf_function.random_caveat(list(random))}"
    if getattr(_INNER, "active", False):
        # A dataset made per element: said once (its note is not kept, see `_note`).
        if text in _WARNED or len(_WARNED) >= 256:
            return text
        _WARNED.add(text)
    # Said where the user's code called stoker.
    frame, level = sys._getframe(0), 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    warnings.warn(text, RuntimeWarning, stacklevel=level)
    return text


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
# what `_random` said of the datasets made per element
_WARNED: set[str] = set()


# the field of the element's seed, for TensorFlow functions whose random ops draw from it
_SEED_FIELD = "_stoker_seed"


def _unseeded(traced: Any, translation: Any) -> list[str]:
    """The random ops that draw from a state of their own in the part of a traced function
    that runs in TensorFlow (see ``_tf_function.unseeded``)."""
    if isinstance(translation, _tf_function.Translation):
        return list(translation.random)
    return list(traced.random())


def _seeded(
    fn: Callable[..., Any],
    template: Template,
    schema: list[tuple[str, str, list[int | None]]],
    keep: bool,
    traced: Any,
    translation: Any,
) -> tuple[Any, Any, list[Any], str]:
    """``fn``'s trace and translation again with its random ops drawing from the element's
    seed (see ``_tf_function.trace``) where its TensorFlow part has random ops with a state of
    their own and that trace seeds some: ``(traced, translation, the op writing the seed
    field, what explain() says of them)``; else as they are, with no op. Where the tf.image
    random crops, flips and colour changes left to the translator stay in TensorFlow (their input computed
    there), traced once more with those seeded too."""
    if not _unseeded(traced, translation) or not _tf_function.SEED:
        return traced, translation, [], ""
    best = None
    for all_random in (False, True):
        seeded, seeded_translation = _TRACES.get(fn, template, schema, keep, _SEED_FIELD, all_random)
        if isinstance(seeded, str) or seeded_translation is None:
            break
        left = _unseeded(seeded, seeded_translation)
        if seeded.drawn and (best is None or len(left) < best[2]):
            best = (seeded, seeded_translation, len(left))
        if (seeded.drawn and not left) or not seeded.kept_native:
            break
    if best is None:
        return traced, translation, [], ""
    seeded, seeded_translation, _ = best
    note = f"; its random ops ({', '.join(dict.fromkeys(seeded.drawn))}) draw from the element's seed"
    return seeded, seeded_translation, [_element_seed(_SEED_FIELD, seeded.seed).spec], note


def _random_of(fn: Any) -> list[str]:
    """The unseeded random ops of a function ``_tf_function`` made (none for others)."""
    return list(getattr(fn, "_stoker_random", ()))

class _PerBatch(NamedTuple):
    """How a map whose TensorFlow rest may run once per batch runs where a batch follows it:
    its native ops on ``source``, the batch, then ``rest``."""

    name: str
    source: Dataset
    native: list[Any]
    rest: Callable[[dict[str, Any]], list[tuple[str, Any]]]
    parallel: tuple[int | None, bool | None]
    note: str
    template: Template


# the Python functions each plan runs itself, by its id: `_capture.code_key` of them (see
# `_keyed`; `snapshot` tells pipelines apart by them)
_FUNCTION_KEYS: dict[int, str] = {}


def _keyed(ds: Dataset, *fns: Any) -> Dataset:
    """``ds``, whose plan runs the Python functions ``fns``, noted so (see ``_FUNCTION_KEYS``)."""
    _FUNCTION_KEYS[ds._plan.id()] = code_key(*fns)
    return ds


def function_keys(plan: Any) -> list[str]:
    """The keys of the Python functions ``plan`` and its inputs run (see ``_keyed``)."""
    keys, stack = [], [plan]
    while stack:
        p = stack.pop()
        if p.id() in _FUNCTION_KEYS:
            keys.append(_FUNCTION_KEYS[p.id()])
        stack.extend(p.inputs())
    return keys


# the maps whose TensorFlow rest may run once per batch, by id
_PER_BATCH: dict[int, _PerBatch] = {}
# the maps that run a TensorFlow rest once per batch, by id: the function's name
_PER_BATCH_RESTS: dict[int, str] = {}


def tf_signature(spec: Any) -> Any:
    """``tf.TensorSpec`` s for a structure of stoker ``TensorSpec`` s (the element's)."""
    import tensorflow as tf  # noqa: PLC0415 - TensorFlow only for its bridges

    if isinstance(spec, TensorSpec):
        return tf.TensorSpec(spec.shape, tf.string if spec.dtype == "string" else tf.as_dtype(spec.dtype))
    if isinstance(spec, dict):
        return {k: tf_signature(v) for k, v in spec.items()}
    return like(spec, [tf_signature(v) for v in spec])


def _parallel_calls(op: str, value: int | None, name: str = "num_parallel_calls") -> int | None:
    if value is None or value == AUTOTUNE:
        return value
    return _whole(f"{op}: {name}", value, 1, " (or AUTOTUNE)")


class Stats(list[dict[str, Any]]):
    """Per-stage counters (a list of dicts, sink first) that print as a table, with the
    pipeline's thread budget (``budget``: threads, and where the number comes from)."""

    def __init__(self, stages: Any = (), budget: tuple[int, str] | None = None) -> None:
        super().__init__(stages)
        self.budget = budget

    COLUMNS = (
        ("stage", "name", "{}"),
        ("kind", "kind", "{}"),
        ("elements", "elements", "{:,}"),
        ("busy s", "busy_s", "{:.3f}"),
        ("wait input s", "wait_input_s", "{:.3f}"),
        ("blocked s", "blocked_output_s", "{:.3f}"),
        ("python s", "python_s", "{:.3f}"),
        ("workers", "workers", "{}"),
        ("skipped", "skipped", "{:,}"),
    )

    def __str__(self) -> str:
        rows = [[title for title, _, _ in self.COLUMNS]]
        rows += [[fmt.format(s.get(key, "")) for _, key, fmt in self.COLUMNS] for s in self]
        widths = [max(len(r[i]) for r in rows) for i in range(len(self.COLUMNS))]
        lines = [
            "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
            for r in rows
        ]
        lines.insert(1, "  ".join("-" * w for w in widths))
        if self.budget is not None:
            lines.append(f"thread budget: {self.budget[0]} ({self.budget[1]})")
        reasons = [f"{s['name']}: last skipped: {s['last_skip_reason']}" for s in self if s.get("last_skip_reason")]
        return "\n".join(lines + reasons)


STATE_KEY = "stoker_iterator_state"


def _state_bytes(state: bytes | dict[str, Any] | None) -> bytes | None:
    if state is None or isinstance(state, (bytes, bytearray, memoryview)):
        return None if state is None else bytes(state)
    if isinstance(state, dict) and STATE_KEY in state:
        return bytes(state[STATE_KEY])
    raise ArgumentTypeError(
        f"state must be bytes from DatasetIterator.state() or a dict from state_dict(), got {type(state).__name__}"
    )


# The iterators not yet closed. At interpreter exit they are closed before Python finalizes:
# a pipeline thread inside a Python function then could not take the GIL back to finish it,
# and CPython aborts the process.
_live: weakref.WeakSet[DatasetIterator] = weakref.WeakSet()
#: The process that imported stoker (a fork()ed child's engine threads are not its parent's).
_IMPORT_PID = os.getpid()


@atexit.register
def _close_live() -> None:
    for it in list(_live):
        # One a fork()ed child inherited belongs to the parent's threads; one that another
        # (daemon) thread is inside `next()` of cannot be closed under it, and exiting must not
        # wait for that call.
        if it._pid != os.getpid() or not it._lock.acquire(timeout=1.0):
            continue
        try:
            it._it.close()
        except BaseException:  # exiting anyway: the others are still closed
            pass
        finally:
            it._lock.release()
    # Threads left to finish a Python call on their own (a closed pipeline's stuck stage) must
    # be out of Python before it finalizes: one coming back into it then aborts the process.
    # A fork()ed child has none of the engine's threads it inherited the record of.
    if os.getpid() == _IMPORT_PID:
        _stoker.quiesce(2.0)


class DatasetIterator(Iterator[Any]):
    """An iteration over a :class:`Dataset` that can save where it stands and resume there.

    ``state()`` returns a few hundred bytes: the position of every step (not the contents of
    shuffle buffers, which a restore rebuilds by reading their records again), a version,
    and a fingerprint of the pipeline. ``Dataset.iterator(state=...)`` resumes from them,
    with the same elements in the same order as the uninterrupted run, whatever the thread
    budget is then. Restoring into another pipeline, or from damaged bytes, raises
    :class:`InvalidArgumentError` saying what differs.

    Exactness needs the pipeline to be the same function of its epoch on every run: random
    ops and shuffles with a ``seed`` are; those without one are too, as a state holds the
    seeds they drew (for every later epoch as well). Python functions
    are re-run on the elements after the position, not before. A ``map`` with
    ``deterministic=False`` hands out elements in no fixed order and cannot save a state.
    A memory ``cache`` that a restore in a new process finds empty is filled again by
    running its input again (exact when that input is seeded).

    Several threads may call ``next()`` on one iterator: each element goes to exactly one
    of them (the calls take turns; the pipeline itself runs on its own threads).
    """

    def __init__(self, dataset: Dataset, state: bytes | None = None, epoch: int | None = None) -> None:
        self._dataset = dataset
        self._it = dataset._plan.iterate(state) if epoch is None else dataset._plan.iterate(state, epoch)
        # The engine's iterator takes one call at a time. A thread waiting here releases the
        # GIL, and the thread inside `next()` waits for the pipeline without it, so the
        # pipeline's own Python calls go on meanwhile.
        self._lock = threading.Lock()
        # Where the profilers' spans say a training loop waited (see `_profile`); `None`
        # where another thread pulls the batches (the loop's wait is spanned there).
        self._span: str | None = "DatasetIterator"
        self._pid = os.getpid()
        _live.add(self)

    def _check_process(self) -> None:
        """A ``fork()``ed child cannot go on with an iteration its parent started: the
        pipeline's threads stayed in the parent (and may have held the engine's locks)."""
        if os.getpid() != self._pid:
            raise InvalidArgumentError(
                f"iterator: this iterator was started in process {self._pid} and this is a fork()ed child "
                f"({os.getpid()}): the pipeline's threads are not in this process, so it cannot go on here; "
                "start a new iteration in the child (iter(ds), or ds.iterator(state=...) from a state the "
                "parent saved)"
            )

    @property
    def element_spec(self) -> Any:
        """The dataset's :attr:`Dataset.element_spec` (as a tf.data iterator has it)."""
        return self._dataset.element_spec

    def __iter__(self) -> DatasetIterator:
        return self

    def __next__(self) -> Any:
        self._check_process()
        with self._lock, (next_span(self._span) if self._span else contextlib.nullcontext()):
            names, arrays = next(self._it)
        return pack_element(self._dataset._structure, names, arrays)

    def state(self) -> bytes:
        """Where the iteration stands after the last element handed out, as bytes."""
        self._check_process()
        with self._lock:
            return bytes(self._it.state())

    def skipped(self) -> int:
        """Bad records skipped under ``ignore_errors()`` before the last element handed out
        (after the end: all of them) in this iteration, counting those before the state it
        was resumed from. Exact, unlike the stage counters of ``Dataset.stats()``, which also
        count what the pipeline's threads skipped ahead of the consumer, and start from zero
        in a new process. Read from the iterator's state: where the pipeline cannot save one,
        an :class:`InvalidArgumentError` says so."""
        return sum(self._skipped_split())

    def _skipped_split(self) -> tuple[int, int]:
        """``skipped()`` in two: below the shards (each shard passes over those), and the
        others."""
        self._check_process()
        with self._lock:
            below, own = self._it.skipped()
        return int(below), int(own)

    def state_dict(self) -> dict[str, Any]:
        """``{"stoker_iterator_state": state()}``, for PyTorch-style checkpointing code."""
        return {STATE_KEY: self.state()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Goes on from a ``state_dict()`` (of this pipeline), dropping the current position."""
        self._check_process()
        state = _state_bytes(state_dict)
        it = self._dataset._plan.iterate(state)
        with self._lock:
            self._it.close()
            self._it = it

    def close(self) -> None:
        """Stops the pipeline's threads now (the position stays readable by ``state()``).
        Called while another thread is in ``next()``, it waits for that call to return. In a
        ``fork()``ed child it lets go of the parent's iteration without touching it."""
        if os.getpid() != self._pid:
            return
        with self._lock:
            self._it.close()


class _Settings:
    """A group of tf.data options: only the names it has can be set."""

    _names: tuple[str, ...] = ()

    def __init__(self) -> None:
        for n in self._names:
            object.__setattr__(self, n, None)

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in self._names:
            raise AttributeError(
                f"{type(self).__name__} has no option '{name}' (it has: {', '.join(self._names)})"
            )
        object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        set_ = {n: getattr(self, n) for n in self._names if getattr(self, n) is not None}
        return f"{type(self).__name__}({set_})"


class ThreadingOptions(_Settings):
    """``private_threadpool_size``: the pipeline's worker threads (its CPU budget; 0 or None:
    this process's share of the cores it may run on). ``max_intra_op_parallelism``: accepted;
    stoker's ops run one element on one thread (tf.data's setting 1)."""

    _names = ("private_threadpool_size", "max_intra_op_parallelism")
    private_threadpool_size: int | None
    max_intra_op_parallelism: int | None


class AutotuneOptions(_Settings):
    """``enabled``: whether stages left to ``AUTOTUNE`` are tuned while they run
    (``with_options(autotune=...)``); ``cpu_budget``: the pipeline's CPU budget in cores (as
    ``threads``); ``ram_budget``: the bytes its buffers left to ``AUTOTUNE`` may hold (as
    ``with_options(ram_budget=...)``)."""

    _names = ("enabled", "cpu_budget", "ram_budget")
    enabled: bool | None
    cpu_budget: int | None
    ram_budget: int | None


class OptimizationOptions(_Settings):
    """tf.data's names for stoker's planner rewrites: ``map_and_batch_fusion``
    (``map_and_batch``), ``map_fusion`` (``fuse_maps``); ``apply_default_optimizations=False``
    switches every rewrite off. Others are accepted and have no effect."""

    _names = (
        "apply_default_optimizations",
        "map_and_batch_fusion",
        "map_fusion",
        "map_parallelization",
        "noop_elimination",
        "parallel_batch",
        "shuffle_and_repeat_fusion",
        "filter_parallelization",
        "inject_prefetch",
    )
    apply_default_optimizations: bool | None
    map_and_batch_fusion: bool | None
    map_fusion: bool | None


class AutoShardPolicy(enum.IntEnum):
    """tf.data's auto-shard policies, for ``Options().experimental_distribute``. stoker
    shards where it is told to (``shard()``, the rank and world size its PyTorch, JAX and Ray
    bridges take, moved towards the files by its planner): the policy is accepted and changes
    nothing."""

    OFF = -1
    AUTO = 0
    FILE = 1
    DATA = 2
    HINT = 3


class DistributeOptions(_Settings):
    """tf.data's ``experimental_distribute`` options: ``auto_shard_policy`` (default
    ``AUTO``, as TF's) and ``num_devices`` are accepted and change nothing. stoker shards
    where it is told to (``shard()``, the rank and world size of its PyTorch, JAX and Ray
    bridges)."""

    _names = ("auto_shard_policy", "num_devices")
    auto_shard_policy: Any
    num_devices: int | None

    def __init__(self) -> None:
        super().__init__()
        self.auto_shard_policy = AutoShardPolicy.AUTO


_PASSES = ("fuse_decode_crop", "fuse_pixels", "fuse_maps", "map_after_batch", "map_and_batch")


class Options(_Settings):
    """tf.data's ``Options``, where they apply: ``deterministic`` (parallel maps that do not
    say keep their order unless ``False``), ``threading`` (:class:`ThreadingOptions`),
    ``experimental_optimization`` (:class:`OptimizationOptions`), and stoker's
    ``on_bad_record`` (``"raise"``/``"skip"``). tf.data's other names are accepted and change
    nothing: ``experimental_distribute`` (:class:`DistributeOptions`), ``experimental_slack``,
    ``experimental_external_state_policy``, ``experimental_warm_start``,
    ``experimental_symbolic_checkpoint``, ``dataset_name``, ``framework_type``. Setting a name
    it does not have is an ``AttributeError``, as in tf.data. Use with
    ``ds.with_options(options)``."""

    _names = (
        "deterministic",
        "threading",
        "autotune",
        "experimental_optimization",
        "on_bad_record",
        "experimental_distribute",
        "experimental_slack",
        "experimental_external_state_policy",
        "experimental_warm_start",
        "experimental_symbolic_checkpoint",
        "dataset_name",
        "framework_type",
    )
    deterministic: bool | None
    threading: ThreadingOptions
    autotune: AutotuneOptions
    experimental_optimization: OptimizationOptions
    on_bad_record: str | None
    experimental_distribute: DistributeOptions

    # tf.data's deprecated names that TF still accepts, and the name each stands for.
    _aliases = {"experimental_deterministic": "deterministic", "experimental_threading": "threading"}

    def __init__(self) -> None:
        super().__init__()
        self.threading = ThreadingOptions()
        self.autotune = AutotuneOptions()
        self.experimental_optimization = OptimizationOptions()
        self.experimental_distribute = DistributeOptions()

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(self._aliases.get(name, name), value)

    def __getattr__(self, name: str) -> Any:
        if name in Options._aliases:
            return getattr(self, Options._aliases[name])
        raise AttributeError(f"Options has no option '{name}' (it has: {', '.join(self._names)})")

    @staticmethod
    def from_tf(options: Any) -> Options:
        """The settings of a ``tf.data.Options`` that apply to stoker (see :class:`Options`),
        so that ``ds.with_options(tf_options)`` works as in tf.data."""
        out = Options()
        out.deterministic = options.deterministic
        out.threading.private_threadpool_size = options.threading.private_threadpool_size
        out.autotune.enabled = options.autotune.enabled
        out.autotune.cpu_budget = options.autotune.cpu_budget or None
        out.autotune.ram_budget = options.autotune.ram_budget or None
        for name in OptimizationOptions._names:
            setattr(out.experimental_optimization, name, getattr(options.experimental_optimization, name, None))
        return out

    def _as_keywords(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.deterministic is not None:
            out["deterministic"] = bool(self.deterministic)
        if self.on_bad_record is not None:
            out["on_bad_record"] = self.on_bad_record
        if self.autotune.enabled is not None:
            out["autotune"] = bool(self.autotune.enabled)
        if self.autotune.ram_budget:
            out["ram_budget"] = self.autotune.ram_budget
        size = self.threading.private_threadpool_size or self.autotune.cpu_budget
        if size:
            out["threads"] = size
        opt = self.experimental_optimization
        passes: dict[str, bool] = {}
        if opt.apply_default_optimizations is False:
            passes = {p: False for p in _PASSES}
        for name, pass_ in (("map_and_batch_fusion", "map_and_batch"), ("map_fusion", "fuse_maps")):
            value = getattr(opt, name)
            if value is not None:
                passes[pass_] = bool(value)
        if passes:
            out["optimizations"] = passes
        return out


class _Opened:
    """The datasets a function made (interleave's, group_by_window's), for the structure of
    their elements: that of the first one whose structure is known. A pipeline opens ahead
    of what it hands out, so the newest may not have run its own Python function yet."""

    def __init__(self) -> None:
        self._waiting: list[Dataset] = []
        self._found: Dataset | None = None

    def add(self, ds: Dataset) -> None:
        if self._found is None:
            self._waiting.append(ds)

    def _first_known(self) -> Dataset | None:
        if self._found is None:
            for ds in list(self._waiting):
                if _known_or_none(ds) is not None:
                    self._found, self._waiting = ds, []
                    break
        return self._found

    def template(self) -> Template | None:
        ds = self._first_known()
        return _known_or_none(ds) if ds is not None else None


def _unknown_dims(ds: Dataset) -> Any:
    """The padded shapes of ``ds``'s elements as its spec has them (``None`` where unknown),
    in its structure."""
    def walk(spec: Any) -> Any:
        if isinstance(spec, TensorSpec):
            return [None] * len(spec.shape)
        if isinstance(spec, dict):
            return {k: walk(v) for k, v in spec.items()}
        return like(spec, [walk(v) for v in spec])

    return walk(ds.element_spec)


def _padded_shapes(template: Template, shapes: Any, where: str = "padded_shapes") -> dict[str, list[int | None]]:
    """``padded_shapes`` matched against the element's structure as tf.data matches it (its
    structure down to the element's components, each a shape there), by field name; ``None``
    (the batch's largest) is left out."""
    if isinstance(template, str):
        if shapes is None:
            return {}
        if hasattr(shapes, "as_list"):  # tf.TensorShape
            shapes = shapes.as_list() if shapes.rank is not None else None
            if shapes is None:
                return {}
        if isinstance(shapes, (int, np.integer)) and not isinstance(shapes, bool) and shapes >= 0:
            shapes = [shapes]  # a vector of that size, as TensorShape(n)
        elif isinstance(shapes, np.ndarray) and shapes.ndim == 1:
            shapes = shapes.tolist()
        if not isinstance(shapes, (list, tuple)) or not all(
            d is None or (isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= -1) for d in shapes
        ):
            raise InvalidArgumentError(
                f"padded_batch: {where} must be a shape (a list or tuple of whole numbers or None, or one int), "
                f"got {shapes!r}"
            )
        return {template: [None if d is None or d == -1 else int(d) for d in shapes]}
    if isinstance(template, dict):
        if not isinstance(shapes, dict) or set(shapes) != set(template):
            raise InvalidArgumentError(
                f"padded_batch: {where} must be a dict with the element's keys {sorted(template)}, got {shapes!r}"
            )
        out: dict[str, list[int | None]] = {}
        for k, t in template.items():
            out.update(_padded_shapes(t, shapes[k], f"{where}[{k!r}]"))
        return out
    if not isinstance(shapes, tuple) or len(shapes) != len(template):
        raise InvalidArgumentError(
            f"padded_batch: {where} must be a tuple of {len(template)} shapes, one per component of the "
            f"element, got {shapes!r}"
        )
    out = {}
    for i, (t, sub) in enumerate(zip(template, shapes)):
        out.update(_padded_shapes(t, sub, f"{where}[{i}]"))
    return out


def _fill_dims(shapes: Any, filler: int) -> Any:
    """``shapes`` with each ``None`` dimension set to ``filler``."""
    if isinstance(shapes, dict):
        return {k: _fill_dims(v, filler) for k, v in shapes.items()}
    if isinstance(shapes, tuple):
        return tuple(_fill_dims(v, filler) for v in shapes)
    return [filler if d is None else d for d in shapes]


def _datasets(op: str, datasets: Any) -> list[Dataset]:
    """``datasets`` checked: one or more stoker Datasets of the same structure."""
    parts = list(datasets) if isinstance(datasets, (list, tuple)) else None
    if not parts or not all(isinstance(d, Dataset) for d in parts):
        raise InvalidArgumentError(f"{op}: datasets must be a non-empty list of stoker.Dataset, got {datasets!r}")
    first = _known_or_none(parts[0])
    for d in parts[1:]:
        other = _known_or_none(d)
        if first is not None and other is not None and _normalized(first) != _normalized(other):
            raise InvalidArgumentError(f"{op}: the datasets' structures differ: {first!r} and {other!r}")
    return parts


def _known_or_none(ds: Dataset) -> Template | None:
    """The structure of ``ds``'s elements, ``None`` while a Python function's is unknown."""
    try:
        return _known(ds)
    except ValueError:
        return None


def _lazy(derive: Callable[[], Template | None]) -> Template | Dynamic:
    """The structure ``derive`` makes of other datasets' structures; known later when one of
    them comes from a Python function that has not run yet."""
    now = derive()
    return now if now is not None else Dynamic(derive)


def _known(ds: Dataset, learn: bool = False) -> Template:
    """The structure of ``ds``'s elements; where a Python function's result gives it and the
    function has not run, with ``learn`` a run of ``ds`` up to its first element tells it (see
    ``element_spec``), else it is an error."""
    s = ds._structure
    if isinstance(s, Dynamic):
        if s.template is None and learn:
            ds._first_element()
        if s.template is not None:
            return s.template
        schema = ds._plan.schema()
        if schema is None:
            raise InvalidArgumentError(
                "the structure of this dataset is only known after its Python function has run"
                + (", and a run of it handed out no element" if learn else "")
            )
        return {n: n for n, _, _ in schema}
    return s


def _shape_checks(template: Template, static: dict[str, list[int | None]], schema: Any) -> list[dict[str, Any]]:
    """``ensure_shape`` ops for the fields of a translated function whose static shape in
    TensorFlow's graph (a ``set_shape`` among its sources) names sizes the native ops do not
    fix: tf.data checks each element against it, and so does stoker."""
    native = {n: s for n, _, s in schema} if schema is not None else {}
    checks = []
    for path, field in flatten(template)[1]:
        dims = static.get(path)
        if not isinstance(field, str) or dims is None or all(d is None for d in dims):
            continue
        have = native.get(field)
        if have is not None and len(have) == len(dims) and all(d is None or h == d for d, h in zip(dims, have)):
            continue
        checks.append(_ensure_shape_op(field, dims).spec)
    return checks


def _distribution(name: str, values: Sequence[float]) -> np.ndarray:
    """A class distribution: non-negative, summing to 1."""
    d = np.asarray(values, dtype=np.float64).reshape(-1)
    if d.size == 0 or (d < 0).any() or not np.isclose(d.sum(), 1.0, atol=1e-3):
        raise InvalidArgumentError(f"rejection_resample: {name} must be probabilities summing to 1, got {values!r}")
    return d


def _nested(template: Template, by_name: dict[str, Any]) -> Any:
    """``template`` with each field name replaced by its value in ``by_name``."""
    if isinstance(template, str):
        return by_name[template]
    if isinstance(template, dict):
        return {k: _nested(v, by_name) for k, v in template.items()}
    return like(template, [_nested(v, by_name) for v in template])


def _normalized(t: Template) -> Any:
    """A structure compared as tf.nest compares it: dicts by key, whatever their order."""
    if isinstance(t, dict):
        return tuple(sorted((k, _normalized(v)) for k, v in t.items()))
    if isinstance(t, (tuple, list)):
        return tuple(_normalized(v) for v in t)
    return t


def _structure_of(plan: Any) -> Template:
    schema = plan.schema()
    if schema is None:
        return {}
    names = [n for n, _, _ in schema]
    if len(names) == 1 and "/" not in names[0]:
        return names[0]
    return {n: n for n in names}


def _dtype_of(value: Any) -> str:
    """The stoker dtype a Python function's result field becomes."""
    kind = np.asarray(value).dtype
    return "string" if kind.kind in "SUO" else kind.name


def _pad_value(v: Any) -> int | float | str | dict[str, list[int]]:
    """A padding value as the engine takes it: a whole number exact (an int64 beyond 2^53
    too), a float, NaN and the infinities by name (JSON has none), or a string's bytes (a
    ``str`` in UTF-8). The engine refuses one the field's dtype does not hold."""
    v = v.numpy() if hasattr(v, "numpy") else v
    if isinstance(v, (str, bytes)):  # whole: NumPy's fixed-width strings drop trailing NULs
        return {"bytes": list(v.encode() if isinstance(v, str) else v)}
    a = np.asarray(v)
    if a.size != 1:
        raise InvalidArgumentError(f"padded_batch: a padding value must be one value, got {v!r}")
    if a.dtype.kind in "SUO":
        text = a.item()
        if not isinstance(text, (str, bytes)):
            raise InvalidArgumentError(f"padded_batch: a padding value must be a number or a string, got {v!r}")
        return {"bytes": list(text.encode() if isinstance(text, str) else text)}
    if a.dtype.kind in "biu":
        return int(a.item())
    x = float(a.item())
    return x if np.isfinite(x) else ("nan" if np.isnan(x) else "inf" if x > 0 else "-inf")


def _adapter(
    fn: Callable[..., Any], structure: Template | Dynamic, out: Dynamic
) -> Callable[[dict[str, Any]], list[tuple[str, Any]]]:
    def call(flat: dict[str, Any]) -> list[tuple[str, Any]]:
        args = pack_element(structure, list(flat), texts(list(flat.values())))
        result = apply(fn, args)
        if isinstance(result, list):
            # tf.data takes a returned list as a tuple of components (`decode_csv` returns
            # one), not as one tensor to stack; lists deeper in the result are stacked.
            result = tuple(result)
        template, pairs = flatten(result)
        out.template = template
        return [(n, plain(v)) for n, v in pairs]

    call.__name__ = getattr(fn, "__name__", "map_fn")
    return call


def _compression(op: str, compression_type: str | None) -> str:
    if compression_type in (None, ""):
        return ""
    if not isinstance(compression_type, str) or compression_type.upper() not in ("GZIP", "ZLIB", "NONE"):
        raise InvalidArgumentError(f"{op}: compression_type must be None, 'GZIP' or 'ZLIB', got {compression_type!r}")
    return compression_type


def _files_of(
    op: str, filenames: Any, num_parallel_reads: int | None, one: Callable[[str], Dataset]
) -> tuple[list[str] | None, int, Dataset | None]:
    """The paths and the number of files read in turn, or, for a Dataset of file names, the
    dataset of ``one(name)`` for each (``num_parallel_reads`` of them in turn)."""
    reads = 1 if num_parallel_reads is None else num_parallel_reads
    n = _parallel_calls(op, reads, "num_parallel_reads")
    assert n is not None
    if isinstance(filenames, Dataset):
        cycle = None if n == AUTOTUNE else max(n, 1)
        return None, n, filenames.interleave(lambda f: one(_path(f)), cycle_length=cycle, block_length=1)
    return _paths(filenames), n, None


def TextLineDataset(
    filenames: PathLike | Sequence[PathLike] | Dataset,
    compression_type: str | None = None,
    buffer_size: int | None = None,
    num_parallel_reads: int | None = None,
) -> Dataset:
    """The lines of text files (paths or glob patterns, or a Dataset of file names), as
    tf.data's ``TextLineDataset``: scalar strings without the ``\\n`` and without any
    ``\\r``. ``compression_type``: None, ``"GZIP"`` or ``"ZLIB"``. ``num_parallel_reads``
    reads that many files at once, a line from each in turn (tf.data's order). An I/O error
    names the file, the line and its byte offset; damage in a GZIP/ZLIB stream (a file cut
    short, a bad block) is a ``CorruptRecordError`` after every whole line before it, and
    under ``ignore_errors()`` the rest of the file is counted lost (``rest_lost`` in
    ``stats()``), as for TFRecord files. Each line remembers its file and line, so a later
    op's error (``decode_csv``) names them too.
    ``buffer_size`` is accepted for compatibility."""
    del buffer_size
    compression = _compression("TextLineDataset", compression_type)
    paths, n, nested = _files_of(
        "TextLineDataset", filenames, num_parallel_reads, lambda f: TextLineDataset(f, compression)
    )
    if nested is not None:
        return nested
    assert paths is not None
    return Dataset(_stoker.Plan.text_line(paths, compression, n), "line")


def CsvDataset(
    filenames: PathLike | Sequence[PathLike],
    record_defaults: Sequence[Any],
    compression_type: str | None = None,
    buffer_size: int | None = None,
    header: bool = False,
    field_delim: str = ",",
    use_quote_delim: bool = True,
    na_value: str = "",
    select_cols: Sequence[int] | None = None,
    exclude_cols: Sequence[int] | None = None,
) -> Dataset:
    """The records of CSV files as tuples of columns, as tf.data's
    ``experimental.CsvDataset``: the records of each file (its first skipped with ``header``)
    decoded by :func:`stoker.ops.decode_csv` natively (``record_defaults``, ``field_delim``,
    ``use_quote_delim``, ``na_value`` as there; but a default equal to TensorFlow's enum value
    of a CSV dtype, ``1``, ``1.0``, ``True`` (float32), ``2`` (float64), ``3`` (int32), ``7``
    (string) or ``9`` (int64), or a string naming one (``"int32"``, ``"float"``, ``"double"``,
    ``"string"``, ...), is that dtype, a required column, as tf.data's readers take it).
    With ``header``, an empty file is an error, as in tf.data. A record ends at a line break (``\\n``,
    ``\\r\\n`` or ``\\r``) outside a quoted field, as in TensorFlow: a quoted field may hold
    line breaks, kept as they are; a file that ends inside a quoted field is an error (under
    ``ignore_errors()``, a counted skip). ``select_cols`` or ``exclude_cols`` (not both) pick
    the record's columns. A bad field is an error naming the file, the line the record starts
    on and the column. Damage in a GZIP/ZLIB stream is a ``CorruptRecordError`` (under
    ``ignore_errors()``, the rest of the file is counted in ``rest_lost``).
    ``buffer_size`` is accepted for compatibility."""
    del buffer_size
    from .ops import decode_csv

    defaults = [_csv_dtype_code(d) for d in record_defaults]
    if select_cols is not None and exclude_cols is not None:
        raise InvalidArgumentError("CsvDataset: give select_cols or exclude_cols, not both")
    cols = list(select_cols) if select_cols is not None else None
    if exclude_cols is not None:
        excluded = {_whole("CsvDataset: exclude_cols", c, 0) for c in exclude_cols}
        cols = [c for c in range(len(defaults) + len(excluded)) if c not in excluded]
    compression = _compression("CsvDataset", compression_type)
    paths = _paths(filenames)

    def records(files: list[str]) -> Dataset:
        # Records as tf.data's CSV reader splits them: a quoted field may hold line breaks.
        return Dataset(_stoker.Plan.text_line(files, compression, 1, (field_delim, use_quote_delim)), "line")

    if header:
        lines = Dataset.from_tensor_slices(np.array(paths, dtype=object)).flat_map(
            lambda f: records([_with_header(_path(f), compression)]).skip(1)
        )
    else:
        lines = records(paths)
    names = [str(i) for i in range(len(defaults))]
    ds = lines.map(decode_csv("line", defaults, names, field_delim, use_quote_delim, na_value, cols))
    return Dataset(ds._plan, tuple(names))


# What tf.data's CSV readers take for a CSV dtype: they test a default with `x in (tf.float32,
# ...)`, which compares a number to a DType by its enum value and a string by its name.
_CSV_DTYPE_CODES = {1: "float32", 2: "float64", 3: "int32", 7: "string", 9: "int64"}
_CSV_DTYPE_NAMES = {
    "float32": "float32",
    "float": "float32",
    "float64": "float64",
    "double": "float64",
    "int32": "int32",
    "int64": "int64",
    "string": "string",
}


def _csv_dtype_code(d: Any) -> Any:
    """A record default as tf.data's CSV readers read it: a number equal to the enum value of
    a CSV dtype (``1``, ``1.0``, ``True``: float32; ``3``: int32; ...), or a ``str`` naming
    one (``"int32"``, ``"float"``, ``"double"``, ``"string"``, ...), is that dtype, a required
    column, as in TensorFlow; anything else is as given."""
    if isinstance(d, (bool, int, float, np.bool_, np.integer, np.floating)) and not isinstance(d, DType):
        code = float(d)
        if code.is_integer() and int(code) in _CSV_DTYPE_CODES:
            return DType(_CSV_DTYPE_CODES[int(code)])
    if isinstance(d, str) and not isinstance(d, DType) and d in _CSV_DTYPE_NAMES:
        return DType(_CSV_DTYPE_NAMES[d])
    return d


def _with_header(path: str, compression: str) -> str:
    """``path``, checked to hold a header line: an empty file (once decompressed) has none,
    an error as in tf.data (rather than a file of no records)."""
    import gzip
    import zlib

    kind = compression.upper()
    try:
        with open(path, "rb") as f:
            if kind == "GZIP":
                with gzip.GzipFile(fileobj=f) as g:
                    empty = not g.read(1)
            elif kind == "ZLIB":
                d = zlib.decompressobj()
                empty = True
                while empty and (chunk := f.read(1 << 16)):
                    empty = not d.decompress(chunk, 1)
            else:
                empty = not f.read(1)
    except (OSError, EOFError, zlib.error):
        empty = False  # missing or damaged: the reader names the file and the damage
    if empty:
        raise InvalidArgumentError(f"CsvDataset: {path} is empty: header=True needs a header line to skip")
    return path


def FixedLengthRecordDataset(
    filenames: PathLike | Sequence[PathLike] | Dataset,
    record_bytes: int,
    header_bytes: int | None = None,
    footer_bytes: int | None = None,
    buffer_size: int | None = None,
    compression_type: str | None = None,
    num_parallel_reads: int | None = None,
) -> Dataset:
    """Fixed-size records of binary files, as tf.data's ``FixedLengthRecordDataset``: after
    ``header_bytes``, records of ``record_bytes`` up to the ``footer_bytes`` at the end of
    each file, as scalar strings (``decode_raw`` makes numbers of them). A file whose body is
    not a whole number of records is an ``InvalidArgumentError`` naming it. Damage in a
    GZIP/ZLIB stream is a ``CorruptRecordError`` after every whole record before it (under
    ``ignore_errors()``, the rest of the file is counted in ``rest_lost``).
    ``buffer_size`` is accepted for compatibility."""
    del buffer_size
    size = _whole("FixedLengthRecordDataset: record_bytes", record_bytes, 1)
    header = _whole("FixedLengthRecordDataset: header_bytes", header_bytes or 0, 0)
    footer = _whole("FixedLengthRecordDataset: footer_bytes", footer_bytes or 0, 0)
    compression = _compression("FixedLengthRecordDataset", compression_type)
    paths, n, nested = _files_of(
        "FixedLengthRecordDataset",
        filenames,
        num_parallel_reads,
        lambda f: FixedLengthRecordDataset(f, size, header, footer, compression_type=compression),
    )
    if nested is not None:
        return nested
    assert paths is not None
    plan = _stoker.Plan.fixed_length_record(paths, size, header, footer, compression, n)
    return Dataset(plan, "record")


#: The default of ``TFRecordDataset(max_record_bytes=...)``: 1 GiB.
MAX_RECORD_BYTES = 1 << 30


def _max_record_bytes(value: Any) -> int:
    return _whole("TFRecordDataset: max_record_bytes", value, 1)


def TFRecordDataset(
    filenames: PathLike | Sequence[PathLike] | Dataset,
    compression_type: str | None = None,
    buffer_size: int | None = None,
    num_parallel_reads: int | None = None,
    verify_crc: bool = True,
    max_record_bytes: int = MAX_RECORD_BYTES,
) -> Dataset:
    """The records of TFRecord files (paths or glob patterns, or a Dataset of file names).

    ``compression_type``: None, ``"GZIP"`` or ``"ZLIB"``. Every record's masked CRC32C is
    checked unless ``verify_crc=False``. ``num_parallel_reads`` (an int or ``AUTOTUNE``) reads
    that many files at once, interleaving their records in tf.data's deterministic order.
    ``buffer_size`` is accepted for compatibility (reads are buffered in 1 MiB chunks).
    ``max_record_bytes`` (default 1 GiB) is the largest record read: a header claiming more
    is a ``CorruptRecordError`` naming the file, the record and its offset (a damaged header,
    or a record larger than allowed), so that a damaged length cannot make a compressed
    stream inflate into memory without bound.
    """
    del buffer_size
    max_bytes = _max_record_bytes(max_record_bytes)
    reads = 1 if num_parallel_reads is None else num_parallel_reads
    n = _parallel_calls("TFRecordDataset", reads, "num_parallel_reads")
    assert n is not None
    if isinstance(filenames, Dataset):
        cycle = None if n == AUTOTUNE else max(n, 1)  # None: as many as the CPU budget
        parallel = None if n == 1 else n
        plan = filenames._plan.interleave_tfrecord(compression_type or "", verify_crc, cycle, 1, parallel, max_bytes)
        return Dataset(plan, "record")
    plan = _stoker.Plan.tfrecord(_paths(filenames), compression_type or "", verify_crc, n, max_bytes)
    return Dataset(plan, "record")

