"""stoker's output equals what TensorFlow produced for the same input (tests/golden/)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import stoker as sk
from stoker import workloads


@pytest.mark.parametrize("name,compression", [("plain", None), ("gzip", "GZIP"), ("zlib", "ZLIB")])
def test_w1_matches_tf_data(golden, name, compression):
    want = np.load(golden / "w1_expected.npz")
    ds = (
        sk.TFRecordDataset(str(golden / f"w1_chess_{name}.tfrecord"), compression_type=compression)
        .batch(16, drop_remainder=True)
        .map(workloads.chess_ops() + workloads.chess_score_ops(), num_parallel_calls=sk.AUTOTUNE)
    )
    batches = list(ds)
    assert len(batches) == 4  # 70 records, the last 6 dropped
    board = np.concatenate([b["board"] for b in batches])
    flags = np.concatenate([b["flags"] for b in batches])
    score = np.concatenate([b["score"] for b in batches])
    assert board.dtype == np.float32 and board.shape == (64, 8, 8, 24)
    # Bit for bit, including the sign of zero (TF negates in int32: no -0.0).
    assert board.tobytes() == want["board"].tobytes()
    assert flags.tobytes() == want["flags"].tobytes()
    # The native score: TF's float32 arithmetic, its tanh approximation included.
    np.testing.assert_array_max_ulp(score, want["score"], maxulp=2)


def test_w1_parsing_matches_raw_fields(golden):
    want = np.load(golden / "w1_expected.npz")
    ds = (
        sk.TFRecordDataset(str(golden / "w1_chess_plain.tfrecord"))
        .batch(16, drop_remainder=True)
        .map(
            [
                sk.ops.parse_example({"d": sk.FixedLenFeature([], sk.string), "s": sk.FixedLenFeature([], sk.int64)}),
                sk.ops.decode_raw("d", sk.uint8),
            ]
        )
    )
    got = list(ds)
    np.testing.assert_array_equal(np.concatenate([b["d"] for b in got]), want["d_bytes"])
    np.testing.assert_array_equal(np.concatenate([b["s"] for b in got]), want["s"])


def test_w4_cached_epoch_matches_tf_data(golden):
    inp = np.load(golden / "w4_input.npz")
    want = np.load(golden / "w4_expected.npz")
    ds = workloads.mnist_pipeline(inp["x"], inp["y"])
    list(ds)  # epoch 1 fills the cache
    epoch2 = list(ds)
    assert [len(b[1]) for b in epoch2] == list(want["batch_sizes"])
    x = np.concatenate([b[0] for b in epoch2])
    y = np.concatenate([b[1] for b in epoch2])
    assert x.tobytes() == want["x"].tobytes()
    np.testing.assert_array_equal(y, want["y"])
    assert not epoch2[0][0].flags.writeable, "cached arrays are read-only"


def _features(spec):
    out = {}
    for name, f in spec.items():
        if f["kind"] == "fixed":
            out[name] = sk.FixedLenFeature(f["shape"], f["dtype"], default_value=f["default"])
        else:
            out[name] = sk.VarLenFeature(f["dtype"])
    return out


def _as_expected(value, dtype):
    if dtype == "string":
        if isinstance(value, (bytes, str)):
            return bytes.fromhex(value) if isinstance(value, str) else value
        return np.vectorize(lambda h: bytes.fromhex(h), otypes=[object])(np.array(value, dtype=object))
    return np.array(value, dtype=np.int64 if dtype == "int64" else np.float32)


def _check(got, want, dtype, where):
    if dtype == "string":
        if isinstance(got, bytes):
            assert got == want, where
        else:
            assert np.asarray(got).shape == np.asarray(want).shape, where
            assert list(np.asarray(got).ravel()) == list(np.asarray(want).ravel()), where
    else:
        got = np.asarray(got)
        assert got.shape == want.shape, f"{where}: {got.shape} vs {want.shape}"
        assert got.dtype == want.dtype, where
        assert got.tobytes() == want.tobytes(), f"{where}: {got} vs {want}"


def test_parse_single_example_matches_tf(golden):
    doc = json.loads((golden / "features_expected.json").read_text())
    features = _features(doc["spec"])
    got = list(sk.TFRecordDataset(str(golden / "features.tfrecord")).map(sk.ops.parse_example(features)))
    assert len(got) == len(doc["single"])
    for i, (g, w) in enumerate(zip(got, doc["single"])):
        for name, f in doc["spec"].items():
            _check(g[name], _as_expected(w[name], f["dtype"]), f["dtype"], f"example {i} '{name}'")


def test_parse_example_batched_matches_tf(golden):
    doc = json.loads((golden / "features_expected.json").read_text())
    features = _features(doc["spec"])
    # The map comes after the batch: this is the batched parser (tf.io.parse_example).
    ds = sk.TFRecordDataset(str(golden / "features.tfrecord")).batch(6).map(sk.ops.parse_example(features))
    (got,) = list(ds)
    for name, f in doc["spec"].items():
        _check(got[name], _as_expected(doc["batched"][name], f["dtype"]), f["dtype"], f"batched '{name}'")


def test_tf_data_interleave_order(golden):
    # interleave_expected.json: the orders tf.data produced for
    # Dataset.range(4).interleave(lambda i: Dataset.range(10*i, 10*i+i+1), cycle_length, block_length)
    cases = json.loads((golden / "interleave_expected.json").read_text())
    assert len(cases) == 5
    for case in cases:
        for npc in (None, 2):
            ds = sk.Dataset.range(4).interleave(
                lambda i: sk.Dataset.range(10 * int(i), 10 * int(i) + int(i) + 1),
                cycle_length=case["cycle_length"],
                block_length=case["block_length"],
                num_parallel_calls=npc,
            )
            assert [int(v) for v in ds] == case["order"], (case, npc)


def test_concatenate_from_tensors_and_take_skip_edges_match_tf(golden):
    g = np.load(golden / "concatenate_expected.npz")
    ranges = sk.Dataset.range(3).concatenate(sk.Dataset.range(10, 12))
    assert [int(v) for v in ranges] == g["ranges"].tolist()
    assert ranges.cardinality() == int(g["ranges_cardinality"])
    infinite = sk.Dataset.range(3).concatenate(sk.Dataset.range(2).repeat())
    unknown = sk.Dataset.range(3).filter(lambda v: v > 0).concatenate(sk.Dataset.range(2))
    assert infinite.cardinality() == int(g["infinite_cardinality"])
    assert unknown.cardinality() == int(g["unknown_cardinality"])
    # Dicts whose vector lengths differ; the second's keys in another order.
    first = sk.Dataset.from_tensor_slices({"x": g["in/x1"], "s": g["in/s1"].astype(object)})
    second = sk.Dataset.from_tensor_slices({"s": g["in/s2"].astype(object), "x": g["in/x2"]})
    dicts = first.concatenate(second)
    assert [-1 if d is None else d for d in dicts.element_spec["x"].shape] == g["dicts_x_shape"].tolist()
    got = list(dicts)
    assert len(got) == 3
    for k, e in enumerate(got):
        np.testing.assert_array_equal(e["x"], g[f"dicts/{k}/x"])
        assert bytes(e["s"]) == bytes(g[f"dicts/{k}/s"])
    one = list(sk.Dataset.from_tensors({"a": np.array([[1, 2], [3, 4]]), "b": b"x"}))
    assert len(one) == int(g["from_tensors_count"])
    np.testing.assert_array_equal(one[0]["a"], g["from_tensors/a"])
    assert bytes(one[0]["b"]) == bytes(g["from_tensors/b"])
    r = sk.Dataset.range(5)
    edges = {
        "take_-1": r.take(-1),
        "skip_-1": r.skip(-1),
        "take_0": r.take(0),
        "skip_0": r.skip(0),
        "take_10": r.take(10),
        "skip_10": r.skip(10),
        "skip_2_take_2": r.skip(2).take(2),
    }
    for name, ds in edges.items():
        assert [int(v) for v in ds] == g[f"edges/{name}"].tolist(), name
        assert ds.cardinality() == int(g[f"edges/{name}/cardinality"]), name


def test_padded_batch_with_strings_and_every_component_given_matches_tf(golden):
    g = np.load(golden / "padded_batch_strings_expected.npz")
    names = list(g["in/names"])
    seqs = [g[f"in/seq/{i}"] for i in range(len(names))]
    ds = sk.Dataset.range(len(names)).map(lambda i: {"seq": seqs[int(i)], "name": names[int(i)]})
    every = ds.padded_batch(2, padded_shapes={"seq": [None], "name": []}, padding_values={"seq": -1, "name": b""})
    for kind, batches in (("every", every), ("default", ds.padded_batch(2))):
        got = list(batches)
        assert len(got) == 3
        for k, b in enumerate(got):
            np.testing.assert_array_equal(b["seq"], g[f"{kind}/{k}/seq"])
            assert [bytes(n) for n in b["name"]] == list(g[f"{kind}/{k}/name"]), (kind, k)


def test_flat_map_rebatch_and_reduce_match_tf(golden):
    g = np.load(golden / "flat_map_expected.npz")
    flat = sk.Dataset.range(5).flat_map(lambda v: sk.Dataset.range(int(v)).map(lambda w, v=int(v): v * 10 + w))
    assert [int(x) for x in flat] == g["flat_map"].tolist()
    batches = sk.Dataset.range(11).batch(3)
    for size in (2, 4):
        for drop in (False, True):
            got = [b.tolist() for b in batches.rebatch(size, drop_remainder=drop)]
            key = f"rebatch_{size}_{int(drop)}"
            assert len(got) == int(g[f"{key}/count"])
            assert got == [g[f"{key}/{k}"].tolist() for k in range(len(got))]
    r = sk.Dataset.range(1, 8)
    assert int(r.reduce(np.int64(0), lambda s, v: s + v)) == int(g["reduce_sum"])
    assert r.reduce(0, lambda s, _: s + 1) == int(g["reduce_count"])
