"""``save`` / ``load`` / ``snapshot`` with tf.data's semantics on stoker's format: a pass saved
in one process and loaded in another, the count known, a damaged or missing save refused
without touching the directory, and a snapshot that a later run of the same pipeline reads
instead of running it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import stoker as sk

PIPELINE = """
import numpy as np, stoker as sk, sys
calls = sys.argv[2]

def count(e):
    with open(calls, "a") as f:
        f.write("x")
    return (e["a"] * 2, {"b": e["b"] + 0.5})

ds = sk.Dataset.from_tensor_slices({"a": np.arange(10), "b": np.arange(10.0)}).map(count).batch(3)
"""


def _run(code: str, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(PIPELINE) + textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def _calls(path: Path) -> int:
    return len(path.read_text()) if path.exists() else 0


def test_saved_in_one_process_loaded_in_another(tmp_path: Path) -> None:
    saved, calls = tmp_path / "saved", tmp_path / "calls"
    _run("ds.save(sys.argv[1])", str(saved), str(calls))
    assert _calls(calls) == 10 and sorted(os.listdir(saved)) == ["dataset.json", "elements.cache"]
    printed = _run(
        """
        loaded = sk.Dataset.load(sys.argv[1])
        print(len(loaded), [(int(a.sum()), float(b["b"].sum())) for a, b in loaded])
        print(loaded.element_spec[1]["b"].dtype)
        """,
        str(saved),
        str(calls),
    )
    assert _calls(calls) == 10  # the load ran nothing of the pipeline
    lines = printed.splitlines()
    assert lines[0] == "4 [(6, 4.5), (24, 13.5), (42, 22.5), (18, 9.5)]"
    assert lines[1] == "float64"


def test_a_missing_or_incomplete_save_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    with pytest.raises(sk.MissingFileError, match="no saved dataset here"):
        sk.Dataset.load(tmp_path)
    ds = sk.Dataset.from_tensor_slices(np.arange(5))
    ds.save(tmp_path)
    (tmp_path / "elements.cache").write_bytes(b"")  # damaged
    with pytest.raises(sk.StokerError):
        list(sk.Dataset.load(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["dataset.json", "elements.cache"]
    assert (tmp_path / "elements.cache").read_bytes() == b""
    with pytest.raises(sk.InvalidArgumentError, match="compression"):
        ds.save(tmp_path / "gz", compression="GZIP")


def test_a_snapshot_is_read_by_a_later_run_of_the_same_pipeline(tmp_path: Path) -> None:
    snap, calls = tmp_path / "snap", tmp_path / "calls"
    first = _run("print([int(a.sum()) for a, _ in ds.snapshot(sys.argv[1])])", str(snap), str(calls))
    assert _calls(calls) == 10 and len([f for f in os.listdir(snap) if f.endswith(".snapshot")]) == 1
    again = _run("print([int(a.sum()) for a, _ in ds.snapshot(sys.argv[1])])", str(snap), str(calls))
    assert again == first and _calls(calls) == 10  # read from the snapshot: the map did not run
    _run("print([int(a.sum()) for a, _ in ds.take(2).snapshot(sys.argv[1])])", str(snap), str(calls))
    assert _calls(calls) > 10  # another pipeline: its own file
    assert len([f for f in os.listdir(snap) if f.endswith(".snapshot")]) == 2


def test_a_snapshot_tells_python_functions_apart_by_their_code_and_captures(tmp_path: Path) -> None:
    """Two lambdas (both ``<lambda>``), or one function capturing another value, are other
    pipelines: each computes its own elements, as tf.data's graph fingerprint tells them apart."""

    def snap(ds: sk.Dataset) -> list[int]:
        return [int(v) for v in ds.snapshot(str(tmp_path))]

    assert snap(sk.Dataset.range(3).map(lambda x: x + 100)) == [100, 101, 102]
    assert snap(sk.Dataset.range(3).map(lambda x: x * 5)) == [0, 5, 10]
    for k in (2, 3):
        assert snap(sk.Dataset.range(3).map(lambda x: x * k)) == [0, k, 2 * k]  # noqa: B023
    offsets = np.array([7, 8])
    assert snap(sk.Dataset.range(2).map(lambda x: x + offsets[x])) == [7, 9]
    offsets = np.array([1, 1])
    assert snap(sk.Dataset.range(2).map(lambda x: x + offsets[x])) == [1, 2]
    assert snap(sk.Dataset.range(6).filter(lambda x: x % 2 == 0)) == [0, 2, 4]
    assert snap(sk.Dataset.range(6).filter(lambda x: x % 3 == 0)) == [0, 3]

    class Scale:  # a bound method: its object's values count too
        def __init__(self, k: int) -> None:
            self.k = k

        def __call__(self, x: Any) -> Any:
            return x * self.k

        def apply(self, x: Any) -> Any:
            return x * self.k

    assert snap(sk.Dataset.range(3).map(Scale(2).apply)) == [0, 2, 4]
    assert snap(sk.Dataset.range(3).map(Scale(3).apply)) == [0, 3, 6]
    assert snap(sk.Dataset.range(3).map(Scale(4))) == [0, 4, 8]
    assert snap(sk.Dataset.range(3).map(Scale(5))) == [0, 5, 10]
    files = [f for f in os.listdir(tmp_path) if f.endswith(".snapshot")]
    assert len(files) == 12
    # the same pipeline again reads its file
    assert snap(sk.Dataset.range(3).map(lambda x: x * 5)) == [0, 5, 10]
    assert len([f for f in os.listdir(tmp_path) if f.endswith(".snapshot")]) == 12


def test_load_checks_a_given_element_spec(tmp_path: Path) -> None:
    tf = pytest.importorskip("tensorflow")
    ds = sk.Dataset.from_tensor_slices({"x": np.arange(4, dtype=np.int32), "y": np.zeros(4, np.float32)})
    ds.save(tmp_path)
    spec = {"x": tf.TensorSpec([], tf.int32), "y": tf.TensorSpec([], tf.float32)}
    assert [int(e["x"]) for e in sk.Dataset.load(tmp_path, element_spec=spec)] == [0, 1, 2, 3]
    with pytest.raises(sk.InvalidArgumentError, match="does not match the saved fields"):
        sk.Dataset.load(tmp_path, element_spec={"x": tf.TensorSpec([], tf.int64), "y": tf.TensorSpec([], tf.float32)})


def test_save_leaves_a_dataset_json_stoker_did_not_write(tmp_path: Path) -> None:
    (tmp_path / "dataset.json").write_text('{"mine": true}')
    with pytest.raises(sk.InvalidArgumentError, match="not a file stoker wrote"):
        sk.Dataset.range(3).save(tmp_path)
    assert (tmp_path / "dataset.json").read_text() == '{"mine": true}'
