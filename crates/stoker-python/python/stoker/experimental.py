"""tf.data's ``experimental`` names, as real tf.data code spells them: constants, and functions
that return a transformation for :meth:`Dataset.apply` (``ds.apply(experimental.ignore_errors())``).
Each is the :class:`Dataset` method of the same meaning; :mod:`stoker.data` holds this module as
``data.experimental``, beside ``data.Dataset``, so that ``tf.data.experimental.X`` becomes
``sk.data.experimental.X``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable

from ._check import whole as _whole
from ._make_csv import make_csv_dataset
from .dataset import AUTOTUNE, INFINITE, UNKNOWN, CsvDataset, Dataset
from .errors import InvalidArgumentError

Transformation = Callable[[Dataset], Dataset]

INFINITE_CARDINALITY = INFINITE
UNKNOWN_CARDINALITY = UNKNOWN

sample_from_datasets = Dataset.sample_from_datasets
choose_from_datasets = Dataset.choose_from_datasets

__all__ = [
    "AUTOTUNE",
    "INFINITE_CARDINALITY",
    "UNKNOWN_CARDINALITY",
    "CsvDataset",
    "assert_cardinality",
    "bucket_by_sequence_length",
    "cardinality",
    "choose_from_datasets",
    "enumerate_dataset",
    "get_single_element",
    "group_by_window",
    "ignore_errors",
    "make_csv_dataset",
    "map_and_batch",
    "sample_from_datasets",
    "scan",
    "take_while",
    "unbatch",
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
