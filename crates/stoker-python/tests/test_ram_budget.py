"""The RAM budget: the buffers left to AUTOTUNE hold at most ``ram_budget`` bytes together,
checked by accounting (``stats()``) and by the process's peak RSS on W2's large elements."""

from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest
import stoker as sk

ROOT = pathlib.Path(__file__).resolve().parents[3]


def _bench():
    """bench/ram_budget.py: its child runs W2 in a fresh process (the benchmark uses it too)."""
    spec = importlib.util.spec_from_file_location("bench_ram_budget", ROOT / "bench" / "ram_budget.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_B = _bench()
_BATCH, _MIB = _B.BATCH, _B.MIB


@pytest.fixture(scope="module")
def w2(tmp_path_factory):
    root = tmp_path_factory.mktemp("w2")
    sk.datasets.write_segmentation_pairs(str(root), n=_B.PAIRS, seed=0)
    return str(root)


def _run(root: str, budget: str) -> dict:
    # Four threads: the default buffer starts four batches deep, whatever the tuner does later.
    got = _B.run_child(root, budget, threads=4)
    assert got["pairs"] == _B.PAIRS
    return got


def test_w2_peak_rss_stays_under_the_ram_budget_plus_the_engine_s_working_set(w2):
    # The engine's working set: what runs with no room for any buffered element (the batch the
    # consumer holds, one waiting for it, the one being filled).
    fixed = max(_run(w2, "1")["peak_rss"] for _ in range(3))
    default = _run(w2, "default")
    budget = _BATCH // 2  # an eighth of what the default buffer holds
    assert default["held"] >= 4 * _BATCH, "the default buffers nothing more: nothing to bound"
    # The working set's own peak moves by up to a batch between runs (a batch's zero pages
    # mapped afresh or recycled, as the threads interleave), a spread the runs above may miss.
    spread = _BATCH
    for run in range(20):
        got = _run(w2, str(budget))
        assert got["held"] <= budget, f"run {run}: the buffers held {got['held']} bytes"
        over = got["peak_rss"] - fixed - budget - spread
        assert over <= 16 * _MIB, f"run {run}: peak RSS {got['peak_rss'] / _MIB:.0f} MiB, {over / _MIB:.0f} MiB over"


def test_the_budget_is_shown_and_the_buffers_stay_within_it():
    budget = 10 * 4 * 1000
    ds = (
        sk.Dataset.range(400)
        .map(lambda x: np.full(1000, x, dtype=np.float32), num_parallel_calls=2)
        .prefetch(sk.AUTOTUNE)
        .with_options(ram_budget=budget)
    )
    got = []
    for x in ds:
        got.append(int(x[0]))
    assert got == list(range(400))
    (pf,) = [s for s in ds.stats() if s["name"] == "prefetch(AUTOTUNE)"]
    assert 0 < pf["buffered_bytes_peak"] <= budget
    (knob,) = pf["knobs"]
    assert (knob["name"], knob["kind"], knob["tuned"]) == ("buffer_size", "buffer", True)
    text = ds.explain()
    assert "ram budget: 39.1 KiB (ram_budget=40000, as set)" in text, text
    assert "buffer_size=" in text


def test_the_default_budget_is_half_of_the_memory_available():
    ds = sk.Dataset.range(3).prefetch(sk.AUTOTUNE)
    list(ds)
    line = next(x for x in ds.explain().splitlines() if x.startswith("ram budget:"))
    assert "half of the" in line and "available" in line, line


def test_options_carry_the_ram_budget_as_tf_data_does():
    o = sk.Options()
    o.autotune.ram_budget = 1 << 20
    ds = sk.Dataset.range(3).prefetch(sk.AUTOTUNE).with_options(o)
    list(ds)
    assert "ram budget: 1.0 MiB (ram_budget=1048576, as set)" in ds.explain()


def test_a_ram_budget_below_one_byte_names_the_argument():
    with pytest.raises(sk.InvalidArgumentError, match="ram_budget"):
        sk.Dataset.range(3).with_options(ram_budget=0)


def test_autotune_off_keeps_the_fixed_prefetch():
    ds = sk.Dataset.range(10).prefetch(sk.AUTOTUNE).with_options(autotune=False, ram_budget=1)
    assert list(ds) == list(range(10))
    assert "ram budget" not in ds.explain()
    (pf,) = [s for s in ds.stats() if s["name"] == "prefetch(AUTOTUNE)"]
    (knob,) = pf["knobs"]
    assert knob["tuned"] is False
