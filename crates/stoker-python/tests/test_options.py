"""tf.data-style Options: deterministic for the whole pipeline, threading, the planner's
rewrites by tf.data's names."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import stoker as sk


def _held_back(v):
    # Element 0 waits until a later one has been made: in order, it would hold them all back.
    if int(v) == 0:
        time.sleep(0.3)
    return v


def test_deterministic_false_lets_a_parallel_map_hand_out_what_is_ready():
    opts = sk.Options()
    opts.deterministic = False
    ds = sk.Dataset.range(20).map(_held_back, num_parallel_calls=2).with_options(opts)
    got = [int(v) for v in ds]
    assert sorted(got) == list(range(20)) and got != list(range(20))
    # A map that says keeps its own setting.
    own = sk.Dataset.range(20).map(_held_back, num_parallel_calls=2, deterministic=True).with_options(opts)
    assert [int(v) for v in own] == list(range(20))
    # The default keeps the order.
    assert [int(v) for v in sk.Dataset.range(20).map(_held_back, num_parallel_calls=2)] == list(range(20))
    assert "deterministic=false" in ds.explain()


def test_threading_and_optimizations_map_to_stokers_options(tmp_path):
    opts = sk.Options()
    opts.threading.private_threadpool_size = 1
    opts.threading.max_intra_op_parallelism = 1
    opts.experimental_optimization.apply_default_optimizations = False
    ds = sk.Dataset.from_tensor_slices({"x": np.arange(8, dtype=np.uint8)}).map(sk.ops.cast("x", "float32")).batch(4)
    tuned = ds.with_options(opts)
    assert "threads=1" in tuned.explain() and "rewrites: none" in tuned.explain()
    assert "map_after_batch x1" in ds.explain()
    assert [b["x"].tolist() for b in tuned] == [b["x"].tolist() for b in ds]
    seen = set()

    def where(v):
        seen.add(threading.current_thread().name)
        return v

    list(sk.Dataset.range(50).map(where, num_parallel_calls=4).with_options(opts))
    assert len(seen) == 1, seen
    # The options travel in a spec file.
    opts2 = sk.Options()
    opts2.deterministic = False
    native = sk.Dataset.range(10).batch(4).with_options(opts2)
    native.save_spec(tmp_path / "o.json")
    assert "deterministic=false" in sk.Dataset.load_spec(tmp_path / "o.json").explain()


def test_unknown_options_and_wrong_arguments():
    opts = sk.Options()
    with pytest.raises(AttributeError, match="no option 'determinstic'"):
        opts.determinstic = False  # type: ignore[attr-defined]
    with pytest.raises(AttributeError, match="private_threadpool_size"):
        opts.threading.threads = 2  # type: ignore[attr-defined]
    with pytest.raises(sk.InvalidArgumentError, match="stoker.Options"):
        sk.Dataset.range(3).with_options({"deterministic": False})  # type: ignore[arg-type]
