"""Edge semantics a tf.data user runs into: file names as bytes, -1 counts, wrong sizes, and
`ignore_errors()` over Python functions."""

from __future__ import annotations

import os

import numpy as np
import pytest
import stoker as sk
from stoker.errors import InvalidArgumentError


def records(ds: sk.Dataset) -> list[bytes]:
    return [bytes(r) for r in ds]


def test_file_names_as_bytes_work_where_a_path_does(chess_files):
    want = records(sk.TFRecordDataset(chess_files[0]))
    assert records(sk.TFRecordDataset(chess_files[0].encode())) == want
    assert records(sk.TFRecordDataset([os.fsencode(f) for f in chess_files[:2]])) == records(
        sk.TFRecordDataset(chess_files[:2])
    )
    # tf.data's idiom: file names come out of list_files as bytes, into a Python function.
    folder = os.path.dirname(chess_files[0])
    pattern = os.path.join(folder, "*.tfrecord")
    ds = sk.Dataset.list_files(pattern, shuffle=False).interleave(lambda f: sk.TFRecordDataset(f), cycle_length=1)
    assert records(ds) == records(sk.TFRecordDataset(sorted(chess_files)))
    assert len(list(sk.Dataset.list_files(pattern.encode(), shuffle=False))) == len(chess_files)


def test_minus_one_counts_mean_what_they_mean_in_tf_data():
    ds = sk.Dataset.range(5)
    assert [int(v) for v in ds.take(-1)] == [0, 1, 2, 3, 4]
    assert [int(v) for v in ds.skip(-1)] == []
    assert [int(v) for v in ds.repeat(-1).take(7)] == [0, 1, 2, 3, 4, 0, 1]
    assert [int(v) for v in ds.take(np.int64(2))] == [0, 1]


@pytest.mark.parametrize(
    "make, argument",
    [
        (lambda ds: ds.batch(-1), "batch: batch_size"),
        (lambda ds: ds.batch(0), "batch: batch_size"),
        (lambda ds: ds.batch(2.5), "batch: batch_size"),
        (lambda ds: ds.batch(True), "batch: batch_size"),
        (lambda ds: ds.padded_batch(-2), "padded_batch: batch_size"),
        (lambda ds: ds.shuffle(-1), "shuffle: buffer_size"),
        (lambda ds: ds.take(-2), "take: count"),
        (lambda ds: ds.skip(-3), "skip: count"),
        (lambda ds: ds.repeat(-2), "repeat: count"),
        (lambda ds: ds.prefetch(-5), "prefetch: buffer_size"),
        (lambda ds: ds.shard(-1, 0), "shard: num_shards"),
        (lambda ds: ds.shard(2, -1), "shard: index"),
        (lambda ds: ds.shard(2, 2), "shard: index"),
        (lambda ds: ds.map(lambda v: v, num_parallel_calls=0), "map: num_parallel_calls"),
        (lambda ds: ds.interleave(lambda v: sk.Dataset.range(2), cycle_length=-3), "interleave: cycle_length"),
        (lambda ds: ds.interleave(lambda v: sk.Dataset.range(2), block_length=0), "interleave: block_length"),
        (lambda ds: ds.with_options(threads=0), "with_options: threads"),
        (lambda ds: sk.ops.resize("x", -1), "resize: size"),
        (lambda ds: sk.ops.resize("x", (224, 0)), "resize: width"),
        (lambda ds: sk.ops.center_crop("x", (-4, 4)), "center_crop: height"),
        (lambda ds: sk.ops.random_resized_crop("x", -224), "random_resized_crop: size"),
        (lambda ds: sk.ops.resize_with_crop_or_pad("x", -1, 3), "resize_with_crop_or_pad: height"),
        (lambda ds: sk.TFRecordDataset([], num_parallel_reads=-7), "TFRecordDataset: num_parallel_reads"),
    ],
)
def test_wrong_sizes_are_invalid_argument_errors_naming_the_argument(make, argument):
    with pytest.raises(InvalidArgumentError) as e:
        make(sk.Dataset.range(10))
    assert argument in str(e.value)


def bad_at_two(v):
    if int(v) == 2:
        raise ValueError("no twos")
    return v * 10


def test_ignore_errors_drops_elements_whose_python_function_raised():
    ds = sk.Dataset.range(5).map(bad_at_two)
    with pytest.raises(ValueError, match="no twos"):
        list(ds)
    kept = ds.ignore_errors()
    assert [int(v) for v in kept] == [0, 10, 30, 40]
    stats = kept.stats()
    assert sum(s["skipped"] for s in stats) == 1
    reasons = [s["last_skip_reason"] for s in stats if s["skipped"]]
    assert "bad_at_two" in reasons[0] and "no twos" in reasons[0], reasons
    # On worker threads too, and in a filter's predicate.
    parallel = sk.Dataset.range(20).map(bad_at_two, num_parallel_calls=3).ignore_errors()
    assert [int(v) for v in parallel] == [10 * i for i in range(20) if i != 2]
    odd = sk.Dataset.range(6).filter(lambda v: 1 / (int(v) % 3) > 0).ignore_errors()
    assert [int(v) for v in odd] == [1, 2, 4, 5]


def test_a_compressed_file_read_without_compression_type_says_it_looks_compressed(chess_files, tmp_path):
    import gzip
    import zlib

    data = open(chess_files[0], "rb").read()
    for name, packed in (("GZIP", gzip.compress(data)), ("ZLIB", zlib.compress(data))):
        path = tmp_path / f"records.{name.lower()}.tfrecord"
        path.write_bytes(packed)
        with pytest.raises(sk.CorruptRecordError) as e:
            list(sk.TFRecordDataset(str(path)))
        assert f'compression_type="{name}"' in str(e.value), str(e.value)
        assert records(sk.TFRecordDataset(str(path), compression_type=name)) == records(
            sk.TFRecordDataset(chess_files[0])
        )


def test_stats_print_as_a_table():
    ds = sk.Dataset.range(10).map(bad_at_two).batch(3).ignore_errors()
    list(ds)
    stats = ds.stats()
    assert isinstance(stats, list) and all(isinstance(s, dict) for s in stats)
    lines = str(stats).splitlines()
    assert lines[0].split()[:3] == ["stage", "kind", "elements"]
    assert set(lines[1]) <= {"-", " "}
    rows = {line.split()[0]: line.split() for line in lines[2 : 2 + len(stats)]}
    assert rows["batch(3)"][1:3] == ["batch", "3"] and rows["map[bad_at_two]"][-1] == "1"
    assert lines[-1] == "map[bad_at_two]: last skipped: element 2: bad_at_two raised ValueError: no twos"


def test_one_hot_colors_takes_what_read_class_colors_returns(tmp_path):
    csv = tmp_path / "class_dict.csv"
    csv.write_text("name,r,g,b\nsky,128,128,128\nroad,128,64,128\n")
    names_and_colors = sk.ops.read_class_colors(str(csv))
    assert names_and_colors == (["sky", "road"], [[128, 128, 128], [128, 64, 128]])
    label = np.array([[[128, 64, 128], [128, 128, 128]]], dtype=np.uint8)
    ds = sk.Dataset.from_tensor_slices({"label": label}).map(sk.ops.one_hot_colors("label", names_and_colors))
    np.testing.assert_array_equal(next(iter(ds))["label"], [[0.0, 1.0], [1.0, 0.0]])
    with pytest.raises(InvalidArgumentError, match="colour 1"):
        sk.ops.one_hot_colors("label", [[1, 2, 3], [1, 2]])
    with pytest.raises(InvalidArgumentError, match="above 255"):
        sk.ops.one_hot_colors("label", [[1, 2, 300]])


def test_after_a_python_map_zip_enumerate_and_padded_batch_work_and_the_spec_is_known_once_run():
    ds = sk.Dataset.range(4).map(lambda v: {"x": np.arange(int(v), dtype=np.int32), "s": b"w%d" % int(v)})
    assert repr(ds) == "<stoker.Dataset element_spec=None>"  # the function has not run (printing does not run it)
    # Built before the function runs: their structure is known when it has.
    zipped = sk.Dataset.zip((ds, sk.Dataset.range(10, 14)))
    numbered = ds.enumerate(start=5)
    padded = ds.padded_batch(2, padding_values=-1)
    got = list(zipped)
    assert [(e[0]["x"].tolist(), bytes(e[0]["s"]), int(e[1])) for e in got] == [
        ([], b"w0", 10),
        ([0], b"w1", 11),
        ([0, 1], b"w2", 12),
        ([0, 1, 2], b"w3", 13),
    ]
    assert [(int(i), e["x"].tolist()) for i, e in numbered] == [(5, []), (6, [0]), (7, [0, 1]), (8, [0, 1, 2])]
    assert [b["x"].tolist() for b in padded] == [[[-1], [0]], [[0, 1, -1], [0, 1, 2]]]
    # Once run: the dtypes and ranks of the function's results, dimensions unknown.
    spec = ds.element_spec
    assert (spec["x"].dtype, spec["x"].shape) == ("int32", (None,))
    assert (spec["s"].dtype, spec["s"].shape) == ("string", ())
    z = zipped.element_spec
    assert z[0]["x"].dtype == "int32" and z[1].dtype == "int64"
    assert numbered.element_spec[0].dtype == "int64"
