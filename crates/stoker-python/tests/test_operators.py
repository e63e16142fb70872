"""Operators as modules: `unbatch` against TensorFlow, strict spec files, and the planner's
named passes."""

from __future__ import annotations

import json

import numpy as np
import pytest
import stoker as sk


def test_unbatch_matches_tf(golden):
    g = np.load(golden / "unbatch_expected.npz")
    n = len([k for k in g.files if k.startswith("in/mat/")])
    mats = [g[f"in/mat/{i}"] for i in range(n)]
    imgs = [g[f"in/img/{i}"] for i in range(n)]
    # Elements of different first dimensions (0 included), made by a Python function.
    ds = sk.Dataset.range(n).map(lambda i: {"mat": mats[int(i)], "img": imgs[int(i)]}).unbatch()
    got = list(ds)
    assert len(got) == len([k for k in g.files if k.startswith("out/") and k.endswith("/mat")])
    for k, e in enumerate(got):
        for f in ("mat", "img"):
            want = g[f"out/{k}/{f}"]
            assert e[f].dtype == want.dtype and e[f].shape == want.shape, (k, f)
            np.testing.assert_array_equal(e[f], want)
    scalars = [int(v) for v in sk.Dataset.range(7).batch(3).unbatch()]
    assert scalars == g["range7_batch3_unbatch"].tolist()


def test_unbatch_schema_and_errors():
    x = np.arange(24, dtype=np.float32).reshape(6, 2, 2)
    ds = sk.Dataset.from_tensor_slices({"x": x, "y": np.arange(6)}).batch(4).unbatch()
    spec = ds.element_spec
    assert spec["x"].shape == (2, 2) and spec["y"].shape == ()
    got = list(ds)
    np.testing.assert_array_equal(np.stack([e["x"] for e in got]), x)
    # A scalar field has no first dimension: refused when the pipeline is built.
    with pytest.raises(sk.SchemaError, match="'value' is a scalar") as e:
        sk.Dataset.range(3).unbatch()
    assert e.value.step == "unbatch"
    # Fields of different first dimensions in one element: an error naming the element.
    bad = sk.Dataset.range(2).map(lambda i: {"a": np.zeros(2), "b": np.zeros(2 + int(i))}).unbatch()
    with pytest.raises(sk.InvalidArgumentError, match="input element 1"):
        list(bad)
    # And in a spec file.
    assert [s["step"] for s in sk.Dataset.range(4).batch(2).unbatch().spec()["pipeline"]] == [
        "range",
        "batch",
        "unbatch",
    ]


def test_a_typo_in_a_spec_key_names_the_key_and_the_step(tmp_path):
    good = sk.Dataset.range(10).shuffle(4, seed=1).batch(2).spec()
    path = tmp_path / "p.json"
    path.write_text(json.dumps(good))
    want = [int(v) for b in sk.Dataset.range(10).shuffle(4, seed=1).batch(2) for v in b]
    assert [int(v) for b in sk.Dataset.load_spec(path) for v in b] == want

    bad = json.loads(json.dumps(good))
    bad["pipeline"][1]["bufer_size"] = bad["pipeline"][1].pop("buffer_size")
    path.write_text(json.dumps(bad))
    with pytest.raises(sk.StokerError, match=r"step 1 \(shuffle\): unknown field `bufer_size`"):
        sk.Dataset.load_spec(path)
    bad = json.loads(json.dumps(good))
    bad["pipeline"][2]["step"] = "bacth"
    path.write_text(json.dumps(bad))
    with pytest.raises(sk.StokerError, match=r"step 2 \(bacth\): unknown step"):
        sk.Dataset.load_spec(path)
    bad = json.loads(json.dumps(good))
    bad["options"] = {"on_bad_recrod": "skip"}
    path.write_text(json.dumps(bad))
    with pytest.raises(sk.StokerError, match="on_bad_recrod"):
        sk.Dataset.load_spec(path)


def test_relative_paths_in_a_spec_file_are_relative_to_its_folder(tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    with sk.io.TFRecordWriter(str(data / "a.tfrecord")) as w:
        for i in range(3):
            w.write(bytes([i]))
    spec_dir = tmp_path / "specs"
    spec_dir.mkdir()
    (spec_dir / "p.toml").write_text('[[pipeline]]\nstep = "tfrecord"\nfiles = ["../data/*.tfrecord"]\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    records = [bytes(r) for r in sk.Dataset.load_spec(spec_dir / "p.toml")]
    assert records == [b"\x00", b"\x01", b"\x02"]
    # Saving writes paths relative to the spec's folder where they lie under it.
    monkeypatch.chdir(tmp_path)
    ds = sk.TFRecordDataset("data/a.tfrecord").take(2)
    ds.save_spec(tmp_path / "here.json")
    saved = json.loads((tmp_path / "here.json").read_text())
    assert saved["pipeline"][0]["files"] == ["data/a.tfrecord"]
    monkeypatch.chdir(elsewhere)
    assert [bytes(r) for r in sk.Dataset.load_spec(tmp_path / "here.json")] == [b"\x00", b"\x01"]


def _chess_ops():
    return [
        sk.ops.parse_example({"s": sk.FixedLenFeature([], sk.int64), "d": sk.FixedLenFeature([], sk.string)}),
        sk.ops.decode_raw("d", sk.uint8),
    ]


def test_planner_passes_are_named_in_explain_and_can_be_switched_off(chess_files):
    ds = sk.TFRecordDataset(chess_files).map(_chess_ops()[:1]).map(_chess_ops()[1:]).batch(32)
    text = ds.explain()
    assert text.splitlines()[-1] == "rewrites: fuse_maps x1, map_after_batch x1", text
    off = ds.with_options(optimizations={"map_after_batch": False})
    lines = off.explain().splitlines()
    assert lines[-1] == "rewrites: fuse_maps x1", lines
    assert lines[1].strip().startswith("batch(32)") and lines[2].strip().startswith("map[parse_example, decode_raw]")
    none = ds.with_options(optimizations={"map_after_batch": False, "fuse_maps": False})
    assert none.explain().splitlines()[-1] == "rewrites: none"
    assert "options(on_bad_record=raise, fuse_maps=off, map_after_batch=off)" in none.explain()
    # The elements are the same whichever passes run.
    for a, b, c in zip(ds, off, none, strict=True):
        for f in ("s", "d"):
            np.testing.assert_array_equal(a[f], b[f])
            np.testing.assert_array_equal(a[f], c[f])
    # A parallel map before a batch runs fused with it (on more than one thread).
    par = sk.TFRecordDataset(chess_files).map(_chess_ops(), num_parallel_calls=2).batch(32).with_options(
        threads=2, optimizations={"map_after_batch": False}
    )
    assert par.explain().splitlines()[-1] == "rewrites: map_and_batch x1"
    unfused = par.with_options(optimizations={"map_and_batch": False})
    assert unfused.explain().splitlines()[-1] == "rewrites: none"
    for a, b in zip(par, unfused, strict=True):
        np.testing.assert_array_equal(a["d"], b["d"])


def test_an_unknown_pass_is_an_invalid_argument_naming_the_passes():
    with pytest.raises(sk.InvalidArgumentError, match="no planner pass is named 'map_fusion'.*fuse_maps"):
        sk.Dataset.range(3).with_options(optimizations={"map_fusion": False})


def test_cardinality_is_the_count_a_pass_hands_out():
    base = sk.Dataset.from_tensor_slices({"x": np.arange(23)})
    finite = {
        "range": sk.Dataset.range(3, 40, 4),
        "slices": base,
        "batch": base.batch(5),
        "batch_drop": base.batch(5, drop_remainder=True),
        "padded": base.map(lambda e: np.arange(int(e["x"]) % 3)).padded_batch(4),
        "take": base.take(7),
        "take_more": base.take(70),
        "skip": base.skip(7),
        "skip_all": base.skip(70),
        "repeat": base.repeat(3),
        "shard": base.shard(4, 3),
        "zip": sk.Dataset.zip((base, sk.Dataset.range(9))),
        "enumerate": base.enumerate(),
        "shuffle": base.shuffle(8, seed=1),
        "map": base.map(lambda e: e),
        "prefetch_cache": base.cache().prefetch(2),
        "infinite_taken": base.repeat().take(50),
    }
    for name, ds in finite.items():
        n = ds.cardinality()
        assert n == len(list(ds)) == len(ds), name
    assert base.repeat().cardinality() == sk.dataset.INFINITE
    assert sk.Dataset.zip((base.repeat(), sk.Dataset.range(4))).cardinality() == 4
    for unknown in (base.filter(lambda e: True), base.batch(2).unbatch(), base.ignore_errors()):
        assert unknown.cardinality() == sk.dataset.UNKNOWN
        with pytest.raises(TypeError, match="unknown"):
            len(unknown)


def test_concatenate_resumes_in_either_part_and_round_trips_its_spec(tmp_path):
    ds = sk.Dataset.range(4).shuffle(4, seed=2).concatenate(sk.Dataset.range(100, 106).shuffle(3, seed=5)).batch(3)
    want = [b.tolist() for b in ds.iterator(epoch=0)]
    assert sorted(v for b in want for v in b) == [0, 1, 2, 3, 100, 101, 102, 103, 104, 105]
    for stop in range(len(want)):
        it = ds.iterator(epoch=0)
        got = [next(it).tolist() for _ in range(stop + 1)]
        rest = [b.tolist() for b in ds.iterator(state=it.state())]
        assert got + rest == want, stop
    spec = tmp_path / "concat.json"
    ds.save_spec(spec)
    assert [b.tolist() for b in sk.Dataset.load_spec(spec).iterator(epoch=0)] == want
    # Different dtypes, different structures.
    with pytest.raises(sk.SchemaError, match="int64 in the first dataset, float32"):
        sk.Dataset.range(2).concatenate(sk.Dataset.from_tensor_slices(np.zeros(2, np.float32)))
    with pytest.raises(sk.InvalidArgumentError, match="structures differ"):
        sk.Dataset.range(2).concatenate(sk.Dataset.from_tensor_slices({"x": np.zeros(2)}))
