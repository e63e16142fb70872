"""sample_from_datasets and choose_from_datasets, against tf.data (tests/golden/mix_expected.json,
made by make_mix_golden.py)."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import stoker as sk


def ints(ds: sk.Dataset) -> list[int]:
    return [int(v) for v in ds]


def parts() -> list[sk.Dataset]:
    return [sk.Dataset.range(0, 3), sk.Dataset.range(10, 15), sk.Dataset.range(20, 22)]


def test_choose_from_datasets_equals_tf(golden):
    want = json.loads((golden / "mix_expected.json").read_text())
    choices = sk.Dataset.from_tensor_slices(np.array(want["choices"], dtype=np.int64))
    for stop in (True, False):
        ds = sk.Dataset.choose_from_datasets(parts(), choices, stop_on_empty_dataset=stop)
        assert ints(ds) == want["choose"][str(stop)]["values"], stop
        assert ds.cardinality() == want["choose"][str(stop)]["cardinality"]
    # The default stops on an empty dataset, as tf.data's.
    assert ints(sk.Dataset.choose_from_datasets(parts(), choices)) == want["choose"]["True"]["values"]


def _in_order_and_whole(run: list[int], stop: bool) -> bool:
    """What every run of sample_from_datasets([range(5), range(100, 105)]) is: each dataset's
    elements in their order; all of both without stop_on_empty_dataset; with it, all of at
    least one (the run ends at the first pick of an ended dataset)."""
    a, b = [v for v in run if v < 100], [v for v in run if v >= 100]
    if a != list(range(len(a))) or b != list(range(100, 100 + len(b))):
        return False
    if not stop:
        return len(a) == 5 and len(b) == 5
    return len(a) == 5 or len(b) == 5


def test_sample_from_datasets_stops_as_tf_does(golden):
    want = json.loads((golden / "mix_expected.json").read_text())
    for stop in (True, False):
        theirs = want["sample"][str(stop)]["runs"]
        ours = [
            ints(sk.Dataset.sample_from_datasets(
                [sk.Dataset.range(0, 5), sk.Dataset.range(100, 105)], seed=seed, stop_on_empty_dataset=stop))
            for seed in range(20)
        ]
        assert all(_in_order_and_whole(r, stop) for r in theirs), "TF's runs have the property"
        assert all(_in_order_and_whole(r, stop) for r in ours), ours
        if stop:
            # Where the runs end: about as far in on average (the draws are TF's and ours).
            assert abs(np.mean([len(r) for r in ours]) - np.mean([len(r) for r in theirs])) < 1.5
            assert min(len(r) for r in ours) < 10, "some runs stop before the end"
        ds = sk.Dataset.sample_from_datasets([sk.Dataset.range(5), sk.Dataset.range(100, 105)], seed=0,
                                             stop_on_empty_dataset=stop)
        assert ds.cardinality() == want["sample"][str(stop)]["cardinality"]
    infinite = sk.Dataset.sample_from_datasets([sk.Dataset.range(3).repeat(), sk.Dataset.range(2)])
    assert infinite.cardinality() == want["sample_infinite_cardinality"]


def test_sample_from_datasets_weights_and_seeds():
    forever = [sk.Dataset.from_tensors(np.int64(i)).repeat() for i in range(3)]
    ds = sk.Dataset.sample_from_datasets(forever, weights=[0.2, 0.3, 0.5], seed=7).take(30_000)
    counts = Counter(ints(ds))
    for i, w in enumerate([0.2, 0.3, 0.5]):
        assert abs(counts[i] / 30_000 - w) < 0.012, counts
    # Weights need not sum to 1; equal by default.
    eq = Counter(ints(sk.Dataset.sample_from_datasets(forever, seed=1).take(9_000)))
    assert all(abs(eq[i] / 9_000 - 1 / 3) < 0.02 for i in range(3)), eq
    # Reproducible with a seed, the same every epoch unless rerandomized.
    mk = lambda seed, **kw: sk.Dataset.sample_from_datasets(forever, [1, 1, 2], seed=seed, **kw).take(200)  # noqa: E731
    assert ints(mk(3)) == ints(mk(3)) and ints(mk(3)) != ints(mk(4))
    again = mk(3)
    assert ints(again) == ints(again)
    fresh = mk(3, rerandomize_each_iteration=True)
    assert ints(fresh) != ints(fresh)
    # A dataset of weight 0 is never drawn; the mix ends when the others have.
    zero = sk.Dataset.sample_from_datasets([sk.Dataset.range(4), sk.Dataset.range(100, 200)], [1, 0], seed=2)
    assert ints(zero) == [0, 1, 2, 3]


def test_mixes_reorder_dict_fields_and_check_their_arguments():
    a = sk.Dataset.from_tensor_slices({"x": np.arange(3), "y": np.arange(3) * 10})
    b = sk.Dataset.from_tensor_slices({"y": np.arange(2) * -1, "x": np.arange(2) + 100})
    got = list(sk.Dataset.choose_from_datasets([a, b], sk.Dataset.from_tensor_slices(np.array([1, 0, 1]))))
    assert [(int(e["x"]), int(e["y"])) for e in got] == [(100, 0), (0, 0), (101, -1)]
    with pytest.raises(sk.InvalidArgumentError, match="picked dataset 5"):
        list(sk.Dataset.choose_from_datasets([a, b], sk.Dataset.from_tensor_slices(np.array([0, 5]))))
    with pytest.raises(sk.SchemaError, match="int64 scalars"):
        sk.Dataset.choose_from_datasets([a, b], sk.Dataset.from_tensor_slices(np.array([0.5])))
    with pytest.raises(sk.InvalidArgumentError, match="structures differ"):
        sk.Dataset.choose_from_datasets([a, sk.Dataset.range(3)], sk.Dataset.range(1))
    with pytest.raises(sk.InvalidArgumentError, match="2 weights for 3 datasets"):
        sk.Dataset.sample_from_datasets(parts(), weights=[1, 2])
    with pytest.raises(sk.InvalidArgumentError, match="finite number >= 0"):
        sk.Dataset.sample_from_datasets(parts(), weights=[1, -2, 1])
    with pytest.raises(sk.InvalidArgumentError, match="above 0"):
        sk.Dataset.sample_from_datasets(parts(), weights=[0, 0, 0])
    with pytest.raises(sk.InvalidArgumentError, match="seed"):
        sk.Dataset.sample_from_datasets(parts(), seed=-1)
    with pytest.raises(sk.InvalidArgumentError, match="non-empty list"):
        sk.Dataset.sample_from_datasets([])


def test_mixes_save_and_load(tmp_path):
    ds = sk.Dataset.sample_from_datasets([sk.Dataset.range(5), sk.Dataset.range(100, 110)], [1, 3], seed=5)
    np.save(tmp_path / "picks.npy", np.array([2, 0, 1, 1, 0, 2, 2, 2, 1]))
    picks = sk.Dataset.from_npy(tmp_path / "picks.npy")
    ch = sk.Dataset.choose_from_datasets(parts(), picks, stop_on_empty_dataset=False)
    for d in (ds, ch):
        d.save_spec(tmp_path / "m.json")
        assert ints(sk.Dataset.load_spec(tmp_path / "m.json")) == ints(d)
