"""What tf.data code moved to stoker relies on: closures bound when a function is handed over,
lists returned as tuples, TensorSpec's argument order, padded shapes, dtypes as CSV defaults,
threads sharing an iterator. Where TensorFlow defines the semantics, the test compares with it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
import stoker as sk
from stoker.errors import InvalidArgumentError

# What TensorFlow does, computed once in a process of its own (TensorFlow is slow to import);
# where the case needs TensorFlow's own functions inside a stoker pipeline, stoker's result is
# computed there too.
TF_SCRIPT = r"""
import json
import numpy as np
import tensorflow as tf
import stoker as sk

out = {}
# A function returning a list: a tuple of components; a list deeper in the result is stacked.
ds = tf.data.Dataset.range(3).map(lambda x: [x, x * 2])
out["list_spec"] = [type(ds.element_spec).__name__, len(ds.element_spec)]
out["list_values"] = [[int(a), int(b)] for a, b in ds.as_numpy_iterator()]
nested = tf.data.Dataset.range(2).map(lambda x: {"a": [x, x + 1]})
out["nested_shape"] = nested.element_spec["a"].shape.as_list()
out["nested_values"] = [e["a"].tolist() for e in nested.as_numpy_iterator()]
rows = ["1,2.5,a", "3,4.5,b"]
csv = tf.data.Dataset.from_tensor_slices(rows).map(lambda r: tf.io.decode_csv(r, [0, 0.0, ""]))
out["csv_map"] = [[int(a), float(b), c.decode()] for a, b, c in csv.as_numpy_iterator()]
# The same decode_csv inside a stoker map: its list of tensors is a tuple too.
mine = sk.Dataset.from_tensor_slices(np.array(rows, dtype=object)).map(
    lambda r: tf.io.decode_csv(r, [0, 0.0, ""]))
out["stoker_csv_map"] = [[int(a), float(b), bytes(c).decode()] for a, b, c in mine]
# After a Python map, to_tf without an output_signature.
words = sk.Dataset.range(5).map(lambda v: {"x": np.full(3, v, np.float32), "w": b"w%d" % v}).batch(2)
tds = words.to_tf()
out["to_tf_spec"] = {k: [v.dtype.name, v.shape.as_list()] for k, v in tds.element_spec.items()}
out["to_tf_w"] = [[bytes(s).decode() for s in b["w"].numpy()] for b in tds]
# padded_batch's padded_shapes: a scalar for rank 1, tuples as shapes.
def lengths():
    for n in [1, 3, 2]:
        yield np.arange(n, dtype=np.int64)

PADDED = {"16": 16, "(None,)": (None,), "[None]": [None], "(16,)": (16,), "[5]": [5], "None": None}
single = tf.data.Dataset.from_generator(lengths, output_signature=tf.TensorSpec([None], tf.int64))
out["padded_single"] = {
    k: [b.tolist() for b in single.padded_batch(2, padded_shapes=v).as_numpy_iterator()] for k, v in PADDED.items()
}
pair = single.map(lambda v: (v, tf.size(v)))
PAIRS = {"((None,), ())": ((None,), ()), "([None], [])": ([None], []), "(16, ())": (16, ())}
out["padded_pair"] = {
    k: [[a.tolist(), b.tolist()] for a, b in pair.padded_batch(2, padded_shapes=v).as_numpy_iterator()]
    for k, v in PAIRS.items()
}
keyed = single.map(lambda v: {"a": v, "n": tf.size(v)})
out["padded_dict"] = [
    [e["a"].tolist(), e["n"].tolist()]
    for e in keyed.padded_batch(2, padded_shapes={"a": 6, "n": ()}).as_numpy_iterator()
]
try:
    single.padded_batch(2, padded_shapes=-1)
    out["padded_minus_one"] = "accepted"
except (ValueError, TypeError) as e:
    out["padded_minus_one"] = type(e).__name__
# CsvDataset / decode_csv with dtypes as record_defaults: required columns of those types.
import os, tempfile
folder = tempfile.mkdtemp()
CSV = {"good": "1,2.5,a\n3,4.5,b\n", "bad_int": "1,2.5,a\n3x,4.5,b\n", "missing": "1,2.5,a\n,1.0,c\n",
       "mixed": "7,,\n8,1.5,q\n"}
for k, text in CSV.items():
    with open(os.path.join(folder, k + ".csv"), "w") as f:
        f.write(text)

def rows(ds):
    try:
        return [[v.item() if hasattr(v, "item") else v for v in r] for r in ds]
    except Exception as e:
        return "error: " + type(e).__name__

def decoded(r):
    return [x.decode() if isinstance(x, bytes) else x for x in r]

for k in CSV:
    path = os.path.join(folder, k + ".csv")
    defaults = [tf.int64, 0.0, "x"] if k == "mixed" else [tf.int32, tf.float32, tf.string]
    mine = [sk.int64, 0.0, "x"] if k == "mixed" else [sk.int32, sk.float32, sk.string]
    got = rows(tf.data.experimental.CsvDataset(path, defaults).as_numpy_iterator())
    out["csv_tf_" + k] = got if isinstance(got, str) else [decoded(r) for r in got]
    for who, d in (("sk", mine), ("tfdtypes", defaults)):
        got = rows(sk.CsvDataset(path, d))
        out[f"csv_{who}_" + k] = got if isinstance(got, str) else [decoded(r) for r in got]
    if k == "good":
        ds = sk.CsvDataset(path, mine)
        out["csv_sk_dtypes"] = [str(a.dtype) for a in next(iter(ds))[:2]]
        ops = sk.TextLineDataset(path).map(sk.ops.decode_csv("line", mine, names=["i", "f", "s"]))
        out["csv_op_good"] = [[e["i"].item(), e["f"].item(), e["s"].decode()] for e in ops]
# TensorSpec's arguments.
out["spec_shapes"] = [tf.TensorSpec(s).shape.as_list() for s in (3, [3], (None, 2), [])]
out["spec_default_dtype"] = tf.TensorSpec([1]).dtype.name
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def tf_says() -> dict:
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(TF_SCRIPT)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""},
    )
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_threads_draining_one_iterator_get_every_element_exactly_once():
    # A second thread calls next() while the first waits for the pipeline.
    ds = sk.Dataset.range(6000).map(lambda v: v * 2, num_parallel_calls=2).prefetch(4)
    it = iter(ds)
    got: list[list[int]] = [[] for _ in range(4)]
    errors: list[BaseException] = []

    def drain(out: list[int]) -> None:
        try:
            for v in it:
                out.append(int(v))
                if len(out) % 500 == 0:
                    it.state()  # a state read between two calls of other threads
        except BaseException as e:  # noqa: BLE001 - every failure is reported below
            errors.append(e)

    threads = [threading.Thread(target=drain, args=(out,)) for out in got]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert sorted(v for out in got for v in out) == list(range(0, 12000, 2))
    assert sum(1 for out in got if out) >= 2  # the calls really were shared


def test_close_from_another_thread_waits_for_the_call_in_progress():
    ds = sk.Dataset.range(10**9).map(lambda v: v)
    it = iter(ds)
    next(it)
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            for _ in it:
                pass
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    t = threading.Thread(target=reader)
    t.start()
    it.close()  # before: "Already borrowed" while the reader was inside next()
    t.join(timeout=30)
    assert not t.is_alive() and not errors, errors


def _labeler(example: object, index: int) -> tuple[object, np.int64]:
    return example, np.int64(index)


def _text_files(tmp_path, n: int = 3) -> list[str]:
    paths = []
    for i in range(n):
        p = tmp_path / f"part{i}.txt"
        p.write_text("".join(f"line {i}.{j}\n" for j in range(4)))
        paths.append(str(p))
    return paths


def test_a_function_built_in_a_loop_keeps_the_loop_variable_of_its_turn(tmp_path):
    # The TensorFlow text-loading tutorial: one labelled dataset per file. tf.data traces the
    # lambda when `map` is called; stoker used to call it later, when `i` was 2 for all.
    labelled = []
    for i, f in enumerate(_text_files(tmp_path)):
        labelled.append(sk.TextLineDataset(f).map(lambda ex: _labeler(ex, i)))  # noqa: B023 - the trap under test
    assert [sorted({int(label) for _, label in ds}) for ds in labelled] == [[0], [1], [2]]
    # Also filter, flat_map, interleave and scan.
    kept = [sk.Dataset.range(6).filter(lambda v: v % 3 == k) for k in range(3)]  # noqa: B023
    assert [[int(v) for v in ds] for ds in kept] == [[0, 3], [1, 4], [2, 5]]
    flat = [sk.Dataset.range(2).flat_map(lambda v: sk.Dataset.range(k)) for k in (1, 2)]  # noqa: B023
    assert [[int(v) for v in ds] for ds in flat] == [[0, 0], [0, 1, 0, 1]]
    scans = [sk.Dataset.range(3).scan(np.int64(0), lambda s, v: (s + v, s * k)) for k in (1, 10)]  # noqa: B023
    assert [[int(v) for v in ds] for ds in scans] == [[0, 0, 1], [0, 0, 10]]


TUTORIAL_AT_MODULE_LEVEL = """
import numpy as np
import stoker as sk

def labeler(example, index):
    return example, np.int64(index)

labelled = []
for i, file_name in enumerate(FILES):
    lines = sk.TextLineDataset(file_name)
    labelled.append(lines.map(lambda ex: labeler(ex, i)))

scale = [1]
scaled = sk.Dataset.range(3).map(lambda v: v * scale[0] + offset())
counted = sk.Dataset.range(4).map(count)

def offset():  # defined after the map that uses it: looked up when the function runs
    return 100

scale[0] = 10  # a mutable object is shared, not copied: the change is seen
"""


def test_module_level_loops_capture_globals_as_tf_data_does(tmp_path):
    # At a module's top level (the tutorial's notebook), `i` is a global, not a closure cell.
    calls = {"n": 0}

    def count(v: object) -> object:
        calls["n"] += 1
        return v

    namespace: dict[str, object] = {"FILES": _text_files(tmp_path), "count": count}
    exec(compile(TUTORIAL_AT_MODULE_LEVEL, "<tutorial>", "exec"), namespace)
    labelled = namespace["labelled"]
    assert [sorted({int(label) for _, label in ds}) for ds in labelled] == [[0], [1], [2]]  # type: ignore[attr-defined]
    assert [int(v) for v in namespace["scaled"]] == [100, 110, 120]  # type: ignore[attr-defined]
    assert [int(v) for v in namespace["counted"]] == [0, 1, 2, 3] and calls["n"] == 4  # type: ignore[attr-defined]


COUNTER = 0


def _counting(v: object) -> object:
    global COUNTER
    COUNTER += 1
    return v


def test_a_function_that_assigns_a_global_still_reaches_the_module():
    global COUNTER
    COUNTER = 0
    assert [int(v) for v in sk.Dataset.range(5).map(_counting)] == list(range(5))
    assert COUNTER == 5


def test_a_returned_list_is_a_tuple_of_components_as_in_tf_data(tf_says):
    # A returned list is a tuple of components, not one stacked array.
    ds = sk.Dataset.range(3).map(lambda x: [x, x * 2])
    got = list(ds)
    assert all(isinstance(e, tuple) and len(e) == 2 for e in got)
    assert tf_says["list_spec"] == ["tuple", 2]
    assert [[int(a), int(b)] for a, b in got] == tf_says["list_values"]
    # Deeper in the result a list is one tensor, as tf.data stacks it.
    nested = sk.Dataset.range(2).map(lambda x: {"a": [x, x + 1]})
    assert [e["a"].tolist() for e in nested] == tf_says["nested_values"]
    assert list(next(iter(nested))["a"].shape) == tf_says["nested_shape"]
    # A list of different dtypes (what decode_csv returns), with TensorFlow's own op.
    assert tf_says["stoker_csv_map"] == tf_says["csv_map"] == [[1, 2.5, "a"], [3, 4.5, "b"]]
    mixed = sk.Dataset.range(2).map(lambda x: [x, np.float32(x) / 2, b"s%d" % x])
    assert [(int(a), float(b), bytes(c)) for a, b, c in mixed] == [(0, 0.0, b"s0"), (1, 0.5, b"s1")]
    # scan's (state, output) given as a list.
    sums = sk.Dataset.range(4).scan(np.int64(0), lambda s, v: [s + v, s + v])
    assert [int(v) for v in sums] == [0, 1, 3, 6]


def test_tensor_spec_takes_tf_order_and_keywords(tf_says):
    # tf.TensorSpec's order: (shape, dtype, name).
    spec = sk.TensorSpec([None], sk.int64)
    assert (spec.shape, spec.dtype, spec.name) == ((None,), "int64", None)
    assert sk.TensorSpec(shape=(2, 3), dtype=np.float32, name="x") == sk.TensorSpec((2, 3), "float32", "x")
    assert [list(sk.TensorSpec(s).shape) for s in (3, [3], (None, 2), [])] == tf_says["spec_shapes"]
    assert sk.TensorSpec([1]).dtype == tf_says["spec_default_dtype"] == "float32"
    with pytest.raises(TypeError, match="shape first"):
        sk.TensorSpec("x", "int32", (4, 2))
    # As from_generator's signature, and as element_spec hands them out.
    ds = sk.Dataset.from_generator(lambda: iter([[1, 2], [3]]), output_signature=sk.TensorSpec([None], sk.int64))
    assert [v.tolist() for v in ds] == [[1, 2], [3]]
    assert ds.element_spec == sk.TensorSpec((None,), sk.int64, name="value")
    pairs = sk.Dataset.from_tensor_slices({"a": np.zeros((4, 2), np.int32)}).batch(2, drop_remainder=True)
    assert pairs.element_spec == {"a": sk.TensorSpec((2, 2), sk.int32, "a")}


def test_after_a_python_map_the_structure_is_learnt_when_asked(tf_says):
    # element_spec is learnt from the first element when asked, so concatenate and to_tf()
    # need no output_signature.
    calls: list[int] = []

    def f(v: np.int64) -> dict[str, object]:
        calls.append(int(v))
        return {"x": np.full(3, v, np.float32), "w": b"w%d" % v}

    shuffled = sk.Dataset.range(6).map(f).shuffle(6, seed=1)
    ds = shuffled.batch(2)
    spec = ds.element_spec
    assert spec == {"x": sk.TensorSpec((None, None), sk.float32, "x"), "w": sk.TensorSpec((None,), sk.string, "w")}
    assert 0 < len(calls) <= 6  # a run up to the first element (through the shuffle's buffer)
    n = len(calls)
    assert ds.element_spec == spec and len(calls) == n  # once
    assert shuffled.element_spec["x"].shape == (None,)  # the batch's dimension is there only after it
    # That run is not an epoch of the dataset's: the first iteration is still epoch 0.
    first = [b["w"].tolist() for b in ds]
    assert first == [b["w"].tolist() for b in ds.iterator(epoch=0)]
    # concatenate without the functions having run.
    a = sk.Dataset.range(2).map(lambda v: (v, v * 2))
    b = sk.Dataset.range(5, 7).map(lambda v: (v, v * 2))
    assert [(int(x), int(y)) for x, y in a.concatenate(b)] == [(0, 0), (1, 2), (5, 10), (6, 12)]
    with pytest.raises(InvalidArgumentError, match="structures differ"):
        a.concatenate(sk.Dataset.range(3).map(lambda v: {"v": v}))
    # A run that hands out nothing cannot tell.
    assert sk.Dataset.range(3).filter(lambda v: v > 5).map(lambda v: (v, v)).element_spec is None
    # to_tf: the learnt spec as its signature (in the TensorFlow process).
    assert tf_says["to_tf_spec"] == {"x": ["float32", [None, None]], "w": ["string", [None]]}
    assert tf_says["to_tf_w"] == [["w0", "w1"], ["w2", "w3"], ["w4"]]


PADDED = {"16": 16, "(None,)": (None,), "[None]": [None], "(16,)": (16,), "[5]": [5], "None": None}
PAIRS = {"((None,), ())": ((None,), ()), "([None], [])": ([None], []), "(16, ())": (16, ())}


def _lengths() -> sk.Dataset:
    return sk.Dataset.from_generator(
        lambda: (np.arange(n, dtype=np.int64) for n in (1, 3, 2)), output_signature=sk.TensorSpec([None], sk.int64)
    )


def test_padded_shapes_take_what_tf_data_takes(tf_says):
    # `padded_shapes=16` and `padded_shapes=(None,)` as TF takes them.
    single = _lengths()
    got = {k: [b.tolist() for b in single.padded_batch(2, padded_shapes=v)] for k, v in PADDED.items()}
    assert got == tf_says["padded_single"]
    pair = single.map(lambda v: (v, np.int32(v.size)))
    got = {k: [[a.tolist(), b.tolist()] for a, b in pair.padded_batch(2, padded_shapes=v)] for k, v in PAIRS.items()}
    assert got == tf_says["padded_pair"]
    keyed = single.map(lambda v: {"a": v, "n": np.int32(v.size)})
    got_dict = [[e["a"].tolist(), e["n"].tolist()] for e in keyed.padded_batch(2, padded_shapes={"a": 6, "n": ()})]
    assert got_dict == tf_says["padded_dict"]
    # What TensorFlow refuses is an InvalidArgumentError naming the argument.
    assert tf_says["padded_minus_one"] == "ValueError"
    for bad, says in ((-1, "padded_shapes must be a shape"), ((16,), "tuple of 2 shapes"), ({"a": 6}, "keys")):
        with pytest.raises(InvalidArgumentError, match=says):
            (single if bad == -1 else pair if bad == (16,) else keyed).padded_batch(2, padded_shapes=bad)


def test_csv_record_defaults_take_stoker_and_tf_dtypes_as_required_columns(tf_says):
    # `sk.int32` is a dtype (a required int column), not the string default "int32".
    assert tf_says["csv_tf_good"] == [[1, 2.5, "a"], [3, 4.5, "b"]]
    for who in ("sk", "tfdtypes"):
        for case in ("good", "mixed"):
            assert tf_says[f"csv_{who}_{case}"] == tf_says[f"csv_tf_{case}"], (who, case)
        for case in ("bad_int", "missing"):  # TensorFlow refuses both files
            assert tf_says[f"csv_tf_{case}"].startswith("error")
            assert tf_says[f"csv_{who}_{case}"] == "error: InvalidRecordError", (who, case)
    assert tf_says["csv_sk_dtypes"] == ["int32", "float32"]
    assert tf_says["csv_op_good"] == tf_says["csv_tf_good"]


def test_stoker_dtypes_are_dtypes_and_strings_stay_defaults(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(",\n")
    # A string is a default value, sk.string a required column; as in tf.data's readers, a
    # string naming a CSV dtype is that dtype ("half" does not name one: a default).
    assert [tuple(bytes(v) for v in r) for r in sk.CsvDataset(str(path), ["half", "x"])] == [(b"half", b"x")]
    for required in (sk.string, "int32", "double"):
        with pytest.raises(sk.InvalidRecordError, match="t.csv"):
            list(sk.CsvDataset(str(path), [required, "x"]))
    assert sk.int32 == "int32" and sk.int32.name == "int32" and np.dtype(sk.float32) == np.float32
