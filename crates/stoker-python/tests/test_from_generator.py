"""Dataset.from_generator against tf.data's (tests/golden/from_generator_expected.npz, made by
make_from_generator_golden.py, whose generators these are)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import stoker as sk

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "golden"))
from make_from_generator_golden import pairs, records  # noqa: E402


class Spec:
    """A TensorSpec as stoker reads one: anything with .dtype and .shape (tf.TensorSpec too)."""

    def __init__(self, shape: tuple, dtype: str) -> None:
        self.shape, self.dtype = shape, dtype


SIG = {"i": Spec((), "int64"), "v": Spec((None,), "float32"), "s": Spec((), "string")}


def test_elements_equal_tf(golden):
    want = np.load(golden / "from_generator_expected.npz")
    ds = sk.Dataset.from_generator(records, args=(6,), output_signature=SIG)
    got = list(ds)
    assert len(got) == 6
    for k, e in enumerate(got):
        for name in ("i", "v"):
            w = want[f"dict/{k}/{name}"]
            assert e[name].dtype == w.dtype and e[name].shape == w.shape
            np.testing.assert_array_equal(e[name], w)
        assert e["s"] == want[f"dict/{k}/s"].tobytes()
    spec = ds.element_spec
    assert (spec["i"].dtype, spec["i"].shape, spec["v"].shape, spec["s"].dtype) == ("int64", (), (None,), "string")
    tuple_sig = (Spec((), "int32"), Spec((2,), "float32"))
    for ds in (
        sk.Dataset.from_generator(pairs, output_signature=tuple_sig),
        sk.Dataset.from_generator(pairs, output_types=("int32", "float32"), output_shapes=((), (2,))),
    ):
        got = list(ds)
        assert len(got) == 5
        for k, (a, b) in enumerate(got):
            for part, v in (("0", a), ("1", b)):
                w = want[f"types/{k}/{part}"]
                assert v.dtype == w.dtype
                np.testing.assert_array_equal(v, w)
                np.testing.assert_array_equal(v, want[f"tuple/{k}/{part}"])


def test_each_iteration_starts_the_generator_and_a_restore_skips():
    calls = []

    def counting():
        calls.append(1)
        yield from records(5)

    ds = sk.Dataset.from_generator(counting, output_signature=SIG)
    assert [int(e["i"]) for e in ds] == [int(e["i"]) for e in ds] == [-3, 4, 11, 18, 25]
    assert len(calls) == 2
    it = ds.iterator()
    [next(it) for _ in range(3)]
    again = ds.iterator(state=it.state())
    assert [int(e["i"]) for e in again] == [18, 25]
    # A generator that yields fewer elements on the restore is an error saying so.
    def counting():  # noqa: F811 - the same name: the state's pipeline matches
        yield from records(2)

    short = sk.Dataset.from_generator(counting, output_signature=SIG)
    with pytest.raises(sk.InvalidArgumentError, match="same elements each time"):
        short.iterator(state=it.state())


def test_bad_elements_and_arguments_are_named():
    def wrong_shape():
        yield {"i": 1, "v": [1.0], "s": "a"}
        yield {"i": [1, 2], "v": [1.0], "s": "a"}

    with pytest.raises(sk.InvalidArgumentError, match=r"element 1: component 'i' has shape \(2,\) where shape \(\)"):
        list(sk.Dataset.from_generator(wrong_shape, output_signature=SIG))

    def wrong_structure():
        yield {"i": 1, "v": [1.0]}

    with pytest.raises(TypeError, match="element 0: did not match the expected structure"):
        list(sk.Dataset.from_generator(wrong_structure, output_signature=SIG))

    def not_a_number():
        yield {"i": "x", "v": [1.0], "s": "a"}

    with pytest.raises(TypeError, match="'i' could not be converted to int64"):
        list(sk.Dataset.from_generator(not_a_number, output_signature=SIG))

    for number in (3, np.int32(7)):  # a number for a string: an error, as TensorFlow's (not bytes(n))

        def number_for_text(n=number):
            yield {"i": 1, "v": [1.0], "s": n}

        with pytest.raises(TypeError, match="'s' could not be converted to string: a string component takes str"):
            list(sk.Dataset.from_generator(number_for_text, output_signature=SIG))

    def raises():
        yield {"i": 1, "v": [1.0], "s": "a"}
        raise KeyError("from the generator")

    ds = sk.Dataset.from_generator(raises, output_signature=SIG)
    with pytest.raises(KeyError, match="from the generator"):
        list(ds)
    with pytest.raises(sk.InvalidArgumentError, match="callable"):
        sk.Dataset.from_generator(3, output_signature=SIG)  # type: ignore[arg-type]
    with pytest.raises(sk.InvalidArgumentError, match="output_signature"):
        sk.Dataset.from_generator(records)
    with pytest.raises(sk.InvalidArgumentError, match="TensorSpec"):
        sk.Dataset.from_generator(records, output_signature={"i": 3})
    with pytest.raises(sk.InvalidArgumentError, match="output_shapes"):
        sk.Dataset.from_generator(pairs, output_types=("int32", "float32"))
    with pytest.raises(sk.SpecError, match="from_generator"):
        sk.Dataset.from_generator(records, output_signature=SIG).save_spec("/tmp/never.json")


def test_with_tf_tensor_specs_and_in_a_pipeline():
    tf = pytest.importorskip("tensorflow")
    sig = {"i": tf.TensorSpec((), tf.int64), "v": tf.TensorSpec((None,), tf.float32), "s": tf.TensorSpec((), tf.string)}
    ds = sk.Dataset.from_generator(records, args=(9,), output_signature=sig).padded_batch(4)
    batches = list(ds)
    assert [len(b["i"]) for b in batches] == [4, 4, 1]
    assert batches[0]["v"].shape == (4, 2)
