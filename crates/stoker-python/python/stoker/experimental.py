"""tf.data's ``experimental`` names, as real tf.data code spells them: constants, and functions
that return a transformation for :meth:`Dataset.apply` (``ds.apply(experimental.ignore_errors())``).
Each is the :class:`Dataset` method of the same meaning; :mod:`stoker.data` holds this module as
``data.experimental``, beside ``data.Dataset``, so that ``tf.data.experimental.X`` becomes
``sk.data.experimental.X``."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any, Callable

import numpy as np

from ._check import path as _path
from ._check import whole as _whole
from ._dtypes import as_tf_converts
from ._make_csv import make_csv_dataset
from ._structure import flatten, pack
from .dataset import (
    AUTOTUNE,
    INFINITE,
    UNKNOWN,
    AutoShardPolicy,
    AutotuneOptions,
    CsvDataset,
    Dataset,
    DistributeOptions,
    OptimizationOptions,
    ThreadingOptions,
)
from .errors import InvalidArgumentError

Transformation = Callable[[Dataset], Dataset]

INFINITE_CARDINALITY = INFINITE
UNKNOWN_CARDINALITY = UNKNOWN

sample_from_datasets = Dataset.sample_from_datasets
choose_from_datasets = Dataset.choose_from_datasets
Counter = Dataset.counter


# tf.data's placeholder for the number of shards under AutoShardPolicy.HINT.
SHARD_HINT = -1


class ExternalStatePolicy(enum.IntEnum):
    """tf.data's policy for functions with external state when a dataset is saved; stoker's
    saved state is its own (a few integers per step): accepted, no effect."""

    WARN = 0
    IGNORE = 1
    FAIL = 2

__all__ = [
    "AUTOTUNE",
    "INFINITE_CARDINALITY",
    "SHARD_HINT",
    "UNKNOWN_CARDINALITY",
    "AutoShardPolicy",
    "AutotuneOptions",
    "Counter",
    "CsvDataset",
    "DistributeOptions",
    "ExternalStatePolicy",
    "OptimizationOptions",
    "TFRecordWriter",
    "ThreadingOptions",
    "assert_cardinality",
    "at",
    "bucket_by_sequence_length",
    "cardinality",
    "choose_from_datasets",
    "copy_to_device",
    "dense_to_ragged_batch",
    "enumerate_dataset",
    "from_list",
    "get_single_element",
    "get_structure",
    "group_by_window",
    "ignore_errors",
    "load",
    "make_csv_dataset",
    "map_and_batch",
    "parallel_interleave",
    "parse_example_dataset",
    "prefetch_to_device",
    "rejection_resample",
    "sample_from_datasets",
    "save",
    "scan",
    "shuffle_and_repeat",
    "snapshot",
    "take_while",
    "unbatch",
    "unique",
]


def cardinality(dataset: Dataset) -> int:
    """:meth:`Dataset.cardinality`: the count, ``INFINITE_CARDINALITY`` or ``UNKNOWN_CARDINALITY``."""
    return dataset.cardinality()


def assert_cardinality(expected_cardinality: int) -> Transformation:
    """:meth:`Dataset.assert_cardinality`, for ``apply``."""
    n = _whole("assert_cardinality: expected_cardinality", expected_cardinality, 0)
    return lambda ds: ds.assert_cardinality(n)


def ignore_errors(log_warning: bool = False) -> Transformation:
    """:meth:`Dataset.ignore_errors`, for ``apply``. Skipped records are always counted in
    ``stats()`` with the last reason; ``log_warning`` is accepted for tf.data's signature."""
    del log_warning
    return lambda ds: ds.ignore_errors()


def enumerate_dataset(start: int = 0) -> Transformation:
    """:meth:`Dataset.enumerate`, for ``apply``."""
    return lambda ds: ds.enumerate(start)


def map_and_batch(
    map_func: Callable[..., Any],
    batch_size: int,
    num_parallel_batches: int | None = None,
    drop_remainder: bool = False,
    num_parallel_calls: int | None = None,
) -> Transformation:
    """``map`` then ``batch``, for ``apply`` (tf.data's deprecated fused form, which BERT's
    input function uses). ``num_parallel_batches`` (batches computed at once in tf.data) makes
    the map parallel with ``AUTOTUNE`` threads: stoker's planner runs a map before a batch on
    whole batches where it can."""
    if num_parallel_batches is not None and num_parallel_calls is not None:
        raise InvalidArgumentError("map_and_batch: give num_parallel_batches or num_parallel_calls, not both")
    calls = num_parallel_calls
    if num_parallel_batches is not None:
        _whole("map_and_batch: num_parallel_batches", num_parallel_batches, 1)
        calls = AUTOTUNE
    return lambda ds: ds.map(map_func, num_parallel_calls=calls).batch(batch_size, drop_remainder)


def take_while(predicate: Callable[..., Any]) -> Transformation:
    """:meth:`Dataset.take_while`, for ``apply``."""
    return lambda ds: ds.take_while(predicate)


def unbatch() -> Transformation:
    """:meth:`Dataset.unbatch`, for ``apply``."""
    return lambda ds: ds.unbatch()


def scan(initial_state: Any, scan_func: Callable[..., tuple[Any, Any]]) -> Transformation:
    """:meth:`Dataset.scan`, for ``apply``."""
    return lambda ds: ds.scan(initial_state, scan_func)


def group_by_window(
    key_func: Callable[..., Any],
    reduce_func: Callable[[Any, Dataset], Dataset],
    window_size: int | None = None,
    window_size_func: Callable[[Any], Any] | None = None,
) -> Transformation:
    """:meth:`Dataset.group_by_window`, for ``apply``."""
    return lambda ds: ds.group_by_window(key_func, reduce_func, window_size, window_size_func)


def bucket_by_sequence_length(
    element_length_func: Callable[..., Any],
    bucket_boundaries: Sequence[int],
    bucket_batch_sizes: Sequence[int],
    padded_shapes: Any = None,
    padding_values: Any = None,
    pad_to_bucket_boundary: bool = False,
    no_padding: bool = False,
    drop_remainder: bool = False,
) -> Transformation:
    """:meth:`Dataset.bucket_by_sequence_length`, for ``apply``."""
    return lambda ds: ds.bucket_by_sequence_length(
        element_length_func,
        bucket_boundaries,
        bucket_batch_sizes,
        padded_shapes,
        padding_values,
        pad_to_bucket_boundary,
        no_padding,
        drop_remainder,
    )


def get_single_element(dataset: Dataset) -> Any:
    """:meth:`Dataset.get_single_element`."""
    return dataset.get_single_element()


def unique() -> Transformation:
    """:meth:`Dataset.unique`, for ``apply``."""
    return lambda ds: ds.unique()


def shuffle_and_repeat(buffer_size: int, count: int | None = None, seed: int | None = None) -> Transformation:
    """``shuffle(buffer_size, seed)`` then ``repeat(count)``, for ``apply`` (tf.data's
    deprecated fused form): each repetition in a new order."""
    return lambda ds: ds.shuffle(buffer_size, seed).repeat(count)


def rejection_resample(
    class_func: Callable[..., Any],
    target_dist: Sequence[float],
    initial_dist: Sequence[float] | None = None,
    seed: int | None = None,
) -> Transformation:
    """:meth:`Dataset.rejection_resample`, for ``apply``."""
    return lambda ds: ds.rejection_resample(class_func, target_dist, initial_dist, seed)


def dense_to_ragged_batch(
    batch_size: int, drop_remainder: bool = False, row_splits_dtype: Any = "int64"
) -> Transformation:
    """:meth:`Dataset.ragged_batch`, for ``apply`` (its padded values and row lengths)."""
    return lambda ds: ds.ragged_batch(batch_size, drop_remainder, row_splits_dtype)


def parallel_interleave(
    map_func: Callable[..., Dataset],
    cycle_length: int,
    block_length: int = 1,
    sloppy: bool | None = False,
    buffer_output_elements: int | None = None,
    prefetch_input_elements: int | None = None,
) -> Transformation:
    """``interleave`` with ``cycle_length`` datasets read at once, for ``apply`` (tf.data's
    deprecated form): in interleave's order unless ``sloppy``. The buffer sizes are accepted
    (each open dataset reads ahead on its own thread)."""
    del buffer_output_elements, prefetch_input_elements
    cycle = _whole("parallel_interleave: cycle_length", cycle_length, 1)
    return lambda ds: ds.interleave(map_func, cycle, block_length, num_parallel_calls=cycle, deterministic=not sloppy)


def save(
    dataset: Dataset,
    path: Any,
    compression: str | None = None,
    shard_func: Callable[..., Any] | None = None,
    checkpoint_args: Any = None,
) -> None:
    """:meth:`Dataset.save`."""
    dataset.save(path, compression, shard_func, checkpoint_args)


def load(path: Any, element_spec: Any = None, compression: str | None = None, reader_func: Any = None) -> Dataset:
    """:meth:`Dataset.load`."""
    return Dataset.load(path, element_spec, compression, reader_func)


def snapshot(
    path: Any, compression: str | None = "AUTO", reader_func: Any = None, shard_func: Any = None
) -> Transformation:
    """:meth:`Dataset.snapshot`, for ``apply`` (``compression="AUTO"``, tf.data's choice, is
    stoker's uncompressed file)."""
    return lambda ds: ds.snapshot(path, compression, reader_func, shard_func)


def get_structure(dataset_or_iterator: Any) -> Any:
    """The element spec of a dataset or of one of its iterators."""
    spec = getattr(dataset_or_iterator, "element_spec", None)
    if spec is None and not isinstance(dataset_or_iterator, Dataset):
        raise InvalidArgumentError(
            f"get_structure: takes a dataset or an iterator, got {type(dataset_or_iterator).__name__}"
        )
    return spec


def from_list(elements: Sequence[Any]) -> Dataset:
    """A dataset of the given elements, each a structure of values of one structure (each
    value converted as tf.data converts it: a Python int is int32), as tf.data's
    ``from_list``. The values of a component must have one shape (they are stacked)."""
    items = list(elements)
    if not items:
        raise InvalidArgumentError("from_list: elements must not be empty")
    template, first = flatten(items[0])
    columns: list[list[Any]] = [[] for _ in first]
    for i, e in enumerate(items):
        t, pairs = flatten(e)
        if t != template or [n for n, _ in pairs] != [n for n, _ in first]:
            raise InvalidArgumentError(f"from_list: element {i} has another structure than element 0")
        for c, (_, v) in enumerate(pairs):
            columns[c].append(np.asarray(as_tf_converts(v)))
    stacked = {}
    for (name, _), column in zip(first, columns):
        kinds = {(a.dtype.kind in "SUO", a.dtype if a.dtype.kind not in "SUO" else None, a.shape) for a in column}
        if len(kinds) != 1:
            raise InvalidArgumentError(
                f"from_list: component {name!r} has values of other dtypes or shapes "
                f"({sorted({f'{a.dtype}{list(a.shape)}' for a in column})}); they must be stackable"
            )
        kind = column[0].dtype
        stacked[name] = np.stack(column).astype(object) if kind.kind in "SUO" else np.stack(column)
    return Dataset.from_tensor_slices(pack(template, stacked))


def at(dataset: Dataset, index: int) -> Any:
    """The element at ``index`` (a pass up to it, as tf.data's ``at`` on a dataset without
    random access)."""
    i = _whole("at: index", index, 0)
    rest = dataset.skip(i).take(1)
    for element in rest:
        return element
    raise InvalidArgumentError(f"at: index {i} is past the end of the dataset")


def prefetch_to_device(device: str, buffer_size: int | None = None) -> Transformation:
    """``prefetch``, for ``apply``: stoker hands out host arrays; its PyTorch, JAX and Keras
    bridges (``stoker.torch.loader(device=...)``, ``stoker.jax.iterator``) copy batches to the
    device ahead of the step."""
    del device
    return lambda ds: ds.prefetch(AUTOTUNE if buffer_size is None else buffer_size)


def copy_to_device(target_device: str, source_device: str = "/cpu:0") -> Transformation:
    """The dataset as it is, for ``apply``: stoker's elements are host arrays (see
    :func:`prefetch_to_device`)."""
    del target_device, source_device
    return lambda ds: ds


def parse_example_dataset(
    features: dict[str, Any], num_parallel_calls: int | None = 1, deterministic: bool | None = None
) -> Transformation:
    """``map`` of ``tf.io.parse_example`` over a dataset of serialized ``tf.train.Example``
    batches (or single records), for ``apply``: the function is traced and runs as the
    native ``parse_example``."""

    def apply(ds: Dataset) -> Dataset:
        import tensorflow as tf  # noqa: PLC0415 - the features are TensorFlow's

        return ds.map(lambda serialized: tf.io.parse_example(serialized, features), num_parallel_calls, deterministic)

    return apply


class TFRecordWriter:
    """Writes a dataset of scalar strings to a TFRecord file (tf.data's
    ``experimental.TFRecordWriter``); ``compression_type`` ``None``, ``"GZIP"`` or ``"ZLIB"``."""

    def __init__(self, filename: Any, compression_type: str | None = None) -> None:
        self._path = _path(filename)
        self._compression = compression_type

    def write(self, dataset: Dataset) -> None:
        from . import io

        spec = dataset.element_spec
        if getattr(spec, "dtype", None) != "string" or tuple(getattr(spec, "shape", (None,))) != ():
            raise InvalidArgumentError(
                f"TFRecordWriter.write: the dataset's elements must be scalar strings, got {spec}"
            )
        with io.TFRecordWriter(self._path, self._compression) as w:
            for record in dataset:
                w.write(bytes(record))
