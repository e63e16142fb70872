"""``sk.data.experimental.make_csv_dataset`` against TensorFlow's on the same files: the
inferred types, the header's names, ``label_name``, ``select_columns``, GZIP, ``num_epochs``,
and shuffling (the same rows, in another order)."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import stoker as sk

ROWS = [
    "age,fare,name,survived,big,ratio,empty",
    "22,7.25,Braund,0,3000000000,1e40,",
    "38,71.2833,Cumings,1,1,0.5,",
    "26,7.925,Heikkinen,1,2,1.5,",
    '35,53.1,"Futrelle, Mrs",1,3,2.5,',
    "35,8.05,Allen,0,4,3.5,",
]


def _write(tmp: Path, name: str, rows: list[str], compress: bool = False) -> str:
    path = tmp / name
    data = ("\n".join(rows) + "\n").encode()
    path.write_bytes(gzip.compress(data) if compress else data)
    return str(path)


def _batches(ds: Any, n: int | None = None) -> list[Any]:
    out = []
    for i, b in enumerate(ds.as_numpy_iterator() if hasattr(ds, "as_numpy_iterator") else ds):
        if n is not None and i >= n:
            break
        out.append(b)
    return out


def _same(ours: Any, theirs: Any) -> None:
    if isinstance(theirs, tuple):
        assert isinstance(ours, tuple) and len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            _same(a, b)
    elif isinstance(theirs, dict):
        assert list(ours) == list(theirs)  # the columns in the file's order
        for k in theirs:
            _same(ours[k], theirs[k])
    else:
        a, b = np.asarray(ours), np.asarray(theirs)
        assert a.dtype == b.dtype or (a.dtype == object and b.dtype == object), (a.dtype, b.dtype)
        assert a.shape == b.shape and a.tolist() == b.tolist()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"label_name": "survived"},
        {"label_name": "survived", "select_columns": ["survived", "fare", "name"]},
        {"select_columns": [0, 3], "num_rows_for_inference": 2},
        {"column_names": ["a", "b", "c", "d", "e", "f", "g"], "header": True, "label_name": "d"},
        {"label_name": "survived", "na_value": "Allen"},
    ],
)
def test_the_batches_equal_tf_data(tmp_path: Path, kwargs: dict[str, Any]) -> None:
    tf = pytest.importorskip("tensorflow")
    path = _write(tmp_path, "titanic.csv", ROWS)
    if kwargs.get("na_value") == "Allen":  # Allen's name is missing: the default, ""
        kwargs = {**kwargs, "column_defaults": [0, 0.0, "", 0, tf.int64, tf.float64, ""]}
    args = {"batch_size": 2, "num_epochs": 1, "shuffle": False, **kwargs}
    ours = _batches(sk.data.experimental.make_csv_dataset(path, **args))
    theirs = _batches(tf.data.experimental.make_csv_dataset(path, **args))
    assert len(ours) == len(theirs) == 3
    for a, b in zip(ours, theirs):
        _same(a, b)


def test_gzip_and_several_files_and_epochs(tmp_path: Path) -> None:
    tf = pytest.importorskip("tensorflow")
    _write(tmp_path, "a.csv.gz", ROWS[:4], compress=True)
    _write(tmp_path, "b.csv.gz", [ROWS[0]] + ROWS[4:], compress=True)
    pattern = str(tmp_path / "*.csv.gz")
    args = {"batch_size": 3, "num_epochs": 2, "shuffle": False, "compression_type": "GZIP", "label_name": "survived"}
    ours = _batches(sk.data.experimental.make_csv_dataset(pattern, **args))
    theirs = _batches(tf.data.experimental.make_csv_dataset(pattern, **args))
    assert len(ours) == len(theirs) == 4
    for a, b in zip(ours, theirs):
        _same(a, b)


def test_a_list_of_files_reads_in_tensorflow_s_order_and_headers_must_agree(tmp_path: Path) -> None:
    """A list of patterns (one matching nothing) reads its files sorted, as TensorFlow does
    without shuffle; files whose headers name other columns are an error, not columns named
    after the first file's; quotes are read as the reader is told, in the inference too."""
    tf = pytest.importorskip("tensorflow")
    b = _write(tmp_path, "b.csv", ["x", "1", "2"])
    a = _write(tmp_path, "a.csv", ["x", "3", "4"])
    args = {"batch_size": 4, "num_epochs": 1, "shuffle": False}
    for pattern in ([b, a], [str(tmp_path / "b*"), str(tmp_path / "none*"), str(tmp_path / "a*")]):
        ours = _batches(sk.data.experimental.make_csv_dataset(pattern, **args))
        theirs = _batches(tf.data.experimental.make_csv_dataset(pattern, **args))
        assert ours[0]["x"].tolist() == theirs[0]["x"].tolist() == [3, 4, 1, 2]
    c = _write(tmp_path, "c.csv", ["x,z", "5,6"])
    d = _write(tmp_path, "d.csv", ["x,y", "7,8"])
    with pytest.raises(sk.InvalidArgumentError, match="same column names"):
        sk.data.experimental.make_csv_dataset([d, c], **args)
    with pytest.raises(ValueError, match="same column names"):
        tf.data.experimental.make_csv_dataset([d, c], **args)
    quoted = _write(tmp_path, "q.csv", ['"a",b', '"1",2', '"3",4'])
    args = {**args, "use_quote_delim": False}
    ours = _batches(sk.data.experimental.make_csv_dataset(quoted, **args))
    theirs = _batches(tf.data.experimental.make_csv_dataset(quoted, **args))
    _same(ours[0], dict(theirs[0]))
    assert list(ours[0]) == ['"a"', "b"] and ours[0]['"a"'].tolist() == [b'"1"', b'"3"']


def test_shuffled_endless_batches_hold_the_same_rows(tmp_path: Path) -> None:
    path = _write(tmp_path, "titanic.csv", ROWS)
    ds = sk.data.experimental.make_csv_dataset(path, batch_size=5, label_name="survived", shuffle_seed=3)
    batches = _batches(ds, 4)  # num_epochs=None: forever, every batch whole
    assert all(len(label) == 5 for _, label in batches)
    everyone = {b"Braund", b"Cumings", b"Heikkinen", b"Futrelle, Mrs", b"Allen"}
    epochs = [tuple(f["name"].tolist()) for f, _ in batches]  # a batch of 5 is one epoch here
    assert all(set(e) == everyone for e in epochs)
    assert len(set(epochs)) > 1  # shuffled anew each epoch


def test_wrong_arguments_name_themselves(tmp_path: Path) -> None:
    path = _write(tmp_path, "titanic.csv", ROWS)
    with pytest.raises(sk.InvalidArgumentError, match="label_name"):
        sk.data.experimental.make_csv_dataset(path, 2, label_name="nope")
    with pytest.raises(sk.InvalidArgumentError, match="select_columns"):
        sk.data.experimental.make_csv_dataset(path, 2, select_columns=["nope"])
    with pytest.raises(sk.MissingFileError):
        sk.data.experimental.make_csv_dataset(str(tmp_path / "none*.csv"), 2)
    with pytest.raises(sk.InvalidArgumentError, match="select_columns names column 'fare' twice"):
        sk.data.experimental.make_csv_dataset(path, 2, select_columns=["fare", "fare"])


def test_a_file_that_does_not_decode_is_named(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_bytes(b"a,b\n1,2\n\xff\xfe,3\n")
    with pytest.raises(sk.InvalidArgumentError, match=r"bad\.csv: 'utf-8' codec"):
        sk.data.experimental.make_csv_dataset(str(path), 2)
    gz = tmp_path / "bad.csv.gz"
    gz.write_bytes(b"not gzip at all")
    with pytest.raises(sk.InvalidArgumentError, match=r"bad\.csv\.gz"):
        sk.data.experimental.make_csv_dataset(str(gz), 2, compression_type="GZIP")
