"""AUTOTUNE tunes while the pipeline runs: a stage that waits gets threads beyond the cores, a
number the user set never moves, ``with_options(autotune=False)`` keeps the share of the
budget, the knob ``stats()`` shows is the one the workers obey, and under ``threads=1`` the
pipeline uses about one core."""

from __future__ import annotations

import resource
import threading
import time

import numpy as np
import stoker as sk
from stoker import workloads


class _Concurrency:
    """A function that waits (as on storage) and counts how many calls run at once."""

    def __init__(self, wait_s: float) -> None:
        self.wait_s = wait_s
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0

    def __call__(self, x: np.ndarray) -> np.ndarray:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(self.wait_s)
        with self.lock:
            self.now -= 1
        return x

    def reset(self) -> None:
        with self.lock:
            self.most = self.now


def _knob(ds: sk.Dataset) -> dict:
    (knob,) = [k for s in ds.stats() for k in s.get("knobs", []) if k["name"] == "num_parallel_calls"]
    return knob


def _rate(it, seconds: float, per_element: int = 1) -> float:
    n, t = 0, time.perf_counter()
    while time.perf_counter() - t < seconds:
        next(it)
        n += per_element
    return n / (time.perf_counter() - t)


def test_a_stage_that_waits_gets_threads_beyond_the_cores():
    fn = _Concurrency(0.01)
    src = sk.Dataset.range(10**7).with_options(threads=2)
    tuned = src.map(fn, num_parallel_calls=sk.AUTOTUNE).batch(4)
    it = iter(tuned)
    _rate(it, 4.0)
    tuned_rate = _rate(it, 1.0, 4)
    knob = _knob(tuned)
    assert knob["tuned"] and knob["value"] > 4, knob
    assert knob["reason"].startswith(("tuned", "tuning")), knob
    assert fn.most > 4
    del it
    fixed = src.with_options(autotune=False).map(fn, num_parallel_calls=sk.AUTOTUNE).batch(4)
    it = iter(fixed)
    _rate(it, 0.3)
    fixed_rate = _rate(it, 1.0, 4)
    off = _knob(fixed)
    assert not off["tuned"] and off["value"] == 2 and "autotune=False" in off["reason"], off
    # 2 threads waiting 10 ms make about 200 elements/s; the tuned map makes several times that.
    assert tuned_rate > 2 * fixed_rate, (tuned_rate, fixed_rate, knob)


def test_a_number_the_user_set_never_moves():
    fn = _Concurrency(0.005)
    ds = sk.Dataset.range(10**7).with_options(threads=2).map(fn, num_parallel_calls=2).batch(4)
    it = iter(ds)
    _rate(it, 2.0)
    knob = _knob(ds)
    assert knob == {**knob, "value": 2, "tuned": False, "reason": "set by the user"}, knob
    assert fn.most == 2
    (stage,) = [s for s in ds.stats() if s["name"].startswith("map[")]
    assert stage["workers"] == 2


def test_the_knob_shown_is_the_parallelism_used():
    fn = _Concurrency(0.01)
    ds = sk.Dataset.range(10**7).with_options(threads=2).map(fn, num_parallel_calls=sk.AUTOTUNE).batch(4)
    it = iter(ds)
    checked = 0
    deadline = time.perf_counter() + 6.0
    while time.perf_counter() < deadline and checked < 5:
        before = _knob(ds)["value"]
        for _ in range(3):
            next(it)
        fn.reset()
        for _ in range(10):
            next(it)
        after = _knob(ds)["value"]
        if before == after:
            # Calls under way never exceed the knob while it holds still.
            assert fn.most <= after, (fn.most, after)
            checked += 1
    assert checked >= 3


def test_tf_data_options_switch_the_tuner_off():
    opts = sk.Options()
    opts.autotune.enabled = False
    ds = sk.Dataset.range(10**6).with_options(opts).with_options(threads=2)
    ds = ds.map(_Concurrency(0.002), num_parallel_calls=sk.AUTOTUNE)
    it = iter(ds)
    _rate(it, 1.0)
    knob = _knob(ds)
    assert not knob["tuned"] and knob["value"] == 2, knob


def test_under_threads_1_the_pipeline_uses_about_one_core(tmp_path):
    root = str(tmp_path / "w3")
    sk.datasets.write_image_folder(root, n=64, num_classes=4, seed=3)
    ops = workloads.imagenet_ops(size=96, seed=1)
    ds = (sk.Dataset.image_folder(root).repeat().with_options(threads=1)
          .map(ops, num_parallel_calls=sk.AUTOTUNE).batch(8).prefetch(sk.AUTOTUNE))
    it = iter(ds)
    _rate(it, 1.0)
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    _rate(it, 3.0)
    r1, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - t0
    cores = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) / wall
    # One core for the work, plus the hand-overs between the pipeline's threads.
    assert cores < 1.3, cores
    assert _knob(ds)["value"] == 1


def test_a_state_saved_under_one_tuning_restores_under_another():
    slow, fast = _Concurrency(0.003), _Concurrency(0.0)

    def build(fn: _Concurrency, **options) -> sk.Dataset:
        ds = sk.Dataset.range(20000).shuffle(64, seed=3).map(fn, num_parallel_calls=sk.AUTOTUNE)
        return ds.batch(8).prefetch(sk.AUTOTUNE).with_options(**options)

    want = [b.tolist() for b in build(fast, autotune=False, threads=1)]
    # Saved while the tuner has moved the map's workers beyond the budget of 2.
    tuned = build(slow, threads=2)
    it = tuned.iterator()
    head = []
    t = time.perf_counter()
    while time.perf_counter() - t < 1.0 or _knob(tuned)["value"] <= 2:
        head.append(next(it).tolist())
        assert time.perf_counter() - t < 30, "the knob never moved"
    state = it.state()
    del it
    assert head == want[: len(head)]
    rest = [b.tolist() for b in build(fast, autotune=False, threads=1).iterator(state=state)]
    assert head + rest == want
    # And the other way: saved untuned on one thread, restored where the tuner moves it.
    it = build(fast, autotune=False, threads=1).iterator()
    head = [next(it).tolist() for _ in range(37)]
    state = it.state()
    del it
    assert head + [b.tolist() for b in build(fast, threads=2).iterator(state=state)] == want


def test_stage_threads_live_across_the_passes_of_a_repeat():
    seen: set[int] = set()
    lock = threading.Lock()

    def note(x):
        with lock:
            seen.add(threading.get_native_id())
        return x

    passes = 200
    ds = sk.Dataset.range(6).map(note, num_parallel_calls=2).prefetch(2).repeat(passes).with_options(autotune=False)
    assert sorted(ds.as_numpy_iterator()) == sorted(list(range(6)) * passes)
    # Each pass starts the map and its prefetch again, on the threads the pass before used.
    assert len(seen) <= 6, f"{len(seen)} threads for {passes} passes of a 2-worker map"


def test_a_forked_child_runs_pipelines_on_threads_of_its_own():
    import os

    assert list(sk.Dataset.range(20).map(lambda x: x + 1, num_parallel_calls=2).prefetch(2)) == list(range(1, 21))
    pid = os.fork()
    if pid == 0:  # the child: the parent's idle threads are not here
        ok = list(sk.Dataset.range(20).map(lambda x: x + 1, num_parallel_calls=2).prefetch(2)) == list(range(1, 21))
        os._exit(0 if ok else 1)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.05)
    os.kill(pid, 9)
    raise AssertionError("the forked child hung")


def test_an_interleave_left_to_autotune_tunes_its_reads_and_keeps_its_order():
    def files(i):
        return sk.Dataset.range(i * 1000, i * 1000 + 300)

    def build(n, **options):
        src = sk.Dataset.range(8)
        return src.interleave(files, cycle_length=4, block_length=2, num_parallel_calls=n).with_options(**options)

    want = list(build(sk.AUTOTUNE, autotune=False))
    tuned = build(sk.AUTOTUNE, threads=2)
    assert list(tuned) == want
    (knob,) = [k for s in tuned.stats() for k in s.get("knobs", []) if k["name"] == "num_parallel_calls"]
    assert (knob["kind"], knob["tuned"], knob["max"]) == ("reads", True, 4)
    assert "reads ahead" in knob["reason"] or "tun" in knob["reason"]
    fixed = build(4, threads=2)
    assert list(fixed) == want
    assert not [k for s in fixed.stats() for k in s.get("knobs", []) if k["tuned"]]
