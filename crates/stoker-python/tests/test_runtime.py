"""Threads, the GIL, early stops, Ctrl-C, and the CLI."""

from __future__ import annotations

import _thread
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import stoker as sk
from stoker import workloads


def test_gil_is_released_while_rust_works(chess_files):
    # A Python thread keeps counting while the main thread iterates a native pipeline. If the
    # GIL were held while Rust works or waits, the counter would barely move.
    ds = workloads.chess_pipeline(chess_files, seed=0, batch_size=64).repeat(3)
    ticks = [0]
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks[0] += 1

    t = threading.Thread(target=count)
    t.start()
    start = time.perf_counter()
    n = sum(len(b["score"]) for b in ds)
    elapsed = time.perf_counter() - start
    stop.set()
    t.join()
    assert n == 3 * (3000 // 64) * 64
    assert ticks[0] > 1000 * elapsed, (ticks[0], elapsed)


def test_early_stop_and_drop_do_not_hang(chess_files):
    start = time.perf_counter()
    for _ in range(10):
        ds = workloads.chess_pipeline(chess_files, seed=0, batch_size=32)
        it = iter(ds)
        next(it)
        del it  # threads stop and are joined
    # Python map workers waiting for the GIL while the iterator is dropped.
    for _ in range(5):
        it = iter(sk.Dataset.range(10_000).map(lambda v: v * 2, num_parallel_calls=4).prefetch(8))
        next(it)
        del it
    assert time.perf_counter() - start < 60



def test_exit_with_a_live_iterator_in_a_python_function():
    # The interpreter exits while a worker runs a NumPy function (which lets the GIL go):
    # the iterator is closed before Python finalizes, so the worker can take the GIL back
    # and finish. Without that, CPython aborts the process (SIGABRT) or the close waits out
    # its time and warns.
    script = """
import numpy as np
import stoker as sk

def work(x):
    return np.tanh(np.ones(200_000, np.float32) * x).sum(dtype=np.float32)

it = iter(sk.Dataset.range(100_000).with_options(threads=2).map(work, num_parallel_calls=2).prefetch(8))
next(it)
"""
    for _ in range(5):
        start = time.perf_counter()
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr[-2000:]
        assert "did not stop" not in r.stderr, r.stderr
        assert time.perf_counter() - start < 30

def test_ctrl_c_interrupts_a_blocked_next():
    # A pipeline that never yields: every element is filtered out, forever.
    ds = sk.Dataset.range(10).repeat().filter(lambda v: False)
    # A process started in the background by a non-interactive shell ignores SIGINT, and then
    # interrupt_main() does nothing: give this test Python's own handler.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.5, _thread.interrupt_main)
    timer.start()
    start = time.perf_counter()
    try:
        with pytest.raises(KeyboardInterrupt):
            next(iter(ds))
        assert time.perf_counter() - start < 10
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)


CTRL_C_IN_A_LOOPING_MAP = """
import os, signal, sys, threading, time
import stoker as sk

def forever(x):
    while True:
        time.sleep(0.5)
    return x

ds = sk.Dataset.range(100).map(forever, num_parallel_calls=2)
threading.Timer(float(sys.argv[1]), lambda: os.kill(os.getpid(), signal.SIGINT)).start()
try:
    for x in ds:
        pass
except KeyboardInterrupt:
    sys.exit(3)
"""


def test_ctrl_c_with_a_looping_python_map_exits_with_the_users_code_every_time(tmp_path):
    # A map worker left to finish its call must not come back into Python while it finalizes
    # ("Fatal Python error: PyGILState_Release", exit -6): a rare race, so many runs under load.
    script = tmp_path / "case.py"
    script.write_text(CTRL_C_IN_A_LOOPING_MAP)
    rng = np.random.default_rng(37)
    delays = [f"{d:.3f}" for d in rng.uniform(1.0, 2.0, 240)]
    from concurrent.futures import ThreadPoolExecutor

    def run(delay: str) -> tuple[int, str]:
        r = subprocess.run(
            [sys.executable, "-W", "ignore", str(script), delay], capture_output=True, text=True, timeout=60
        )
        return r.returncode, r.stderr[-500:]

    # Twelve at a time on the test machine's cores: the load is what makes the race likely.
    with ThreadPoolExecutor(12) as pool:
        results = list(pool.map(run, delays))
    bad = [(delay, rc, err) for delay, (rc, err) in zip(delays, results) if rc != 3]
    assert not bad, f"{len(bad)} of {len(delays)} runs: {bad[:3]}"


FORK_WITH_A_LIVE_ITERATOR = """
import os, sys, threading, time
import stoker as sk

ds = sk.Dataset.range(10**6).map(lambda x: x * 2, num_parallel_calls=2).prefetch(4)
it = iter(ds)
assert (next(it), next(it)) == (0, 2)
# A thread is inside next() while the process forks.
reader = threading.Thread(target=lambda: [next(it) for _ in range(3000)])
reader.start()
time.sleep(0.01)
pid = os.fork()
if pid == 0:
    try:
        next(it)
        sys.exit(10)
    except sk.InvalidArgumentError as e:
        if "fork()ed child" not in str(e):
            sys.exit(11)
    try:
        it.state()
        sys.exit(12)
    except sk.InvalidArgumentError:
        pass
    it.close()
    # A new iteration in the child has threads of its own.
    if [int(x) for x in sk.Dataset.range(5).map(lambda x: x + 1, num_parallel_calls=2)] != [1, 2, 3, 4, 5]:
        sys.exit(13)
    sys.exit(0)  # through atexit, which must not wait for the parent's threads
reader.join()
_, status = os.waitpid(pid, 0)
assert os.WIFEXITED(status), status
print("child", os.WEXITSTATUS(status), "parent", int(next(it)))
"""


def test_a_forked_child_gets_a_clear_error_from_its_parents_iterator_and_exits(tmp_path):
    # A fork()ed child going on with an iterator its parent started gets an error, not a hang.
    script = tmp_path / "fork.py"
    script.write_text(FORK_WITH_A_LIVE_ITERATOR)
    for _ in range(5):
        r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr[-2000:]
        assert r.stdout.split()[:2] == ["child", "0"], r.stdout
        assert int(r.stdout.split()[3]) == 2 * 3002


def test_stats_count_every_stage(chess_files):
    # W1 (all native) and a Python function after it.
    ds = workloads.chess_pipeline(chess_files, seed=0, batch_size=100).map(lambda b: {**b, "score": b["score"] * 2})
    n = sum(len(b["score"]) for b in ds)
    stats = {s["kind"]: s for s in ds.stats()}
    assert n == 3000
    assert stats["shuffle"]["elements"] == 3000
    assert stats["batch"]["elements"] == 30
    maps = [s for s in ds.stats() if s["kind"] == "map"]
    assert all(m["elements"] == 30 for m in maps) and any(m["workers"] >= 1 for m in maps)
    assert any(m["python_s"] > 0 for m in maps) and any(m["busy_s"] > 0 and m["python_s"] == 0 for m in maps)
    for s in ds.stats():
        for key in ("busy_s", "wait_input_s", "blocked_output_s", "buffer_len", "buffer_capacity"):
            assert key in s


def test_threads_option_limits_workers(chess_files):
    ds = workloads.chess_pipeline(chess_files, seed=0, threads=1)
    list(ds)
    assert all(s["workers"] <= 1 for s in ds.stats() if s["kind"] == "map")
    ds = workloads.chess_pipeline(chess_files, seed=0, threads=2)
    list(ds)
    assert any(s["workers"] == 2 for s in ds.stats() if s["kind"] == "map")


def _stoker_bin():
    path = os.environ.get("STOKER_BIN")
    if not path or not os.path.exists(path):
        pytest.fail("STOKER_BIN must point at the built `stoker` binary (make py-test builds it)")
    return path


def test_cli_output_into_a_closed_pipe_ends_quietly(chess_files):
    # `stoker inspect ... | head -c 10`: the reader goes away while stoker still writes.
    for _ in range(5):
        p = subprocess.Popen(
            [_stoker_bin(), "inspect", "--json", *(chess_files * 50)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert p.stdout is not None and p.stderr is not None
        p.stdout.read(10)
        p.stdout.close()
        err = p.stderr.read().decode()
        code = p.wait(timeout=60)
        assert code in (0, -signal.SIGPIPE, 141), (code, err)
        assert "panicked" not in err, err


def test_the_console_script_runs_the_same_command_as_the_binary(chess_files, tmp_path):
    # The wheel's `stoker` is `python -m stoker._cli`: the same output and exit status as the
    # binary, for a success, a check that fails (1), an error (2) and clap's own --version.
    bad = tmp_path / "bad.tfrecord"
    data = bytearray(open(chess_files[0], "rb").read())
    data[500] ^= 0xFF
    bad.write_bytes(bytes(data))
    none = str(tmp_path / "none")
    cases = [["inspect", "--json", *chess_files], ["inspect", str(bad)], ["inspect", none], ["--version"]]
    for args in cases:
        binary = subprocess.run([_stoker_bin(), *args], capture_output=True, text=True)
        script = subprocess.run([sys.executable, "-m", "stoker._cli", *args], capture_output=True, text=True)
        same = (script.returncode, script.stdout, script.stderr) == (binary.returncode, binary.stdout, binary.stderr)
        assert same, (args, script, binary)
    assert [binary.returncode, binary.stdout.strip()] == [0, f"stoker {sk.__version__}"]
    # A file name that is not UTF-8 (Latin-1 bytes) reaches the command as it reaches the
    # binary, whose arguments say they take UTF-8 (not a Python traceback). Linux's file
    # systems take any bytes in a name (macOS's and Windows' do not).
    if not sys.platform.startswith("linux"):
        return
    latin1 = os.path.join(os.fsencode(tmp_path), b"caf\xe9.tfrecord")
    with open(latin1, "wb") as f:
        f.write(open(chess_files[0], "rb").read())
    args = [b"inspect", latin1]
    binary = subprocess.run([_stoker_bin(), *args], capture_output=True)
    script = subprocess.run([sys.executable, "-m", "stoker._cli", *args], capture_output=True)
    assert binary.returncode == 2 and b"invalid UTF-8" in binary.stderr, binary
    assert (script.returncode, script.stdout, script.stderr) == (binary.returncode, binary.stdout, binary.stderr)


def test_ctrl_c_ends_the_console_script_at_once(tmp_path):
    # The command runs in Rust with the GIL released: Python's own SIGINT handler would only
    # set a flag, looked at when the command returns (here after a minute).
    spec = str(tmp_path / "long.toml")
    sk.Dataset.range(10**12).batch(64).save_spec(spec)
    p = subprocess.Popen([sys.executable, "-m", "stoker._cli", "bench", spec, "--seconds", "60"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(3)
        sent = time.monotonic()
        p.send_signal(signal.SIGINT)
        code = p.wait(timeout=30)
        assert time.monotonic() - sent < 1.0
        assert code == -signal.SIGINT
    finally:
        p.kill()


def test_cli_inspect_expands_patterns_and_says_things_once(chess_files, tmp_path):
    pattern = os.path.join(os.path.dirname(chess_files[0]), "*.tfrecord")
    out = subprocess.run([_stoker_bin(), "inspect", "--json", pattern], capture_output=True, text=True, check=True)
    assert sorted(r["file"] for r in json.loads(out.stdout)) == sorted(chess_files)
    r = subprocess.run([_stoker_bin(), "inspect", str(tmp_path / "none-*.tfrecord")], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.count("no files match this pattern") == 1, r.stderr


def test_cli_inspect(chess_files, tmp_path):
    out = subprocess.run([_stoker_bin(), "inspect", "--json", *chess_files], capture_output=True, text=True, check=True)
    reports = json.loads(out.stdout)
    assert sum(r["records"] for r in reports) == 3000
    assert all(r["crc_ok"] for r in reports)
    ex = reports[0]["first_record"]["example"]
    assert ex["d"]["type"] == "bytes_list" and ex["d"]["first_lengths"] == [194]
    assert ex["s"]["type"] == "int64_list"
    bad = tmp_path / "bad.tfrecord"
    data = bytearray(open(chess_files[0], "rb").read())
    data[500] ^= 0xFF
    bad.write_bytes(bytes(data))
    r = subprocess.run([_stoker_bin(), "inspect", str(bad)], capture_output=True, text=True)
    assert r.returncode == 1 and "ERROR" in r.stdout and "record" in r.stdout
    gz = tmp_path / "g.tfrecord"
    with sk.io.TFRecordWriter(str(gz), "GZIP") as w:
        w.write(sk.io.serialize_example({"a": [1.0, 2.0]}))
    r = subprocess.run([_stoker_bin(), "inspect", "--json", str(gz)], capture_output=True, text=True, check=True)
    rep = json.loads(r.stdout)[0]
    assert rep["compression"] == "gzip" and rep["records"] == 1


def test_cli_bench_runs_a_saved_spec(chess_files, tmp_path):
    native = (
        sk.TFRecordDataset(chess_files).batch(100, drop_remainder=True).map(workloads.chess_ops(), num_parallel_calls=2)
    )
    spec = tmp_path / "w1.toml"
    native.save_spec(spec)
    r = subprocess.run(
        [_stoker_bin(), "bench", str(spec), "--json", "--batches", "1000", "--warmup", "0"],
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(r.stdout)
    assert report["elements"] == 30 and report["examples"] == 3000 and report["ended"]
    assert report["examples_per_s"] > 0
    kinds = [s["kind"] for s in report["stages"]]
    assert "map" in kinds and "batch" in kinds and "tfrecord" in kinds
    # Repeated, so that it runs the whole half second; the verdict in the terminal and the JSON.
    native.repeat().save_spec(spec)
    text = subprocess.run(
        [_stoker_bin(), "bench", str(spec), "--seconds", "0.5", "--threads", "2"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "examples/s" in text and "busy s" in text
    assert "verdict: " in text and "end the pipeline with .prefetch(" in text, text
    r = subprocess.run(
        [_stoker_bin(), "bench", str(spec), "--json", "--seconds", "0.5", "--threads", "2"],
        capture_output=True,
        text=True,
        check=True,
    )
    verdict = json.loads(r.stdout)["verdict"]
    assert verdict["bottleneck"] in [s["name"] for s in verdict["stages"]]
    assert verdict["groups"][0]["label"] == "driver thread"
    assert all(r["evidence"] for r in verdict["recommendations"])
    bad = tmp_path / "bad.json"
    bad.write_text('{"pipeline": [{"step": "shuffle", "buffer_size": 3}]}')
    r = subprocess.run([_stoker_bin(), "bench", str(bad)], capture_output=True, text=True)
    assert r.returncode == 2 and "step 0 (shuffle)" in r.stderr


def test_serialize_example_types():
    data = sk.io.serialize_example(
        {"b": b"x", "s": "é", "i": [1, 2], "f": np.array([0.5], np.float32), "e": sk.io.int64_feature([]), "flag": True}
    )
    parsed = sk.io.parse_example_proto(data)
    assert parsed["b"] == ("bytes", [b"x"])
    assert parsed["s"] == ("bytes", ["é".encode()])
    assert parsed["i"] == ("int64", [1, 2])
    assert parsed["f"] == ("float", [0.5])
    assert parsed["e"] == ("int64", [])
    assert parsed["flag"] == ("int64", [1])
    with pytest.raises(ValueError, match="empty list"):
        sk.io.serialize_example({"e": []})


def test_parallel_map_then_batch_is_fused_with_the_same_batches():
    # On 2 threads a parallel map right before a batch runs as one stage whose workers write
    # each element into its batch row; batches must equal the 1-thread map-then-batch.
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (103, 6, 5, 3), dtype=np.uint8)
    names = np.array([f"n{i}".encode() for i in range(103)], dtype=object)

    def run(threads, drop_remainder=False, deterministic=None):
        ds = sk.Dataset.from_tensor_slices({"image": images, "name": names}).with_options(threads=threads)
        ds = ds.map(
            [sk.ops.random_flip_left_right("image", seed=3), sk.ops.cast("image", np.float32)],
            num_parallel_calls=sk.AUTOTUNE,
            deterministic=deterministic,
        )
        ds = ds.batch(10, drop_remainder=drop_remainder)
        return list(ds), ds.stats()

    for drop in (False, True):
        one, _ = run(1, drop)
        two, stats = run(2, drop)
        assert len(two) == (10 if drop else 11) and two[-1]["image"].shape[0] == (10 if drop else 3)
        for a, b in zip(one, two, strict=True):
            np.testing.assert_array_equal(a["image"], b["image"])
            assert a["name"].tolist() == b["name"].tolist()
        by_kind = {s["kind"]: s for s in stats}
        assert by_kind["batch"]["elements"] == len(two)
        assert by_kind["map"]["elements"] == 103  # the map runs on the dropped remainder too
    # Unordered: the same batches, in some order.
    one, _ = run(1)
    anyorder, _ = run(2, deterministic=False)
    key = lambda b: b["name"].tolist()  # noqa: E731
    assert sorted(map(key, anyorder)) == sorted(map(key, one))


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux's /proc/self/smaps")
def test_the_engine_allocator_asks_for_no_huge_pages():
    # mimalloc marks its arenas (reserved a GiB at a time) for transparent huge pages unless it
    # is built with `no_thp`; with them a long run's resident memory crept up (RELIABILITY.md,
    # "Soak"). Checked in a fresh process, where no other library has mapped memory.
    code = """
import re, numpy as np, stoker as sk
rows = sum(1 for _ in sk.Dataset.from_tensor_slices(np.arange(200_000)).batch(1000).as_numpy_iterator())
assert rows == 200, rows
size, marked = 0, []
for line in open("/proc/self/smaps"):
    m = re.match(r"([0-9a-f]+)-([0-9a-f]+) ", line)
    if m:
        size = int(m.group(2), 16) - int(m.group(1), 16)
    elif line.startswith("VmFlags:") and " hg" in line and size >= 256 << 20:
        marked.append(size >> 20)
print(marked)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"mappings of this many MiB are marked for huge pages: {out.stdout}"
