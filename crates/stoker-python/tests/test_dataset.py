"""Operator semantics through the Python API (tf.data names and behaviour)."""

from __future__ import annotations

import numpy as np
import pytest
import stoker as sk

from .conftest import write_examples


def ints(ds):
    return [int(v) for v in ds]


def test_structures_dict_tuple_single():
    x = np.arange(12, dtype=np.int32).reshape(6, 2)
    y = np.arange(6, dtype=np.int64)
    d = list(sk.Dataset.from_tensor_slices({"x": x, "y": y}))
    assert len(d) == 6 and set(d[0]) == {"x", "y"}
    np.testing.assert_array_equal(d[3]["x"], x[3])
    t = list(sk.Dataset.from_tensor_slices((x, y)).batch(4))
    assert isinstance(t[0], tuple) and t[0][0].shape == (4, 2) and t[1][0].shape == (2, 2)
    single = list(sk.Dataset.from_tensor_slices(y))
    assert [int(v) for v in single] == list(range(6))
    nested = next(iter(sk.Dataset.from_tensor_slices({"a": (x, y)})))
    assert isinstance(nested["a"], tuple) and int(nested["a"][1]) == 0
    strings = list(sk.Dataset.from_tensor_slices(np.array([b"ab", b"c"], dtype=object)))
    assert strings == [b"ab", b"c"]
    spec = sk.Dataset.from_tensor_slices({"x": x, "y": y}).batch(4, drop_remainder=True).element_spec
    assert spec["x"] == sk.TensorSpec((4, 2), sk.int32, name="x") and spec["y"].shape == (4,)


def test_dtypes_round_trip():
    ints = [np.uint8, np.uint16, np.int8, np.int16, np.int32, np.int64]
    for dt in [np.bool_, *ints, np.float16, np.float32, np.float64]:
        a = (np.arange(6) % 2).astype(dt).reshape(3, 2)
        got = np.stack(list(sk.Dataset.from_tensor_slices(a)))
        assert got.dtype == a.dtype and got.tobytes() == a.tobytes(), dt
    with pytest.raises(TypeError, match="uint32 is not supported"):
        sk.Dataset.from_tensor_slices(np.zeros(3, np.uint32))


def test_map_python_function_and_parallel_order():
    ds = sk.Dataset.from_tensor_slices((np.arange(100), np.arange(100) * 2))
    out = list(ds.map(lambda a, b: {"sum": a + b}, num_parallel_calls=4))
    assert [int(o["sum"]) for o in out] == [3 * i for i in range(100)]
    unordered = list(ds.map(lambda a, b: a * b, num_parallel_calls=4, deterministic=False))
    assert sorted(int(v) for v in unordered) == sorted(2 * i * i for i in range(100))
    never_run = ds.map(lambda a, b: a).stats()
    assert all(s["elements"] == 0 for s in never_run), "nothing is counted before iterating"


def test_python_map_time_is_counted_apart():
    ds = sk.Dataset.range(50).map(lambda v: v + 1)
    assert ints(ds) == list(range(1, 51))
    by_kind = {s["kind"]: s for s in ds.stats()}
    assert by_kind["map"]["python_calls"] == 50
    assert by_kind["map"]["python_s"] > 0


def test_filter_take_skip_repeat_shard_enumerate():
    ds = sk.Dataset.range(10)
    assert ints(ds.filter(lambda v: v % 3 == 0)) == [0, 3, 6, 9]
    assert ints(ds.take(3)) == [0, 1, 2]
    assert ints(ds.take(-1)) == list(range(10))
    assert ints(ds.skip(8)) == [8, 9]
    assert ints(ds.skip(-1)) == []
    assert ints(ds.take(2).repeat(3)) == [0, 1] * 3
    assert ints(ds.repeat().take(12)) == list(range(10)) + [0, 1]
    assert ints(ds.shard(4, 1)) == [1, 5, 9]
    assert [(int(i), int(v)) for i, v in ds.skip(7).enumerate(start=5)] == [(5, 7), (6, 8), (7, 9)]


def test_zip():
    a = sk.Dataset.range(5)
    b = sk.Dataset.from_tensor_slices({"x": np.arange(3) * 10})
    got = list(sk.Dataset.zip((a, b)))
    assert [(int(p), int(q["x"])) for p, q in got] == [(0, 0), (1, 10), (2, 20)]
    got = list(sk.Dataset.zip({"left": a, "right": b}))
    assert int(got[2]["right"]["x"]) == 20 and int(got[2]["left"]) == 2
    # nested tuples and dicts of datasets: nested elements, as in tf.data
    c = sk.Dataset.range(20, 30)
    got = list(sk.Dataset.zip((a, (b, c))))
    assert [(int(p), int(q["x"]), int(r)) for p, (q, r) in got] == [(0, 0, 20), (1, 10, 21), (2, 20, 22)]
    got = list(sk.Dataset.zip({"left": a, "right": {"b": b, "c": c}}))
    assert int(got[1]["right"]["c"]) == 21 and int(got[1]["right"]["b"]["x"]) == 10
    with pytest.raises(sk.InvalidArgumentError, match="zip: takes datasets"):
        sk.Dataset.zip((a, [b, c]))


def test_shuffle_seed_reproducible_and_reshuffled():
    def epochs(seed, reshuffle=True):
        ds = sk.Dataset.range(100).shuffle(30, seed=seed, reshuffle_each_iteration=reshuffle)
        return ints(ds), ints(ds)

    a1, a2 = epochs(7)
    assert sorted(a1) == list(range(100)) and a1 != list(range(100))
    assert a1 != a2
    assert epochs(7) == (a1, a2)
    assert epochs(8)[0] != a1
    f1, f2 = epochs(7, reshuffle=False)
    assert f1 == f2
    unseeded = sk.Dataset.range(100).shuffle(100)
    assert ints(unseeded) != ints(unseeded)


def test_list_files_order(tmp_path):
    for name in ["b.txt", "a.txt", "c.txt"]:
        (tmp_path / name).write_text("x")
    sorted_names = [p.decode() for p in sk.Dataset.list_files(str(tmp_path / "*.txt"), shuffle=False)]
    assert [n.rsplit("/", 1)[1] for n in sorted_names] == ["a.txt", "b.txt", "c.txt"]
    s1 = list(sk.Dataset.list_files(str(tmp_path / "*.txt"), seed=3))
    assert sorted(s1) == sorted(p.encode() for p in sorted_names)
    assert list(sk.Dataset.list_files(str(tmp_path / "*.txt"), seed=3)) == s1
    with pytest.raises(FileNotFoundError, match="no files match"):
        sk.Dataset.list_files(str(tmp_path / "*.nope"))


def test_tfrecord_files_and_interleave(tmp_path):
    files = [write_examples(tmp_path / f"f{i}.tfrecord", [10 * i + j for j in range(i + 1)]) for i in range(3)]
    parse = sk.ops.parse_example({"s": sk.FixedLenFeature([], sk.int64)}, key="record")
    seq = [int(e["s"]) for e in sk.TFRecordDataset(files).map(parse)]
    assert seq == [0, 10, 11, 20, 21, 22]
    par = [int(e["s"]) for e in sk.TFRecordDataset(files, num_parallel_reads=3).map(parse)]
    assert par == [0, 10, 20, 11, 21, 22]
    names = sk.Dataset.list_files(str(tmp_path / "*.tfrecord"), shuffle=False)
    inter = names.interleave(sk.TFRecordDataset, cycle_length=2, num_parallel_calls=2).map(parse)
    assert [int(e["s"]) for e in inter] == [0, 10, 11, 20, 21, 22]
    assert "interleave" in inter.spec()["pipeline"][1]["step"]
    glob_ds = sk.TFRecordDataset(str(tmp_path / "f*.tfrecord")).map(parse)
    assert sorted(int(e["s"]) for e in glob_ds) == [0, 10, 11, 20, 21, 22]


def test_compressed_tfrecords(tmp_path):
    for c in ["GZIP", "ZLIB"]:
        f = write_examples(tmp_path / f"x.{c}", list(range(50)), c)
        parse = sk.ops.parse_example({"s": sk.FixedLenFeature([], sk.int64)})
        assert [int(e["s"]) for e in sk.TFRecordDataset(f, compression_type=c).map(parse)] == list(range(50))


def test_cache_in_memory_is_zero_copy_and_read_only():
    x = np.arange(40, dtype=np.float32).reshape(10, 4)
    ds = sk.Dataset.from_tensor_slices(x).map(sk.ops.rescale("value", divisor=2.0)).batch(4).cache()
    first = list(ds)
    assert all(b.flags.writeable is False for b in first), "cached buffers are shared: read-only"
    second = list(ds)
    for a, b in zip(first, second):
        assert a.__array_interface__["data"][0] == b.__array_interface__["data"][0], "same buffer, no copy"
    with pytest.raises(ValueError):
        second[0][0, 0] = 1.0
    np.testing.assert_array_equal(np.concatenate(second), x / 2)
    # Without a cache, a batch is exclusively the caller's: writable.
    fresh = next(iter(sk.Dataset.from_tensor_slices(x).batch(4)))
    assert fresh.flags.writeable
    fresh[0, 0] = 99.0


def test_cache_on_disk(tmp_path):
    path = tmp_path / "cache"
    calls = []

    def spy(v):
        calls.append(1)
        return v * 2

    ds = sk.Dataset.range(10).map(spy).batch(3).cache(str(path))
    a = [list(map(int, b)) for b in ds]
    assert path.exists() and len(calls) == 10
    b = [list(map(int, b)) for b in ds]
    assert a == b and len(calls) == 10, "the second pass reads the file"
    again = sk.Dataset.range(10).map(spy).batch(3).cache(str(path))
    assert [list(map(int, b)) for b in again] == a and len(calls) == 10


def test_save_and_load_spec(tmp_path, chess_files):
    from stoker import workloads

    native = (
        sk.TFRecordDataset(chess_files, num_parallel_reads=2)
        .shuffle(500, seed=1)
        .batch(64, drop_remainder=True)
        .map(workloads.chess_ops(), num_parallel_calls=sk.AUTOTUNE)
        .prefetch(2)
    )
    want = [b["board"].sum() for b in native]
    for ext in ["json", "toml"]:
        path = tmp_path / f"w1.{ext}"
        native.save_spec(path)
        loaded = sk.Dataset.load_spec(path)
        got = [b["board"].sum() for b in loaded]
        assert got == want, ext
    with pytest.raises(sk.SpecError, match="Python function"):
        native.map(workloads.chess_score).save_spec(tmp_path / "x.json")
    # Small in-memory arrays go into the spec inline, exactly (int64 past 2**53, float32,
    # text); large ones do not.
    cols = {"i": np.array([2**62 + 1, -3, 7], dtype=np.int64), "f": np.array([0.1, -2.5, 3e-38], dtype=np.float32),
            "s": np.array(["a/b.jpg", "ü", ""], dtype=object), "m": np.arange(6, dtype=np.uint8).reshape(3, 2)}
    small = sk.Dataset.from_tensor_slices(cols)
    small.save_spec(tmp_path / "small.json")
    back = list(sk.Dataset.load_spec(tmp_path / "small.json"))
    for row, want_row in zip(back, small):
        for k in cols:
            assert np.asarray(row[k]).tobytes() == np.asarray(want_row[k]).tobytes(), k
    assert len(back) == 3
    with pytest.raises(sk.SpecError, match="from_npz"):
        sk.Dataset.from_tensor_slices(np.zeros(8_100_000)).save_spec(tmp_path / "y.json")


def test_from_npz_and_npy(tmp_path):
    x = np.arange(24, dtype=np.int16).reshape(6, 4)
    np.savez(tmp_path / "d.npz", x=x, y=np.arange(6.0))
    np.save(tmp_path / "a.npy", x)
    rows = list(sk.Dataset.from_npz(tmp_path / "d.npz"))
    assert len(rows) == 6 and rows[2]["x"].dtype == np.int16
    np.testing.assert_array_equal(rows[2]["x"], x[2])
    np.testing.assert_array_equal(np.stack(list(sk.Dataset.from_npy(tmp_path / "a.npy"))), x)


def test_explain_shows_the_planner_moving_maps_after_batch(chess_files):
    ops = [
        sk.ops.parse_example({"s": sk.FixedLenFeature([], sk.int64), "d": sk.FixedLenFeature([], sk.string)}),
        sk.ops.decode_raw("d", sk.uint8),
    ]
    slow_form = sk.TFRecordDataset(chess_files).map(ops).batch(32)
    text = slow_form.explain()
    assert text.splitlines()[0].startswith("map[parse_example, decode_raw]"), text
    assert "batch(32)" in text.splitlines()[1]
    fast = sk.TFRecordDataset(chess_files).batch(32).map(ops)
    for a, b in zip(slow_form, fast):
        np.testing.assert_array_equal(a["d"], b["d"])
        np.testing.assert_array_equal(a["s"], b["s"])
    # Under the skip policy the move would change batch sizes: it is not done.
    skipping = sk.TFRecordDataset(chess_files).map(ops).batch(32).ignore_errors()
    lines = skipping.explain().splitlines()
    assert lines[0].startswith("options(on_bad_record=skip)"), lines
    assert lines[1].strip().startswith("batch(32)"), lines


def test_schema_errors_at_build_time():
    with pytest.raises(sk.SchemaError, match="no field 'nope'") as e:
        sk.Dataset.range(3).map(sk.ops.cast("nope", sk.float32))
    assert e.value.step == "cast"
    with pytest.raises(sk.SchemaError, match="expected uint8"):
        sk.Dataset.range(3).map(sk.ops.unpack_bits("value"))
    with pytest.raises(sk.InvalidArgumentError, match="batch_size"):
        sk.Dataset.range(3).batch(0)
    with pytest.raises(sk.SchemaError, match="different first dimensions"):
        sk.Dataset.from_tensor_slices((np.zeros(3), np.zeros(4)))


def test_padded_batch_matches_tf(golden):
    g = np.load(golden / "padded_batch_expected.npz")
    n = len([k for k in g.files if k.startswith("in/seq/")])
    seqs = [g[f"in/seq/{i}"] for i in range(n)]
    imgs = [g[f"in/img/{i}"] for i in range(n)]

    def ds():  # elements of varying shapes, made by a Python function
        return sk.Dataset.range(n).map(lambda i: {"seq": seqs[int(i)], "img": imgs[int(i)]})

    largest = list(ds().padded_batch(2))
    assert len(largest) == 3
    for k, b in enumerate(largest):
        for f in ("seq", "img"):
            want = g[f"largest/{k}/{f}"]
            assert b[f].dtype == want.dtype and b[f].shape == want.shape, (k, f, b[f].shape, want.shape)
            np.testing.assert_array_equal(b[f], want)
    fixed = ds().padded_batch(
        2, padded_shapes={"seq": [6], "img": [None, 6, 2]}, padding_values={"seq": -1, "img": 7}, drop_remainder=True
    )
    got = list(fixed)
    assert len(got) == 2
    for k, b in enumerate(got):
        for f in ("seq", "img"):
            np.testing.assert_array_equal(b[f], g[f"fixed/{k}/{f}"])
    with pytest.raises(sk.InvalidArgumentError, match="larger than the padded size 2"):
        list(ds().padded_batch(2, padded_shapes={"seq": [2], "img": [None, None, 2]}))


def test_padding_values_are_exact_and_a_value_the_dtype_does_not_hold_is_an_error():
    """An int64 padding value beyond 2^53 is written exactly; one the field's dtype does not
    hold (a fraction for an integer, 300 or -1 for uint8) is an error, as in tf.data, not a
    silent conversion; None in a structure is the default padding."""
    def seqs(dtype):
        return sk.Dataset.range(1, 4).map(lambda x: np.full(int(x), x, dtype))

    big = 2**53 + 1
    (first, _) = list(seqs(np.int64).padded_batch(2, padding_values=big))
    assert first.tolist() == [[1, big], [2, 2]]
    (first, _) = list(seqs(np.int64).padded_batch(2, padding_values=-(2**63) + 1))
    assert first[0, 1] == -(2**63) + 1
    for dtype, value in ((np.int32, 1.5), (np.uint8, 300), (np.uint8, -1), (np.bool_, 2), (np.float32, 1e300)):
        with pytest.raises(sk.InvalidArgumentError, match=f"padding value .* is not a {np.dtype(dtype).name} value"):
            list(seqs(dtype).padded_batch(3, padding_values=value))
    pairs = sk.Dataset.range(1, 4).map(lambda x: (np.full(int(x), x), np.full(int(x), x, np.float32)))
    a, b = next(iter(pairs.padded_batch(3, padding_values=(None, -1.0))))
    assert a.tolist()[0] == [1, 0, 0] and b.tolist()[0] == [1.0, -1.0, -1.0]
    # one value for every field: checked only where a field is padded (a scalar uint8 is not)
    mixed = sk.Dataset.range(1, 4).map(lambda x: (np.full(int(x), x, np.float32), np.uint8(x), np.bool_(x > 1)))
    floats, small, flags = next(iter(mixed.padded_batch(3, padding_values=-1)))
    assert floats.tolist()[0] == [1.0, -1.0, -1.0] and small.tolist() == [1, 2, 3] and flags.dtype == np.bool_
    for value in (float("nan"), float("inf"), -np.inf):
        (padded, _) = list(seqs(np.float32).padded_batch(2, padding_values=value))
        assert np.array_equal(padded[0, 1:], np.array([value], np.float32), equal_nan=True)


def test_padded_batch_spec_round_trip(tmp_path, chess_files):
    # A native pipeline (so it can be saved) padded to a fixed length with a fill value.
    parse = sk.ops.parse_example({"d": sk.FixedLenFeature([], sk.string)})
    ds = (
        sk.TFRecordDataset(chess_files)
        .map([parse, sk.ops.decode_raw("d", sk.uint8), sk.ops.slice("d", 0, 194)])
        .take(5)
        .padded_batch(2, padded_shapes={"d": [200]}, padding_values={"d": 255})
    )
    want = [b["d"] for b in ds]
    assert [w.shape for w in want] == [(2, 200), (2, 200), (1, 200)]
    assert (want[0][:, 194:] == 255).all()
    for ext in ["json", "toml"]:
        path = tmp_path / f"p.{ext}"
        ds.save_spec(path)
        assert "padded_batch" in path.read_text()
        got = list(sk.Dataset.load_spec(path))
        assert len(got) == len(want)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)  # a loaded spec's one field comes back bare


def test_strings_are_padded_as_tf_data_pads_them():
    """String fields are padded like numbers: with b"" (or the string given), to the batch's
    longest or to padded_shapes (a fixed shape was ignored: silently narrower batches); the
    element_spec after the batch has tf.data's dimensions (the batch size where every batch
    has it, the fixed padded sizes)."""
    tf = pytest.importorskip("tensorflow")

    def pipelines(m):
        words = m.Dataset.range(4).map(lambda x: tf.strings.split(tf.strings.reduce_join(tf.fill([x + 1], "ab "))))
        return [
            words.padded_batch(3),
            words.padded_batch(2, padded_shapes=[5], padding_values="-", drop_remainder=True),
            m.Dataset.from_tensor_slices([["a", "b"], ["c", "d"]])
            .map(lambda x: x[:1])
            .padded_batch(2, padded_shapes=[2]),
            m.Dataset.range(3)
            .map(lambda x: (tf.fill([x, 2 - x], "s"), tf.fill([x], x)))
            .padded_batch(3, padded_shapes=([3, 2], [4]), padding_values=("z", tf.constant(-1, tf.int64))),
            # one scalar tensor for every field
            m.Dataset.range(3)
            .map(lambda x: (tf.fill([x], x), tf.fill([x], x * 2)))
            .padded_batch(2, padding_values=tf.constant(-1, tf.int64)),
        ]

    for ours, theirs in zip(pipelines(sk.data), pipelines(tf.data)):
        got = [tf.nest.map_structure(lambda v: np.asarray(v).tolist(), e) for e in ours]
        want = [tf.nest.map_structure(lambda v: np.asarray(v).tolist(), e) for e in theirs.as_numpy_iterator()]
        assert got == want
        spec_ours = [tuple(s.shape) for s in tf.nest.flatten(ours.element_spec)]
        spec_theirs = [tuple(s.shape) for s in tf.nest.flatten(theirs.element_spec)]
        assert spec_ours == spec_theirs
    with pytest.raises(sk.InvalidArgumentError, match="padding value 0 is not a string value"):
        list(sk.Dataset.from_tensor_slices([["a"], ["b"]]).map(lambda x: x[:1]).padded_batch(2, [2], 0))
    # a padding value for no field (known only once the function has run) is an error
    with pytest.raises(sk.InvalidArgumentError, match="no field 'b' to pad"):
        list(sk.Dataset.range(3).map(lambda x: {"a": np.full(int(x), x)}).padded_batch(2, padding_values={"b": 1}))
