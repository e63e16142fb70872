"""The step timer: measured input share against a constructed one."""

import time

import pytest
import stoker as sk
from stoker.keras import StepTimer as KerasStepTimer
from stoker.timing import input_bound_verdict, timed


def slow_source(n, seconds):
    for i in range(n):
        time.sleep(seconds)
        yield i


def run_loop(iterable, step_seconds):
    for _ in iterable:
        time.sleep(step_seconds)


def test_verdict_bands_are_tensorflow_profilers():
    assert input_bound_verdict(20.0) == "highly input-bound"
    assert input_bound_verdict(19.9) == "moderately input-bound"
    assert input_bound_verdict(5.0) == "moderately input-bound"
    assert input_bound_verdict(4.9) == "not input-bound"


def test_input_bound_loop_over_a_python_iterable():
    # Input 30 ms, step 10 ms: 75 % of each step waits for input.
    t = timed(slow_source(18, 0.030), warmup=3)
    run_loop(t, 0.010)
    r = t.report()
    assert r.steps == 15 and r.warmup_steps == 3
    assert r.input_percent == pytest.approx(75.0, abs=5.0)
    assert r.verdict == "highly input-bound"
    assert r.to_dict()["step_ms_p50"] == pytest.approx(40.0, abs=8.0)
    assert "highly input-bound" in str(r)


def test_input_bound_stoker_pipeline_without_prefetch():
    # A pipeline that makes one element per 20 ms (running ahead of the loop by one element on
    # its driver thread) and 10 ms steps: each step lasts 20 ms, of which 10 wait for input.
    def slow(x):
        time.sleep(0.020)
        return x

    ds = sk.Dataset.range(15).map(slow)
    t = timed(ds, warmup=3)
    run_loop(t, 0.010)
    assert t.report().steps == 12
    assert t.report().input_percent == pytest.approx(50.0, abs=6.0)


def test_compute_bound_stoker_pipeline_with_prefetch():
    # Input 5 ms per element on two workers, prefetched; 20 ms steps: nothing waits.
    def slow(x):
        time.sleep(0.005)
        return x

    ds = sk.Dataset.range(20).with_options(threads=2).map(slow, num_parallel_calls=2).prefetch(4)
    t = timed(ds, warmup=3)
    run_loop(t, 0.020)
    r = t.report()
    assert r.steps == 17
    assert r.input_percent < 3.0
    assert r.verdict == "not input-bound"


def test_synchronize_counts_device_work_in_the_step():
    # 10 ms input, 5 ms host step + 5 ms of "device work" waited for by synchronize: 50 %.
    synced = []

    def synchronize():
        synced.append(1)
        time.sleep(0.005)

    t = timed(slow_source(14, 0.010), warmup=2, synchronize=synchronize)
    run_loop(t, 0.005)
    r = t.report()
    assert len(synced) == 14
    assert r.input_percent == pytest.approx(50.0, abs=6.0)


def test_keras_callback_in_a_keras_like_loop():
    # Keras fetches each batch inside the step, between batch begin and batch end.
    cb = KerasStepTimer(warmup=2)
    data = cb.wrap(slow_source(12, 0.010))
    cb.on_train_begin()
    for step in range(12):
        cb.on_train_batch_begin(step)
        next(data)
        time.sleep(0.030)
        cb.on_train_batch_end(step)
    r = cb.report()
    assert r.steps == 10
    assert r.input_percent == pytest.approx(25.0, abs=5.0)
    assert r.verdict == "highly input-bound"


def test_headspace_replays_the_batches_with_input_free():
    # Input 30 ms, step 10 ms: steps go ~4x as fast (40 -> 10 ms) once input is free.
    seen = []

    def step(batch):
        seen.append(batch)
        time.sleep(0.010)

    h = sk.headspace(step, slow_source(100, 0.030), steps=12, warmup=2)
    assert seen[:14] == list(range(14)) and seen[14:] == list(range(14))  # live, then replayed
    assert h.replayed.input_percent < 5
    assert h.speedup == pytest.approx(4.0, rel=0.2)
    assert "4." in str(h) or "3." in str(h)
