"""The timeline: a Chrome Trace Event file with spans per thread and buffer-fill counters."""

import json
import os
import subprocess
import sys

import numpy as np
import stoker as sk


def check_chrome_trace(doc):
    """The structure chrome://tracing and Perfetto read (the JSON object format)."""
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list)
    for e in doc["traceEvents"]:
        assert isinstance(e["name"], str) and e["ph"] in {"X", "C", "M"}, e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int), e
        if e["ph"] == "X":
            assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0, e
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
            assert isinstance(e["cat"], str) and isinstance(e["args"], dict), e
        elif e["ph"] == "C":
            assert isinstance(e["ts"], (int, float)), e
            assert e["args"] and all(isinstance(v, (int, float)) for v in e["args"].values()), e
        else:
            assert e["name"] in {"process_name", "thread_name"} and isinstance(e["args"]["name"], str), e


def check_nesting(doc):
    """Perfetto (and chrome://tracing) need the complete events of one thread to nest: a span
    that starts inside another ends inside it too."""
    by_thread = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            by_thread.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"], e["name"]))
    eps = 1e-3  # µs: float rounding of nanosecond times
    for spans in by_thread.values():
        spans.sort(key=lambda s: (s[0], -s[1]))
        open_ends = []
        for start, end, name in spans:
            while open_ends and start >= open_ends[-1][0] - eps:
                open_ends.pop()
            if open_ends:
                assert end <= open_ends[-1][0] + eps, (name, start, end, open_ends[-1])
            open_ends.append((end, name))
    return sum(len(v) for v in by_thread.values())


def slow_pipeline():
    def slow(x):
        # Long enough (> 10 µs) for every element's spans to be kept.
        return np.full(1000, x, dtype=np.float32).cumsum()

    return (
        sk.Dataset.range(400)
        .with_options(threads=2)
        .map(slow, num_parallel_calls=2)
        .map(sk.ops.rescale("value", divisor=3.0), num_parallel_calls=2)
        .batch(8)
        .prefetch(2)
    )


def test_trace_records_stages_ops_waits_and_buffer_fill(tmp_path):
    path = tmp_path / "run.trace.json"
    ds = slow_pipeline()
    with sk.trace(path):
        assert sum(len(b) for b in ds) == 400
    doc = json.loads(path.read_text())
    check_chrome_trace(doc)
    assert check_nesting(doc) > 400
    events = doc["traceEvents"]
    threads = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert {"stoker-map-0", "stoker-map-1", "stoker-prefetch(2)"} <= threads, threads
    spans = [e for e in events if e["ph"] == "X"]
    cats = {e["cat"] for e in spans}
    assert {"stage", "op", "wait_input"} <= cats, cats
    # Every element's stage span on the map workers, with its position.
    map_spans = [e for e in spans if e["cat"] == "stage" and e["name"].startswith("map[slow")]
    assert sorted(e["args"]["element"] for e in map_spans) == list(range(400))
    assert any(e["cat"] == "op" and e["name"] == "slow" for e in spans)
    # Queue graph: the map's and the prefetch's buffer fill levels.
    counters = {e["name"] for e in events if e["ph"] == "C"}
    assert any(c.startswith("buffer: map[") for c in counters), counters
    assert any(c.startswith("buffer: prefetch") for c in counters), counters
    other = doc["otherData"]
    assert other["dropped_spans"] == 0 and other["producer"] == "stoker"


def test_nothing_is_recorded_outside_a_trace(tmp_path):
    ds = slow_pipeline()
    with sk.trace(tmp_path / "a.json"):
        pass
    list(ds)  # not traced
    with sk.trace(tmp_path / "b.json"):
        pass
    doc = json.loads((tmp_path / "b.json").read_text())
    check_chrome_trace(doc)
    assert not [e for e in doc["traceEvents"] if e["ph"] != "M"]


def test_stoker_trace_environment_variable_traces_the_process(tmp_path):
    path = tmp_path / "env.trace.json"
    code = (
        "import stoker as sk, numpy as np\n"
        "ds = sk.Dataset.range(50).map(lambda x: np.full(2000, x).cumsum(), num_parallel_calls=2).batch(5)\n"
        "assert len(list(ds)) == 10\n"
    )
    env = dict(os.environ, STOKER_TRACE=str(path))
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    doc = json.loads(path.read_text())
    check_chrome_trace(doc)
    assert any(e["ph"] == "X" and e["cat"] == "stage" for e in doc["traceEvents"])
