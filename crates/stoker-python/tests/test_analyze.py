"""`stoker.analyze` and `stoker analyze` on the real ResNet-50 traces (tests/traces/)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import stoker as sk

TRACES = Path(__file__).resolve().parents[3] / "tests" / "traces"


def resnet(workers):
    return next((TRACES / "pytorch" / "kineto_tb_samples").glob(f"resnet50_num_workers_{workers}.*"))


def test_input_bound_only_without_dataloader_workers():
    a0, a4 = sk.analyze(resnet(0)), sk.analyze(resnet(4))
    assert a0.verdict == "highly input-bound" and 35 < a0.input_percent < 45
    assert a4.verdict == "not input-bound" and a4.input_percent < 2
    assert a0.idle_ms_per_step_by_cause["input"] > 50  # ms per step the GPU waits for data
    more_workers = [r for r in a0.recommendations if "DataLoader workers" in r["action"]]
    assert more_workers and "% of each step" in more_workers[0]["evidence"]
    assert not any("DataLoader workers" in r["action"] for r in a4.recommendations)
    assert "highly input-bound" in str(a0)
    # The idle time by cause adds up, input first with the DataLoader as its evidence.
    idle_ms = a0.step_ms * a0.raw["idle_percent"] / 100
    assert abs(sum(a0.idle_ms_per_step_by_cause.values()) - idle_ms) < 1e-6 * idle_ms
    first = a0.idle_by_cause[0]
    assert first["cause"] == "input" and first["top"][0]["what"].startswith("enumerate(DataLoader)")
    assert abs(sum(c["share_of_idle"] for c in a0.idle_by_cause) - 1) < 1e-9


def test_cli_text_and_json():
    stoker_bin = os.environ.get("STOKER_BIN")
    assert stoker_bin and os.path.exists(stoker_bin), "STOKER_BIN must point at the built `stoker` binary"
    r = subprocess.run(
        [stoker_bin, "analyze", "--json", str(resnet(0)), str(resnet(4))], capture_output=True, text=True, check=True
    )
    reports = json.loads(r.stdout)
    assert [x["verdict"] for x in reports] == ["highly input-bound", "not input-bound"]
    text = subprocess.run([stoker_bin, "analyze", str(resnet(0))], capture_output=True, text=True, check=True).stdout
    assert "verdict: highly input-bound" in text and "DataLoader workers" in text
    bad = subprocess.run([stoker_bin, "analyze", str(TRACES / "README.md")], capture_output=True, text=True)
    assert bad.returncode == 2 and "README.md" in bad.stderr and "line 1" in bad.stderr


def test_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        sk.analyze(tmp_path / "missing.json")
    p = tmp_path / "cut.json"
    p.write_text('{"traceEvents": [{"ph": "X"')
    with pytest.raises(ValueError, match="cut.json: not a readable trace at line 1"):
        sk.analyze(p)


def test_html_report_from_python_and_cli(tmp_path):
    out = tmp_path / "why.html"
    a = sk.analyze(resnet(0), html=out)
    html = out.read_text()
    assert f"<b>{a.verdict}:</b> {a.input_percent:.1f} %" in html and "<script" not in html
    assert "Timeline of the longest step" in html
    stoker_bin = os.environ.get("STOKER_BIN")
    assert stoker_bin and os.path.exists(stoker_bin), "STOKER_BIN must point at the built `stoker` binary"
    subprocess.run(
        [stoker_bin, "analyze", "--html", str(tmp_path / "r.html"), str(resnet(0)), str(resnet(4))],
        capture_output=True,
        check=True,
    )
    written = sorted(p.name for p in tmp_path.glob("r.*.html"))
    assert len(written) == 2 and "num_workers_0" in written[0] and "num_workers_4" in written[1]
    assert "not input-bound:" in (tmp_path / written[1]).read_text()


def test_tensorflow_xspace_and_jax_json():
    tf = sk.analyze(TRACES / "tensorflow" / "xspace" / "tf_custom_loop.xplane.pb")
    assert tf.raw["dialect"] == "xspace" and len(tf.steps) == 6
    assert tf.verdict == "moderately input-bound" and abs(tf.input_percent - 10.61) < 0.05
    assert "tf.data" in tf.recommendations[0]["action"]
    jax = sk.analyze(TRACES / "jax" / "jax_train.perfetto_trace.json.gz")
    assert [s["name"] for s in jax.steps] == [f"train#{i}" for i in range(6)]
    bad = TRACES / "README.md"
    with pytest.raises(ValueError, match="README.md"):
        sk.analyze(bad)


@pytest.mark.parametrize("name", ["torch_memory_cuda_w0", "torch_memory_cpu_w0"])
def test_memory_from_the_allocators_events(name, tmp_path):
    """Peak, its moment and what a step allocates, against the `[memory]` events themselves
    (traces recorded with profile_memory=True: tests/traces/make/make_torch_memory_trace.py)."""
    import gzip

    path = TRACES / "pytorch" / "memory" / f"{name}.pt.trace.json.gz"
    events = json.load(gzip.open(path))["traceEvents"]
    mem = [e for e in events if e.get("name") == "[memory]"]
    steps = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in events
                   if e.get("cat") == "user_annotation" and str(e.get("name")).startswith("ProfilerStep#"))
    a = sk.analyze(path, html=tmp_path / "r.html")
    by_device = {m["device"]: m for m in a.raw["memory"]}
    for dtype, device in [(1, "cuda:0"), (0, "cpu")]:
        mine = sorted((e["ts"], e["args"]["Total Allocated"], e["args"]["Bytes"]) for e in mem
                      if e["args"]["Device Type"] == dtype)
        if not mine:
            assert device not in by_device
            continue
        m = by_device[device]
        assert m["events"] == len(mine)
        peak = max(x[1] for x in mine)
        assert m["peak_allocated_bytes"] == peak
        first_peak = next(ts for ts, total, _ in mine if total == peak)
        origin = min(e["ts"] for e in events if "ts" in e and e.get("ph") != "M")
        assert abs(m["peak_at_ms"] - (first_peak - origin) / 1000) < 1e-6
        assert m["peak_step"] == next(n for a_, b_, n in steps if a_ <= first_peak <= b_)
        # Each kept step (the first is warm-up): allocated before it, its peak, after it.
        kept = steps[1:]
        assert [s["step"] for s in m["steps"]] == [n for _, _, n in kept]
        for s, (a_, b_, _) in zip(m["steps"], kept):
            before = [t for ts, t, _ in mine if ts < a_]
            start = before[-1] if before else mine[0][1] - mine[0][2]
            assert s["start_bytes"] == start
            assert s["peak_bytes"] == max([start] + [t for ts, t, _ in mine if a_ <= ts <= b_])
        rise = np.mean([s["peak_bytes"] - s["start_bytes"] for s in m["steps"]])
        assert abs(m["step_rise_bytes"] - rise) < 1
    assert f"memory {next(iter(by_device))}: peak" in str(a)
    html = (tmp_path / "r.html").read_text()
    assert "<h2>Memory</h2>" in html and "allocated at start, MB" in html


def test_compare_before_and_after_more_dataloader_workers(tmp_path):
    """The ResNet-50 pair (num_workers 0 → 4): the input share falls from ~40 % to ~1 %, and
    the comparison says so in its text, JSON and HTML."""
    c = sk.analyze([resnet(0), resnet(4)], compare=True, html=tmp_path / "cmp.html")
    a0, a4 = sk.analyze(resnet(0)), sk.analyze(resnet(4))
    share = c.row("input share")
    assert share["before"] == a0.input_percent and share["after"] == a4.input_percent
    assert 35 < share["before"] < 45 and share["after"] < 2
    assert share["change"] == pytest.approx(a4.input_percent - a0.input_percent)
    assert share["change_percent"] is None  # a share changes in points
    step = c.row("step time")
    assert step["before"] == a0.step_ms and step["after"] == a4.step_ms
    assert step["change_percent"] == pytest.approx((a4.step_ms - a0.step_ms) / a0.step_ms * 100)
    waits = c.row("idle: waiting for input")
    assert waits["before"] == a0.idle_ms_per_step_by_cause["input"] > 50 and waits["after"] < 1
    assert (c.verdict_before, c.verdict_after) == ("highly input-bound", "not input-bound")
    text = str(c)
    assert "input share fell from 39.8 % to 0.6 %" in text
    assert "verdict: highly input-bound → not input-bound" in text
    assert "largest change in idle time: waiting for input" in text
    html = (tmp_path / "cmp.html").read_text()
    assert "<h2>What changed</h2>" in html and "input share fell" in html and "-39.1 points" in html
    with pytest.raises(sk.InvalidArgumentError, match="two traces"):
        sk.analyze([resnet(0)], compare=True)
    stoker_bin = os.environ.get("STOKER_BIN")
    if stoker_bin:
        r = subprocess.run([stoker_bin, "analyze", "--compare", str(resnet(0)), str(resnet(4)), "--json"],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert [row["metric"] for row in doc["rows"]] == [row["metric"] for row in c.rows]
        assert doc["summary"] == c.summary
        r = subprocess.run([stoker_bin, "analyze", "--compare", str(resnet(0))], capture_output=True, text=True)
        assert r.returncode == 2 and "two traces" in r.stderr


def test_absurd_values_are_left_out_with_a_warning(tmp_path):
    events = [{"ph": "M", "name": "process_name", "pid": "GPU 0", "args": {"name": "GPU 0"}}]
    for k in range(3):
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "pid": "host", "tid": 1,
                       "ts": k * 1000, "dur": 1000})
        events.append({"ph": "X", "cat": "kernel", "name": "sgemm", "pid": "GPU 0", "tid": "stream 7",
                       "ts": k * 1000 + 400, "dur": 300, "args": {"device": 0, "stream": 7}})
    clean = tmp_path / "clean.json"
    clean.write_text(json.dumps(events))
    evil = tmp_path / "evil.json"
    evil.write_text(json.dumps(events + [{"ph": "X", "cat": "kernel", "name": "evil", "pid": "GPU 0",
                                          "tid": "stream 7", "ts": 1500, "dur": 1e308}]))
    a, b = sk.analyze(clean), sk.analyze(evil)
    assert a.warnings == []
    (w,) = b.warnings
    assert w.startswith("events left out (a duration over a day") and ": 1 (the first: 'evil'" in w
    assert f"warning: {w}" in str(b)
    assert (b.step_ms, len(b.steps), b.busy_percent) == (a.step_ms, len(a.steps), a.busy_percent)
    assert [k["name"] for k in b.raw["top_kernels"]] == ["sgemm"]


def test_a_loop_fed_by_stokers_loader_is_judged_by_its_waits_in_next(tmp_path):
    # A real torch.profiler trace (tests/traces/make/make_stoker_loader_trace.py): the loader's
    # next() leaves `stoker:next#torch.Loader` spans; the input share is the time measured in
    # next() around each profiled step, on the steps the analyzer keeps.
    base = TRACES / "pytorch" / "stoker" / "stoker_loader_cpu"
    reference = json.loads(base.with_suffix(".next.json").read_text())
    a = sk.analyze(str(base) + ".pt.trace.json.gz")
    steps = a.steps
    assert len(steps) == len(reference["next_ms"])
    kept = [i for i, s in enumerate(steps) if not s["warmup"]]
    measured = 100 * sum(reference["next_ms"][i] for i in kept) / sum(reference["step_ms"][i] for i in kept)
    assert abs(a.input_percent - measured) <= 5, (a.input_percent, measured)
    assert a.verdict.startswith("highly input-bound"), a.verdict
    # Without the spans (the trace as it was before the loader left them) nothing says input.
    import gzip

    events = json.loads(gzip.open(str(base) + ".pt.trace.json.gz").read())
    for e in events["traceEvents"]:
        if str(e.get("name", "")).startswith("stoker:next"):
            e["name"] = "some_python_function"
    unnamed = tmp_path / "unnamed.pt.trace.json"
    unnamed.write_text(json.dumps(events))
    assert sk.analyze(str(unnamed)).input_percent < 1


SPANS = """
import torch
import stoker as sk
from stoker import _profile
from stoker import torch as skt

ds = sk.Dataset.range(8).batch(2)
assert type(_profile.next_span("x")).__name__ == "nullcontext"  # no profiler recording
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
    assert sum(1 for _ in skt.loader(ds)) == 4
    assert sum(1 for _ in ds) == 4
names = [e.name for e in prof.events()]
assert names.count("stoker:next#torch.Loader") == 5, names  # 4 batches and the end
assert names.count("stoker:next#DatasetIterator") == 5, names
"""


def test_the_loader_leaves_spans_only_while_a_profiler_records():
    # In a process of its own: torch.profiler loads Triton, which cannot be loaded into a
    # process that already holds TensorFlow's and JAX's libraries (as pytest's, after
    # collecting every test module).
    r = subprocess.run([sys.executable, "-c", SPANS], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


JAX_LOOP = """
import glob, json, sys, time
import jax, jax.numpy as jnp, numpy as np
import stoker as sk, stoker.jax

def slow(b):
    time.sleep(0.02)  # a pipeline slower than the step
    return b

ds = sk.Dataset.from_tensor_slices(np.ones((64, 8), np.float32)).batch(8, drop_remainder=True).map(slow)
step = jax.jit(lambda x: jnp.tanh(x @ x.T).sum())
waits, steps = [], []
with jax.profiler.trace(sys.argv[1]):
    it = iter(stoker.jax.iterator(ds, prefetch=1))
    for i in range(7):
        t0 = time.perf_counter()
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            b = next(it)
            t1 = time.perf_counter()
            step(b).block_until_ready()
        waits.append(t1 - t0)
        steps.append(time.perf_counter() - t0)
path = glob.glob(sys.argv[1] + "/**/*.xplane.pb", recursive=True)[0]
a = sk.analyze(path)
kept = [i for i, s in enumerate(a.steps) if not s["warmup"]]
print(json.dumps({"analyzed": a.input_percent, "verdict": a.verdict, "steps": len(a.steps),
                  "measured": 100 * sum(waits[i] for i in kept) / sum(steps[i] for i in kept)}))
"""


def test_a_jax_loop_fed_by_stokers_iterator_is_judged_by_its_waits(tmp_path):
    # The iterator's `stoker:next#jax.iterator` TraceAnnotations, in a real JAX XSpace.
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    r = subprocess.run(
        [sys.executable, "-c", JAX_LOOP, str(tmp_path / "prof")], capture_output=True, text=True, env=env, timeout=300
    )
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["steps"] == 7 and got["verdict"].startswith("highly input-bound"), got
    assert abs(got["analyzed"] - got["measured"]) <= 5, got
