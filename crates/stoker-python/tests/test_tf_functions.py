"""TensorFlow functions in ``map``: traced when ``map`` is called, translated into native ops
where each op has one, else run as the traced graph; the elements equal tf.data's on the same
input, dtypes included, and ``explain()`` says which way each function went."""

from __future__ import annotations

import re
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import stoker as sk


def _tf() -> Any:
    return pytest.importorskip("tensorflow")


def _notes(ds: sk.Dataset) -> str:
    return ds.explain().split("TensorFlow functions:")[-1]


def _equal(ours: Any, theirs: Any, ulps: int = 0) -> None:
    """The same structure, dtypes, shapes and values (floats within ``ulps`` of their scale)."""
    if isinstance(theirs, dict):
        assert isinstance(ours, dict) and sorted(ours) == sorted(theirs)
        for k in theirs:
            _equal(ours[k], theirs[k], ulps)
        return
    if isinstance(theirs, tuple):
        assert isinstance(ours, tuple) and len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            _equal(a, b, ulps)
        return
    a, b = np.asarray(ours), np.asarray(theirs)
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    if ulps and a.dtype.kind == "f":
        # a composed affine map rounds differently: within `ulps` of the values' scale
        assert np.abs(a - b).max() <= ulps * np.spacing(np.float32(max(1.0, np.abs(b).max())))
    else:
        assert np.array_equal(a, b)


def _same(make: Any, fn: Any, batch: int | None = None, ulps: int = 0, **options: Any) -> sk.Dataset:
    """``make(lib)`` mapped with ``fn`` (then batched) in tf.data and in stoker: equal."""
    tf = _tf()
    ours_in = make(sk.data)
    if options:
        ours_in = ours_in.with_options(**options)
    ds, ref = ours_in.map(fn), make(tf.data).map(fn)
    if batch:
        ds, ref = ds.batch(batch), ref.batch(batch)
    ours, theirs = list(ds), list(ref.as_numpy_iterator())
    assert len(ours) == len(theirs) > 0
    for a, b in zip(ours, theirs):
        _equal(a, b, ulps)
    return ds


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> str:
    tf = _tf()
    rng = np.random.default_rng(1)
    path = str(tmp_path_factory.mktemp("bert") / "pretrain.tfrecord")
    with tf.io.TFRecordWriter(path) as w:
        for i in range(50):
            feature = {
                "input_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=rng.integers(0, 30522, 16))),
                "segment_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 2] * 16)),
                "masked_lm_weights": tf.train.Feature(float_list=tf.train.FloatList(value=rng.random(4))),
                "next_sentence_labels": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 2])),
            }
            w.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    return path


def test_bert_input_fn_runs_native_and_equals_tf_data(records: str) -> None:
    """google-research/bert's `_decode_record`: parse_single_example, int64 → int32."""
    tf = _tf()
    name_to_features = {
        "input_ids": tf.io.FixedLenFeature([16], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([16], tf.int64),
        "masked_lm_weights": tf.io.FixedLenFeature([4], tf.float32),
        "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
        "missing": tf.io.FixedLenFeature([2], tf.int64, default_value=[7, 8]),
    }

    def _decode_record(record: Any, name_to_features: Any) -> Any:
        example = tf.io.parse_single_example(record, name_to_features)
        for name in list(example.keys()):
            t = example[name]
            if t.dtype == tf.int64:
                t = tf.cast(t, tf.int32)
            example[name] = t
        return example

    ds = _same(lambda lib: lib.TFRecordDataset([records]), lambda r: _decode_record(r, name_to_features), batch=8)
    assert next(iter(ds))["input_ids"].dtype == np.int32
    notes = _notes(ds)
    assert "translated to native ops" in notes and "with the Casts to int32 of input_ids" in notes
    assert "map[parse_example]" in ds.explain()  # one native op, moved after the batch
    assert "TensorFlow graph" not in ds.explain()


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    tf = _tf()
    root = tmp_path_factory.mktemp("images")
    paths = []
    for i in range(12):
        h, w = 40 + 3 * i, 70 - 2 * i
        img = (np.add.outer(np.arange(h), np.arange(w))[..., None] * [1, 2, 3] % 256).astype(np.uint8)
        path = str(root / f"{i}.{'png' if i % 2 else 'jpg'}")
        tf.io.write_file(path, tf.io.encode_png(img) if i % 2 else tf.io.encode_jpeg(img, quality=90))
        paths.append(path)
    return paths


def test_segmentation_style_png_chain_is_native_and_fused(images: list[str]) -> None:
    """W2 as its users write it: decode_png, convert_image_dtype, resize_with_crop_or_pad."""
    tf = _tf()

    def load(path: Any) -> Any:
        img = tf.io.decode_png(tf.io.read_file(path), channels=3)
        img = tf.image.convert_image_dtype(img, tf.float32)
        return tf.image.resize_with_crop_or_pad(img, 48, 64)

    ds = _same(lambda lib: lib.Dataset.from_tensor_slices(images[1::2]), load, batch=3)
    assert "decode_crop_or_pad+rescale" in ds.explain()  # the planner's fusion applies
    assert "tf.image.resize_with_crop_or_pad → resize_with_crop_or_pad" in _notes(ds)


def test_imagenet_style_chain_is_native(images: list[str]) -> None:
    tf = _tf()

    def prep(path: Any, label: Any) -> Any:
        img = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
        img = tf.cast(img, tf.float32) / 255.0
        img = tf.image.resize_with_crop_or_pad(img, 40, 40)
        img = tf.image.flip_left_right(img)
        img = (img - [0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225]
        return tf.transpose(img, [2, 0, 1]), tf.one_hot(label, 12)

    def make(lib: Any) -> Any:
        return lib.Dataset.from_tensor_slices((images[::2], list(range(0, 12, 2))))

    # The planner composes the per-pixel affine steps into one (`fuse_pixels`), as for
    # hand-written ops: within a few float32 ulps; without it, bit for bit.
    _same(make, prep, optimizations={"fuse_pixels": False})
    ds = _same(make, prep, ulps=4)
    assert "pixel_chain" in ds.explain()
    notes = _notes(ds)
    assert "translated to native ops" in notes
    for native in ("normalize", "hwc_to_chw", "one_hot", "flip", "rescale"):
        assert f"→ {native}" in notes


def test_tf_functions_are_traced_into_the_graph_and_translated(images: list[str]) -> None:
    """A map function decorated with ``tf.function``, calling others (a method among them), is
    traced into one graph as tf.data's is inlined: translated as the plain function is, equal
    to tf.data. Left as calls, as in tf.data: XLA-compiled functions."""
    tf = _tf()

    class Scale:
        @tf.function
        def __call__(self, img: Any) -> Any:
            return tf.cast(img, tf.float32) / 255.0

    scale = Scale()

    @tf.function
    def normalize(img: Any) -> Any:
        return (img - [0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225]

    @tf.function
    def prep(path: Any, label: Any) -> Any:
        img = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
        img = tf.image.resize_with_crop_or_pad(scale(img), 40, 40)
        return tf.transpose(normalize(tf.image.flip_left_right(img)), [2, 0, 1]), tf.one_hot(label, 12)

    def make(lib: Any) -> Any:
        return lib.Dataset.from_tensor_slices((images[::2], list(range(0, 12, 2))))

    ds = _same(make, prep, optimizations={"fuse_pixels": False})
    notes = _notes(ds)
    assert "TensorFlow function translated to native ops" in notes and "TensorFlow graph" not in ds.explain()
    for native in ("decode_image", "rescale", "normalize", "flip", "hwc_to_chw", "one_hot"):
        assert native in notes

    # AutoGraph converts an inlined function as tf.function would (a Python `if` on a
    # tensor): the `cond` and what follows stay in TensorFlow, run as tf.data runs them
    # (without Grappler's rewrites: equal to the last bit).
    @tf.function
    def maybe_flip(img: Any) -> Any:
        if tf.rank(img) == 3:
            img = tf.image.flip_left_right(img)
        return img

    def prep2(path: Any) -> Any:
        img = tf.cast(tf.io.decode_jpeg(tf.io.read_file(path), channels=3), tf.float32) / 255.0
        return normalize(maybe_flip(img))

    ds = _same(lambda lib: lib.Dataset.from_tensor_slices(images[::2]), prep2)
    assert "partly translated to native ops: ReadFile → read_file, DecodeJpeg → decode_image" in _notes(ds)
    assert "from op 'cond'" in _notes(ds)
    # Outside stoker's tracing, tf.function's call is its own again.
    from tensorflow.python.eager.polymorphic_function import polymorphic_function

    assert polymorphic_function.Function.__call__.__qualname__ == "Function.__call__"
    assert float(normalize(tf.zeros([1, 1, 3]))[0, 0, 0]) == pytest.approx(-0.485 / 0.229)

    @tf.function(input_signature=[tf.TensorSpec([], tf.int64)])
    def typed(x: Any) -> Any:
        return tf.cast(x, tf.float32) * 2.0

    ds = _same(lambda lib: lib.Dataset.range(5), typed)
    assert "translated to native ops" in _notes(ds)

    @tf.function(jit_compile=True)
    def compiled(x: Any) -> Any:
        return x * 3

    ds = _same(lambda lib: lib.Dataset.range(5), lambda x: compiled(x) + 1)
    assert "(PartitionedCall) has no native counterpart" in _notes(ds)

    # Where its trace would see other shapes than the arguments' (an input signature's, a
    # reduce_retracing function's), a function stays a call of its own, equal to tf.data.
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def relaxed(x: Any) -> Any:
        return tf.reduce_sum(x) if x.shape[0] is None else tf.reduce_max(x)

    rows = np.array([[1, 2], [4, 1]], np.float32)
    _same(lambda lib: lib.Dataset.from_tensor_slices(rows), relaxed)
    retracing = tf.function(lambda x: tf.reduce_sum(x) if x.shape[0] is None else tf.reduce_max(x),
                            reduce_retracing=True)  # fmt: skip
    retracing(tf.zeros([1]))
    retracing(tf.zeros([3]))
    _same(lambda lib: lib.Dataset.from_tensor_slices(rows), retracing)

    # A function left a call of its own keeps the functions it calls to their own traces: the
    # typed one below still refuses an int64 afterwards.
    @tf.function(input_signature=[tf.TensorSpec([], tf.float32)])
    def typed_float(x: Any) -> Any:
        return x * 2

    outer = tf.function(lambda x: typed_float(x) + 1, jit_compile=True)
    assert [float(v) for v in sk.data.Dataset.range(3).map(lambda x: outer(tf.cast(x, tf.float32)))] == [1, 3, 5]
    with pytest.raises(TypeError):
        outer(tf.constant(1, tf.int64))


def test_arithmetic_is_one_compute_equal_to_tensorflow_bit_for_bit() -> None:
    tf = _tf()

    def score(s: Any) -> Any:
        mate = tf.cast(tf.abs(s) < 30.0, tf.float32)
        plain = 0.75 * tf.tanh(s / 600.0)
        return (1.0 - mate) * plain + mate * tf.sign(s) * (0.75 + 0.25 / 29.0 * tf.maximum(0.0, 30.0 - tf.abs(s)))

    values = np.linspace(-900, 900, 2001, dtype=np.float32)
    ds = _same(lambda lib: lib.Dataset.from_tensor_slices(values).batch(100), score)
    assert "map[compute]" in ds.explain()


def test_values_used_twice_are_not_overwritten(images: list[str]) -> None:
    """An op writes over its input's field only when nothing else still reads it."""
    tf = _tf()

    def both(path: Any) -> Any:
        raw = tf.io.read_file(path)
        img = tf.io.decode_image(raw, channels=3, expand_animations=False)
        return img, tf.cast(img, tf.float32) / 255.0, tf.strings.length(raw) > 0

    # StringLength has no native op: it runs in TensorFlow, after the native decode
    ds = _same(lambda lib: lib.Dataset.from_tensor_slices(images[:4]), both)
    assert "partly translated" in _notes(ds) and "StringLength" in _notes(ds)

    def twice(path: Any) -> Any:
        img = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
        return img, tf.cast(img, tf.float32) / 255.0, tf.image.flip_up_down(img)

    ds = _same(lambda lib: lib.Dataset.from_tensor_slices(images[:4]), twice, ulps=1)  # fuse_pixels
    assert "translated to native ops" in _notes(ds)


def test_an_op_without_native_counterpart_runs_the_traced_graph_not_eagerly() -> None:
    tf = _tf()
    calls = []

    def shout(s: Any) -> Any:
        calls.append(1)  # a Python side effect: runs when traced, not per element
        return tf.strings.upper(s), tf.strings.length(s)

    words = [b"alpha", b"beta", b"gamma", b"delta", b"epsilon"]
    ds = sk.data.Dataset.from_tensor_slices(words).map(shout)
    traced = len(calls)
    ours = list(ds)
    assert len(calls) == traced  # no call per element: the graph runs
    ref = list(tf.data.Dataset.from_tensor_slices(words).map(shout).as_numpy_iterator())
    for a, b in zip(ours, ref):
        _equal(a, b)
    notes = _notes(ds)
    assert "runs as its traced graph" in notes and "StringUpper" in notes


def test_python_constants_returned_are_tensors_as_in_tf_data() -> None:
    """A Python int a function returns is int32, a float float32 (tf.data's conversion)."""
    tf = _tf()
    ds = _same(lambda lib: lib.Dataset.range(5), lambda x: (tf.cast(x, tf.float32) * 2.0, 1, 0.5, True))
    assert "translated to native ops" in _notes(ds) and "the constant 1 → compute" in _notes(ds)
    assert [e[1].dtype for e in ds] == [np.int32] * 5 and next(iter(ds))[2].dtype == np.float32
    # a constant tensor too (the text tutorial's labeler), beside an op left to TensorFlow
    ds = _same(lambda lib: lib.Dataset.range(3), lambda x: (tf.strings.as_string(x), tf.cast(7, tf.int64)))
    assert "partly translated" in _notes(ds) and "the constant 7 → compute" in _notes(ds)


def test_a_list_s_dtype_is_tensorflow_s_its_first_value_s() -> None:
    """A Python list converts as tf.data converts it: arrays (or tensors) of one dtype keep
    it; else the first scalar decides, looked for inside arrays too (a 0-d array is its
    scalar): a NumPy float keeps its width (float64: ``list(np.array([0.1, 1e300]))`` is not
    narrowed to float32's inf), Python numbers and NumPy integers as Python's (int32 where
    they fit); a value that type cannot hold is an error, not an infinity or a wrap."""
    tf = _tf()
    cases = [
        [np.array(1, np.int64), 2],
        [np.array(1, np.uint8), np.array(2, np.uint8)],
        [np.array([1], np.int64), [2]],
        [np.array([1], np.int32), np.array([2**40], np.int64)],
        [np.array([1.5], np.float32), np.array([2], np.int64)],
        [1, 2.5, 2**70],
        [[np.array([1], np.int64)], [np.array([2], np.int64)]],
        [[1, 2], [np.array(3, np.int64), 4]],
        [1.5, tf.constant(2.0, tf.float64)],
        list(np.array([0.1, 1e300])),
        [np.float64(2), 0.1],
        [0.1, np.float64(2)],
        [np.float32(1), np.float64(2)],
        [1, np.float64(2)],
        [np.int64(1), 5],
        [np.int64(2**40), np.int64(1)],
        [np.uint8(1), np.uint8(2)],
        [np.float16(1)],
        [np.array([1.5, 2.0]), np.array([3.0, 4.0])],
        [np.array([1, 2]), np.array([3, 4])],
        [[np.float64(1)], [np.float64(2)]],
        [tf.constant(0.1, tf.float64), tf.constant(2.5, tf.float64)],
        [True, np.bool_(False)],
    ]
    for value in cases:
        theirs = list(tf.data.Dataset.from_tensor_slices(value).as_numpy_iterator())
        ours = list(sk.data.Dataset.from_tensor_slices(value))
        assert len(ours) == len(theirs), value
        for a, b in zip(ours, theirs):
            assert np.asarray(a).dtype == np.asarray(b).dtype and np.array_equal(a, b), (value, a, b)
        (whole,) = list(sk.data.Dataset.from_tensors(value))
        (want,) = list(tf.data.Dataset.from_tensors(value).as_numpy_iterator())
        assert whole.dtype == want.dtype and np.array_equal(whole, want), value
    for bad in (
        [np.float32(1), 1e300],
        [1.0, 1e300],
        [np.array([1], np.float32), [1e300]],
        [np.float16(1), 70000.0],
        [True, 2],
        [1, 2**70],
        [np.int64(1), 2**64 - 1],
        [np.uint64(2**63), np.int64(1)],
        [tf.constant(1.0), tf.constant(1e300, tf.float64)],
    ):
        with pytest.raises((ValueError, tf.errors.InvalidArgumentError)):
            tf.data.Dataset.from_tensor_slices(bad)
        with pytest.raises(sk.InvalidArgumentError, match="Can't convert (Python sequence|a list of tensors)"):
            sk.data.Dataset.from_tensor_slices(bad)


def test_stateless_crops_pads_and_lists_of_traced_scalars_equal_tf_data() -> None:
    """``tf.image.stateless_random_crop`` (in a ``random_crop`` scope) follows its seed, as in
    tf.data (an image and its mask cropped alike), not stoker's draws; ``tf.pad`` with
    ``constant_values`` before a batch pads with them (TensorFlow's vectorized form pads with
    0: it runs per element); a dataset made in a function from a list of its scalars keeps
    their dtype."""
    tf = _tf()
    images = np.arange(4 * 8 * 9, dtype=np.int32).reshape(4, 8, 9, 1)

    def crops(x: Any) -> Any:
        return (tf.image.stateless_random_crop(x, [3, 3, 1], seed=[3, 4]),
                tf.image.stateless_random_crop(x * 10, [3, 3, 1], seed=[3, 4]))  # fmt: skip

    ds = _same(lambda lib: lib.Dataset.from_tensor_slices(images), crops)
    assert "draws from the seed it is given" in _notes(ds)
    padded = _same(
        lambda lib: lib.Dataset.from_tensor_slices(np.arange(6, dtype=np.float32).reshape(3, 2)),
        lambda x: tf.pad(x, [[1, 1]], constant_values=-7.0),
        batch=2,
    )
    assert list(padded)[0].tolist()[0] == [-7.0, 0.0, 1.0, -7.0]
    for cast in (tf.int64, tf.uint8, tf.float32):
        def pair(lib: Any, cast: Any = cast) -> Any:
            return lambda v: lib.Dataset.from_tensor_slices([tf.cast(v, cast), tf.cast(v + 1, cast)])

        theirs = list(tf.data.Dataset.range(1, 3).flat_map(pair(tf.data)).as_numpy_iterator())
        ours = list(sk.data.Dataset.range(1, 3).flat_map(pair(sk.data)))
        assert [(np.asarray(e).dtype, e.tolist()) for e in ours] == [(e.dtype, e.tolist()) for e in theirs]


def test_slices_past_the_end_are_cut_as_tensorflow_s() -> None:
    """A strided slice whose bounds pass the axis's end (``x[:10]`` of a shorter ``x``, also
    one whose length is known only at run time, ``x[5:2]``, ``x[-10:]``) is cut as
    TensorFlow cuts it, natively; a one-hot of depth 0 runs in TensorFlow."""
    tf = _tf()
    grid = np.arange(21, dtype=np.int32).reshape(3, 7)
    for bounds in ((-10, None), (None, -10), (5, 2), (10, None), (2, 50)):
        def cut(x: Any, bounds: Any = bounds) -> Any:
            return tf.identity(x)[bounds[0] : bounds[1]]

        ds = _same(lambda lib: lib.Dataset.from_tensor_slices(grid), cut)
        assert "translated to native ops" in _notes(ds), bounds
    records = [b"abc", b"abcdefghijkl", b""]
    ds = _same(lambda lib: lib.Dataset.from_tensor_slices(records), lambda r: tf.io.decode_raw(r, tf.uint8)[1:10])
    assert "translated to native ops" in _notes(ds)
    ds = _same(lambda lib: lib.Dataset.from_tensor_slices(np.array([0, 1])), lambda x: tf.one_hot(x, 0))
    assert "one_hot of depth 0" in _notes(ds)


def test_a_list_inside_the_returned_structure_is_one_tensor_as_in_tf_data() -> None:
    """``return x, [a, b]`` (or ``{"a": [x, x]}``): the list is stacked into one tensor, as
    tf.data converts it; a list at the top is a tuple of components."""
    tf = _tf()
    for fn in (lambda v: (tf.identity(v), [v, v * 2]), lambda v: (tf.identity(v), [1, 2]),
               lambda v: {"a": [tf.identity(v), v]}, lambda v: [tf.identity(v), v + 1]):  # fmt: skip
        _same(lambda lib: lib.Dataset.range(3), fn)
        _same(lambda lib: lib.Dataset.range(3), fn, batch=2)


def test_native_sign_is_tensorflow_s_bit_for_bit() -> None:
    """``tf.sign`` translated to the native op: +0 for -0 (TensorFlow's), NaN for NaN."""
    tf = _tf()
    values = np.array([-0.0, 0.0, -2.0, 3.5, np.nan, -np.inf], np.float32)
    ds = sk.data.Dataset.from_tensor_slices(values).map(lambda x: tf.sign(x) * 1.0)
    assert "translated to native ops" in _notes(ds)
    ours = np.array(list(ds), np.float32)
    theirs = np.array(list(tf.data.Dataset.from_tensor_slices(values).map(lambda x: tf.sign(x) * 1.0)
                           .as_numpy_iterator()), np.float32)  # fmt: skip
    assert ours.tobytes() == theirs.tobytes(), (ours, theirs)


def test_random_colour_functions_run_as_native_color_jitter() -> None:
    """``tf.image.random_brightness`` / ``_contrast`` / ``_saturation`` / ``_hue`` on float32
    images are native ``color_jitter`` s (stoker's draws; each adjustment computes as
    TensorFlow's kernel, see test_images): draws are per element, the same per element and per
    batch, and another epoch's are others. Where the image is not float32 (a conversion in the
    function) they run in TensorFlow, seeded."""
    tf = _tf()
    rng = np.random.default_rng(5)
    images = rng.random((12, 7, 9, 3), dtype=np.float32)

    def jitter(img: Any) -> Any:
        img = tf.image.random_brightness(img, 0.2)
        img = tf.image.random_contrast(img, 0.5, 1.5)
        img = tf.image.random_saturation(img, 0.5, 1.5)
        return tf.image.random_hue(img, 0.1)

    ds = sk.data.Dataset.from_tensor_slices(images).map(jitter)
    for kind in ("brightness", "contrast", "saturation", "hue"):
        assert f"tf.image.random_{kind} → color_jitter({kind}) (stoker's draws)" in _notes(ds)
    assert "translated to native ops" in _notes(ds) and "the rest" not in _notes(ds)
    per_element = np.stack(list(ds.iterator(epoch=0)))
    per_batch = np.concatenate(list(ds.batch(5).iterator(epoch=0)))
    np.testing.assert_array_equal(per_element, per_batch)
    np.testing.assert_array_equal(per_element, np.stack(list(ds.iterator(epoch=0))))
    assert not np.array_equal(per_element, np.stack(list(ds.iterator(epoch=1))))
    # each element its own brightness shift: the images' means move by different amounts
    brightened = np.stack(list(sk.data.Dataset.from_tensor_slices(images).map(
        lambda i: tf.image.random_brightness(i, 0.2)).iterator(epoch=0)))  # fmt: skip
    shifts = (brightened - images).mean(axis=(1, 2, 3))
    assert np.abs(shifts).max() <= 0.2 + 1e-6 and len(np.unique(shifts.round(5))) == len(images)

    # uint8 images: adjust_brightness converts them, which the native op does not: TensorFlow
    as_uint8 = (images * 255).astype(np.uint8)
    ds = _same(lambda lib: lib.Dataset.from_tensor_slices(as_uint8), lambda i: tf.image.random_brightness(i, 0.0))
    assert "runs as its traced graph" in _notes(ds)
    assert "(tf.random.uniform in random_brightness) draw from the element's seed" in _notes(ds)


def test_random_flip_is_native_seeded_and_flips_or_keeps(images: list[str]) -> None:
    tf = _tf()

    def aug(path: Any) -> Any:
        img = tf.io.decode_png(tf.io.read_file(path), channels=3)
        return tf.image.random_flip_left_right(img, seed=5)

    ds = sk.data.Dataset.from_tensor_slices(images[1::2]).map(aug)
    assert "random_flip_left_right" in _notes(ds) and "translated to native ops" in _notes(ds)
    plain = [tf.io.decode_png(tf.io.read_file(p), channels=3).numpy() for p in images[1::2]]
    first, again = list(ds), list(ds.iterator(epoch=0))
    flipped = 0
    for out, img, out2 in zip(first, plain, again):
        assert np.array_equal(out, img) or np.array_equal(out, img[:, ::-1])
        flipped += int(not np.array_equal(out, img))
        assert np.array_equal(out, out2)  # the same draws for the same seed and epoch
    assert 0 < flipped < len(plain)


def test_untraceable_function_still_runs_eagerly_and_says_so() -> None:
    tf = _tf()

    def eager_only(x: Any) -> Any:
        return tf.constant(int(x) * 3)  # int() of a traced tensor fails

    ds = sk.data.Dataset.range(4).map(eager_only)
    assert [int(v) for v in ds] == [0, 3, 6, 9]
    assert "runs eagerly: tracing failed" in _notes(ds)


def test_plain_python_functions_are_not_traced() -> None:
    _tf()
    ds = sk.Dataset.range(4).map(lambda x: x * 2)
    assert [int(v) for v in ds] == [0, 2, 4, 6]
    assert "TensorFlow functions" not in ds.explain()


def test_translated_map_resumes_in_a_new_pipeline(records: str, tmp_path: Path) -> None:
    tf = _tf()
    features = {"input_ids": tf.io.FixedLenFeature([16], tf.int64)}

    def make() -> sk.Dataset:
        ds = sk.data.TFRecordDataset([records]).map(lambda r: tf.io.parse_single_example(r, features))
        return ds.batch(4)

    it = iter(make())
    for _ in range(3):
        next(it)
    state = it.state()
    rest = [b["input_ids"] for b in it]
    resumed = [b["input_ids"] for b in make().iterator(state=state)]
    assert len(rest) == len(resumed) > 0
    assert all(np.array_equal(a, b) for a, b in zip(rest, resumed))


def test_map_and_batch_as_bert_spells_it(records: str) -> None:
    tf = _tf()
    features = {"input_ids": tf.io.FixedLenFeature([16], tf.int64)}

    def make(lib: Any) -> Any:
        fn = lib.experimental.map_and_batch(
            lambda r: tf.io.parse_single_example(r, features), batch_size=8, num_parallel_batches=2, drop_remainder=True
        )
        return lib.TFRecordDataset([records]).apply(fn)

    ours, theirs = list(make(sk.data)), list(make(tf.data).as_numpy_iterator())
    assert len(ours) == len(theirs) == 50 // 8
    for a, b in zip(ours, theirs):
        _equal(a, b)
    with pytest.raises(sk.InvalidArgumentError, match="num_parallel_batches or num_parallel_calls"):
        sk.data.experimental.map_and_batch(lambda r: r, 8, num_parallel_batches=1, num_parallel_calls=2)


def test_an_untranslated_tail_runs_in_tensorflow_after_the_native_head(images: list[str]) -> None:
    """W3 as its users write it (decode_jpeg, random_crop) is native; an op without a native
    counterpart (a reverse of the channels) and what reads it run in TensorFlow on the
    native part's results."""
    tf = _tf()

    def prep(path: Any, tail: bool) -> Any:
        img = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
        img = tf.image.random_crop(img, [20, 24, 3], seed=1)
        if tail:
            img = tf.reverse(img, [2])
        return tf.cast(img, tf.float32) / 255.0, tf.shape(img)

    for tail in (False, True):
        ds = sk.data.Dataset.from_tensor_slices(images).map(lambda p, tail=tail: prep(p, tail))
        notes = _notes(ds)
        assert "random_crop → random_crop" in notes
        assert ("partly translated" in notes and "ReverseV2" in notes) == tail
        for path, (crop, shape) in zip(images, ds):
            assert crop.dtype == np.float32 and crop.shape == (20, 24, 3) and shape.dtype == np.int32
            assert shape.tolist() == [20, 24, 3]
            img = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False).numpy()
            pixels = np.round(crop * 255).astype(np.uint8)
            pixels = pixels[..., ::-1] if tail else pixels
            h, w = img.shape[:2]
            assert any(
                np.array_equal(img[y : y + 20, x : x + 24], pixels) for y in range(h - 19) for x in range(w - 23)
            ), path


def test_int64_features_cast_to_int32_wrap_as_tensorflow_casts(tmp_path: Path) -> None:
    """Parsed straight to int32 for their casts: values beyond int32 keep their low 32 bits."""
    tf = _tf()
    path = str(tmp_path / "big.tfrecord")
    values = [0, -1, 2**31, 2**40 + 5, -(2**35) - 7, 2**63 - 1]
    with tf.io.TFRecordWriter(path) as w:
        for v in values:
            f = {"v": tf.train.Feature(int64_list=tf.train.Int64List(value=[v, v // 3]))}
            w.write(tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString())
    features = {
        "v": tf.io.FixedLenFeature([2], tf.int64),
        "d": tf.io.FixedLenFeature([1], tf.int64, default_value=[2**33 + 1]),
    }

    def parse(r: Any) -> Any:
        ex = tf.io.parse_single_example(r, features)
        return tf.cast(ex["v"], tf.int32), tf.cast(ex["d"], tf.int32), ex["v"]

    ds = _same(lambda lib: lib.TFRecordDataset([path]), parse)
    assert "with the Casts to int32 of d" in _notes(ds)  # "v" is also handed out as int64


def test_a_per_colour_one_hot_is_one_native_op(tmp_path: Path) -> None:
    """W2's label one-hot as its users write it (tf.equal per class colour, reduce_all, stack,
    cast): one ``one_hot_colors`` fused into the decode, a pixel of no class colour a row of
    zeros as in TensorFlow."""
    tf = _tf()
    colors = [[0, 0, 0], [128, 0, 0], [0, 128, 0], [64, 64, 64]]
    paths = []
    for i in range(4):
        lab = np.zeros((30 + i, 40, 3), np.uint8)
        lab[5:15, 5:20] = colors[1]
        lab[15:, 20:] = colors[2]
        lab[10, 12] = [1, 2, 3]  # no class's colour
        path = str(tmp_path / f"{i}.png")
        tf.io.write_file(path, tf.io.encode_png(lab))
        paths.append(path)
    rgb = tf.constant(np.asarray(colors, np.uint8))

    def load(path: Any) -> Any:
        lab = tf.io.decode_png(tf.io.read_file(path), channels=3)
        lab = tf.image.resize_with_crop_or_pad(lab, 32, 32)
        matches = [tf.reduce_all(tf.equal(lab, rgb[i]), axis=-1) for i in range(len(colors))]
        return tf.cast(tf.stack(matches, axis=-1), tf.float32)

    ds = _same(lambda lib: lib.Dataset.from_tensor_slices(paths), load)
    assert "→ one_hot_colors" in _notes(ds) and "decode_crop_or_pad+one_hot_colors" in ds.explain()
    assert not next(iter(ds))[11, 8].any()  # the pixel of no class colour, after the pad and crop
    with pytest.raises(sk.InvalidArgumentError, match="others"):
        sk.ops.one_hot_colors("x", colors, others="drop")


def _filtered(make: Any, predicate: Any) -> sk.Dataset:
    """``make(lib)`` filtered with ``predicate`` in tf.data and in stoker: the same elements."""
    tf = _tf()
    ds, ref = make(sk.data).filter(predicate), make(tf.data).filter(predicate)
    ours, theirs = list(ds), list(ref.as_numpy_iterator())
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        _equal(a, b)
    return ds


def test_filter_predicates_are_traced_and_computed_natively() -> None:
    """Float comparisons in float32 (the product rounds as TensorFlow's), integer ones exact,
    combined: one native compute each, the elements tf.data keeps."""
    tf = _tf()
    rng = np.random.default_rng(3)
    x = (rng.random(300) * 8).astype(np.float32)
    y = rng.integers(-(2**31), 2**31, 300, dtype=np.int64).astype(np.int32)
    y[::7] = 2**30 + 1  # integers float32 cannot hold

    def make(lib: Any) -> Any:
        return lib.Dataset.from_tensor_slices((x, y))

    def pred(a: Any, b: Any) -> Any:
        return tf.logical_or(a * np.float32(1.1) > 4.4, tf.equal(b, 2**30 + 1))

    ds = _filtered(make, pred)
    notes = _notes(ds)
    assert "TensorFlow predicate translated to native ops" in notes and "compute" in notes, notes
    assert "TensorFlow graph" not in ds.explain().split("TensorFlow functions:")[0]
    assert 0 < len(list(ds)) < 300


def test_filter_on_parsed_records_as_real_code_writes_it(records: str) -> None:
    tf = _tf()
    spec = {
        "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
        "masked_lm_weights": tf.io.FixedLenFeature([4], tf.float32),
    }

    def make(lib: Any) -> Any:
        return lib.TFRecordDataset([records]).map(lambda r: tf.io.parse_single_example(r, spec))

    # int64 is compared in TensorFlow (float64 does not hold every int64), per element
    ds = _filtered(make, lambda ex: tf.math.greater(tf.reduce_max(ex["next_sentence_labels"]), 0))
    assert "filter '<lambda>': TensorFlow predicate runs as its traced graph" in _notes(ds)
    ds = _filtered(make, lambda ex: tf.math.less(ex["masked_lm_weights"][0], 0.5))
    assert len(list(ds)) > 0
    # a predicate that does not use TensorFlow runs as Python, on NumPy values
    ds = _filtered(make, lambda ex: ex["next_sentence_labels"][0] > 0)
    assert "filter" not in _notes(ds)


def test_filter_predicates_without_native_ops_run_as_graphs_not_eagerly() -> None:
    tf = _tf()
    words = np.array([b"a", b"bbb", b"cc", b"dddd"], dtype=object)
    ds = _filtered(lambda lib: lib.Dataset.from_tensor_slices(words), lambda w: tf.strings.length(w) > 1)
    assert "runs as its traced graph, per element" in _notes(ds) and "StringLength" in _notes(ds)
    with pytest.raises(sk.InvalidArgumentError, match="scalar bool"):
        sk.data.Dataset.from_tensor_slices(words).filter(lambda w: tf.strings.length(w))


def test_tf_image_resize_is_native_and_bit_for_bit(images: list[str]) -> None:
    """``tf.image.resize`` (bilinear, no antialias; uint8 or float32 in, float32 out, not
    rounded) → ``resize_bilinear``, TensorFlow's values bit for bit, enlarging and shrinking,
    and ``tf.compat.v1``'s ``align_corners``; a resize with antialias stays in TensorFlow."""
    tf = _tf()

    def tutorial(path: Any) -> Any:  # the TensorFlow image tutorials' form
        img = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
        return tf.image.resize(img, [57, 31]) / 255.0

    def floats(path: Any) -> Any:
        img = tf.image.convert_image_dtype(tf.io.decode_jpeg(tf.io.read_file(path), channels=3), tf.float32)
        return tf.compat.v1.image.resize(img, [90, 100], align_corners=True)

    for fn in (tutorial, floats):
        ds = _same(lambda lib: lib.Dataset.from_tensor_slices(images[::2]), fn, optimizations={"fuse_pixels": False})
        assert "tf.image.resize → resize_bilinear" in _notes(ds)
        assert "TensorFlow graph" not in ds.explain().split("TensorFlow functions:")[0]

    def smooth(path: Any) -> Any:
        img = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
        return tf.image.resize(img, [20, 20], antialias=True)

    ds = _same(lambda lib: lib.Dataset.from_tensor_slices(images[::2]), smooth)
    assert "ScaleAndTranslate" in _notes(ds) and "→ decode_image" in _notes(ds)
    with pytest.raises(sk.InvalidArgumentError, match="align_corners"):
        sk.ops.resize_bilinear("image", 4, align_corners=True, half_pixel_centers=True)


def test_an_untranslated_rest_runs_once_per_batch_where_a_batch_follows(images: list[str]) -> None:
    """The native head per element, the batch, then the TensorFlow rest once per batch
    (vectorized) where the fields it reads have one shape; per element where they do not."""
    tf = _tf()

    def contrast(path: Any) -> Any:
        img = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
        img = tf.image.resize_with_crop_or_pad(img, 32, 48)
        return tf.image.rgb_to_grayscale(tf.image.adjust_contrast(tf.cast(img, tf.float32) / 255.0, 2.0))

    ds = _same(lambda lib: lib.Dataset.from_tensor_slices(images[::2]), contrast, batch=4)
    assert "once per batch (vectorized), from op 'adjust_contrast'" in _notes(ds)
    assert "rest, per batch" in ds.explain()

    def sizes(path: Any) -> Any:  # the decoded images' sizes differ: the rest reads them
        img = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
        return tf.image.adjust_contrast(tf.cast(img, tf.float32), 2.0)[:8, :8]

    ds = _same(lambda lib: lib.Dataset.from_tensor_slices(images[::2]), sizes, batch=2)
    assert "the rest runs as its traced graph, per element" in _notes(ds)

    # Nothing translated: the whole graph once per batch where its inputs and outputs have
    # one shape; per element otherwise, and where no batch follows.
    x = np.random.default_rng(1).normal(size=(10, 3, 5)).astype(np.float32)

    def sums(v: Any) -> Any:
        return tf.math.cumsum(v, axis=1), tf.reduce_max(v), tf.strings.as_string(tf.shape(v)[0])

    ds = _same(lambda lib: lib.Dataset.from_tensor_slices(x), sums, batch=4)
    assert "runs as its traced graph, once per batch (vectorized): op 'Cumsum'" in _notes(ds)
    ds = _same(lambda lib: lib.Dataset.from_tensor_slices(x), sums)
    assert "runs as its traced graph, per element" in _notes(ds)
    # Not where the graph has effects (a variable's update, a py_function): per element, each
    # element's once, as in tf.data.
    calls: list[int] = []

    def counted(v: Any) -> Any:
        effect = tf.py_function(lambda: calls.append(1) or 0.0, [], tf.float32)
        return tf.math.cumsum(v, axis=1) + tf.ensure_shape(effect, [])

    ds = _same(lambda lib: lib.Dataset.from_tensor_slices(x), counted, batch=4)
    assert "per element" in _notes(ds) and "once per batch" not in _notes(ds)
    assert len(calls) == 2 * len(x)  # tf.data's pass and stoker's
    ragged = [np.arange(n, dtype=np.float32) for n in (3, 5, 3, 5)]
    ds = _same(lambda lib: lib.Dataset.from_generator(lambda: iter(ragged), output_signature=tf.TensorSpec([None])),
               lambda v: tf.math.cumsum(v)[:2], batch=2)  # fmt: skip
    assert "per element" in _notes(ds) and "once per batch" not in _notes(ds)


def test_an_error_of_a_per_batch_call_is_the_error_of_its_row() -> None:
    """A graph run once per batch that fails there raises what the failing element's own call
    raises (TensorFlow's error of the vectorized graph names a node of its loop), with a note
    naming the row."""
    tf = _tf()
    texts = [b"1", b"2", b"4", b"x3", b"5"]

    def to_number(s: Any) -> Any:
        return tf.strings.to_number(s) * 2.0

    ds = sk.data.Dataset.from_tensor_slices(texts).map(to_number).batch(2)
    assert "once per batch" in _notes(ds)
    with pytest.raises(tf.errors.InvalidArgumentError, match="could not correctly convert string: x3") as caught:
        list(ds)
    assert "pfor" not in str(caught.value)
    if sys.version_info >= (3, 11):  # notes (PEP 678)
        notes = caught.value.__notes__
        assert notes[0].startswith("(stoker: row 1 of the batch of 2;")
        assert "per batch)' on element 1)" in notes[1]  # the second batch
    # Per element, the same error, for the same element.
    with pytest.raises(tf.errors.InvalidArgumentError, match="could not correctly convert string: x3") as caught:
        list(sk.data.Dataset.from_tensor_slices(texts).map(to_number))
    if sys.version_info >= (3, 11):
        assert "on element 3)" in caught.value.__notes__[0]


def test_channel_gathers_and_reversals_are_gather_channels() -> None:
    """RGB to BGR as real code writes it (``tf.gather(..., axis=-1)``, ``[..., ::-1]``,
    ``tf.reverse(axis=[-1])``): one native ``gather_channels``, dtypes kept."""
    tf = _tf()
    x = np.random.default_rng(0).integers(0, 255, (6, 5, 4, 3)).astype(np.uint8)

    def make(lib: Any) -> Any:
        return lib.Dataset.from_tensor_slices(x)

    for fn in (
        lambda i: tf.gather(i, [2, 1, 0, 0], axis=-1),
        lambda i: tf.identity(i)[..., ::-1],
        lambda i: tf.cast(i, tf.int32)[:, :, ::-1],
        lambda i: tf.reverse(tf.cast(i, tf.float32), axis=[-1]) / 255.0,
    ):
        ds = _same(make, fn)
        assert "→ gather_channels" in _notes(ds) and "TensorFlow graph" not in ds.explain()
    ds = _same(make, lambda i: tf.gather(i, [1, 0], axis=0))  # not the channels: in TensorFlow
    assert "a gather other than of channels" in _notes(ds)


def test_a_per_batch_rest_is_not_used_where_bad_records_are_skipped(images: list[str]) -> None:
    """Skipped one by one: where bad records are skipped before the batch, the rest runs per
    element; a skip asked for after such a batch is refused, naming the remedy."""
    tf = _tf()

    def contrast(path: Any) -> Any:
        img = tf.image.resize_with_crop_or_pad(tf.io.decode_jpeg(tf.io.read_file(path), channels=3), 32, 48)
        return tf.image.adjust_contrast(tf.cast(img, tf.float32), 2.0)

    paths = images[::2]
    ds = sk.data.Dataset.from_tensor_slices(paths).ignore_errors().map(contrast).batch(2)
    assert "per element" in _notes(ds) and "once per batch" not in _notes(ds)
    assert len(list(ds)) == 3
    batched = sk.data.Dataset.from_tensor_slices(paths).map(contrast).batch(2)
    assert "once per batch" in _notes(batched)
    with pytest.raises(sk.InvalidArgumentError, match="before .batch"):
        batched.with_options(on_bad_record="skip")


def test_comparisons_keep_their_precision_and_filters_keep_their_elements(images: list[str]) -> None:
    """An int32 comparison cast to float32 (values float32 cannot hold), a float32 one under
    a logical_not beside an int32 one, and a filter whose predicate crops a rescaled image
    (the element passes through unchanged): all as TensorFlow."""
    tf = _tf()
    a = np.array([16777217, 16777216, 5], dtype=np.int32)
    b = np.array([16777216, 16777216, 4], dtype=np.int32)
    f = np.array([0.7, 0.1, 0.3], dtype=np.float32)

    def make(lib: Any) -> Any:
        return lib.Dataset.from_tensor_slices((a, b, f))

    _same(make, lambda p, q, r: tf.cast(p > q, tf.float32))
    _filtered(make, lambda p, q, r: tf.logical_and(tf.logical_not(r * np.float32(0.1) > 0.03), p >= q))

    def bright(path: Any) -> Any:
        img = tf.io.decode_png(tf.io.read_file(path), channels=3)
        return tf.reduce_mean(tf.image.resize_with_crop_or_pad(tf.cast(img, tf.float32) / 255.0, 4, 4)) > -1.0

    ds = _filtered(lambda lib: lib.Dataset.from_tensor_slices(images[1::2]), bright)
    assert len(list(ds)) == 6


def test_scan_functions_are_traced_and_run_as_graphs_equal_to_tf_data() -> None:
    tf = _tf()
    calls = []

    def running(state: Any, x: Any) -> Any:
        calls.append(1)  # a Python side effect: runs when traced, not per element
        total, count = state
        total = total + tf.cast(x, tf.float32) * 0.5
        return (total, count + 1), {"mean": total / tf.cast(count + 1, tf.float32), "tag": tf.strings.as_string(x)}

    def make(lib: Any) -> Any:
        return lib.Dataset.range(12)

    ds = make(sk.data).scan((np.float32(0), 0), running)
    traced = len(calls)
    ours = list(ds)
    assert len(calls) == traced  # no call per element
    ref = list(make(tf.data).scan((np.float32(0), 0), running).as_numpy_iterator())
    assert len(ours) == len(ref) == 12
    for a, b in zip(ours, ref):
        _equal(a, b)
    assert "scan 'running': TensorFlow function runs as its traced graph" in _notes(ds)

    # A state whose dimensions change: traced again with them unknown, as tf.data does.
    def grow(state: Any, x: Any) -> Any:
        new = tf.concat([state, [x]], 0)
        return new, tf.reduce_sum(new)

    grown = list(make(sk.data).scan(np.zeros([0], np.int64), grow))
    want = list(make(tf.data).scan(np.zeros([0], np.int64), grow).as_numpy_iterator())
    for a, b in zip(grown, want):
        _equal(a, b)
    assert len(grown) == 12


def test_key_and_length_functions_are_traced_and_equal_tf_data() -> None:
    tf = _tf()
    calls = []

    def length(x: Any) -> Any:
        calls.append(1)
        return tf.shape(x)[0]

    def make(lib: Any) -> Any:
        return lib.Dataset.range(23).map(lambda x: tf.fill([x % 5 + 1], x))

    ds = make(sk.data).bucket_by_sequence_length(length, [3, 5], [2, 3, 2])
    traced = len(calls)
    ours = list(ds)
    assert len(calls) == traced
    ref = list(make(tf.data).bucket_by_sequence_length(length, [3, 5], [2, 3, 2]).as_numpy_iterator())
    assert len(ours) == len(ref)
    for a, b in zip(ours, ref):
        _equal(a, b)
    assert "bucket_by_sequence_length 'length': TensorFlow function runs as its traced graph" in _notes(ds)

    def parity(x: Any) -> Any:
        return tf.cast(tf.reduce_sum(x) % 2, tf.int64)

    grouped = make(sk.data).group_by_window(parity, lambda k, w: w.padded_batch(3), window_size=3)
    want = make(tf.data).group_by_window(parity, lambda k, w: w.padded_batch(3), window_size=3)
    got = list(grouped)
    for a, b in zip(got, want.as_numpy_iterator(), strict=True):
        _equal(a, b)
    assert "group_by_window 'parity': TensorFlow function runs as its traced graph" in _notes(grouped)


def test_flat_map_and_interleave_functions_are_traced_and_equal_tf_data() -> None:
    tf = _tf()
    calls = []

    def words(lib: Any) -> Any:
        def split(line: Any) -> Any:
            calls.append(1)  # a Python side effect: runs when traced, not per element
            return lib.Dataset.from_tensor_slices(tf.strings.split(line))

        return split

    lines = ["the cat sat", "on", "", "the mat today"]
    ds = sk.data.Dataset.from_tensor_slices(lines).flat_map(words(sk.data))
    traced = len(calls)
    ours = list(ds)
    assert len(calls) == traced == 1
    ref = list(tf.data.Dataset.from_tensor_slices(lines).flat_map(words(tf.data)).as_numpy_iterator())
    assert len(ours) == len(ref) == 7
    for a, b in zip(ours, ref):
        _equal(a, b)
    assert "flat_map 'split': TensorFlow ops run as its traced graph, per element" in _notes(ds)
    # A dataset of the slices of the graph's values (and nothing more), read one at a time:
    # their rows, handed out by a map and an unbatch, no dataset made per element; a tuple
    # with a dict in it, rows of none in some elements; resumed within an element's rows.
    assert "handed out by a map and an unbatch" in _notes(ds) and "unbatch" in ds.explain().split("\n")[0]

    def ranges(lib: Any) -> Any:
        def rows(x: Any) -> Any:
            r = tf.range(x)
            return lib.Dataset.from_tensor_slices((r, {"sq": r**2, "s": tf.strings.as_string(r)}))

        return rows

    ours, ref = (list(make(lib).as_numpy_iterator() if lib is tf.data else make(lib))
                 for lib, make in ((sk.data, lambda lib: lib.Dataset.range(6).flat_map(ranges(lib))),
                                   (tf.data, lambda lib: lib.Dataset.range(6).flat_map(ranges(lib)))))  # fmt: skip
    assert len(ours) == len(ref) == 15
    for a, b in zip(ours, ref):
        _equal(a, b)
    it = sk.data.Dataset.range(6).flat_map(ranges(sk.data)).iterator()
    head = [next(it) for _ in range(7)]  # within element 4's rows
    rest = list(sk.data.Dataset.range(6).flat_map(ranges(sk.data)).iterator(state=it.state()))
    for a, b in zip(head + rest, ref):
        _equal(a, b)
    # Interleaved (more than one at a time): a dataset per element, as before.
    assert "handed out by a map and an unbatch" in _notes(sk.data.Dataset.range(6).flat_map(ranges(sk.data)))
    # Values stoker's fields cannot hold, or a dict key that is no field name: a dataset per
    # element, whose error (in the code, not the data) is raised under ignore_errors() too.
    for wrong in (
        lambda x: sk.data.Dataset.from_tensor_slices(tf.cast(tf.range(x), tf.uint32)),
        lambda x: sk.data.Dataset.from_tensor_slices({"a/b": tf.range(x)}),
    ):
        ds = sk.data.Dataset.range(4).flat_map(wrong)
        assert "map and an unbatch" not in _notes(ds)
        with pytest.raises(sk.ArgumentTypeError):
            list(ds.ignore_errors())
    ds = sk.data.Dataset.range(6).interleave(ranges(sk.data), cycle_length=2)
    assert "map and an unbatch" not in _notes(ds)
    ref = list(tf.data.Dataset.range(6).interleave(ranges(tf.data), cycle_length=2).as_numpy_iterator())
    _equal(tuple(ds), tuple(ref))

    # Several values of the graph, a method called with a tensor, a dict element, interleaved.
    def blocks(lib: Any) -> Any:
        def repeated(x: Any) -> Any:
            calls.append(1)
            made = lib.Dataset.from_tensors(
                {"v": x * 2, "s": tf.strings.as_string(x), "f": tf.cast(x, tf.float32) * 0.5}
            )
            return made.repeat(tf.cast(x % 3 + 1, tf.int64)).batch(2)

        return repeated

    calls.clear()
    ds = sk.data.Dataset.range(7).interleave(blocks(sk.data), cycle_length=3, block_length=2)
    ours = list(ds)
    assert len(calls) == 1
    ref = list(tf.data.Dataset.range(7).interleave(blocks(tf.data), cycle_length=3, block_length=2).as_numpy_iterator())
    assert len(ours) == len(ref) > 7
    for a, b in zip(ours, ref):
        _equal(a, b)
    assert "interleave 'repeated': TensorFlow ops run as its traced graph" in _notes(ds)

    # Datasets made of the graph's values handed to another (zipped), and a function made in
    # the traced one that captured a tensor of the graph (the line's label): that one cannot
    # run after the trace, so the whole function runs as Python; tf.data's values both ways.
    def zipped(lib: Any) -> Any:
        def fn(line: Any, label: Any) -> Any:
            w = tf.strings.split(line)
            lengths = lib.Dataset.from_tensor_slices(tf.strings.length(w))
            return lib.Dataset.zip((lib.Dataset.from_tensor_slices(w), lengths))

        return fn

    def labelled(lib: Any) -> Any:
        return lambda line, label: lib.Dataset.from_tensor_slices(tf.strings.split(line)).map(lambda w: (w, label))

    pairs_in = (lines, np.arange(len(lines), dtype=np.int64))
    for fn, how in ((zipped, "TensorFlow ops run as its traced graph"), (labelled, "runs eagerly: tracing failed")):
        ds = sk.data.Dataset.from_tensor_slices(pairs_in).flat_map(fn(sk.data))
        ref = list(tf.data.Dataset.from_tensor_slices(pairs_in).flat_map(fn(tf.data)).as_numpy_iterator())
        ours = list(ds)
        assert len(ours) == len(ref) == 7
        for a, b in zip(ours, ref):
            _equal(a, b)
        assert how in _notes(ds), _notes(ds)

    # A dataset made per element with a TensorFlow map of its own: that map is traced for
    # each element's dataset, and what became of it is not kept per element (memory stays
    # bounded); the pipeline's own function is noted once.
    from stoker import dataset as dataset_module

    kept = len(dataset_module._NOTES)
    ds = sk.data.Dataset.range(60).flat_map(
        lambda x: sk.data.Dataset.from_tensors(x).map(lambda y: tf.cast(y, tf.float32) * 2)
    )
    assert [float(v) for v in ds] == [2.0 * i for i in range(60)]
    assert len(dataset_module._NOTES) <= kept + 1

    # A window's function gets datasets: it runs as Python, as tf.data's would give the same.
    def pairs(lib: Any) -> Any:
        return lambda w: w.batch(tf.constant(2, tf.int64))

    ds = sk.data.Dataset.range(5).window(2).flat_map(pairs(sk.data))
    ref = list(tf.data.Dataset.range(5).window(2).flat_map(pairs(tf.data)).as_numpy_iterator())
    ours = list(ds)
    assert len(ours) == len(ref) == 3
    for a, b in zip(ours, ref):
        _equal(a, b)
    assert "its argument is a window" in _notes(ds)

    # A function that reads a tensor's value in NumPy cannot be traced: it runs as Python, as
    # before, and says why.
    ds = sk.data.Dataset.range(1, 4).flat_map(
        lambda x: sk.data.Dataset.from_tensors(tf.cast(x, tf.float32)).repeat(np.asarray(x).item())
    )
    assert [float(v) for v in ds] == [1.0, 2.0, 2.0, 3.0, 3.0, 3.0]
    assert "TensorFlow function runs eagerly: tracing failed" in _notes(ds)


_RESUMED_INTERLEAVE = """
import pickle, sys
import stoker as sk
import tensorflow as tf

def make():
    lines = [" ".join(f"w{i}_{j}" for j in range(i % 5 + 1)) for i in range(40)]
    ds = sk.data.Dataset.from_tensor_slices(lines).shuffle(8, seed=3)
    words = lambda l: sk.data.Dataset.from_tensor_slices(tf.strings.split(l))
    if sys.argv[3] == "interleave":
        return ds.interleave(words, cycle_length=3, block_length=2).batch(4)
    # a flat_map of slices (a map and an unbatch), two epochs
    return ds.flat_map(words).repeat(2)

def values(items):
    return [bytes(w) if sys.argv[3] == "flat_map" else [bytes(x) for x in w] for w in items]

path, at = sys.argv[1], int(sys.argv[4])
if sys.argv[2] == "save":
    assert ("map and an unbatch" in make().explain()) == (sys.argv[3] == "flat_map")
    whole = values(make().iterator())
    it = make().iterator()
    for _ in range(at):
        next(it)
    pickle.dump((it.state(), whole), open(path, "wb"))
else:
    state, whole = pickle.load(open(path, "rb"))
    rest = values(make().iterator(state=state))
    pickle.dump(rest, open(path + ".rest", "wb"))
"""


@pytest.mark.parametrize(
    "how, at",
    [("interleave", 7), ("flat_map", 7), ("flat_map", 120)],  # 120: the end of the first epoch
)
def test_a_traced_interleave_resumes_in_a_new_process(tmp_path: Path, how: str, at: int) -> None:
    import subprocess

    _tf()
    script = tmp_path / "resume.py"
    script.write_text(_RESUMED_INTERLEAVE)
    state = tmp_path / "state.pkl"
    for step in ("save", "load"):
        subprocess.run(
            [sys.executable, str(script), str(state), step, how, str(at)], check=True, capture_output=True, timeout=300
        )
    import pickle

    _, whole = pickle.loads(state.read_bytes())
    rest = pickle.loads((tmp_path / "state.pkl.rest").read_bytes())
    assert len(whole) > at and rest == whole[at:]
    if how == "flat_map":
        assert len(whole) == 240 and whole[:120] != whole[120:]  # 120 words an epoch, reshuffled


def test_an_element_whose_dataset_function_raises_is_skipped_under_ignore_errors_and_named_otherwise() -> None:
    tf = _tf()
    texts = ["1", "2", "x", "4", "5 6", "y"]

    def parsed(lib: Any) -> Any:
        # "x" and "y" are not numbers: the function raises on those elements (and runs
        # traced in stoker, as its graph).
        return lambda s: lib.Dataset.from_tensor_slices(tf.strings.to_number(tf.strings.split(s), tf.int64))

    def eager(lib: Any) -> Any:
        # Reads a value in NumPy in stoker: runs eagerly, one call per element (tf.data's
        # reference counts in the graph, the same count).
        def count(s: Any) -> Any:
            if lib is sk.data:
                return 1 + int(np.asarray(tf.strings.length(s)))
            return 1 + tf.cast(tf.strings.length(s), tf.int64)

        return lambda s: lib.Dataset.from_tensors(tf.strings.to_number(s, tf.int64)).repeat(count(s))

    # ("5 6" is one number to neither: `eager` raises on it too.)
    for fn, how, bad in ((parsed, "traced graph", 2), (eager, "runs eagerly", 3)):
        for lib_op in ("flat_map", "interleave"):

            def make(lib: Any, fn: Any = fn, lib_op: str = lib_op) -> Any:
                ds = lib.Dataset.from_tensor_slices(texts)
                if lib_op == "flat_map":
                    return ds.flat_map(fn(lib))
                return ds.interleave(fn(lib), cycle_length=2, block_length=1)

            want = [int(v) for v in make(tf.data).ignore_errors().as_numpy_iterator()]
            ds = make(sk.data).ignore_errors()
            assert how in _notes(ds)
            it = iter(ds)
            assert [int(v) for v in it] == want and len(want) > 0
            assert it.skipped() == bad
            assert sum(s["skipped"] for s in ds.stats()) == bad
            reasons = [s["last_skip_reason"] for s in ds.stats() if s.get("last_skip_reason")]
            # (a flat_map of the slices of the graph's values is a map and an unbatch: its map
            # names the element as a map does)
            assert len(reasons) == 1 and re.match("(input )?element 5: ", reasons[0]) and "y" in reasons[0]

            # Without the policy: the function's own error, noting the element.
            with pytest.raises(tf.errors.InvalidArgumentError) as raised:
                list(make(sk.data))
            assert re.search(r"\belement 2\b", "".join(getattr(raised.value, "__notes__", []))), raised.value

            # Saved after the first skip, resumed: the rest, and both skips counted once.
            it = make(sk.data).ignore_errors().iterator()
            head = [int(next(it))]
            while it.skipped() == 0:
                head.append(int(next(it)))
            first = it.skipped()
            rest = make(sk.data).ignore_errors().iterator(state=it.state())
            assert head + [int(v) for v in rest] == want
            assert 1 <= first < bad and rest.skipped() == bad

    # An error in the code, not the data (a wrong argument, not returning a dataset, a
    # misspelt name, in the function or in an inner map's), would fail for every element: it
    # stops the pipeline under ignore_errors() too.
    for wrong, error in (
        (lambda x: sk.Dataset.range(int(x)).batch(0), sk.InvalidArgumentError),
        (lambda x: np.arange(int(x)), sk.ArgumentTypeError),
        (lambda x: sk.Dataset.range(undefined_name), NameError),  # type: ignore[name-defined]  # noqa: F821
        (lambda x: sk.Dataset.range(int(x)).map(lambda y: y * undefined_name), NameError),  # type: ignore[name-defined]  # noqa: F821
    ):
        with pytest.raises(error):
            list(sk.Dataset.range(1, 4).flat_map(wrong).ignore_errors())

    # A Python function (no TensorFlow) under the same rule.
    def plain(x: Any) -> sk.Dataset:
        if int(x) % 3 == 1:
            raise ValueError(f"no dataset for {int(x)}")
        return sk.Dataset.range(int(x))

    ds = sk.Dataset.range(6).flat_map(plain).ignore_errors()
    it = iter(ds)
    assert [int(v) for v in it] == [0, 1, 0, 1, 2, 0, 1, 2, 3, 4] and it.skipped() == 2
    with pytest.raises(ValueError, match="no dataset for 1") as err:
        list(sk.Dataset.range(6).flat_map(plain))
    assert "input element 1" in "".join(err.value.__notes__)


_SEEDED_CHILD = """
import json, sys
import numpy as np
import tensorflow as tf
import stoker as sk

def jitter(x):
    return tf.cast(x, tf.float32) + tf.random.uniform([])

ds = sk.data.Dataset.range(12).map(jitter).batch(3)
for line in sys.stdin.read().split():
    print(json.dumps([b.tolist() for b in ds.iterator(state=bytes.fromhex(line))]))
"""


def test_random_ops_in_tensorflow_functions_draw_from_the_pipeline_seed() -> None:
    import json
    import subprocess

    tf = _tf()

    def jitter(x: Any) -> Any:
        return tf.cast(x, tf.float32) + tf.random.uniform([])

    # Seeded: no warning; the same values in two passes over an epoch, in another epoch
    # others; each uniform in [x, x + 1).
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = sk.data.Dataset.range(64).map(jitter)
        again = sk.data.Dataset.range(64).map(jitter)
    assert "its random ops (tf.random.uniform) draw from the element's seed" in _notes(ds)
    assert "not seeded" not in _notes(ds)
    first = [float(v) for v in ds.iterator(epoch=0)]
    assert first == [float(v) for v in ds.iterator(epoch=0)]
    assert first != [float(v) for v in ds.iterator(epoch=1)]
    assert all(x <= v < x + 1 for x, v in enumerate(first)) and len(set(v % 1 for v in first)) == 64
    # (a start state carries the drawn seed's value to the same pipeline made again)
    assert [float(v) for v in again.iterator(epoch=0)] != first
    start = ds.iterator(epoch=0).state()
    assert [float(v) for v in again.iterator(state=start)] == first

    # Given a seed (an op's, or tf.random.set_seed's), the values are fixed by it, in every
    # dataset and run: as many threads, and the TensorFlow part run once per batch
    # (vectorized), give each element the same values.
    def seeded(x: Any) -> Any:
        return tf.cast(x, tf.float32) + tf.random.uniform([], seed=7)

    fixed = [float(v) for v in sk.data.Dataset.range(64).map(seeded)]
    assert fixed == [float(v) for v in sk.data.Dataset.range(64).map(seeded, num_parallel_calls=2)]
    assert fixed != first and fixed != [float(v) for v in sk.data.Dataset.range(64).map(jitter)]
    batches = sk.data.Dataset.range(64).map(seeded).batch(8)
    assert "once per batch" in _notes(batches)
    assert [float(v) for b in batches for v in b] == fixed
    eight = sk.data.Dataset.range(64).map(lambda x: tf.cast(x, tf.float32) + tf.random.uniform([], seed=8))
    assert fixed != [float(v) for v in eight]
    tf.random.set_seed(11)
    try:
        globally = [float(v) for v in sk.data.Dataset.range(64).map(jitter)]
        assert globally == [float(v) for v in sk.data.Dataset.range(64).map(jitter)]
    finally:
        tf.random.set_seed(None)
    assert globally != [float(v) for v in sk.data.Dataset.range(64).map(jitter)]

    # Saved mid-epoch, restored in another process (whose drawn seeds are others): the rest
    # as this process gives it.
    ds = sk.data.Dataset.range(12).map(jitter).batch(3)
    it = ds.iterator(epoch=1)
    next(it)
    state = it.state()
    rest = [b.tolist() for b in it]
    # and saved at the epoch's end: the next epoch, as this process gives it
    end = it.state()
    following = [b.tolist() for b in ds.iterator(state=end)]
    assert following != rest and len(following) == 4
    child = subprocess.run(
        [sys.executable, "-c", _SEEDED_CHILD],
        input=f"{state.hex()}\n{end.hex()}",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    assert [json.loads(line) for line in child.stdout.strip().splitlines()[-2:]] == [rest, following]

    # The stateless forms keep the distributions: normal, truncated normal, categorical,
    # shuffle; and tf.image's random functions (random_brightness calls random_uniform).
    def draws(x: Any) -> Any:
        return {
            "normal": tf.random.normal([4], 1.0, 2.0),
            "truncated": tf.random.truncated_normal([4]),
            "category": tf.random.categorical(tf.math.log([[0.25, 0.75]]), 4)[0],
            "shuffled": tf.random.shuffle(tf.range(5)),
            "bright": tf.image.random_brightness(tf.zeros([2, 2, 1]), 0.5),
            "int": tf.random.uniform([], 3, 7, tf.int64),
        }

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = sk.data.Dataset.range(2000).map(draws)
    out = list(ds.iterator(epoch=0))
    assert [e["normal"].tolist() for e in out[:50]] == [e["normal"].tolist() for e in list(ds.iterator(epoch=0))[:50]]
    normal = np.concatenate([e["normal"] for e in out])
    assert abs(normal.mean() - 1.0) < 0.1 and abs(normal.std() - 2.0) < 0.1
    truncated = np.concatenate([e["truncated"] for e in out])
    assert np.abs(truncated).max() <= 2.0 and abs(truncated.std() - 0.88) < 0.05
    ones = np.concatenate([e["category"] for e in out])
    assert set(ones.tolist()) == {0, 1} and abs(ones.mean() - 0.75) < 0.03
    assert all(sorted(e["shuffled"].tolist()) == [0, 1, 2, 3, 4] for e in out)
    assert len({tuple(e["shuffled"].tolist()) for e in out}) == 120
    bright = np.array([float(e["bright"][0, 0, 0]) for e in out])
    assert bright.min() >= -0.5 and bright.max() < 0.5 and abs(bright.mean()) < 0.05
    assert all(np.all(e["bright"] == e["bright"][0, 0, 0]) for e in out)
    assert sorted({int(e["int"]) for e in out}) == [3, 4, 5, 6]
    # Each element its own draws, and each random op of an element its own.
    assert not np.array_equal(out[0]["normal"], out[1]["normal"])
    pairs = list(sk.data.Dataset.range(3).map(lambda x: (tf.random.uniform([4]), tf.random.uniform([4]))))
    assert all(not np.array_equal(a, b) for a, b in pairs)
    assert "tf.random.normal, tf.random.truncated_normal, tf.random.categorical" in _notes(ds)

    # In a condition's branch, in a filter: seeded too, and repeatable.
    def branch(x: Any) -> Any:
        if x > 3:
            return tf.random.normal([])
        return tf.constant(0.0)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = sk.data.Dataset.range(8).map(branch)
        kept = sk.data.Dataset.range(400).filter(lambda x: tf.random.uniform([]) > 0.5)
    values = [float(v) for v in ds.iterator(epoch=0)]
    assert values == [float(v) for v in ds.iterator(epoch=0)] and values[:4] == [0.0] * 4 and len(set(values[4:])) == 4
    taken = [int(v) for v in kept.iterator(epoch=0)]
    assert taken == [int(v) for v in kept.iterator(epoch=0)] and 150 < len(taken) < 250 and taken == sorted(set(taken))
    assert "draw from the element's seed" in _notes(kept)

    # A flip whose input TensorFlow computes (a random scaling) is not translated: its
    # random op is seeded too, as the scaling's.
    images = np.zeros((6, 4, 4, 1), np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = sk.data.Dataset.from_tensor_slices(images).map(
            lambda i: tf.image.random_flip_left_right(i * tf.random.uniform([], 0.5, 1.5))
        )
    assert "tf.random.uniform in random_flip_left_right" in _notes(ds)
    assert [a.tolist() for a in ds.iterator(epoch=0)] == [a.tolist() for a in ds.iterator(epoch=0)]
    with warnings.catch_warnings():  # the flip the only random op
        warnings.simplefilter("error")
        ds = sk.data.Dataset.from_tensor_slices(images).map(
            lambda i: tf.image.random_flip_left_right(tf.math.cumsum(i, axis=0))
        )
    assert "(tf.random.uniform in random_flip_left_right) draw" in _notes(ds)

    # A loop's body is traced once for all its iterations: its random ops take the element's
    # seed folded with the loop's counters (nested loops too), so each iteration draws its own.
    def per_image(batch: Any) -> Any:
        return tf.map_fn(lambda i: tf.image.random_brightness(i, 0.5), batch), tf.random.normal([])

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = sk.data.Dataset.from_tensors(images).repeat(2).map(per_image)
    assert "random ops (tf.random.uniform in map, tf.random.normal) draw from the element's seed" in _notes(ds)
    shifts = [[float(v[0, 0, 0]) for v in shifted] for shifted, _ in ds.iterator(epoch=0)]
    assert len(set(shifts[0] + shifts[1])) == 12  # each image of each element its own shift
    assert shifts == [[float(v[0, 0, 0]) for v in shifted] for shifted, _ in ds.iterator(epoch=0)]
    assert shifts != [[float(v[0, 0, 0]) for v in shifted] for shifted, _ in ds.iterator(epoch=1)]

    def digits(x: Any) -> Any:  # AutoGraph's loops over tensors, nested
        s = tf.zeros([], tf.int64)
        for _ in tf.range(3):
            for _ in tf.range(2):
                s = s * 10 + tf.random.uniform([], 0, 10, tf.int64)
        return s

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = sk.data.Dataset.range(300).map(digits)
    drawn = [int(v) for v in ds.iterator(epoch=0)]
    assert drawn == [int(v) for v in ds.iterator(epoch=0)] and len(set(drawn)) > 290
    places = np.array([[v // 10**p % 10 for p in range(6)] for v in drawn])
    assert all(len(set(places[:, p])) == 10 for p in range(6)) and abs(places.mean() - 4.5) < 0.2
    # A tf.data dataset's function inside the function runs many times: named, not seeded.
    def inner(x: Any) -> Any:
        mapped = tf.data.Dataset.range(4).map(lambda i: tf.random.uniform([]))
        return mapped.reduce(0.0, lambda a, b: a + b) + tf.random.uniform([])

    with pytest.warns(RuntimeWarning, match=r"random ops \(RandomUniform\) run in TensorFlow, not seeded"):
        ds = sk.data.Dataset.range(3).map(inner)
    assert "its random ops (tf.random.uniform) draw from the element's seed" in _notes(ds)
    # tf.vectorized_map's body: seeded with its index (see below), nothing named.
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        sk.data.Dataset.from_tensors(images).map(lambda b: tf.vectorized_map(lambda i: i + tf.random.uniform([]), b))

    # A tf.function it calls is traced into its graph: seeded too. One compiled by XLA stays a
    # call of its own (traced once, before): its random ops are named.
    @tf.function
    def helper(x: Any) -> Any:
        return tf.cast(x, tf.float32) + tf.random.uniform([])

    helper(tf.constant(0, tf.int64))  # a trace of its own, cached before stoker's
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = sk.data.Dataset.range(4).map(lambda x: helper(x) * 2.0)
    assert "its random ops (tf.random.uniform) draw from the element's seed" in _notes(ds)
    assert [float(v) for v in ds.iterator(epoch=0)] == [float(v) for v in ds.iterator(epoch=0)]
    assert [float(v) for v in ds.iterator(epoch=0)] != [float(v) for v in ds.iterator(epoch=1)]

    @tf.function(jit_compile=True)
    def compiled(x: Any) -> Any:
        return tf.cast(x, tf.float32) + tf.random.uniform([])

    with pytest.warns(RuntimeWarning, match="not seeded by stoker"):
        sk.data.Dataset.range(4).map(lambda x: compiled(x) * 2.0)

    # Keras's random preprocessing layers (a tutorial's augmentation), which draw from a
    # SeedGenerator's state: traced, and seeded per element; in a loop's body, named.
    keras = pytest.importorskip("keras")
    augment = keras.Sequential([keras.layers.RandomFlip("horizontal"), keras.layers.RandomRotation(0.1)])
    photos = np.random.default_rng(2).random((40, 8, 8, 3)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = sk.data.Dataset.from_tensor_slices(photos).map(lambda x: augment(x, training=True))
    assert "its random ops (keras.random in sequential" in _notes(ds)
    first = [a.tolist() for a in ds.iterator(epoch=0)]
    assert first == [a.tolist() for a in ds.iterator(epoch=0)] != [a.tolist() for a in ds.iterator(epoch=1)]
    flip = keras.layers.RandomFlip("horizontal")
    flipped = [bool(np.array_equal(a, p[:, ::-1])) for a, p in zip(sk.data.Dataset.from_tensor_slices(photos).map(
        lambda x: flip(x, training=True)).iterator(epoch=0), photos)]  # fmt: skip
    assert 8 < sum(flipped) < 32  # each element its own decision
    with warnings.catch_warnings():  # in a loop's body: each iteration its own
        warnings.simplefilter("error")
        ds = sk.data.Dataset.from_tensors(photos).map(lambda b: tf.map_fn(lambda x: flip(x, training=True), b))
    flipped = [bool(np.array_equal(a, p[:, ::-1])) for a, p in zip(next(iter(ds)), photos)]
    assert 8 < sum(flipped) < 32
    with warnings.catch_warnings():  # in a vectorized_map's body too
        warnings.simplefilter("error", RuntimeWarning)
        ds = sk.data.Dataset.from_tensors(photos).map(lambda b: tf.vectorized_map(lambda x: flip(x, training=True), b))
    flipped = [bool(np.array_equal(a, p[:, ::-1])) for a, p in zip(next(iter(ds)), photos)]
    assert 8 < sum(flipped) < 32

    def twice(layer: Any) -> list[Any]:  # two datasets, each its seed (drawn, unless given)
        return [
            [a.tolist() for a in sk.data.Dataset.from_tensor_slices(photos).map(lambda x: layer(x, training=True))]
            for _ in range(2)
        ]

    given = twice(keras.layers.RandomFlip("horizontal", seed=42))
    assert given[0] == given[1]
    drawn = twice(keras.layers.RandomRotation(0.2))
    assert drawn[0] != drawn[1]
    # A layer whose op draws its seed through another module (the elastic transform's image op).
    elastic = keras.layers.RandomElasticTransform()
    ds = sk.data.Dataset.from_tensor_slices(photos[:4]).map(lambda x: elastic(x, training=True))
    assert [a.tolist() for a in ds.iterator(epoch=0)] == [a.tolist() for a in ds.iterator(epoch=0)]
    # Keras's Normalization of a feature vector keeps its statistics' leading axis, as in
    # tf.data: (5,) in, (1, 5) out.
    features = photos.reshape(40, -1)[:, :5]
    norm = keras.layers.Normalization()
    norm.adapt(features)
    ds = _same(lambda lib: lib.Dataset.from_tensor_slices(features), lambda x: norm(x))
    assert next(iter(ds)).shape == (1, 5)

    # A tf.vectorized_map's body: each row its own draws (the seed folded with the body's
    # index), the same per element and per batch, and in every run.
    def rows(v: Any) -> Any:
        return tf.vectorized_map(lambda row: row + tf.random.uniform([], seed=3), v)

    zeros = np.zeros((6, 5), np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        per_element = sk.data.Dataset.from_tensor_slices(zeros).map(rows)
    drawn = [e.tolist() for e in per_element.iterator(epoch=0)]
    assert drawn == [e.tolist() for e in per_element.iterator(epoch=0)] and len({v for e in drawn for v in e}) == 30
    assert "tf.random.uniform in loop_body) draw from the element's seed" in _notes(per_element)
    batched = sk.data.Dataset.from_tensor_slices(zeros).map(rows).batch(3)
    assert [r.tolist() for b in batched.iterator(epoch=0) for r in b] == drawn

    # What stoker does not seed is still named: a draw of a candidate sampler beside a seeded
    # uniform, a flat_map's function (the dataset it makes per element).
    def sampled(x: Any) -> Any:
        return tf.cast(candidates(), tf.float32) + tf.random.uniform([])

    def candidates() -> Any:
        return tf.random.uniform_candidate_sampler([[0]], 1, 1, True, 5)[0][0]

    with pytest.warns(RuntimeWarning, match=r"random ops \(UniformCandidateSampler\) run in TensorFlow, not seeded"):
        ds = sk.data.Dataset.range(4).map(sampled)
    assert "random ops (UniformCandidateSampler)" in _notes(ds) and "random ops (tf.random.uniform) draw" in _notes(ds)
    with pytest.warns(RuntimeWarning, match="RandomUniformInt"):
        ds = sk.data.Dataset.range(4).flat_map(lambda x: sk.data.Dataset.range(tf.random.uniform([], 1, 4, tf.int64)))
    assert "random ops (RandomUniformInt)" in _notes(ds)

    # In datasets made per element: an inner map seeded, repeatable where its ops were given
    # seeds (else drawn per dataset, as an inner shuffle's); what is not seeded said once,
    # not per element.
    inner = sk.data.Dataset.range(20).flat_map(
        lambda x: sk.data.Dataset.from_tensors(x).map(lambda y: y + tf.random.uniform([], 0, 9, tf.int64, seed=2))
    )
    assert [int(v) for v in inner.iterator(epoch=0)] == [int(v) for v in inner.iterator(epoch=0)]
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        ds = sk.data.Dataset.range(20).flat_map(
            lambda x: sk.data.Dataset.from_tensors(x).map(lambda y: y + candidates())
        )
        assert len(list(ds)) == 20
    unseeded = [w for w in said if "UniformCandidateSampler" in str(w.message)]
    assert len(unseeded) == 1 and issubclass(unseeded[0].category, RuntimeWarning)

    # A random flip it translates draws from the pipeline's seed as the native op: no
    # TensorFlow left, repeatable.
    images = np.arange(4 * 2 * 3 * 1, dtype=np.uint8).reshape(4, 2, 3, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = sk.data.Dataset.from_tensor_slices(images).map(lambda i: tf.image.random_flip_left_right(i, seed=4))
        ds.explain()
    assert "translated to native ops" in _notes(ds) and "runs as its traced graph" not in _notes(ds)
    assert [a.tolist() for a in ds.iterator(epoch=0)] == [a.tolist() for a in ds.iterator(epoch=0)]


def test_gamma_poisson_bounding_boxes_and_tf_compat_v1_names_draw_from_the_element_seed() -> None:
    """``tf.random.gamma`` and ``poisson``, ``tf.image.sample_distorted_bounding_box`` (the
    Inception crop of tensorflow/models' ImageNet preprocessing, v2 and tf.compat.v1's), and
    the random functions under their ``tf.compat.v1`` names take the element's seed."""
    tf = _tf()
    boxes = tf.constant([[[0.1, 0.1, 0.9, 0.9]]], tf.float32)

    def draws(x: Any) -> Any:
        begin, size, _ = tf.image.sample_distorted_bounding_box(
            [64, 64, 3], boxes, min_object_covered=0.1, area_range=(0.05, 1.0), use_image_if_no_bounding_boxes=True
        )
        v1_begin, _, _ = tf.compat.v1.image.sample_distorted_bounding_box([64, 64, 3], boxes, min_object_covered=0.1)
        return {
            "gamma": tf.random.gamma([], 2.0),
            "gammas": tf.random.gamma([3], [[1.0], [2.0]], beta=[1.0, 2.0, 4.0]),  # [3] + the parameters' shape
            "poisson": tf.random.poisson([], 3.0),
            "poissons": tf.compat.v1.random.poisson([3.0, 30.0], [4]),
            "v1_uniform": tf.compat.v1.random_uniform([]),
            "v1_normal": tf.compat.v1.random.normal([]),
            "v1_multinomial": tf.compat.v1.multinomial(tf.math.log([[0.25, 0.75]]), 8, output_dtype=tf.int32)[0],
            "begin": begin,
            "size": size,
            "v1_begin": v1_begin,
        }

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = sk.data.Dataset.range(2000).map(draws)
    notes = _notes(ds)
    for what in ("tf.random.gamma", "tf.random.poisson", "tf.image.sample_distorted_bounding_box",
                 "tf.compat.v1.multinomial"):  # fmt: skip
        assert what in notes
    first = list(ds.iterator(epoch=0))
    columns = {k: np.array([e[k] for e in first]) for k in first[0]}
    again = list(ds.iterator(epoch=0))
    assert all(np.array_equal(columns[k], np.array([e[k] for e in again])) for k in columns)
    assert not np.array_equal(columns["gamma"], np.array([e["gamma"] for e in ds.iterator(epoch=1)]))
    assert abs(columns["gamma"].mean() - 2) < 0.15 and abs(columns["poisson"].mean() - 3) < 0.15
    # shapes as TensorFlow's; the means alpha / beta and lam
    assert columns["gammas"].shape == (2000, 3, 2, 3) and columns["poissons"].shape == (2000, 4, 2)
    means = columns["gammas"].mean(axis=(0, 1))
    assert np.allclose(means, np.array([[1.0], [2.0]]) / [1.0, 2.0, 4.0], rtol=0.1)
    assert np.allclose(columns["poissons"].mean(axis=(0, 1)), [3.0, 30.0], rtol=0.05)
    assert abs(columns["v1_uniform"].mean() - 0.5) < 0.05 and abs(columns["v1_normal"].std() - 1) < 0.1
    # multinomial: its output dtype, the categories' probabilities, each element its own draws
    assert columns["v1_multinomial"].dtype == np.int32 and columns["v1_multinomial"].shape == (2000, 8)
    assert abs(columns["v1_multinomial"].mean() - 0.75) < 0.02
    assert len({tuple(m) for m in columns["v1_multinomial"]}) > 100
    for k in ("begin", "v1_begin"):
        assert len({tuple(b) for b in columns[k]}) > 100  # each element its own box
    assert (columns["begin"][:, :2] + columns["size"][:, :2] <= 64).all()

    # Given seeds (v1's seed and seed2): the same in every run.
    def seeded(x: Any) -> Any:
        return tf.compat.v1.image.sample_distorted_bounding_box([64, 64, 3], boxes, seed=1, seed2=2)[0]

    def run() -> list[list[int]]:
        return [b.tolist() for b in sk.data.Dataset.range(30).map(seeded).iterator(epoch=0)]

    assert run() == run()


def test_a_random_generator_in_a_map_function_draws_from_the_element_seed() -> None:
    """The TensorFlow tutorial's augmentation: a ``tf.random.Generator`` made ``from_seed``
    hands each element seeds for ``tf.image``'s stateless ops. Its draws take the element's
    seed: repeatable in every run, on 1 or N threads, per batch or per element, other values
    each epoch; the generator's state is left as it is."""
    tf = _tf()
    images = np.random.default_rng(3).random((2000, 6, 6, 3)).astype(np.float32)

    def make(seed: int = 123, threads: int | None = None) -> sk.Dataset:
        rng = tf.random.Generator.from_seed(seed, alg="philox")

        def augment(image: Any, seed: Any) -> Any:
            image = tf.image.resize_with_crop_or_pad(image, 8, 8)
            new_seed = tf.random.split(seed, num=1)[0, :]
            image = tf.image.stateless_random_crop(image, size=[6, 6, 3], seed=seed)
            image = tf.image.stateless_random_brightness(image, max_delta=0.5, seed=new_seed)
            return tf.clip_by_value(image, 0, 1)

        def f(x: Any) -> Any:
            seed = rng.make_seeds(1)[:, 0]
            return augment(x, seed), rng.normal([]), rng.uniform([], 0, 10, tf.int32), rng.binomial([], 10.0, 0.5)

        ds = sk.data.Dataset.from_tensor_slices(images)
        return (ds.with_options(threads=threads) if threads else ds).map(f, num_parallel_calls=sk.data.AUTOTUNE)

    def values(ds: sk.Dataset, epoch: int = 0) -> list[Any]:
        return [tuple(np.asarray(v).tolist() for v in e) for e in ds.iterator(epoch=epoch)]

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = make()
    assert "draw from the element's seed" in _notes(ds) and "tf.random.Generator" in _notes(ds)
    first = values(ds)
    assert first == values(ds) == values(make()) == values(make(threads=1))  # a fresh generator from the same seed
    assert first != values(make(124)) and first != values(ds, epoch=1)
    # The generator's state (with the function's code) is the draws' given seed: left as it
    # is, by building the pipeline and by running it; two functions using it differ.
    def shifted(generator: Any) -> Any:
        return lambda x: x + generator.normal([])

    rng = tf.random.Generator.from_seed(5)
    state = rng.state.numpy().tolist()
    ds = sk.data.Dataset.from_tensor_slices(images[:20]).map(shifted(rng))
    each = [a.tolist() for a in ds.iterator(epoch=0)]
    assert rng.state.numpy().tolist() == state
    pairs = sk.data.Dataset.range(50).map(lambda x: rng.normal([])).map(lambda a: tf.stack([a, rng.normal([])]))
    assert all(a != b for a, b in pairs.iterator(epoch=0))

    # A state saved from one build resumes in another built after other builds (as a new
    # process may build the pipeline more or fewer times first): the same rest.
    def build(generator: Any) -> sk.Dataset:
        return sk.data.Dataset.range(10).map(lambda x: tf.cast(x, tf.float32) + generator.normal([]))

    whole = [float(v) for v in build(tf.random.Generator.from_seed(7)).iterator(epoch=0)]
    it = build(tf.random.Generator.from_seed(7)).iterator(epoch=0)
    head = [float(next(it)) for _ in range(4)]
    other = tf.random.Generator.from_seed(7)
    build(other)
    assert head + [float(v) for v in build(other).iterator(state=it.state())] == whole
    # Per batch (the graph vectorized), the same values (a generator from the same seed).
    ds = sk.data.Dataset.from_tensor_slices(images[:20]).map(shifted(tf.random.Generator.from_seed(5))).batch(5)
    assert "once per batch" in _notes(ds)
    assert [row.tolist() for b in ds.iterator(epoch=0) for row in b] == each
    # A generator only the function refers to (made by a factory) lives as long as the
    # pipeline: the graph holds its variable weakly.
    def factory() -> Any:
        own = tf.random.Generator.from_seed(9)
        return lambda x: x + own.normal([])

    batched = sk.data.Dataset.from_tensor_slices(images[:8]).map(factory()).batch(4)
    import gc

    gc.collect()
    assert len(list(batched)) == 2
    # Their distributions.
    crops, normal, ints, counts = (np.array(c) for c in zip(*first))
    assert len({c.tobytes() for c in crops}) == len(crops)
    # (float32 draws: a repeat among 2,000 happens by chance a few times in a hundred)
    assert abs(normal.mean()) < 0.1 and abs(normal.std() - 1) < 0.1 and len(set(normal)) >= len(normal) - 3
    assert set(ints) == set(range(10)) and abs(counts.mean() - 5) < 0.2
    # The global generator's state is not a given seed: the pipeline draws one.
    glob = tf.random.get_global_generator()

    def drawn() -> list[float]:
        ds = sk.data.Dataset.range(50).map(lambda x: tf.cast(x, tf.float32) + glob.normal([]))
        return [float(v) for v in ds.iterator(epoch=0)] + [float(v) for v in ds.iterator(epoch=0)]

    one = drawn()
    assert one[:50] == one[50:] != drawn()[:50]
    # In a loop's body, each iteration its own.
    ds = sk.data.Dataset.from_tensors(images[:4]).map(lambda b: tf.map_fn(lambda i: i + glob.normal([]), b))
    shifted = next(iter(ds))
    assert len({float(a[0, 0, 0] - b[0, 0, 0]) for a, b in zip(shifted, images[:4])}) == 4


def test_the_function_of_a_dataset_made_per_element_is_traced_once_per_signature() -> None:
    tf = _tf()
    calls: list[int] = []

    def scaled(x: Any) -> Any:
        calls.append(1)  # runs when traced
        return tf.cast(x, tf.float32) * 2.0 + 1.0

    def odd(x: Any) -> Any:
        calls.append(1)
        return tf.equal(x % 2, 1)

    def make(lib: Any) -> Any:
        return lib.Dataset.range(40).flat_map(lambda x: lib.Dataset.range(x, x + 3).filter(odd).map(scaled))

    ours = [float(v) for v in make(sk.data)]
    assert ours == [float(v) for v in make(tf.data).as_numpy_iterator()] and len(ours) > 40
    assert len(calls) <= 4  # each function once (tf.data's trace of the outer one included)

    # Elements whose datasets differ in shape: one trace per shape, the values right.
    calls.clear()
    ds = sk.data.Dataset.range(1, 30).flat_map(lambda n: sk.data.Dataset.from_tensors(tf.range(n % 3 + 1)).map(scaled))
    assert [v.tolist() for v in ds] == [[2.0 * i + 1.0 for i in range(n % 3 + 1)] for n in range(1, 30)]
    assert len(calls) <= 4

    # An inner function made per element, closing over the element's value: each element's
    # own trace, never another element's.
    def closing(lib: Any) -> Any:
        return lambda x: lib.Dataset.range(3).map(lambda y: tf.cast(y * x, tf.float32))

    ours = [float(v) for v in sk.data.Dataset.range(6).flat_map(closing(sk.data))]
    assert ours == [float(v) for v in tf.data.Dataset.range(6).flat_map(closing(tf.data)).as_numpy_iterator()]
    assert ours == [float(y * x) for x in range(6) for y in range(3)]

    # A predicate that is not one: said, whether made per element or not (there, under
    # ignore_errors() too: an error in the code is not bad data).
    with pytest.raises(sk.InvalidArgumentError, match="must return a scalar bool tensor"):
        sk.data.Dataset.range(3).filter(lambda x: tf.cast(x, tf.float32))
    inner = sk.data.Dataset.range(1, 4).flat_map(
        lambda x: sk.data.Dataset.range(x).filter(lambda y: tf.cast(y, tf.float32))
    )
    with pytest.raises(sk.InvalidArgumentError, match="must return a scalar bool tensor"):
        list(inner.ignore_errors())


def test_an_element_whose_group_key_function_raises_is_skipped_under_ignore_errors() -> None:
    tf = _tf()
    texts = ["1", "2", "x", "4", "5", "y", "7", "8", "10", "z", "11"]

    def make(lib: Any) -> Any:
        return lib.Dataset.from_tensor_slices(texts).group_by_window(
            lambda s: tf.strings.to_number(s, tf.int64) % 2, lambda k, w: w.batch(2), window_size=2
        )

    want = [b.tolist() for b in make(tf.data).ignore_errors().as_numpy_iterator()]
    it = make(sk.data).ignore_errors().iterator()
    got = [b.tolist() for b in it]
    assert got == want and len(want) >= 4
    assert it.skipped() == 3
    ds = make(sk.data).ignore_errors()
    list(ds)
    reasons = [s["last_skip_reason"] for s in ds.stats() if s.get("last_skip_reason")]
    assert len(reasons) == 1 and reasons[0].startswith("element 9: <lambda> raised"), reasons

    # Saved after each batch, resumed: the skips so far carried, the rest, all counted once.
    for at in range(1, len(want)):
        it = make(sk.data).ignore_errors().iterator()
        head = [next(it).tolist() for _ in range(at)]
        before = it.skipped()
        rest = make(sk.data).ignore_errors().iterator(state=it.state())
        assert rest.skipped() == before
        assert head + [b.tolist() for b in rest] == want and rest.skipped() == 3

    # Skips inside the datasets reduce_func makes are counted too.
    def halves(k: Any, w: Any) -> Any:
        return w.map(lambda s: tf.strings.to_number(s, tf.int64) // 2)

    def reduced(lib: Any) -> Any:
        one_key = lambda s: tf.cast(tf.strings.length(s) * 0, tf.int64)  # noqa: E731
        return lib.Dataset.from_tensor_slices(texts).group_by_window(one_key, halves, 4)

    want = [int(v) for v in reduced(tf.data).ignore_errors().as_numpy_iterator()]
    it = reduced(sk.data).ignore_errors().iterator()
    assert [int(v) for v in it] == want and it.skipped() == 3

    # A Python key function (no TensorFlow), and code errors that stop it under the policy.
    def parity(x: Any) -> int:
        if int(x) % 5 == 3:
            raise ValueError("no key")
        return int(x) % 2

    it = sk.Dataset.range(10).group_by_window(parity, lambda k, w: w.batch(9), 9).ignore_errors().iterator()
    assert [b.tolist() for b in it] == [[0, 2, 4, 6], [1, 5, 7, 9]] and it.skipped() == 2
    with pytest.raises(sk.ArgumentTypeError, match="integer scalar"):
        list(sk.Dataset.range(4).group_by_window(lambda x: 0.5, lambda k, w: w.batch(2), 2).ignore_errors())
    by_length = sk.Dataset.range(4).bucket_by_sequence_length(lambda x: [1, 2], [2], [2, 2])
    with pytest.raises(sk.ArgumentTypeError, match="element_length_func must return an integer scalar"):
        list(by_length.ignore_errors())

    # Without the policy: the function's error, noting the element.
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        list(make(sk.data))
    assert "on element 2" in "".join(getattr(raised.value, "__notes__", []))


def test_string_format_runs_per_element_before_a_batch_and_python_lists_of_bytes_stay_whole() -> None:
    """Two of tf.data's results stoker gave otherwise: ``tf.strings.format`` mapped before a
    ``batch`` (the vectorizer formats a whole batch as one string; also in a ``tf.cond`` 's
    branch), and a Python list of bytes with trailing NUL bytes (NumPy's fixed-width strings
    drop them; a serialized record may end in one)."""
    tf = _tf()
    words = np.array([b"a", b"bb", b"ccc", b"dddd"], dtype=object)
    _same(lambda lib: lib.Dataset.from_tensor_slices(words), lambda x: tf.strings.format("<{}>", x), batch=3)

    def branch(x: Any) -> Any:
        return tf.cond(tf.strings.length(x) > 1, lambda: tf.strings.format("{}", x), lambda: x)

    _same(lambda lib: lib.Dataset.from_tensor_slices(words), branch, batch=4)
    # An op whose vectorized form cannot hold the rows' values (tf.unique's results of other
    # lengths): the batches run row by row.
    ints = np.random.default_rng(7).integers(0, 6, (12, 10)).astype(np.int32)
    _same(lambda lib: lib.Dataset.from_tensor_slices(ints), lambda x: tf.shape(tf.unique(x).y)[0], batch=4)
    count = lambda x: tf.strings.join([tf.strings.as_string(tf.size(tf.unique(x).y)), "\x00"])  # noqa: E731
    _same(lambda lib: lib.Dataset.from_tensor_slices(ints), count, batch=4)  # strings stacked whole
    raw = [b"ab\x00\x00", b"\x00", b""]
    for data in (raw, {"k": raw}, [raw, raw[::-1]]):
        ours = [tf.nest.map_structure(np.asarray, e) for e in sk.data.Dataset.from_tensor_slices(data)]
        theirs = list(tf.data.Dataset.from_tensor_slices(data).as_numpy_iterator())
        assert len(ours) == len(theirs) > 0
        for a, b in zip(ours, theirs):
            _equal(a, b)
        whole = next(iter(sk.data.Dataset.from_tensors(data)))
        _equal(whole, next(tf.data.Dataset.from_tensors(data).as_numpy_iterator()))
    record = tf.train.Example(
        features=tf.train.Features(feature={"v": tf.train.Feature(int64_list=tf.train.Int64List(value=[0]))})
    ).SerializeToString()
    assert record.endswith(b"\x00")  # the last value, 0, is a NUL byte
    parsed = sk.data.Dataset.from_tensor_slices([record]).map(
        lambda r: tf.io.parse_single_example(r, {"v": tf.io.FixedLenFeature([1], tf.int64)})
    )
    assert [e["v"].tolist() for e in parsed] == [[0]]


def test_exp_log_pow_and_float64_tanh_give_tensorflows_values() -> None:
    """TensorFlow's exp, log and pow (and its float64 tanh) round some values otherwise than
    stoker's native math: they run in TensorFlow, with tf.data's values to the last bit;
    float32 tanh (Eigen's approximation, which stoker's is) stays native."""
    tf = _tf()
    x = np.random.default_rng(1).uniform(-3, 3, (4, 64)).astype(np.float32)
    for fn in (tf.exp, lambda v: tf.math.log(tf.abs(v) + 0.5), lambda v: tf.pow(v, 3.0), lambda v: tf.abs(v) ** 2.5):
        ds = _same(lambda lib: lib.Dataset.from_tensor_slices(x), fn)
        assert "translated to native ops" not in _notes(ds)
    ds = _same(lambda lib: lib.Dataset.from_tensor_slices(x.astype(np.float64)), tf.tanh)
    assert "Tanh" in _notes(ds) and "float32 only" in _notes(ds)
    ds = _same(lambda lib: lib.Dataset.from_tensor_slices(x), lambda v: tf.tanh(v) * 2.0)
    assert "translated to native ops" in _notes(ds)
    # tf.data's calls run Grappler's arithmetic optimizer (not its constant folding), whose
    # rewrites change values: log(1 + x) as log1p(x), a mean's reductions; !(a <= b) as a > b
    # (NaN: not True but False), which the translation makes too
    _same(lambda lib: lib.Dataset.from_tensor_slices(x), lambda v: tf.math.log(1.0 + tf.abs(v)))
    _same(lambda lib: lib.Dataset.from_tensor_slices(x), lambda v: (v - tf.reduce_mean(v)) / tf.math.reduce_std(v))
    nans = np.where(x > 1, np.float32(np.nan), x)
    not_le = lambda v: tf.cast(tf.logical_not(v <= 0.5), tf.float32)  # noqa: E731
    ds = _same(lambda lib: lib.Dataset.from_tensor_slices(nans), not_le)
    assert "translated to native ops" in _notes(ds) and "Greater" in _notes(ds)
    # not where the comparison is read twice (written twice: Grappler merges the two first)
    twice = lambda v: not_le(v) + tf.cast(v <= 0.5, tf.float32) * 2.0  # noqa: E731
    ds = _same(lambda lib: lib.Dataset.from_tensor_slices(nans), twice)
    assert "translated to native ops" in _notes(ds) and "LogicalNot" in _notes(ds)
    # a constant infinity (native expressions hold finite numbers) keeps its op in TensorFlow
    for fn in (lambda v: tf.minimum(v, float("inf")), lambda v: tf.where(v > 0, v, -float("inf"))):
        ds = _same(lambda lib: lib.Dataset.from_tensor_slices(x), fn, batch=2)
        assert "is the constant" in _notes(ds)


def test_a_keras_layer_built_in_another_pipeline_gives_tensorflows_error() -> None:
    """A Keras Normalization given its mean builds its constants in the first graph that calls
    it; another pipeline's function then captures a tensor of that graph: TensorFlow's own
    error, as tf.data gives (not an AttributeError of the translator)."""
    tf = _tf()
    keras = pytest.importorskip("keras")
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    ours, theirs = (keras.layers.Normalization(mean=[0.5, 1.0, 2.0], variance=[1.0, 4.0, 9.0]) for _ in range(2))
    got = list(sk.data.Dataset.from_tensor_slices(x).map(lambda v: ours(v)))
    want = list(tf.data.Dataset.from_tensor_slices(x).map(lambda v: theirs(v)).as_numpy_iterator())
    assert all(np.array_equal(a, b) for a, b in zip(got, want)) and len(got) == 4
    norm = keras.layers.Normalization(mean=[0.5, 1.0, 2.0], variance=[1.0, 4.0, 9.0])
    list(tf.data.Dataset.from_tensor_slices(x).map(lambda v: norm(v)))
    with pytest.raises(Exception, match="out of scope") as raised:
        list(sk.data.Dataset.from_tensor_slices(x).map(lambda v: norm(v)))
    assert not isinstance(raised.value, AttributeError)


def test_a_sparse_or_ragged_result_is_an_error_naming_the_remedy() -> None:
    tf = _tf()
    records = [
        tf.train.Example(
            features=tf.train.Features(
                feature={"v": tf.train.Feature(int64_list=tf.train.Int64List(value=list(range(i))))}
            )
        ).SerializeToString()
        for i in range(1, 4)
    ]
    spec = {"v": tf.io.VarLenFeature(tf.int64)}
    sparse = sk.data.Dataset.from_tensor_slices(records).map(lambda r: tf.io.parse_single_example(r, spec)["v"])
    with pytest.raises(sk.InvalidArgumentError, match=r"returns a tf.SparseTensor .* tf.sparse.to_dense"):
        list(sparse)
    dense = sk.data.Dataset.from_tensor_slices(records).map(
        lambda r: tf.sparse.to_dense(tf.io.parse_single_example(r, spec)["v"])
    )
    assert [v.tolist() for v in dense] == [[0], [0, 1], [0, 1, 2]]
    ragged = sk.data.Dataset.from_tensor_slices(records).map(lambda r: tf.ragged.constant([[1], [2, 3]]))
    with pytest.raises(sk.InvalidArgumentError, match=r"tf.RaggedTensor of rows of different lengths.*to_tensor"):
        list(ragged)


Pair = __import__("collections").namedtuple("Pair", "a b")


def test_a_namedtuple_stays_one_and_is_one_argument_as_in_tf_data(tmp_path: Path) -> None:
    """A namedtuple element (returned by a TensorFlow or a Python function, sliced, zipped,
    declared by a generator) is handed out as that namedtuple and passed to the next function
    as one argument (tf.data unpacks only plain tuples); its element_spec is one too, and a
    save keeps it (loaded, a namedtuple of the same name and fields)."""
    tf = _tf()

    def both(make: Any) -> tuple[list[Any], list[Any]]:
        ours = list(make(sk.data))
        theirs = list(make(tf.data).as_numpy_iterator())
        def kinds(elements: list[Any]) -> list[str]:
            return [type(e).__name__ if isinstance(e, tuple) else "value" for e in elements]

        assert kinds(ours) == kinds(theirs), (ours, theirs)
        return ours, theirs

    def gen() -> Any:
        for i in range(3):
            yield Pair(np.int64(i), np.float32(i / 2))

    signature = Pair(tf.TensorSpec([], tf.int64), tf.TensorSpec([], tf.float32))
    pipelines = [
        lambda m: m.Dataset.range(4).map(lambda x: Pair(x, tf.cast(x, tf.float32) * 2)),
        lambda m: m.Dataset.range(4).map(lambda x: Pair(x, x + 1)).map(lambda p: p.a * 10 + p.b),
        lambda m: m.Dataset.from_tensor_slices(Pair(np.arange(3), np.arange(3.0))).filter(lambda p: p.a > 0),
        lambda m: m.Dataset.zip(Pair(m.Dataset.range(3), m.Dataset.range(5, 8))).map(lambda p: p.b - p.a),
        lambda m: m.Dataset.from_tensor_slices(np.arange(12.0).reshape(3, 4))
        .map(lambda x: tf.math.top_k(x, 2))
        .map(lambda r: r.indices),
        lambda m: m.Dataset.from_generator(gen, output_signature=signature),
        lambda m: m.Dataset.range(5).map(lambda x: Pair(tf.fill([x], x), x)).padded_batch(2),
    ]
    for make in pipelines:
        ours, theirs = both(make)
        assert tf.nest.map_structure(lambda v: np.asarray(v).tolist(), ours) == tf.nest.map_structure(
            lambda v: np.asarray(v).tolist(), theirs
        )
    spec = sk.data.Dataset.range(2).map(lambda x: Pair(x, tf.cast(x, tf.float32))).element_spec
    assert type(spec) is Pair and spec.b.dtype == "float32"
    saved = str(tmp_path / "saved")
    sk.data.Dataset.range(3).map(lambda x: Pair(x, x * 2)).save(saved)
    loaded = sk.data.Dataset.load(saved)
    assert type(loaded.element_spec).__name__ == "Pair" and loaded.element_spec._fields == ("a", "b")
    assert [int(p.b) for p in loaded] == [0, 2, 4]


def test_a_graph_s_static_shapes_are_the_spec_s_and_are_checked_as_tf_data_checks_them() -> None:
    """Where a function runs as its traced graph, element_spec has the graph's static
    dimensions (also through a batch and the steps after it: what Keras builds its layers
    from); an element that does not have them (a py_function's result, against its
    set_shape; a Reshape TensorFlow's optimizer dropped) is an error, as tf.data's
    iterator makes it, not an element of another shape."""
    tf = _tf()
    pipelines = [
        lambda m: m.Dataset.range(4).map(lambda x: tf.stack([x, x, x])),
        lambda m: m.Dataset.from_tensor_slices(["a", "b"]).map(lambda s: s == tf.constant(["a", "b", "c"])),
        lambda m: m.Dataset.range(4).map(lambda x: tf.stack([x, x, x])).batch(2, drop_remainder=True).prefetch(1),
        lambda m: m.Dataset.range(6).map(lambda x: tf.fill([2], x)).shuffle(3).take(4).batch(2, drop_remainder=True),
    ]
    for make in pipelines:
        ours, theirs = make(sk.data).element_spec, make(tf.data).element_spec
        assert tuple(ours.shape) == tuple(theirs.shape), (ours, theirs)

    def loader(x: Any) -> Any:
        y = tf.py_function(lambda s: np.array([len(s.numpy())]), [x], tf.int64)
        y.set_shape([])
        return y

    def raw(x: Any) -> Any:
        v = tf.io.decode_raw(x, tf.int64)
        v.set_shape([2])
        return v

    wrong = [
        lambda m: m.Dataset.from_tensor_slices(["ab", "c"]).map(loader),
        lambda m: m.Dataset.from_tensor_slices([b"\x01" * 24]).map(
            lambda x: tf.reshape(tf.io.decode_raw(x, tf.int64), [2])
        ),
        lambda m: m.Dataset.from_tensor_slices([b"\x01" * 16, b"\x02" * 24]).map(raw),
        lambda m: m.Dataset.from_tensor_slices([b"\x01" * 16, b"\x02" * 24]).map(
            lambda x: tf.ensure_shape(tf.io.decode_raw(x, tf.int64), [2])
        ),
    ]
    for make in wrong:
        with pytest.raises(tf.errors.InvalidArgumentError, match="Incompatible shapes|Shape of tensor"):
            list(make(tf.data).as_numpy_iterator())
        with pytest.raises(sk.InvalidArgumentError, match="incompatible shapes|cannot become"):
            list(make(sk.data))
    # a native part's output too, beside a rest left to TensorFlow (per element and per batch)
    small, big = (tf.io.encode_png(np.zeros((n, n, 3), np.uint8)).numpy() for n in (8, 16))

    def decoded(x: Any) -> Any:
        img = tf.io.decode_png(x, channels=3)
        img.set_shape([8, 8, 3])
        return img, tf.math.lgamma(tf.cast(tf.strings.length(x), tf.float32))

    for batch in (None, 1):
        for m in (tf.data, sk.data):
            ds = m.Dataset.from_tensor_slices(np.array([small, big], dtype=object)).map(decoded)
            ds = ds if batch is None else ds.batch(batch)
            errors = (tf.errors.InvalidArgumentError, sk.InvalidArgumentError)
            with pytest.raises(errors, match="(?i)incompatible shapes"):
                list(ds)
    # where the native ops run the function, its static shape is their spec too
    checked = sk.data.Dataset.from_tensor_slices([b"\x01" * 16]).map(raw)
    assert "ensure_shape" in checked.explain() and tuple(checked.element_spec.shape) == (2,)


def test_namedtuples_made_in_a_flat_map_s_function_and_declared_by_output_types() -> None:
    tf = _tf()

    def pairs(m: Any) -> Any:
        return m.Dataset.range(3).flat_map(lambda x: m.Dataset.from_tensor_slices(Pair(tf.range(x), tf.range(x) * 2)))

    ours, theirs = list(pairs(sk.data)), list(pairs(tf.data).as_numpy_iterator())
    assert all(type(p) is Pair for p in ours) and [tuple(map(int, p)) for p in ours] == [tuple(p) for p in theirs]

    def gen() -> Any:
        yield Pair(np.int64(1), np.float32(2))

    made = sk.data.Dataset.from_generator(gen, output_types=Pair(tf.int64, tf.float32), output_shapes=Pair([], []))
    (element,) = list(made)
    assert type(element) is Pair and element.b.dtype == np.float32
    assert type(sk.data.experimental.get_structure(iter(made))) is Pair
