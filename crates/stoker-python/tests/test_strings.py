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


def test_a_string_a_function_returns_keeps_its_trailing_nul_bytes() -> None:
    """A string ending in NUL bytes (a serialized record or tensor may) is handed on whole,
    as tf.data does: NumPy's fixed-width strings would drop them."""
    tf = pytest.importorskip("tensorflow")
    pipelines = [
        lambda m: m.Dataset.from_tensor_slices([b"ab\x00", b"\x00"]).map(lambda x: x),
        lambda m: m.Dataset.from_tensor_slices([b"ab"]).map(lambda x: tf.strings.join([x, "\x00"])),
        lambda m: m.Dataset.from_tensor_slices([b"Hab\x00\x00"])
        .map(lambda r: tf.strings.substr(r, 1, 99))
        .map(lambda s: tf.io.decode_raw(s, tf.uint8)),
        lambda m: m.Dataset.from_tensor_slices(np.array([[1, 0]], np.int32))
        .map(tf.io.serialize_tensor)
        .map(lambda s: tf.io.parse_tensor(s, tf.int32)),
        lambda m: m.Dataset.from_tensor_slices([b"a", b"a\x00"]).unique(),
        lambda m: m.Dataset.from_tensor_slices(["a b", "c"])
        .map(tf.strings.split)
        .padded_batch(2, padding_values="\x00"),
        lambda m: m.Dataset.range(2).map(lambda x: (x, "z\x00")),
    ]

    def whole(v: Any) -> Any:  # bytes as they are (np.asarray would drop their NULs too)
        return v if isinstance(v, bytes) else np.asarray(v).tolist()

    for make in pipelines:
        ours = [tf.nest.map_structure(whole, e) for e in make(sk.data)]
        theirs = [tf.nest.map_structure(whole, e) for e in make(tf.data).as_numpy_iterator()]
        assert ours == theirs


def test_a_string_joins_a_str_as_a_tf_string_does() -> None:
    tf = pytest.importorskip("tensorflow")
    words = ["a", "bé"]
    ours = list(sk.data.Dataset.from_tensor_slices(words).map(lambda x: "pre_" + x + "_s"))
    theirs = list(tf.data.Dataset.from_tensor_slices(words).map(lambda x: "pre_" + x + "_s").as_numpy_iterator())
    assert ours == theirs == [b"pre_a_s", "pre_bé_s".encode()]
    assert list(sk.Dataset.from_tensor_slices(words).map(lambda x: x + b"!" + "_s")) == [b"a!_s", "bé!_s".encode()]
    # with an array of strings, elementwise; with a tensor, the tensor's own join
    (joined,) = list(sk.Dataset.from_tensor_slices(["a"]).map(lambda x: x + np.array([b"x", b"yy"])))
    assert joined.tolist() == [b"ax", b"ayy"]
    seen = []
    list(sk.Dataset.from_tensor_slices(["a"]).map(lambda x: seen.append((x + tf.constant("c")).numpy()) or x))
    assert seen == [b"ac"]
