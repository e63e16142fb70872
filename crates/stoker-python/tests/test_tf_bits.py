"""Bit unpacking in TensorFlow functions (W1's chess boards as its users write them): the
integer arithmetic, reshapes, slices, gathers, transposes and signs that pick bits from
``decode_raw``'s bytes become one native ``bit_planes`` each; results equal tf.data's bit for
bit; what no ``bit_planes`` expresses still runs, in TensorFlow; a record of another length
fails as in TensorFlow."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import stoker as sk

N, D = 40, 194
CHANNELS = [0, 4, 8, 12, 16, 20, 1, 5, 9, 13, 17, 21, 2, 6, 10, 14, 18, 22, 3, 7, 11, 15, 19, 23]
SIGNS = [1] * 6 + [-1] * 6 + [1] * 6 + [-1] * 6


def _tf() -> Any:
    return pytest.importorskip("tensorflow")


def _write(path: Path, lengths: list[int]) -> str:
    tf = _tf()
    rng = np.random.default_rng(7)
    with tf.io.TFRecordWriter(str(path)) as w:
        for n in lengths:
            f = {
                "d": tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[rng.integers(0, 256, n, np.uint8).tobytes()])
                ),
                "s": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(rng.integers(-3000, 3000))])),
            }
            w.write(tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString())
    return str(path)


@pytest.fixture(scope="module")
def chess(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _write(tmp_path_factory.mktemp("w1") / "chess.tfrecord", [D] * N)


def _spec(tf: Any) -> dict:
    return {"d": tf.io.FixedLenFeature([], tf.string), "s": tf.io.FixedLenFeature([], tf.int64)}


def _score(tf: Any, bits_mate: Any, s: Any) -> Any:
    is_mate = tf.cast(bits_mate, tf.float32)
    sf = tf.cast(s, tf.float32)
    one, zero = tf.constant(1.0), tf.constant(0.0)
    a, k, b = tf.constant(0.75), tf.constant(600.0), tf.constant(30.0)
    slope = (one - a) / (b - one)
    return (one - is_mate) * a * tf.math.tanh(sf / k) + is_mate * tf.math.sign(sf) * (
        a + slope * tf.math.maximum(zero, b - tf.math.abs(sf))
    )


def _functions(tf: Any) -> dict[str, Any]:
    """The map functions, closing over ``tf`` as a module's ``import tensorflow as tf`` does."""

    def literal(serialized: Any) -> dict:
        """W1 as workloads.md words it: ``(x // 2**k) % 2`` in int32, a gather, int32 signs."""
        p = tf.io.parse_example(serialized, _spec(tf))
        x = tf.io.decode_raw(p["d"], tf.uint8)
        pw = tf.constant([128, 64, 32, 16, 8, 4, 2, 1], dtype=tf.int32)
        bits = tf.reshape((tf.cast(x, tf.int32)[:, :, None] // pw) % 2, (-1, D * 8))
        board = tf.reshape(bits[:, :1536], (-1, 8, 8, 24))
        board = tf.cast(tf.gather(board, CHANNELS, axis=-1) * tf.constant(SIGNS, tf.int32), tf.float32)
        return {
            "board": board,
            "flags": tf.cast(bits[:, 1536:1546], tf.float32),
            "score": _score(tf, bits[:, 1546], p["s"]),
            "d": x,
        }

    def shifts(serialized: Any) -> dict:
        """W1 in its fast TensorFlow form: ``>>`` and ``&`` on uint8, a bitcast to int8, the
        channel order as a transpose, the signs broadcast per group."""
        p = tf.io.parse_example(serialized, _spec(tf))
        x = tf.io.decode_raw(p["d"], tf.uint8)
        bits = tf.bitwise.bitwise_and(
            tf.bitwise.right_shift(x[..., None], tf.constant([7, 6, 5, 4, 3, 2, 1, 0], tf.uint8)), 1
        )
        bits = tf.reshape(bits, [-1, D * 8])
        board = tf.bitcast(tf.reshape(bits[..., :1536], [-1, 8, 8, 6, 4]), tf.int8)
        board = tf.transpose(board, [0, 1, 2, 4, 3]) * tf.constant([[1], [-1], [1], [-1]], tf.int8)
        return {
            "board": tf.cast(tf.reshape(board, [-1, 8, 8, 24]), tf.float32),
            "flags": tf.cast(bits[..., 1536:1546], tf.float32),
            "score": _score(tf, bits[..., 1546], p["s"]),
        }

    def single(serialized: Any) -> dict:
        """Per element, before ``batch``: parse_single_example, the bits of one row."""
        p = tf.io.parse_single_example(serialized, _spec(tf))
        x = tf.cast(tf.io.decode_raw(p["d"], tf.uint8), tf.int64)
        bits = tf.reshape(
            tf.math.floormod(tf.math.floordiv(tf.expand_dims(x, -1), [128, 64, 32, 16, 8, 4, 2, 1]), 2), [D * 8]
        )
        board = -tf.reshape(bits[:1536], [8, 8, 24])
        return {"board": tf.cast(board, tf.int32), "flags": bits[1536:1546], "score": _score(tf, bits[1546], p["s"])}

    return {"literal": literal, "shifts": shifts, "single": single}


def _run(files: str, fn: Any, batch_first: bool = True) -> tuple[sk.Dataset, list, list]:
    tf = _tf()
    ds, ref = sk.data.TFRecordDataset([files]), tf.data.TFRecordDataset([files])
    if batch_first:
        ds, ref = ds.batch(16), ref.batch(16)
        ds, ref = ds.map(fn), ref.map(fn)
    else:
        ds, ref = ds.map(fn).batch(16), ref.map(fn).batch(16)
    return ds, list(ds), list(ref.as_numpy_iterator())


def _bitwise_equal(ours: list, theirs: list) -> None:
    assert len(ours) == len(theirs) == -(-N // 16)
    for a, b in zip(ours, theirs):
        assert sorted(a) == sorted(b)
        for k in b:
            x, y = np.asarray(a[k]), b[k]
            assert x.dtype == y.dtype and x.shape == y.shape, (k, x.dtype, y.dtype, x.shape, y.shape)
            # bit for bit: +0.0 and -0.0 differ
            assert x.tobytes() == y.tobytes(), k


def _native(ds: sk.Dataset) -> str:
    text = ds.explain()
    assert "TensorFlow graph" not in text.split("TensorFlow functions:")[0], text
    return text


@pytest.mark.parametrize("form", ["literal", "shifts"])
def test_w1_as_written_is_bit_planes_and_equals_tf_data(chess: str, form: str) -> None:
    ds, ours, theirs = _run(chess, _functions(_tf())[form])
    _bitwise_equal(ours, theirs)
    text = _native(ds)
    # board, flags and the mate bit: one bit_planes each, straight from the bytes
    assert text.split("\n")[0].count("bit_planes") == 3, text
    assert "→ bit_planes" in text


def test_bits_per_element_before_batch(chess: str) -> None:
    ds, ours, theirs = _run(chess, _functions(_tf())["single"], batch_first=False)
    _bitwise_equal(ours, theirs)
    _native(ds)


def test_unpacking_no_bit_planes_expresses_runs_in_tensorflow(chess: str) -> None:
    """Divisions by other than powers of two, and bits picked in no regular rows, are not
    bits: the ops run in TensorFlow, with the same results."""
    tf = _tf()

    def thirds(serialized: Any) -> Any:
        x = tf.io.decode_raw(tf.io.parse_example(serialized, _spec(tf))["d"], tf.uint8)
        return tf.reshape(tf.cast((tf.cast(x, tf.int32)[:, :, None] // [81, 27, 9, 3, 1]) % 3, tf.float32), [-1, D * 5])

    def scattered(serialized: Any) -> Any:
        x = tf.io.decode_raw(tf.io.parse_example(serialized, _spec(tf))["d"], tf.uint8)
        bits = tf.reshape(
            tf.bitwise.bitwise_and(
                tf.bitwise.right_shift(x[..., None], tf.constant([7, 6, 5, 4, 3, 2, 1, 0], tf.uint8)), 1
            ),
            [-1, D * 8],
        )
        return tf.reshape(tf.gather(bits, [5, 1, 900, 3], axis=1), [-1, 2, 2])

    for fn in (thirds, scattered):
        ds, ours, theirs = _run(chess, fn)
        for a, b in zip(ours, theirs):
            assert np.asarray(a).dtype == b.dtype and np.array_equal(a, b)
        notes = ds.explain().split("TensorFlow functions:")[-1]
        assert "the rest runs as its traced graph" in notes, notes
        if fn is thirds:
            assert "powers of two" in notes, notes


def test_a_record_of_another_length_fails_as_in_tensorflow(tmp_path: Path) -> None:
    tf = _tf()
    single = _functions(tf)["single"]
    files = _write(tmp_path / "bad.tfrecord", [D] * 20 + [D + 1] + [D] * 3)
    with pytest.raises(tf.errors.InvalidArgumentError):
        list(tf.data.TFRecordDataset([files]).map(single).as_numpy_iterator())
    ds = sk.data.TFRecordDataset([files]).map(single)
    with pytest.raises(sk.StokerError, match=f"rows of {D + 1} bytes where {D}"):
        list(ds)


def test_index_and_bit_steps_that_differ_from_bits_stay_exact() -> None:
    """Steps that look like bit picking but are not (a slice of the batch, a bitcast to
    float, the low bit of a negated bit, a constant adding axes, a slice of the bytes before a
    reshape) give TensorFlow's values: translated exactly or left to TensorFlow."""
    tf = _tf()
    x = np.random.default_rng(5).integers(0, 256, (6, 10), dtype=np.uint8)
    shifts = tf.constant([7, 6, 5, 4, 3, 2, 1, 0], tf.uint8)

    def bits(v: Any) -> Any:
        return tf.bitwise.bitwise_and(tf.bitwise.right_shift(tf.identity(v)[..., None], shifts), 1)

    cases = [
        lambda v: tf.reshape(bits(v)[:2], [-1, 80]),  # the batch sliced
        lambda v: tf.bitcast(tf.cast(tf.reshape(bits(v), [-1, 80]), tf.int32), tf.float32),
        lambda v: tf.math.floormod(tf.cast(tf.reshape(bits(v), [-1, 80]), tf.int32) * -1, 2),
        lambda v: tf.reshape(
            tf.identity(v)[..., None]
            // tf.reshape(tf.constant([128, 64, 32, 16, 8, 4, 2, 1], tf.uint8), [1, 1, 1, 8])
            % 2,
            [1, -1, 80],
        ),  # noqa: E501
    ]
    for fn in cases:
        ours = list(sk.data.Dataset.from_tensor_slices(x).batch(3).map(fn))
        theirs = list(tf.data.Dataset.from_tensor_slices(x).batch(3).map(fn).as_numpy_iterator())
        for a, b in zip(ours, theirs):
            assert np.asarray(a).dtype == b.dtype and np.asarray(a).shape == b.shape
            assert np.asarray(a).tobytes() == b.tobytes()

    def prefix(s: Any) -> Any:  # the bytes sliced before the unpacking: rows of 10 bytes
        head = tf.io.decode_raw(s, tf.uint8)[:8]
        return tf.reshape(tf.bitwise.bitwise_and(tf.bitwise.right_shift(head[:, None], shifts), 1), [64])

    records = np.array([r.tobytes() for r in x], dtype=object)
    ours = list(sk.data.Dataset.from_tensor_slices(records).map(prefix))
    theirs = list(tf.data.Dataset.from_tensor_slices(records).map(prefix).as_numpy_iterator())
    assert all(np.array_equal(a, b) for a, b in zip(ours, theirs)) and len(ours) == 6
