"""The RAM budget: the buffers left to AUTOTUNE hold at most ``ram_budget`` bytes together,
checked by accounting (``stats()``) and by the process's peak RSS on W2's large elements."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import stoker as sk

# One W2 run in a fresh process: 18 pairs in batches of 3 (110 MiB each), taken by a consumer
# slower than the pipeline, so that every buffer fills; prints the peak RSS and the stats.
_CHILD = r"""
import glob, json, os, sys, time
import stoker
from stoker import workloads
root, budget = sys.argv[1], sys.argv[2]
images = sorted(glob.glob(os.path.join(root, "images", "*.png")))
labels = sorted(glob.glob(os.path.join(root, "labels", "*.png")))
_, colors = stoker.ops.read_class_colors(os.path.join(root, "class_dict.csv"))
ds = workloads.segmentation_pipeline(images, labels, colors).with_options(threads=2)
if budget != "default":
    ds = ds.with_options(ram_budget=int(budget))
n = 0
for batch in ds:
    n += len(batch["image"])
    del batch
    time.sleep(0.2)
# VmHWM, not ru_maxrss: the latter keeps the parent's peak across fork and exec.
with open("/proc/self/status") as f:
    peak = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
held = max(s.get("buffered_bytes_peak", 0) for s in ds.stats())
print(json.dumps({"pairs": n, "peak_rss": peak, "held": held}))
"""

_BATCH = 3 * 512 * 512 * (3 + 32) * 4
_MIB = 1 << 20


@pytest.fixture(scope="module")
def w2(tmp_path_factory):
    root = tmp_path_factory.mktemp("w2")
    sk.datasets.write_segmentation_pairs(str(root), n=18, seed=0)
    return str(root)


def _run(root: str, budget: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD, root, budget], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["pairs"] == 18
    return got


def test_w2_peak_rss_stays_under_the_ram_budget_plus_the_engine_s_working_set(w2):
    # The engine's working set: what runs with no room for any buffered element (the batch the
    # consumer holds, one waiting for it, the one being filled).
    fixed = max(_run(w2, "1")["peak_rss"] for _ in range(2))
    default = _run(w2, "default")
    budget = _BATCH  # half of what the default prefetch buffers on two cores
    assert default["held"] >= 2 * _BATCH
    assert default["peak_rss"] > fixed + budget + 32 * _MIB, "the default buffers nothing more: nothing to bound"
    for run in range(20):
        got = _run(w2, str(budget))
        assert got["held"] <= budget, f"run {run}: the buffers held {got['held']} bytes"
        over = got["peak_rss"] - fixed - budget
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
