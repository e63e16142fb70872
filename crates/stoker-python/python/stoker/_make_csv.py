"""``make_csv_dataset``: CSV files as batches of ``(features, label)``, as tf.data's.

The column names come from the header (or ``column_names``), the types from the first rows
(TensorFlow's inference: int32, then int64, float32, float64, else string), and the records
are read natively by :func:`stoker.CsvDataset`; the batches' dict of features is the
dataset's structure over the columns' fields, so regrouping them costs nothing.
"""

from __future__ import annotations

import csv
import glob
import gzip
import io
import itertools
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from . import _dtypes
from ._check import path as _path
from ._check import whole
from .dataset import AUTOTUNE, CsvDataset, Dataset
from .errors import InvalidArgumentError, MissingFileError

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_ORDER = ("int32", "int64", "float32", "float64", "string")


def _files(file_pattern: Any) -> list[str]:
    patterns = (
        [file_pattern]
        if isinstance(file_pattern, (str, bytes)) or hasattr(file_pattern, "__fspath__")
        else list(file_pattern)
    )
    names = [p.decode() if isinstance(p, bytes) else str(p) for p in patterns]
    files = [f for p in names for f in glob.glob(p)]
    if not files:
        raise MissingFileError(2, "make_csv_dataset: no file matches the pattern", ", ".join(names))
    # in one sorted order, as TensorFlow's (which reads them so where it does not shuffle them)
    return sorted(files)


def _valid(value: str, k: int) -> bool:
    """Whether ``value`` is a valid ``_ORDER[k]`` (TensorFlow's ``_is_valid_*``)."""
    try:
        if k <= 1:
            low, high = _INT32 if k == 0 else _INT64
            return low <= int(value) <= high
        if k <= 3:
            with np.errstate(over="ignore"):  # too large for the type: inf, so not valid
                return bool((np.float32 if k == 2 else np.float64)(value) < np.inf)
    except (ValueError, OverflowError):
        return False
    return True


def _kind(value: str, na_value: str, previous: int) -> int:
    """The index in ``_ORDER`` of the first type that holds ``value`` and is no narrower than
    ``previous`` (-1: none yet), as TensorFlow's ``_infer_type``; an empty field says nothing."""
    if value in ("", na_value):
        return previous
    return next(k for k in range(max(previous, 0), len(_ORDER)) if _valid(value, k))


def _infer(
    files: list[str],
    n_columns: int,
    header: bool,
    rows: int,
    na_value: str,
    read: Callable[[str], Iterator[list[str]]],
) -> list[str]:
    """Each column's type from the first ``rows`` records (``read`` from each of the files,
    after its header)."""
    records = (r for f in files for r in itertools.islice(read(f), int(header), None))
    kinds = [-1] * n_columns
    for record in itertools.islice(records, rows):
        for c, value in enumerate(record[:n_columns]):
            kinds[c] = _kind(value, na_value, kinds[c])
    return [_ORDER[k] if k >= 0 else "string" for k in kinds]  # a column seen empty: string, as TF


def _records(
    path: str, delim: str, compression_type: str | None, encoding: str, quoted: bool = True
) -> Iterator[list[str]]:
    """The records of a CSV file, read as they are needed (Python's csv reader; quotes as
    quotes unless not ``quoted``, as TensorFlow reads them for its inference); a file that
    does not decode is an error naming it."""
    kind = (compression_type or "").upper()
    try:
        if kind == "ZLIB":
            with open(path, "rb") as raw:
                text: Any = io.StringIO(zlib.decompress(raw.read()).decode(encoding), newline="")
        elif kind == "GZIP":
            text = gzip.open(path, "rt", encoding=encoding, newline="")
        else:
            text = open(path, encoding=encoding, newline="")  # noqa: SIM115 - closed below
        with text:
            yield from csv.reader(text, delimiter=delim, quoting=csv.QUOTE_MINIMAL if quoted else csv.QUOTE_NONE)
    except (UnicodeDecodeError, csv.Error, OSError, EOFError, zlib.error) as e:
        raise InvalidArgumentError(f"make_csv_dataset: {path}: {e}") from None


def make_csv_dataset(
    file_pattern: Any,
    batch_size: int,
    column_names: Sequence[str] | None = None,
    column_defaults: Sequence[Any] | None = None,
    label_name: str | None = None,
    select_columns: Sequence[str | int] | None = None,
    field_delim: str = ",",
    use_quote_delim: bool = True,
    na_value: str = "",
    header: bool = True,
    num_epochs: int | None = None,
    shuffle: bool = True,
    shuffle_buffer_size: int = 10000,
    shuffle_seed: int | None = None,
    prefetch_buffer_size: int | None = None,
    num_parallel_reads: int | None = None,
    sloppy: bool = False,
    num_rows_for_inference: int = 100,
    compression_type: str | None = None,
    ignore_errors: bool = False,
    encoding: str = "utf-8",
) -> Dataset:
    """CSV files as batches of ``(features, label)`` (or of ``features`` without
    ``label_name``), ``features`` a dict from column name to a batch of its values, as
    ``tf.data.experimental.make_csv_dataset``: the names from the first file's header unless
    ``column_names``; each column's type from ``column_defaults`` or inferred from the first
    ``num_rows_for_inference`` records as TensorFlow infers it (int32, int64, float32, float64,
    else string; a column is then required: an empty field is an error, or a skip under
    ``ignore_errors``); ``select_columns`` (names or indices) keeps those; the files in a new
    order each epoch and the records through a ``shuffle_buffer_size`` buffer with
    ``shuffle``; ``num_epochs`` passes (``None``: forever, the last batch then always whole);
    ``compression_type`` ``"GZIP"`` or ``"ZLIB"``. ``num_parallel_reads`` and ``sloppy`` are
    accepted; the files are read in turn."""
    del num_parallel_reads, sloppy
    size = whole("make_csv_dataset: batch_size", batch_size, 1)
    files = _files(file_pattern)

    def records(path: str) -> Iterator[list[str]]:
        return _records(path, field_delim, compression_type, encoding, bool(use_quote_delim))

    if column_names is None:
        if not header:
            raise InvalidArgumentError("make_csv_dataset: give column_names when the files have no header")
        heads: dict[str, list[str]] = {}
        for f in files:
            head = next(iter(records(f)), None)
            if not head:
                raise InvalidArgumentError(f"make_csv_dataset: {f} has no header line")
            heads[f] = head
        column_names = heads[files[0]]
        other = next((f for f in files if heads[f] != column_names), None)
        if other is not None:
            raise InvalidArgumentError(
                f"make_csv_dataset: the files' headers name other columns: {files[0]} {column_names}, "
                f"{other} {heads[other]}; all input CSV files should have the same column names"
            )
    names = [str(n) for n in column_names]
    if len(set(names)) != len(names):
        raise InvalidArgumentError(f"make_csv_dataset: column names are not unique: {names}")
    cols: list[int] = list(range(len(names)))
    if select_columns is not None:
        picked: set[int] = set()
        for c in select_columns:
            index = names.index(c) if isinstance(c, str) and c in names else c
            if not isinstance(index, int) or not 0 <= index < len(names):
                raise InvalidArgumentError(f"make_csv_dataset: select_columns: no column {c!r} in {names}")
            if index in picked:
                raise InvalidArgumentError(f"make_csv_dataset: select_columns names column {c!r} twice")
            picked.add(index)
        cols = sorted(picked)
    if label_name is not None and label_name not in [names[c] for c in cols]:
        raise InvalidArgumentError(f"make_csv_dataset: label_name {label_name!r} is not one of the columns")
    if column_defaults is None:
        kinds = _infer(files, len(names), header, num_rows_for_inference, na_value, records)
        defaults: list[Any] = [_Inferred(kinds[c]) for c in cols]
    else:
        given = list(column_defaults)
        if len(given) not in (len(names), len(cols)):
            raise InvalidArgumentError(
                f"make_csv_dataset: {len(given)} column_defaults for {len(names)} columns ({len(cols)} selected)"
            )
        defaults = [given[c] for c in cols] if len(given) == len(names) and len(cols) != len(names) else given
    record_defaults = [_required(d) for d in defaults]
    select = cols if len(cols) != len(names) else None

    def read(paths: list[str]) -> Dataset:
        return CsvDataset(
            paths,
            record_defaults,
            compression_type=compression_type,
            header=header,
            field_delim=field_delim,
            use_quote_delim=use_quote_delim,
            na_value=na_value,
            select_cols=select,
        )

    if shuffle and len(files) > 1:  # the files in a new order each epoch, as tf.data's
        ds = Dataset.list_files(files, shuffle=True, seed=shuffle_seed).flat_map(lambda f: read([_path(f)]))
    else:
        ds = read(files)
    if ignore_errors:
        ds = ds.ignore_errors()
    if shuffle:
        ds = ds.shuffle(shuffle_buffer_size, seed=shuffle_seed)
    if num_epochs != 1:
        ds = ds.repeat(num_epochs)
    ds = ds.batch(size, drop_remainder=num_epochs is None)
    fields = [str(i) for i in range(len(cols))]
    features = {names[c]: f for c, f in zip(cols, fields)}
    structure: Any = features
    if label_name is not None:
        label = features.pop(label_name)
        structure = (features, label)
    out = Dataset(ds._plan, structure)._rows_of(ds)
    return out.prefetch(AUTOTUNE if prefetch_buffer_size is None else prefetch_buffer_size)


class _Inferred:
    """A column's inferred type."""

    def __init__(self, kind: str) -> None:
        self.kind = kind


def _required(d: Any) -> Any:
    """A default as ``CsvDataset`` takes it: an inferred type's is 0 or "" (as TensorFlow's);
    a TensorFlow tensor its value (an empty one a required column of its dtype)."""
    if isinstance(d, _Inferred):
        return "" if d.kind == "string" else np.dtype(d.kind).type(0)
    if isinstance(d, str) and d in _ORDER:  # a dtype's name: a required column
        return getattr(_dtypes, d)
    if hasattr(d, "numpy"):
        v = np.asarray(d.numpy())
        return v[()] if v.ndim == 0 else v
    return d
