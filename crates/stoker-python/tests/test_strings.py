"""What a Python function receives for a string field: ``bytes`` (a scalar) or an object array
of ``bytes`` (batched), that also compare equal to ``str`` as TensorFlow's strings do, so that
``label == "yes"`` and ``label == np.array(["yes", "no"])`` answer as in tf.data instead of a
silent ``False``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import stoker as sk

WORDS = np.array([b"yes", b"no", b"maybe", b"yes"], dtype=object)


def test_a_scalar_string_is_bytes_that_equals_its_text() -> None:
    seen: list[Any] = []

    def look(e: Any) -> Any:
        s = e["s"]
        seen.append((isinstance(s, bytes), s == "yes", s == b"yes", s != "yes", s.decode()))
        return {"match": np.asarray(s == np.array(["yes", "no"])), "s": s}

    out = list(sk.Dataset.from_tensor_slices({"s": WORDS}).map(look))
    assert seen[0] == (True, True, True, False, "yes")
    assert seen[1] == (True, False, False, True, "no")
    assert [o["match"].tolist() for o in out] == [[True, False], [False, True], [False, False], [True, False]]
    assert [o["s"] for o in out] == list(WORDS)  # handed back, the strings are plain bytes again
    assert all(type(o["s"]) is bytes for o in out)


def test_a_batch_of_strings_compares_elementwise() -> None:
    ds = sk.Dataset.from_tensor_slices({"s": WORDS}).batch(4)
    (out,) = list(ds.map(lambda e: {"a": e["s"] == "yes", "b": e["s"] == np.array(["yes", "no", "x", "y"])}))
    assert out["a"].tolist() == [True, False, False, True]
    assert out["b"].tolist() == [True, True, False, False]


def test_filter_on_a_string_keeps_what_tf_data_keeps() -> None:
    tf = pytest.importorskip("tensorflow")
    ours = [bytes(x) for x in sk.Dataset.from_tensor_slices(WORDS).filter(lambda s: s == "yes")]
    theirs = list(tf.data.Dataset.from_tensor_slices(list(WORDS)).filter(lambda s: s == "yes").as_numpy_iterator())
    assert ours == theirs == [b"yes", b"yes"]
