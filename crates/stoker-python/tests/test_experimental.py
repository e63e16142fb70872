"""``Dataset.apply`` with the transformations of ``sk.data.experimental``, checked against
TensorFlow's ``tf.data.experimental`` on the same input: the same elements in the same order."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import stoker as sk


def _plain(x: Any) -> Any:
    """An element as nested Python lists and numbers (stoker's and TF's alike)."""
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (tuple, list)):
        return [_plain(v) for v in x]
    return np.asarray(x).tolist()


def _both(ours: sk.Dataset, theirs: Any) -> tuple[list[Any], list[Any]]:
    return [_plain(e) for e in ours], [_plain(e) for e in theirs.as_numpy_iterator()]


def test_the_namespace_mirrors_tf_data() -> None:
    tf = pytest.importorskip("tensorflow")
    assert sk.data.Dataset is sk.Dataset
    assert sk.data.experimental.AUTOTUNE == sk.AUTOTUNE
    assert sk.data.INFINITE_CARDINALITY == tf.data.INFINITE_CARDINALITY
    assert sk.data.experimental.UNKNOWN_CARDINALITY == tf.data.experimental.UNKNOWN_CARDINALITY
    ds = sk.Dataset.range(7).repeat()
    assert sk.data.experimental.cardinality(ds) == int(
        tf.data.experimental.cardinality(tf.data.Dataset.range(7).repeat())
    )


CASES = {
    "enumerate_dataset": (
        lambda x: x.enumerate_dataset(start=3),
        lambda: sk.Dataset.range(5),
        lambda tf: tf.data.Dataset.range(5),
    ),
    "group_by_window": (
        lambda x: x.group_by_window(lambda e: e % 3, lambda k, w: w.batch(2), window_size=2),
        lambda: sk.Dataset.range(12),
        lambda tf: tf.data.Dataset.range(12),
    ),
    "scan": (
        lambda x: x.scan(np.int64(0), lambda s, e: (s + e, s * 10 + e)),
        lambda: sk.Dataset.range(6),
        lambda tf: tf.data.Dataset.range(6),
    ),
    "take_while": (
        lambda x: x.take_while(lambda e: e * e < 20),
        lambda: sk.Dataset.range(10),
        lambda tf: tf.data.Dataset.range(10),
    ),
    "unbatch": (
        lambda x: x.unbatch(),
        lambda: sk.Dataset.range(7).batch(3),
        lambda tf: tf.data.Dataset.range(7).batch(3),
    ),
    "assert_cardinality": (
        lambda x: x.assert_cardinality(4),
        lambda: sk.Dataset.range(8).filter(lambda e: e % 2 == 1),
        lambda tf: tf.data.Dataset.range(8).filter(lambda e: e % 2 == 1),
    ),
    "unique": (
        lambda x: x.unique(),
        lambda: sk.Dataset.from_tensor_slices([3, 1, 3, 2, 1, 5]),
        lambda tf: tf.data.Dataset.from_tensor_slices([3, 1, 3, 2, 1, 5]),
    ),
    # a buffer of one keeps the order: the elements of each repetition, in turn
    "shuffle_and_repeat": (
        lambda x: x.shuffle_and_repeat(1, count=3, seed=4),
        lambda: sk.Dataset.range(4),
        lambda tf: tf.data.Dataset.range(4),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_apply_matches_tensorflow(name: str) -> None:
    tf = pytest.importorskip("tensorflow")
    transformation, ours, theirs = CASES[name]
    got, want = _both(
        ours().apply(transformation(sk.data.experimental)), theirs(tf).apply(transformation(tf.data.experimental))
    )
    assert got == want


def test_ignore_errors_drops_what_failed_as_tensorflow_does() -> None:
    tf = pytest.importorskip("tensorflow")
    values = [1.0, 0.0, 4.0, 0.0, 8.0]

    def inverse(x: Any) -> Any:
        if float(x) == 0.0:
            raise ValueError("division by zero")
        return np.float32(1.0 / float(x))

    ours = sk.Dataset.from_tensor_slices(np.array(values, np.float32)).map(inverse)
    theirs = tf.data.Dataset.from_tensor_slices(values).map(lambda x: tf.debugging.check_numerics(1.0 / x, "inverse"))
    got, want = _both(
        ours.apply(sk.data.experimental.ignore_errors()), theirs.apply(tf.data.experimental.ignore_errors())
    )
    assert got == want == [1.0, 0.25, 0.125]


def test_get_single_element() -> None:
    assert int(sk.data.experimental.get_single_element(sk.Dataset.range(3, 4))) == 3
    assert int(sk.Dataset.range(5, 6).get_single_element()) == 5
    for many in (sk.Dataset.range(0), sk.Dataset.range(2)):
        with pytest.raises(sk.InvalidArgumentError, match="exactly one"):
            sk.data.experimental.get_single_element(many)


def test_apply_refuses_a_function_that_returns_no_dataset() -> None:
    with pytest.raises(TypeError, match="transformation_func must return a stoker.Dataset, got list"):
        sk.Dataset.range(3).apply(lambda ds: list(ds))


def test_zip_takes_datasets_as_arguments_as_tensorflow() -> None:
    tf = pytest.importorskip("tensorflow")
    a, b = sk.Dataset.range(3), sk.Dataset.range(10, 14)
    ta, tb = tf.data.Dataset.range(3), tf.data.Dataset.range(10, 14)
    assert _both(sk.Dataset.zip(a, b), tf.data.Dataset.zip(ta, tb)) == _both(
        sk.Dataset.zip((a, b)), tf.data.Dataset.zip((ta, tb))
    )
    assert _both(sk.Dataset.zip(a, b), tf.data.Dataset.zip(ta, tb))[0] == [[0, 10], [1, 11], [2, 12]]
    got, want = _both(sk.Dataset.zip(a), tf.data.Dataset.zip(ta))
    assert got == want == [0, 1, 2]
    got, want = _both(sk.Dataset.zip(datasets={"x": a, "y": b}), tf.data.Dataset.zip(datasets={"x": ta, "y": tb}))
    assert got == want
    with pytest.raises(sk.InvalidArgumentError, match="not both"):
        sk.Dataset.zip(a, datasets=(a, b))


def test_tf_options_and_their_deprecated_names() -> None:
    tf = pytest.importorskip("tensorflow")
    ds = sk.Dataset.range(4).map(lambda x: x * 2, num_parallel_calls=2)
    theirs = tf.data.Options()
    theirs.experimental_deterministic = False
    theirs.threading.private_threadpool_size = 2
    theirs.experimental_optimization.map_fusion = False
    ours = sk.data.Options()
    ours.experimental_deterministic = False
    assert ours.deterministic is False and ours.experimental_deterministic is False
    ours.threading.private_threadpool_size = 2
    ours.experimental_optimization.map_fusion = False
    keywords = ds.with_options(threads=2, deterministic=False, optimizations={"fuse_maps": False})
    assert ds.with_options(theirs).explain() == ds.with_options(ours).explain() == keywords.explain()
    with pytest.raises(AttributeError, match="no option 'no_such_option'"):
        ours.no_such_option = True


def test_take_while_ends_an_endless_dataset_and_resumes_where_it_stopped() -> None:
    tf = pytest.importorskip("tensorflow")
    ours = sk.Dataset.range(1000).repeat().take_while(lambda e: e < 5)
    theirs = tf.data.Dataset.range(1000).repeat().take_while(lambda e: e < 5)
    got, want = _both(ours, theirs)
    assert got == want == [0, 1, 2, 3, 4]
    it = ours.iterator()
    assert [int(next(it)) for _ in range(3)] == [0, 1, 2]
    assert [int(e) for e in ours.iterator(state=it.state())] == [3, 4]


def test_take_while_under_ignore_errors_skips_what_raised_and_goes_on_as_tensorflow() -> None:
    """An element the predicate raised on is skipped and counted; the elements after it are
    tested, not lost (the take ends only where the predicate is false)."""
    tf = pytest.importorskip("tensorflow")

    def under_6(x: Any) -> bool:
        if int(x) == 3:
            raise ValueError("no 3")
        return int(x) < 6

    ours = sk.Dataset.range(10).take_while(under_6).ignore_errors()
    theirs = tf.data.Dataset.range(10).take_while(
        lambda x: tf.logical_and(x < 6, tf.debugging.check_numerics(1.0 / tf.cast(x - 3, tf.float32), "p") != 0.0)
    )
    got, want = _both(ours, theirs.apply(tf.data.experimental.ignore_errors()))
    assert got == want == [0, 1, 2, 4, 5]
    skipped = {s["name"]: s["skipped"] for s in ours.stats()}
    assert skipped.get("take_while[under_6]") == 1, skipped


def test_element_spec_reads_as_tf_data_specs() -> None:
    """Code that walks an element_spec with tf.nest and reads `.shape` / `.dtype` as of a
    tf.TensorSpec gets tf.data's answers."""
    tf = pytest.importorskip("tensorflow")
    data = {"image": np.zeros((6, 4, 3), np.float32), "label": np.arange(6)}
    ours = sk.data.Dataset.from_tensor_slices(data).batch(2, drop_remainder=True).element_spec
    theirs = tf.data.Dataset.from_tensor_slices(data).batch(2, drop_remainder=True).element_spec
    tf.nest.assert_same_structure(ours, theirs)
    for a, b in zip(tf.nest.flatten(ours), tf.nest.flatten(theirs)):
        assert a.shape.as_list() == b.shape.as_list() and a.shape.rank == b.shape.rank == a.shape.ndims
        assert a.shape.is_fully_defined() and a.shape.num_elements() == b.shape.num_elements()
        assert b.dtype == a.dtype and a.dtype == b.dtype.name and a.dtype.name == b.dtype.name
    shapes = tf.nest.map_structure(lambda s: tuple(s.shape), ours)
    assert shapes == {"image": (2, 4, 3), "label": (2,)}
    assert not sk.TensorSpec([None, 3], sk.float32).shape.is_fully_defined()
    assert sk.TensorSpec([None, 3]).shape.num_elements() is None


def test_the_deprecated_and_helper_forms_real_code_spells() -> None:
    """parallel_interleave, Counter, dense_to_ragged_batch, from_list, at, get_structure,
    range(output_type=), batch(num_parallel_calls=): tf.data's elements."""
    tf = pytest.importorskip("tensorflow")
    import itertools

    interleaved = []
    for mod in (sk.data, tf.data):
        opened = mod.Dataset.range(4).apply(
            mod.experimental.parallel_interleave(
                lambda e, m=mod: m.Dataset.range(e * 10, e * 10 + e + 1), cycle_length=2, block_length=2
            )
        )
        interleaved.append([int(x) for x in opened.as_numpy_iterator()])
    assert interleaved[0] == interleaved[1]

    counted = [
        [np.asarray(x).tolist() for x in itertools.islice(mod.experimental.Counter(5, -3).as_numpy_iterator(), 4)]
        for mod in (sk.data, tf.data)
    ]
    assert counted[0] == counted[1] == [5, 2, -1, -4]
    assert int(sk.data.Dataset.counter(dtype="int32").cardinality()) == int(tf.data.Dataset.counter().cardinality())
    assert next(iter(sk.data.Dataset.counter(2, dtype=sk.int32))).dtype == np.int32

    ranged = [(str(np.asarray(x).dtype), int(x)) for x in sk.Dataset.range(2, 5, output_type=tf.int32)]
    theirs = [(x.dtype.name, int(x)) for x in tf.data.Dataset.range(2, 5, output_type=tf.int32).as_numpy_iterator()]
    assert ranged == theirs

    got, want = _both(
        sk.Dataset.range(5).batch(2, num_parallel_calls=sk.AUTOTUNE, deterministic=True),
        tf.data.Dataset.range(5).batch(2, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True),
    )
    assert got == want

    # ragged batches: stoker's (values padded, row lengths), TF's RaggedTensor of them
    ours = list(
        sk.Dataset.range(4).map(lambda x: np.arange(int(x))).apply(sk.data.experimental.dense_to_ragged_batch(3))
    )
    theirs = list(
        tf.data.Dataset.range(4)
        .map(lambda x: tf.range(x))
        .apply(tf.data.experimental.dense_to_ragged_batch(3))
    )
    assert len(ours) == len(theirs) == 2
    for (values, lengths), ragged in zip(ours, theirs):
        made = tf.RaggedTensor.from_tensor(values, lengths=lengths)
        assert made.to_list() == ragged.to_list()

    elements = [{"a": 1, "b": (np.float64(0.5), "x")}, {"a": 2, "b": (np.float64(1.5), "yz")}]
    got, want = _both(sk.data.experimental.from_list(elements), tf.data.experimental.from_list(elements))
    assert got == want
    assert sk.data.experimental.from_list(elements).element_spec["a"].dtype == "int32"

    assert int(sk.data.experimental.at(sk.Dataset.range(10, 20), 3)) == 13
    with pytest.raises(sk.InvalidArgumentError, match="past the end"):
        sk.data.experimental.at(sk.Dataset.range(3), 3)
    spec = sk.data.experimental.get_structure(sk.Dataset.range(3).batch(2, drop_remainder=True))
    assert tuple(spec.shape) == (2,) and spec.dtype == "int64"


def test_distribute_options_and_auto_shard_policy_are_accepted() -> None:
    tf = pytest.importorskip("tensorflow")
    for name in ("OFF", "AUTO", "FILE", "DATA", "HINT"):
        assert int(getattr(sk.data.experimental.AutoShardPolicy, name)) == int(
            getattr(tf.data.experimental.AutoShardPolicy, name)
        )
    assert sk.data.experimental.SHARD_HINT == tf.data.experimental.SHARD_HINT
    for mod in (sk.data, tf.data):
        options = mod.Options()
        options.experimental_distribute.auto_shard_policy = mod.experimental.AutoShardPolicy.DATA
        options.experimental_slack = True
        ds = mod.Dataset.range(3).with_options(options)
        assert [int(x) for x in ds.as_numpy_iterator()] == [0, 1, 2]
    # a tf.data.Options with a shard policy is taken as well
    theirs = tf.data.Options()
    theirs.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    assert [int(x) for x in sk.Dataset.range(2).with_options(theirs)] == [0, 1]


def test_save_load_snapshot_and_tfrecord_writer_of_experimental(tmp_path: Any) -> None:
    tf = pytest.importorskip("tensorflow")
    x = sk.data.experimental
    x.save(sk.Dataset.range(4).map(lambda v: (v, v * 2)), str(tmp_path / "saved"))
    assert [_plain(e) for e in x.load(str(tmp_path / "saved"))] == [[i, 2 * i] for i in range(4)]
    snap = sk.Dataset.range(3).apply(x.snapshot(str(tmp_path / "snap")))
    assert [int(e) for e in snap] == [int(e) for e in snap] == [0, 1, 2]
    records = [b"one", b"", b"three\x00"]
    x.TFRecordWriter(str(tmp_path / "r.tfrecord"), "GZIP").write(sk.Dataset.from_tensor_slices(records))
    read = tf.data.TFRecordDataset(str(tmp_path / "r.tfrecord"), compression_type="GZIP")
    assert list(read.as_numpy_iterator()) == records
    with pytest.raises(sk.InvalidArgumentError, match="scalar strings"):
        x.TFRecordWriter(str(tmp_path / "n.tfrecord")).write(sk.Dataset.range(2))


def test_parse_example_dataset_parses_as_tensorflow() -> None:
    tf = pytest.importorskip("tensorflow")
    records = [
        tf.train.Example(
            features=tf.train.Features(
                feature={
                    "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
                    "w": tf.train.Feature(float_list=tf.train.FloatList(value=[i / 2, -i])),
                }
            )
        ).SerializeToString()
        for i in range(5)
    ]
    features = {"id": tf.io.FixedLenFeature([], tf.int64), "w": tf.io.FixedLenFeature([2], tf.float32)}
    ours = sk.Dataset.from_tensor_slices(records).batch(2).apply(sk.data.experimental.parse_example_dataset(features))
    theirs = tf.data.Dataset.from_tensor_slices(records).batch(2).apply(
        tf.data.experimental.parse_example_dataset(features)
    )
    got, want = _both(ours, theirs)
    assert got == want and len(got) == 3


def test_counter_counts_from_anywhere_and_stands_still_with_step_0() -> None:
    import itertools

    tf = pytest.importorskip("tensorflow")
    for start, step in ((2**62, 1), (2**63 - 3, 1), (-(2**63) + 2, -1), (7, 0)):
        ours = [int(x) for x in itertools.islice(sk.data.experimental.Counter(start, step), 2)]
        theirs = [int(x) for x in itertools.islice(tf.data.experimental.Counter(start, step).as_numpy_iterator(), 2)]
        assert ours == theirs, (start, step)
    assert sk.data.experimental.Counter(7, 0).cardinality() == sk.data.INFINITE_CARDINALITY


def test_load_waits_as_it_may_for_a_complete_save(tmp_path: Any) -> None:
    sk.Dataset.range(3).save(str(tmp_path / "s"))
    assert [int(x) for x in sk.Dataset.load(str(tmp_path / "s"), wait=True)] == [0, 1, 2]
    options = sk.data.Options()
    assert options.experimental_distribute.auto_shard_policy == sk.data.experimental.AutoShardPolicy.AUTO
