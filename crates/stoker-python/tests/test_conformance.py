"""Every registered operator, held to the same contract.

For each operator kind the registry lists (``stoker._stoker.step_kinds()``) there is a case
here: a small pipeline ending in that operator, over generated input. Each case is checked
for what every operator promises:

- its elements match the schema the plan declares (dtypes, and every fixed dimension);
- its cardinality is what one pass hands out (where the plan knows it);
- a state saved after ``k`` elements, for several ``k``, restores in a pipeline built anew
  (as a restarted process builds it) to exactly the elements that followed;
- its spec round trip (``save_spec`` then ``load_spec``) gives the same elements, or, for an
  operator running the caller's Python, the save names why it cannot be loaded;
- a wrong argument or a wrong input fails when the pipeline is built, naming the operator.

An operator added to the registry without a case here fails
``test_every_registered_operator_has_a_case``.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import stoker as sk
from stoker import _stoker

from .conftest import write_examples
from .resume_pipelines import digest

# Operators the registry lists that no user builds directly, and the case that runs them.
INTERNAL = {"elements": "group_by_window"}

# The most elements a case's pass is compared over (an endless one is cut there).
PREFIX = 24


@dataclass
class Case:
    build: Callable[[Path], sk.Dataset]
    # Builds a wrong pipeline ending in the operator; the error must name it.
    bad: Callable[[Path], Any] | None
    # Whether its spec loads (False: it runs the caller's Python).
    loadable: bool = True


def _ints(n: int = 10) -> sk.Dataset:
    return sk.Dataset.range(n).map(lambda i: {"i": np.int64(i), "sq": np.full(3, i * i, np.int64)})


def _native(n: int = 10) -> sk.Dataset:
    return sk.Dataset.from_tensor_slices(
        {"i": np.arange(n, dtype=np.int64), "v": np.arange(n * 3, dtype=np.float32).reshape(n, 3)}
    )


def _records(tmp: Path, name: str = "r.tfrecord", n: int = 9) -> str:
    return write_examples(tmp / name, list(range(n)))


def _text(tmp: Path) -> str:
    p = tmp / "lines.txt"
    p.write_text("".join(f"line {i}\n" for i in range(11)))
    return str(p)


def _fixed(tmp: Path) -> str:
    p = tmp / "fixed.bin"
    p.write_bytes(bytes(range(40)))
    return str(p)


def _npz(tmp: Path) -> str:
    p = tmp / "a.npz"
    np.savez(p, x=np.arange(14, dtype=np.int32).reshape(7, 2), y=np.arange(7, dtype=np.float64))
    return str(p)


def _squares() -> Any:
    for i in range(8):
        yield {"i": np.int64(i), "sq": np.int64(i * i)}


CASES: dict[str, Case] = {
    "range": Case(lambda t: sk.Dataset.range(3, 40, 3), lambda t: sk.Dataset.range(0, 5, 0)),
    "from_tensor_slices": Case(
        lambda t: _native(),
        lambda t: sk.Dataset.from_tensor_slices({"a": np.zeros(3), "b": np.zeros(4)}),
    ),
    "from_npz": Case(lambda t: sk.Dataset.from_npz(_npz(t)), lambda t: sk.Dataset.from_npz(str(t / "none.npz"))),
    "from_generator": Case(
        lambda t: sk.Dataset.from_generator(
            _squares, output_signature={"i": sk.TensorSpec((), np.int64), "sq": sk.TensorSpec((), np.int64)}
        ),
        lambda t: sk.Dataset.from_generator(_squares),
        loadable=False,
    ),
    "list_files": Case(
        lambda t: sk.Dataset.list_files(
            str(Path(_records(t, "a.tfrecord")).parent / "*.tfrecord"), shuffle=True, seed=3
        ),
        lambda t: sk.Dataset.list_files(str(t / "nothing-*.tfrecord")),
    ),
    "tfrecord": Case(
        lambda t: sk.TFRecordDataset([_records(t)]), lambda t: sk.TFRecordDataset([str(t / "missing.tfrecord")])
    ),
    "text_line": Case(lambda t: sk.TextLineDataset([_text(t)]), lambda t: sk.TextLineDataset([str(t / "missing.txt")])),
    "fixed_length_record": Case(
        lambda t: sk.FixedLengthRecordDataset([_fixed(t)], record_bytes=4, header_bytes=2, footer_bytes=2),
        lambda t: sk.FixedLengthRecordDataset([_fixed(t)], record_bytes=0),
    ),
    "shuffle": Case(lambda t: _native(12).shuffle(5, seed=4), lambda t: _native().shuffle(0)),
    "global_shuffle": Case(
        lambda t: _native(12).global_shuffle(seed=2), lambda t: _native().filter(lambda e: True).global_shuffle(seed=1)
    ),
    "map": Case(
        lambda t: _native(12).map(sk.ops.compute("w", sk.ops.field("v") * 2.0), num_parallel_calls=2),
        lambda t: _native().map(sk.ops.cast("nope", "int32")),
    ),
    "batch": Case(lambda t: _native(11).batch(4), lambda t: _native().batch(0)),
    "padded_batch": Case(
        lambda t: sk.TextLineDataset([_text(t)]).map(sk.ops.decode_raw("line", "uint8")).padded_batch(3),
        lambda t: _native().padded_batch(0),
    ),
    "unbatch": Case(lambda t: _native(10).batch(3).unbatch(), lambda t: sk.Dataset.range(4).unbatch()),
    "scan": Case(
        lambda t: _native(9).scan(np.int64(0), lambda s, e: (s + e["i"], {"total": s + e["i"]})), None, loadable=False
    ),
    "group_by_window": Case(
        lambda t: _native(12).group_by_window(lambda e: e["i"] % 3, lambda k, w: w.batch(2), window_size=2),
        lambda t: _native().group_by_window(lambda e: e["i"] % 3, lambda k, w: w, window_size=0),
        loadable=False,
    ),
    "window": Case(
        lambda t: _native(10).window(3, shift=2).flat_map(lambda w: sk.Dataset.zip(w)),
        lambda t: _native().window(0),
        loadable=False,
    ),
    "interleave": Case(
        lambda t: sk.Dataset.from_tensor_slices([_records(t, "a.tfrecord"), _records(t, "b.tfrecord", 5)]).interleave(
            sk.TFRecordDataset, cycle_length=2, block_length=2
        ),
        lambda t: sk.Dataset.from_tensor_slices([_records(t)]).interleave(sk.TFRecordDataset, cycle_length=0),
    ),
    "filter": Case(lambda t: _native(12).filter(lambda e: e["i"] % 3 != 1), None, loadable=False),
    "take": Case(lambda t: _native(12).take(7), lambda t: _native().take(-3)),
    "take_while": Case(
        lambda t: _native(12).take_while(lambda e: e["i"] < 7),
        None,
        loadable=False,
    ),
    "assert_cardinality": Case(
        lambda t: _native(12).filter(lambda e: e["i"] % 2 == 0).assert_cardinality(6),
        lambda t: _native(12).assert_cardinality(5),
        loadable=False,
    ),
    "skip": Case(lambda t: _native(12).skip(5), lambda t: _native().skip(-4)),
    "repeat": Case(lambda t: _native(4).repeat(3), lambda t: _native().repeat(-5)),
    "cache": Case(
        lambda t: _native(6).cache(str(t / "cache.bin")).repeat(2),
        lambda t: _native().cache(str(t / "no" / "such" / "dir" / "c")),
    ),
    "prefetch": Case(lambda t: _native(9).prefetch(3), lambda t: _native().prefetch(-7)),
    "shard": Case(lambda t: _native(11).shard(3, 1), lambda t: _native().shard(2, 5)),
    "zip": Case(
        lambda t: sk.Dataset.zip((_native(7), sk.Dataset.range(100, 110))),
        lambda t: sk.Dataset.zip(()),
    ),
    "concatenate": Case(
        lambda t: _native(5).concatenate(_native(4)), lambda t: _native(5).concatenate(_native(5).batch(2))
    ),
    "sample_from_datasets": Case(
        lambda t: sk.Dataset.sample_from_datasets([_native(6), _native(8)], weights=[0.3, 0.7], seed=9),
        lambda t: sk.Dataset.sample_from_datasets([_native(6), _native(8)], weights=[1.0]),
    ),
    "choose_from_datasets": Case(
        lambda t: sk.Dataset.choose_from_datasets(
            [_native(6), _native(6)], sk.Dataset.range(10).map(lambda i: np.int64(i % 2))
        ),
        lambda t: sk.Dataset.choose_from_datasets([_native(6)], sk.Dataset.range(3).map(lambda i: np.float32(i))),
        loadable=False,
    ),
    "enumerate": Case(lambda t: _native(6).enumerate(start=10), lambda t: _native().enumerate(start=1.5)),
    "options": Case(
        lambda t: _native(8).map(sk.ops.cast("i", "int32")).with_options(on_bad_record="skip"),
        lambda t: _native().with_options(optimizations={"no_such_pass": False}),
    ),
}


def test_every_registered_operator_has_a_case() -> None:
    kinds = set(_stoker.step_kinds())
    missing = sorted(kinds - set(CASES) - set(INTERNAL))
    assert not missing, f"operators without a conformance case: {missing}"
    assert not sorted(set(CASES) - kinds), "cases for operators the registry does not list"
    assert all(INTERNAL[k] in CASES for k in INTERNAL)


def _pass(ds: sk.Dataset) -> list[Any]:
    return list(itertools.islice(ds, PREFIX))


def _arrays(element: Any) -> list[np.ndarray]:
    if isinstance(element, dict):
        return [np.asarray(element[k]) for k in element]
    if isinstance(element, (tuple, list)):
        return [a for e in element for a in _arrays(e)]
    return [np.asarray(element)]


def _check_schema(ds: sk.Dataset, elements: list[Any]) -> None:
    schema = ds._plan.schema()
    if schema is None:
        return
    for e in elements:
        arrays = _arrays(e)
        assert len(arrays) == len(schema), (schema, e)
        for a, field in zip(arrays, schema):
            name, dtype, shape = field[0], field[1], field[2]
            kind = "object" if dtype in ("string", "bytes") else dtype
            assert a.dtype.name == kind or (kind == "object" and a.dtype.kind in "OSU"), (name, a.dtype, dtype)
            assert a.ndim == len(shape), (name, a.shape, shape)
            for d, s in zip(a.shape, shape):
                assert s is None or s == d, (name, a.shape, shape)


@pytest.mark.parametrize("kind", sorted(CASES))
def test_operator_conforms(kind: str, tmp_path: Path) -> None:
    case = CASES[kind]
    ds = case.build(tmp_path)
    plan_kinds = _kinds(ds)
    assert kind in plan_kinds, f"the case for {kind} builds {plan_kinds}"
    elements = _pass(ds)
    assert elements, f"{kind}: the case hands out no element"

    _check_schema(ds, elements)

    n = ds.cardinality()
    if n >= 0:
        assert n == len(elements), f"{kind}: cardinality {n}, a pass hands out {len(elements)}"
    elif n == -1:  # endless
        assert len(elements) == PREFIX

    # Saved after k elements, restored in a pipeline built anew: the elements that follow
    # are those the saved iteration hands out next (a reshuffling step's next iteration is
    # another epoch, so the saved one is run on to compare).
    # A finite pass is compared to its end, so that a restore handing out too many shows.
    left = None if len(elements) < PREFIX else PREFIX
    for k in sorted({0, 1, len(elements) // 2, len(elements) - 1, len(elements)}):
        it = ds.iterator()
        for _ in range(k):
            next(it)
        state = it.state()
        expected = [digest(e) for e in itertools.islice(it, left)]
        it.close()
        again = case.build(tmp_path)
        rest = [digest(e) for e in itertools.islice(again.iterator(state=state), left)]
        assert rest == expected, f"{kind}: restored after {k} elements, it went on otherwise"

    spec = tmp_path / "spec.json"
    if case.loadable:
        ds.save_spec(spec)
        loaded = sk.Dataset.load_spec(spec)
        assert kind in _kinds(loaded) or kind == "options"
        assert json.loads(spec.read_text())["pipeline"], spec.read_text()
        # A spec holds the fields, not the Python structure they were packed in.
        flat = [digest(_arrays(e)) for e in _pass(loaded)]
        assert flat == [digest(_arrays(e)) for e in elements], f"{kind}: its spec round trip changed the elements"
    else:
        with pytest.raises(sk.errors.StokerError) as err:
            ds.save_spec(spec)
            sk.Dataset.load_spec(spec)
        assert "spec" in str(err.value), str(err.value)

    if case.bad is not None:
        with pytest.raises((sk.errors.StokerError, ValueError, TypeError)) as err:
            bad = case.bad(tmp_path)
            list(itertools.islice(bad, PREFIX))
        message = str(err.value) + str(getattr(err.value, "filename", ""))
        located = _names(kind, message) or str(tmp_path) in message
        assert located, f"{kind}: the error names neither it nor the file: {err.value}"


def _kinds(ds: sk.Dataset) -> set[str]:
    """The operator kinds of the plan: the registry's kind of each node."""
    out = set()
    stack = [ds._plan]
    while stack:
        p = stack.pop()
        out.add(p.kind())
        stack.extend(p.inputs())
    return out


# What an error about an operator may call it (the Python method's name, or tf.data's).
ALIASES = {
    "from_tensor_slices": ("from_tensor_slices", "components"),
    "tfrecord": ("tfrecord", "TFRecord"),
    "text_line": ("text_line", "TextLine"),
    "fixed_length_record": ("fixed_length_record", "FixedLengthRecord", "record_bytes"),
    "options": ("options", "optimizations"),
    # A map's error names the op in it that refused its input.
    "map": ("map", "cast"),
    "zip": ("zip",),
}


def _names(kind: str, message: str) -> bool:
    return any(a in message for a in ALIASES.get(kind, (kind,)))
