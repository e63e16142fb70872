"""Damaged input as a hostile user brings it: every read ends, with a located error or counted
skips that account for every record written, in bounded memory (issue: broken promises).

The cases that used to hang or to allocate gigabytes run in a subprocess under a time limit,
so that a regression fails the test instead of stalling the suite.
"""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import stoker as sk


def run_py(code: str, timeout: float = 60) -> dict:
    """Runs `code` in a fresh interpreter; it prints one JSON object last. Adds the peak RSS
    (MB) and fails the test if the run does not end within `timeout` seconds. The peak is the
    interpreter's own (Linux's VmHWM): `ru_maxrss` would count the test process's memory,
    which a child inherits across fork and exec."""
    prog = textwrap.dedent(code) + textwrap.dedent(
        """
        import resource as _r, json as _j, sys as _s
        try:
            _hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
            _mb = int(_hwm.split()[1]) / 1024
        except (OSError, IndexError):
            _mb = _r.getrusage(_r.RUSAGE_SELF).ru_maxrss / 1024
        _s.stdout.write("\\n" + _j.dumps({"__rss_mb": _mb}) + "\\n")
        """
    )
    try:
        r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"did not end within {timeout} s:\n{code}")
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    out = lines[0] if len(lines) > 1 else {}
    out["rss_mb"] = lines[-1]["__rss_mb"]
    return out


def skipped(ds: sk.Dataset) -> tuple[int, int, str]:
    stats = ds.stats()
    reasons = [s["last_skip_reason"] for s in stats if s["last_skip_reason"]]
    return sum(s["skipped"] for s in stats), sum(s["rest_lost"] for s in stats), " | ".join(reasons)


def _read_skipping_in_subprocess(path, compression: str, damage: str) -> dict:
    """Writes records, runs `damage` on the file (as `f`), then reads it under the skip policy
    in a fresh interpreter with a time limit: the records read, the skips and their reasons."""
    return run_py(
        f"""
        import json, stoker as sk
        f = {str(path)!r}
        with sk.io.TFRecordWriter(f, {compression!r}) as w:
            for i in range(1000): w.write(b"record %d" % i)
        {damage}
        ds = sk.TFRecordDataset(f, compression_type={compression!r}).ignore_errors()
        got = [r.decode() for r in ds]
        st = ds.stats()
        print(json.dumps({{"got": got, "skipped": sum(s["skipped"] for s in st),
                          "rest_lost": sum(s["rest_lost"] for s in st),
                          "why": [s["last_skip_reason"] for s in st if s["last_skip_reason"]]}}))
        """,
        timeout=20,
    )


def test_garbage_after_a_gzip_stream_ends_instead_of_spinning(tmp_path):
    f = tmp_path / "g.gz"
    out = _read_skipping_in_subprocess(f, "GZIP", 'open(f, "ab").write(b"garbage!" * 8)')
    assert out["got"] == [f"record {i}" for i in range(1000)]
    assert (out["skipped"], out["rest_lost"]) == (0, 1)
    assert "rest of the file after byte" in out["why"][0] and "g.gz" in out["why"][0]


def test_a_damaged_zlib_stream_under_skip_ends(tmp_path):
    flip = 'data = bytearray(open(f, "rb").read()); data[len(data) // 2] ^= 0xFF; open(f, "wb").write(bytes(data))'
    out = _read_skipping_in_subprocess(tmp_path / "z.zlib", "ZLIB", flip)
    got = out["got"]
    assert 0 < len(got) < 1000 and got == [f"record {i}" for i in range(len(got))]
    assert out["rest_lost"] == 1


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
def test_truncated_compressed_file_is_a_located_corrupt_record(tmp_path, compression):
    f = str(tmp_path / f"t.{compression}")
    with sk.io.TFRecordWriter(f, compression) as w:
        for i in range(100):
            w.write(b"rec%d" % i * 10)
    data = open(f, "rb").read()
    open(f, "wb").write(data[: len(data) // 2])
    got = []
    with pytest.raises(sk.CorruptRecordError, match="compressed stream is damaged") as e:
        for r in sk.TFRecordDataset(f, compression_type=compression):
            got.append(r)
    assert e.value.file == f and e.value.record == len(got) and 0 < len(got) < 100
    assert e.value.offset == sum(12 + len(r) + 4 for r in got)
    assert "compressed byte" in str(e.value)
    ds = sk.TFRecordDataset(f, compression_type=compression).ignore_errors()
    assert len(list(ds)) == len(got)
    assert skipped(ds)[:2] == (0, 1)


@pytest.mark.parametrize("compression", [None, "GZIP", "ZLIB"])
def test_an_empty_file_holds_no_records_whatever_its_compression(tmp_path, compression):
    f = tmp_path / "empty.tfrecord"
    f.write_bytes(b"")
    assert list(sk.TFRecordDataset(str(f), compression_type=compression)) == []


def test_garbage_after_a_zlib_stream_is_reported(tmp_path):
    f = str(tmp_path / "z.zlib")
    with sk.io.TFRecordWriter(f, "ZLIB") as w:
        for i in range(3):
            w.write(b"r%d" % i)
    open(f, "ab").write(b"garbage!")
    with pytest.raises(sk.CorruptRecordError, match="follow the end of the ZLIB stream") as e:
        list(sk.TFRecordDataset(f, compression_type="ZLIB"))
    assert e.value.record == 3


@pytest.mark.parametrize("verify_crc", [True, False])
def test_a_huge_claimed_length_costs_no_memory(tmp_path, verify_crc):
    f = tmp_path / "big.tfrecord"
    length = struct.pack("<Q", 1 << 31)
    out = run_py(
        f"""
        import json, time, struct, stoker as sk
        length = {length!r}
        def crc32c(data):
            crc = 0xFFFFFFFF
            for b in data:
                crc ^= b
                for _ in range(8):
                    crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
            return crc ^ 0xFFFFFFFF
        c = crc32c(length)
        crc = ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF if {verify_crc} else 0
        open({str(f)!r}, "wb").write(length + struct.pack("<I", crc) + b"x" * 100)
        t = time.perf_counter()
        try:
            list(sk.TFRecordDataset({str(f)!r}, verify_crc={verify_crc}))
            err = None
        except sk.CorruptRecordError as e:
            err = str(e)
        print(json.dumps({{"err": err, "s": time.perf_counter() - t}}))
        """,
        timeout=30,
    )
    # Above max_record_bytes (1 GiB by default): refused at the header.
    assert out["err"] and "more than max_record_bytes" in out["err"], out
    assert out["s"] < 1.0 and out["rss_mb"] < 200, out


def test_a_damaged_length_costs_one_record_not_the_rest_of_the_file(tmp_path):
    f = str(tmp_path / "x.tfrecord")
    recs = [b"record %03d" % i for i in range(50)]
    with sk.io.TFRecordWriter(f) as w:
        for r in recs:
            w.write(r)
    data = bytearray(open(f, "rb").read())
    per = 12 + len(recs[0]) + 4
    data[per * 20 + 3] ^= 0x01
    open(f, "wb").write(bytes(data))
    ds = sk.TFRecordDataset(f).ignore_errors()
    assert list(ds) == recs[:20] + recs[21:]
    n, rest, why = skipped(ds)
    assert (n, rest) == (1, 0)
    assert "length CRC" in why and f"next intact record header, at byte {per * 21}" in why


def _framed_starts(recs: list[bytes]) -> list[int]:
    starts, at = [], 0
    for r in recs:
        starts.append(at)
        at += 12 + len(r) + 4
    return starts


def _masked_crc(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    crc ^= 0xFFFFFFFF
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def _skip_stats(ds: sk.Dataset) -> tuple[int, int, int]:
    st = ds.stats()
    return tuple(sum(s[k] for s in st) for k in ("skipped", "skipped_bytes", "rest_lost"))  # type: ignore[return-value]


@pytest.mark.parametrize("seed", range(5))
def test_a_zeroed_page_reports_the_bytes_it_cost(tmp_path, seed):
    """A 4 KiB page of a TFRecord file zeroed: the records whose headers lay in it cannot be
    counted, so the bytes passed over are reported, and they are exactly the lost records'."""
    rng = random.Random(seed)
    recs = [b"%d:" % i + rng.randbytes(rng.randrange(150, 260)) for i in range(300)]
    f = tmp_path / "z.tfrecord"
    with sk.io.TFRecordWriter(str(f)) as w:
        for r in recs:
            w.write(r)
    data = bytearray(f.read_bytes())
    page = 4096 * rng.randrange(1, len(data) // 4096 - 1)
    data[page : page + 4096] = bytes(4096)
    f.write_bytes(bytes(data))
    ds = sk.TFRecordDataset(str(f)).ignore_errors()
    kept = list(ds)
    assert _is_subsequence(kept, recs)
    lost = [r for r in recs if r not in set(kept)]
    n, nbytes, rest = _skip_stats(ds)
    assert len(lost) >= 16 and 1 <= n <= 2 and rest == 0
    assert nbytes == sum(12 + len(r) + 4 for r in lost)
    first = _framed_starts(recs)[recs.index(lost[0])]
    assert f"bytes {first} to {first + nbytes}" in skipped(ds)[2]


@pytest.mark.parametrize("appended", [20, 400])
def test_a_write_cut_short_then_appended_to_costs_only_the_cut_record(tmp_path, appended):
    """A record written in part (a crash mid-write), then more records appended: they are
    read, and the cut record is the one counted."""
    recs = [b"record %d" % i for i in range(10)] + [b"x" * 5000] + [b"after %d" % i for i in range(appended)]
    f = tmp_path / "cut.tfrecord"
    with sk.io.TFRecordWriter(str(f)) as w:
        for r in recs:
            w.write(r)
    data = f.read_bytes()
    starts = _framed_starts(recs)
    f.write_bytes(data[: starts[10] + 12 + 100] + data[starts[11] :])
    ds = sk.TFRecordDataset(str(f)).ignore_errors()
    assert list(ds) == recs[:10] + recs[11:]
    assert _skip_stats(ds) == (1, 12 + 100, 0)


@pytest.mark.parametrize("delta", [1, 700, 1 << 20, -3])
def test_a_valid_crc_with_a_wrong_length_costs_its_record(tmp_path, delta):
    recs = [b"record %03d" % i for i in range(60)]
    f = tmp_path / "len.tfrecord"
    with sk.io.TFRecordWriter(str(f)) as w:
        for r in recs:
            w.write(r)
    data = bytearray(f.read_bytes())
    at = _framed_starts(recs)[3]
    length = struct.pack("<Q", len(recs[3]) + delta)
    data[at : at + 12] = length + struct.pack("<I", _masked_crc(length))
    f.write_bytes(bytes(data))
    ds = sk.TFRecordDataset(str(f)).ignore_errors()
    assert list(ds) == recs[:3] + recs[4:]
    n, nbytes, rest = _skip_stats(ds)
    # A length short of the record's end looks like damage running on into the next header.
    assert (n in (1, 2) if delta < 0 else n == 1) and nbytes == 12 + len(recs[3]) + 4 and rest == 0


def _gzip_claiming(path, claimed: int, zeros_mb: int) -> None:
    """A GZIP TFRecord file: a header claiming `claimed` bytes (its length CRC valid), then
    `zeros_mb` MiB of zeros, which inflate from a few hundred KiB."""
    import zlib

    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    length = struct.pack("<Q", claimed)
    with open(path, "wb") as out:
        out.write(z.compress(length + struct.pack("<I", _masked_crc(length))))
        chunk = bytes(1 << 20)
        for _ in range(zeros_mb):
            out.write(z.compress(chunk))
        out.write(z.flush())


@pytest.mark.parametrize(
    ("claimed", "max_record_bytes", "zeros_mb", "rss_limit_mb"),
    [
        # Above the default limit: refused at the header, before anything is inflated.
        ((1 << 31) - 1, None, 600, 100),
        # Under a raised limit: what arrived is held once, then passed over.
        ((1 << 31) - 1, 1 << 32, 200, 60 + 200 * 1.2),
    ],
)
def test_a_damaged_length_in_a_gzip_stream_costs_at_most_what_arrived(
    tmp_path, claimed, max_record_bytes, zeros_mb, rss_limit_mb
):
    f = tmp_path / "bomb.gz"
    _gzip_claiming(f, claimed, zeros_mb)
    assert f.stat().st_size < (1 << 20)
    extra = "" if max_record_bytes is None else f", max_record_bytes={max_record_bytes}"
    out = run_py(
        f"""
        import json, stoker as sk
        ds = sk.TFRecordDataset({str(f)!r}, compression_type="GZIP"{extra})
        try:
            list(ds)
            err = None
        except sk.CorruptRecordError as e:
            err = [str(e), e.file, e.record, e.offset]
        skip = sk.TFRecordDataset({str(f)!r}, compression_type="GZIP"{extra}).ignore_errors()
        n = len(list(skip))
        st = skip.stats()
        print(json.dumps({{"err": err, "n": n, "skipped": sum(s["skipped"] for s in st)}}))
        """,
        timeout=120,
    )
    msg, file, record, offset = out["err"]
    assert (file, record, offset) == (str(f), 0, 0)
    if max_record_bytes is None:
        assert "more than max_record_bytes (1073741824)" in msg, msg
    else:
        assert "truncated record" in msg, msg
    assert out["n"] == 0 and out["skipped"] == 1
    assert out["rss_mb"] < rss_limit_mb, out


def _records(rng: random.Random, n: int) -> list[bytes]:
    return [rng.randbytes(rng.randrange(0, 300)) for _ in range(n)]


def _damage(rng: random.Random, data: bytes) -> tuple[bytes, int, str]:
    """Damaged bytes, how many bytes of the original are still there, and what was done."""
    if rng.random() < 0.4:
        cut = rng.randrange(0, len(data))
        return data[:cut], cut, f"truncated at {cut}"
    out = bytearray(data)
    where = sorted(rng.randrange(0, len(data)) for _ in range(rng.choice([1, 1, 2, 3])))
    for i in where:
        out[i] ^= rng.randrange(1, 256)
    return bytes(out), len(data), f"bytes {where} flipped"


def _is_subsequence(part: list[bytes], whole: list[bytes]) -> bool:
    it = iter(whole)
    return all(any(p == w for w in it) for p in part)


def test_damaged_input_matrix(tmp_path):
    """Random flips and truncations of plain, GZIP and ZLIB files under both policies: every
    read ends within 10 s, with a located error or skips that account for every record."""
    rng = random.Random(18)
    problems = []
    for compression in [None, "GZIP", "ZLIB"]:
        for case in range(40):
            recs = _records(rng, 200)
            f = str(tmp_path / f"{compression}-{case}.tfrecord")
            with sk.io.TFRecordWriter(f, compression) as w:
                for r in recs:
                    w.write(r)
            damaged, kept_bytes, how = _damage(rng, open(f, "rb").read())
            open(f, "wb").write(damaged)
            where = f"{compression} case {case}: {how}"
            # The records that are still in the file, whole or in part (a plain file's cut).
            present = len(recs)
            if compression is None:
                starts = [sum(12 + len(r) + 4 for r in recs[:i]) for i in range(len(recs))]
                present = sum(1 for s in starts if s < kept_bytes)

            got: list[bytes] = []
            try:
                for r in sk.TFRecordDataset(f, compression_type=compression):
                    got.append(r)
            except sk.CorruptRecordError as e:
                if (e.file, e.record) != (f, len(got)) or not isinstance(e.offset, int):
                    problems.append(f"{where}: error at {e.file}/{e.record}/{e.offset} after {len(got)}")
            if got != recs[: len(got)]:
                problems.append(f"{where}: raise policy handed out records not written")

            ds = sk.TFRecordDataset(f, compression_type=compression).ignore_errors()
            kept = list(ds)
            n, rest, why = skipped(ds)
            if not _is_subsequence(kept, recs):
                problems.append(f"{where}: skip policy handed out records not written")
            if rest == 0 and len(kept) + n != present:
                problems.append(f"{where}: {len(kept)} read + {n} skipped != {present} ({why})")
            if rest and (len(kept) + n > present or "lost" not in why):
                problems.append(f"{where}: rest lost but {len(kept)} + {n} ({why})")
            if len(kept) < present and not why:
                problems.append(f"{where}: {present - len(kept)} records lost without a reason")
    assert not problems, "\n".join(problems)


def test_damaged_input_matrix_is_bounded_in_time_and_memory(tmp_path):
    """The matrix's worst cases for memory and time, in a fresh process: peak RSS under 200 MB."""
    out = run_py(
        f"""
        import json, random, struct, time, stoker as sk
        rng = random.Random(7)
        worst = 0.0
        for compression in [None, "GZIP", "ZLIB"]:
            for case in range(30):
                f = {str(tmp_path)!r} + f"/{{compression}}-{{case}}"
                with sk.io.TFRecordWriter(f, compression) as w:
                    for i in range(300):
                        w.write(rng.randbytes(rng.randrange(0, 2000)))
                data = bytearray(open(f, "rb").read())
                for _ in range(rng.choice([1, 2, 4])):
                    data[rng.randrange(0, len(data))] ^= rng.randrange(1, 256)
                if case % 3 == 0:
                    data = data[: rng.randrange(0, len(data))]
                open(f, "wb").write(bytes(data))
                for ignore in [False, True]:
                    t = time.perf_counter()
                    ds = sk.TFRecordDataset(f, compression_type=compression, verify_crc=case % 2 == 0)
                    try:
                        for _ in ds.ignore_errors() if ignore else ds:
                            pass
                    except sk.CorruptRecordError:
                        pass
                    worst = max(worst, time.perf_counter() - t)
        print(json.dumps({{"worst_s": worst}}))
        """,
        timeout=120,
    )
    assert out["worst_s"] < 10 and out["rss_mb"] < 200, out


INTERRUPT_CHILD = """
import os, signal, sys, time
import numpy as np
import stoker as sk

seen = {}
def handler(sig, frame):
    # A second Ctrl-C reaches this handler while stoker stops the pipeline, or after the
    # first was caught: counted, not raised, so that it cannot hit the reporting below.
    if "t" in seen:
        seen["more"] = seen.get("more", 0) + 1
        return
    seen["t"] = time.monotonic()
    signal.default_int_handler(sig, frame)
signal.signal(signal.SIGINT, handler)

%s

print("ready", flush=True)
try:
    for _ in ds:
        pass
    print("ended", flush=True)
except KeyboardInterrupt:
    print("caught %%.3f" %% (time.monotonic() - seen["t"]), flush=True)
"""

STUCK_PIPELINES = {
    "sleeping_function": """
def f(x):
    time.sleep(1e6)
    return x
ds = sk.Dataset.from_tensor_slices(np.arange(10)).map(f)
""",
    "looping_function": """
def f(x):
    while True:
        pass
ds = sk.Dataset.from_tensor_slices(np.arange(10)).map(f, num_parallel_calls=2)
""",
    "read_file_on_a_fifo": """
fifo = sys.argv[1] + "/fifo"
os.mkfifo(fifo)
ds = sk.Dataset.from_tensor_slices({"f": np.array([fifo.encode()])}).map(sk.ops.read_file("f"))
""",
}


@pytest.mark.parametrize("case", sorted(STUCK_PIPELINES))
@pytest.mark.parametrize("signals", [1, 2])
def test_ctrl_c_ends_a_pipeline_whose_worker_is_stuck(tmp_path, case, signals):
    import signal
    import time

    child = subprocess.Popen(
        [sys.executable, "-c", INTERRUPT_CHILD % STUCK_PIPELINES[case], str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        time.sleep(0.5)  # the worker is now stuck
        for _ in range(signals):
            child.send_signal(signal.SIGINT)
            time.sleep(0.1)
        t = time.monotonic()
        out, err = child.communicate(timeout=10)
        ended_after = time.monotonic() - t
    finally:
        child.kill()
    lines = out.split()
    assert lines[:1] == ["caught"], (out, err[-2000:])
    assert float(lines[1]) < 1.0, out
    assert ended_after < 5, ended_after
    # The process exits cleanly: a looping function is interrupted in its thread, a thread
    # blocked in C (sleep, open) is left behind and reported.
    assert child.returncode == 0, err[-2000:]
    if case != "looping_function":
        assert "left to finish on their own" in err, err[-2000:]


def _cached(path, calls: list) -> sk.Dataset:
    def spy(v):
        calls.append(1)
        return v * 2

    return sk.Dataset.range(100).map(spy).cache(str(path))


def _record_starts(data: bytes) -> list[int]:
    """Where each TFRecord record of `data` starts."""
    starts, at = [], 0
    while at + 12 <= len(data):
        starts.append(at)
        at += 12 + struct.unpack("<Q", data[at : at + 8])[0] + 4
    return starts


@pytest.mark.parametrize("keep", ["half", "header", "all_but_completion"])
def test_a_partial_disk_cache_is_rebuilt_not_replayed(tmp_path, keep):
    path = tmp_path / "cache"
    calls: list = []
    want = [int(v) for v in _cached(path, calls)]
    assert len(calls) == 100 and want == [2 * i for i in range(100)]
    data = path.read_bytes()
    starts = _record_starts(data)  # header, 100 elements, completion
    assert len(starts) == 102
    cut = {"half": starts[11], "header": starts[1], "all_but_completion": starts[101]}[keep]
    path.write_bytes(data[:cut])
    again: list = []
    assert [int(v) for v in _cached(path, again)] == want
    assert len(again) == 100, "the cut file was taken for a complete cache"
    assert path.read_bytes() == data, "the cache was not rebuilt whole"
    third: list = []
    assert [int(v) for v in _cached(path, third)] == want and third == []


def test_two_first_passes_over_one_disk_cache_both_complete(tmp_path):
    path = tmp_path / "cache"
    a_calls: list = []
    b_calls: list = []
    a, b = iter(_cached(path, a_calls)), iter(_cached(path, b_calls))
    got_a, got_b = [], []
    for x, y in zip(a, b):  # the two passes run at once, interleaved
        got_a.append(int(x))
        got_b.append(int(y))
    assert got_a == got_b == [2 * i for i in range(100)]
    # zip stops at a's end without asking b for its end: both passes are ended here, so that
    # the check does not race b's thread finishing its cache file.
    assert next(a, None) is None and next(b, None) is None
    assert [p.name for p in tmp_path.iterdir()] == ["cache"], "a temporary file was left behind"
    replay: list = []
    assert [int(v) for v in _cached(path, replay)] == got_a and replay == []


def test_damage_in_a_disk_cache_names_the_element(tmp_path):
    path = tmp_path / "cache"
    list(_cached(path, []))
    data = bytearray(path.read_bytes())
    starts = _record_starts(bytes(data))
    data[starts[1 + 36] + 14] ^= 0xFF  # element 36's data
    path.write_bytes(bytes(data))
    got = []
    with pytest.raises(sk.CorruptRecordError) as e:
        for v in _cached(path, []):
            got.append(int(v))
    assert len(got) == 36 and e.value.record == 36 and e.value.file == str(path)
    assert "cache element 36" in str(e.value)


@pytest.mark.parametrize("kind", ["tfrecord", "text", "empty", "cache_of_no_stoker"])
def test_a_disk_cache_never_replaces_a_file_it_did_not_write(tmp_path, kind):
    # cache(p) where p names a user's file (a typo, a reused name) must leave that file alone.
    path = tmp_path / "data"
    if kind == "tfrecord":
        with sk.io.TFRecordWriter(str(path)) as w:
            for i in range(10):
                w.write(sk.io.serialize_example({"s": i}))
    elif kind == "text":
        path.write_text("a,b\n1,2\n")
    elif kind == "cache_of_no_stoker":
        # A TFRecord file whose first record is JSON, but not a cache header.
        with sk.io.TFRecordWriter(str(path)) as w:
            w.write(b'{"fields": []}')
    else:
        path.write_bytes(b"")
    before = path.read_bytes()
    ds = sk.Dataset.range(5).cache(str(path))
    with pytest.raises(sk.InvalidArgumentError, match="not a stoker cache file") as e:
        list(ds)
    assert str(path) in str(e.value)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"], "a temporary file was left behind"


PARSE_S = sk.ops.parse_example({"s": sk.FixedLenFeature([], sk.int64)})


def PARSE_ONE(record: bytes):  # noqa: N802
    """The Example's "s", or None for a record that is not an Example."""
    try:
        return {"s": sk.io.parse_example_proto(bytes(record))["s"][1][0]}
    except Exception:
        return None


def _example_file(path, values: list) -> str:
    """Examples {"s": v} and, where v is None, a record that is not an Example."""
    with sk.io.TFRecordWriter(str(path)) as w:
        for i, v in enumerate(values):
            w.write(sk.io.serialize_example({"s": v}) if v is not None else b"\xff\xfe"[: 1 + i % 2] + b"\xff")
    return str(path)


def test_skipping_in_a_batched_parse_keeps_the_declared_batch_shape(tmp_path):
    f = _example_file(tmp_path / "x.tfrecord", [1, 2, None, None, 5])
    ds = sk.TFRecordDataset(f).batch(2, drop_remainder=True).map(PARSE_S).ignore_errors()
    assert ds.element_spec["s"].shape == (2,)
    got = [b["s"].tolist() for b in ds]
    # As if the bad records had been skipped before batch(2): [1, 2], [5] dropped as remainder.
    assert got == [[1, 2]]
    assert skipped(ds)[0] == 2


@pytest.mark.parametrize("drop_remainder", [True, False])
@pytest.mark.parametrize("parallel", [None, 2])
def test_a_batched_parse_under_skip_equals_skipping_before_the_batch(tmp_path, drop_remainder, parallel):
    rng = random.Random(6)
    values: list = [i if rng.random() > 0.15 else None for i in range(200)]
    f = _example_file(tmp_path / "x.tfrecord", values)
    ds = (
        sk.TFRecordDataset(f)
        .batch(8, drop_remainder=drop_remainder)
        .map(PARSE_S, num_parallel_calls=parallel)
        .ignore_errors()
    )
    good = [v for v in values if v is not None]
    want = [good[i : i + 8] for i in range(0, len(good), 8)]
    if drop_remainder and len(want[-1]) < 8:
        want.pop()
    assert [b["s"].tolist() for b in ds] == want
    assert skipped(ds)[0] == values.count(None)


def test_unordered_map_delivers_everything_before_a_failure():
    def f(x):
        if int(x) == 999:
            raise ValueError("bad element")
        return x

    for _ in range(10):
        got = []
        with pytest.raises(ValueError, match="bad element"):
            for x in sk.Dataset.range(1000).map(f, num_parallel_calls=4, deterministic=False):
                got.append(int(x))
        assert sorted(got) == list(range(999))


def _entropy_start(jpg: bytes) -> int:
    sos = jpg.find(b"\xff\xda")
    return sos + 2 + int.from_bytes(jpg[sos + 2 : sos + 4], "big")


def _decode_outcome(data: bytes, ops: list) -> tuple[str, int, str]:
    """"ok" or the error, and the warnings counted, for one encoded image through `ops`."""
    ds = _source(data).map(ops)
    try:
        list(ds)
        outcome = "ok"
    except sk.InvalidRecordError as e:
        outcome = "error: " + str(e)
    warnings = [s for s in ds.stats() if s["warnings"]]
    return outcome, sum(s["warnings"] for s in warnings), " ".join(s["last_warning"] for s in warnings)


def _source(data: bytes) -> sk.Dataset:
    import numpy as np

    return sk.Dataset.from_tensor_slices({"x": np.array([data], dtype=object)})


def test_jpeg_damage_gets_the_same_outcome_whole_and_in_the_fused_crop():
    """One rule on both paths: truncated files and markers that cannot be in image data are
    errors; damage libjpeg recovers from is used and counted as a warning."""
    import numpy as np
    from stoker.datasets import natural_photo

    whole = [sk.ops.decode_image("x", channels=3)]
    fused = [sk.ops.decode_image("x", channels=3), sk.ops.random_resized_crop("x", 224, seed=1)]
    assert "decode_random_resized_crop" in _source(b"").map(fused).explain()
    files: list[tuple[str, bytes]] = []
    for seed in range(3):
        jpg = sk.io.encode_jpeg(natural_photo(np.random.default_rng(seed), 375, 500), 90)
        start = _entropy_start(jpg)
        rng = random.Random(seed)
        for _ in range(60):
            b = bytearray(jpg)
            b[rng.randrange(start, len(jpg) - 2)] ^= 1 << rng.randrange(8)
            files.append(("flipped", bytes(b)))
        files += [("truncated", jpg[: len(jpg) * k // 10]) for k in (2, 5, 8)] + [("truncated", jpg[:-2])]
        bogus = bytearray(jpg)
        bogus[len(jpg) - 500 : len(jpg) - 498] = b"\xff\x04"
        files.append(("bogus marker", bytes(bogus)))

    seen = {"warned": 0, "error": 0}
    for i, (kind, data) in enumerate(files):
        a, wa, why_a = _decode_outcome(data, whole)
        b, wb, _ = _decode_outcome(data, fused)
        assert (a == "ok") == (b == "ok"), (i, kind, a, b)
        if kind == "truncated":
            assert "truncated: no end-of-image marker" in a and "truncated" in b, (i, a)
        elif kind == "bogus marker":
            assert "marker 0xFF04" in a and "marker 0xFF04" in b, (i, a, b)
        # A crop decode counts what libjpeg notices in the rows it decodes: never more.
        assert wa >= wb, (i, wa, wb)
        if wa:
            assert a == "ok" and "Corrupt JPEG data" in why_a and "the image was used" in why_a, (i, a, why_a)
            seen["warned"] += 1
        if a != "ok" and kind == "flipped":
            seen["error"] += 1
    # The sample covers both outcomes of a flipped bit besides the plain one.
    assert seen["warned"] >= 5 and seen["error"] >= 1, seen


def test_a_tiny_file_claiming_a_huge_image_costs_no_memory(tmp_path):
    out = run_py(
        """
        import json, struct, zlib, numpy as np, stoker as sk

        def chunk(kind, body):
            return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

        ihdr = struct.pack(">IIBBBBB", 16384, 16384, 16, 6, 0, 0, 0)
        idat = zlib.compress(b"\\0" * 64)
        png = b"\\x89PNG\\r\\n\\x1a\\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")
        jpg = bytearray(sk.io.encode_jpeg(np.zeros((16, 16, 3), np.uint8), 90))
        sof = jpg.find(b"\\xff\\xc0")
        jpg[sof + 5 : sof + 9] = struct.pack(">HH", 16000, 16000)
        errors = {}
        for name, data in [("png", png), ("jpeg", bytes(jpg))]:
            decode = sk.ops.decode_image("x", channels=3)
            for path, ops in [("whole", [decode]),
                              ("crop", [decode, sk.ops.random_resized_crop("x", 224, seed=0)]),
                              ("crop_or_pad", [decode, sk.ops.resize_with_crop_or_pad("x", 512, 512)])]:
                ds = sk.Dataset.from_tensor_slices({"x": np.array([data], dtype=object)}).map(ops)
                try:
                    list(ds)
                    errors[name + "/" + path] = None
                except sk.InvalidRecordError as e:
                    errors[name + "/" + path] = str(e)
        print(json.dumps({"size": len(png), "errors": errors}))
        """,
        timeout=60,
    )
    assert out["size"] < 120
    for where, err in out["errors"].items():
        assert err and "too few for that" in err, (where, err)
    assert out["rss_mb"] < 200, out


def _cut_gzip(path, data: bytes) -> None:
    import gzip

    gz = gzip.compress(data)
    path.write_bytes(gz[: len(gz) // 2])


@pytest.mark.parametrize("source", ["text", "csv", "fixed"])
def test_a_cut_gzip_text_csv_or_fixed_length_file_is_a_counted_rest_lost(tmp_path, source):
    """As for TFRecord files: every whole line (record) before the damage, then a located
    CorruptRecordError, or under ignore_errors() the rest of the file counted in rest_lost."""
    f = tmp_path / "cut.gz"
    if source == "fixed":
        _cut_gzip(f, b"".join(struct.pack("<I", i) for i in range(50_000)))
        make = lambda: sk.FixedLengthRecordDataset(str(f), 4, compression_type="GZIP")  # noqa: E731
        want = [struct.pack("<I", i) for i in range(50_000)]
    else:
        _cut_gzip(f, b"".join(b"%d,line %d\n" % (i, i) for i in range(50_000)))
        if source == "text":
            make = lambda: sk.TextLineDataset(str(f), compression_type="GZIP")  # noqa: E731
            want = [b"%d,line %d" % (i, i) for i in range(50_000)]
        else:
            make = lambda: sk.CsvDataset(str(f), [0, ""], compression_type="GZIP")  # noqa: E731
            want = [(i, b"line %d" % i) for i in range(50_000)]

    def norm(x):
        return tuple(int(v) if isinstance(v, np.ndarray) else v for v in x) if isinstance(x, tuple) else x

    got = []
    with pytest.raises(sk.CorruptRecordError, match="compressed stream is damaged") as e:
        for x in make():
            got.append(norm(x))
    assert 0 < len(got) < 50_000 and got == want[: len(got)]
    assert e.value.file == str(f) and e.value.record == len(got)
    ds = make().ignore_errors()
    assert [norm(x) for x in ds] == got
    n, rest, why = skipped(ds)
    assert (n, rest) == (0, 1) and "the rest of the file after byte" in why


def test_temporary_files_left_by_a_killed_cache_pass_are_cleaned(tmp_path):
    """`kill -9` during a disk cache's first pass leaves its temporary file; the next time the
    cache is opened, the files of processes that are gone (and unwritten for ten minutes, as a
    directory may be shared with other machines) are removed, and only those."""
    import os
    import signal
    import time

    path = tmp_path / "c.cache"
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import time, stoker as sk
                def slow(x):
                    time.sleep(0.01)
                    return x
                for i, _ in enumerate(sk.Dataset.range(10**6).map(slow).cache({str(path)!r})):
                    if i == 5:
                        print("writing", flush=True)
                """
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "writing"
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
    finally:
        child.kill()
    (left,) = [p for p in tmp_path.iterdir() if p.name.startswith("c.cache.tmp-")]
    assert left.name.startswith(f"c.cache.tmp-{child.pid}-")
    old = time.time() - 3600
    os.utime(left, (old, old))
    # Files that are not that pass's: a live process's (ours), another cache's, another name.
    mine = tmp_path / f"c.cache.tmp-{os.getpid()}-0-0badcafe"
    other = tmp_path / f"d.cache.tmp-{child.pid}-0-0badcafe"
    notes = tmp_path / "c.cache.tmp-notes"
    for f in (mine, other, notes):
        f.write_bytes(b"keep")
        os.utime(f, (old, old))
    assert [int(v) for v in sk.Dataset.range(3).cache(str(path))] == [0, 1, 2]
    assert not left.exists()
    assert all(f.read_bytes() == b"keep" for f in (mine, other, notes))


MATRIX_KINDS = ["bytes flipped", "run zeroed", "length rewritten with a valid CRC", "page zeroed"]


def test_seeded_damage_matrix_every_lost_byte_is_reported(tmp_path):
    """400 seeded damaged plain TFRecord files (RELIABILITY.md's table): records come out whole
    and in order, `skipped` never counts more than was lost nor nothing when something was,
    `skipped_bytes` is exactly the bytes of the records lost, and a length rewritten with a
    valid CRC costs its one record."""
    counts: dict[str, list[int]] = {k: [0, 0] for k in MATRIX_KINDS}
    for seed in range(400):
        rng = random.Random(seed)
        recs = [b"%d:" % i + rng.randbytes(rng.randrange(0, 300)) for i in range(120)]
        f = str(tmp_path / f"m{seed}.tfrecord")
        with sk.io.TFRecordWriter(f) as w:
            for r in recs:
                w.write(r)
        data = bytearray(open(f, "rb").read())
        starts = _framed_starts(recs)
        kind = MATRIX_KINDS[seed % 4]
        if kind == "bytes flipped":
            for _ in range(rng.randrange(1, 6)):
                data[rng.randrange(len(data))] ^= rng.randrange(1, 256)
        elif kind == "run zeroed":
            n = rng.randrange(1, 3000)
            i = rng.randrange(len(data) - n)
            data[i : i + n] = bytes(n)
        elif kind == "page zeroed":
            p = 4096 * rng.randrange(1, len(data) // 4096)
            data[p : p + 4096] = bytes(min(4096, len(data) - p))
        else:
            r = rng.randrange(len(recs) - 1)
            length = struct.pack("<Q", rng.randrange(0, 20000))
            data[starts[r] : starts[r] + 12] = length + struct.pack("<I", _masked_crc(length))
        open(f, "wb").write(bytes(data))
        ds = sk.TFRecordDataset(f).ignore_errors()
        kept = list(ds)
        n, nbytes, rest = _skip_stats(ds)
        kept_set = set(kept)
        lost = [r for r in recs if r not in kept_set]
        where = f"seed {seed} ({kind})"
        assert kept == [r for r in recs if r in kept_set], where
        assert rest == 0 and n <= len(lost) and (n > 0) == (len(lost) > 0), where
        assert nbytes == sum(12 + len(r) + 4 for r in lost), where
        if kind == "length rewritten with a valid CRC":
            assert len(lost) == n == 1, where
        counts[kind][0] += len(lost)
        counts[kind][1] += n
    assert counts == {
        "bytes flipped": [313, 313],
        "run zeroed": [912, 191],
        "length rewritten with a valid CRC": [100, 100],
        "page zeroed": [2538, 195],
    }


def test_max_record_bytes_refuses_a_larger_record_by_name_and_is_kept_in_specs(tmp_path):
    f = str(tmp_path / "a.tfrecord")
    with sk.io.TFRecordWriter(f) as w:
        for r in (b"first", b"x" * 2000, b"last"):
            w.write(r)
    assert list(sk.TFRecordDataset(f)) == [b"first", b"x" * 2000, b"last"]
    small = sk.TFRecordDataset(f, max_record_bytes=1000)
    nested = sk.TFRecordDataset(sk.Dataset.from_tensor_slices([f]), max_record_bytes=1000)
    for ds in (small, nested):
        ds.save_spec(tmp_path / "s.json")
        for d in (ds, sk.Dataset.load_spec(tmp_path / "s.json")):
            too_large = r"holds 2000 bytes, more than max_record_bytes \(1000\)"
            with pytest.raises(sk.CorruptRecordError, match=too_large) as e:
                list(d)
            assert (e.value.file, e.value.record, e.value.offset) == (f, 1, 12 + 5 + 4)
            skip = d.ignore_errors()
            assert list(skip) == [b"first", b"last"]
            assert _skip_stats(skip) == (1, 12 + 2000 + 4, 0)
    with pytest.raises(sk.InvalidArgumentError, match="max_record_bytes"):
        sk.TFRecordDataset(f, max_record_bytes=0)


def _with_damaged_records(path, n: int, damaged: set, bad_examples: set = frozenset()) -> str:
    """`n` Examples {"s": i} in a TFRecord file; the data of the records in `damaged` changed
    after their CRCs were made (a CRC mismatch); those in `bad_examples` not Examples."""
    with sk.io.TFRecordWriter(str(path)) as w:
        for i in range(n):
            w.write(b"\xff\xfe not an example" if i in bad_examples else sk.io.serialize_example({"s": i}))
    data = bytearray(path.read_bytes())
    for k, at in enumerate(_record_starts(bytes(data))):
        if k in damaged:
            data[at + 12 + 2] ^= 0xFF
    path.write_bytes(bytes(data))
    return str(path)


@pytest.mark.parametrize("indexed", [False, True])
def test_resume_and_global_shuffle_skip_what_the_skip_policy_skips(tmp_path, indexed):
    # A skipped record shifts positions: a restored shuffle must not find its buffer by record
    # position, and a global shuffle must skip what it reaches.
    f = _with_damaged_records(tmp_path / "d.tfrecord", 60, damaged={13, 41}, bad_examples={7})
    if indexed:
        subprocess.run([os.environ["STOKER_BIN"], "index", f], check=True, capture_output=True)

    def shuffled() -> sk.Dataset:
        return sk.TFRecordDataset(f).shuffle(8, seed=1).map(PARSE_S).ignore_errors()

    full = [int(e["s"]) for e in shuffled()]
    assert sorted(full) == sorted(set(range(60)) - {7, 13, 41})
    for k in range(0, len(full) + 1, 4):
        it = shuffled().iterator()
        head = [int(next(it)["s"]) for _ in range(k)]
        again = shuffled()
        rest = [int(e["s"]) for e in again.iterator(state=it.state())]
        assert head + rest == full, k
        if k >= 48:
            # Every bad record lies before where the shuffle's input stood: the saved run
            # counted them, the restored one (which runs its input again to rebuild the
            # buffer) does not count them again.
            assert sum(s["skipped"] for s in again.stats()) == 0, k
    # skip(n) counts elements, not records.
    assert [int(e["s"]) for e in sk.TFRecordDataset(f).map(PARSE_S).skip(20).ignore_errors()] == [
        i for i in range(60) if i not in {7, 13, 41}
    ][20:]

    def global_() -> sk.Dataset:
        return sk.TFRecordDataset(f).global_shuffle(seed=3).map(PARSE_S).ignore_errors()

    g = global_()
    everything = [int(e["s"]) for e in g]
    assert sorted(everything) == sorted(set(range(60)) - {7, 13, 41})
    assert sum(s["skipped"] for s in g.stats()) == 3
    # Parsed before the shuffle: the map's skip happens in the shuffle's reads too.
    parsed = sk.TFRecordDataset(f).map(PARSE_S).global_shuffle(seed=3).ignore_errors()
    assert sorted(int(e["s"]) for e in parsed) == sorted(everything)
    # Resumed part way: the rest, and each damaged record counted once over the two runs
    # (the first run's reads ran ahead of what it handed out).
    for cut in (5, 30, 56):
        first = sk.TFRecordDataset(f).global_shuffle(seed=3).ignore_errors()
        it = first.iterator()
        head = [next(it) for _ in range(cut)]
        resumed = sk.TFRecordDataset(f).global_shuffle(seed=3).ignore_errors()
        rest = list(resumed.iterator(state=it.state()))
        assert [int(e["s"]) for e in map(PARSE_ONE, head + rest) if e is not None] == [
            v for v in everything
        ], cut
        counted = sum(s["skipped"] for s in first.stats()) + sum(s["skipped"] for s in resumed.stats())
        assert counted == 2, cut


@pytest.mark.parametrize("how", ["interleave", "interleave_parallel", "flat_map"])
def test_skips_inside_datasets_a_function_opens_are_counted_in_the_pipeline(tmp_path, how):
    # The datasets an interleave's (or flat_map's) Python function opens keep counters of
    # their own: their losses must reach the pipeline's stats.
    files = [
        _with_damaged_records(tmp_path / f"d{k}.tfrecord", 20, damaged={3 + k}, bad_examples={11})
        for k in range(2)
    ]
    names = sk.Dataset.from_tensor_slices(np.array(files, dtype=object))

    def open_file(f):
        return sk.TFRecordDataset(f).map(PARSE_S)

    if how == "flat_map":
        ds = names.flat_map(open_file)
    else:
        ds = names.interleave(open_file, cycle_length=2, num_parallel_calls=2 if how.endswith("parallel") else None)
    ds = ds.ignore_errors()
    assert len(list(ds)) == 2 * (20 - 2)
    stats = ds.stats()
    assert sum(s["skipped"] for s in stats) == 4
    reasons = " | ".join(s["last_skip_reason"] for s in stats if s["last_skip_reason"])
    assert "d0.tfrecord" in reasons or "d1.tfrecord" in reasons, reasons


def test_damage_in_a_compressed_fixed_length_header_is_located_or_counted(tmp_path):
    import gzip

    data = bytearray(gzip.compress(b"H" * 7 + bytes(4000)))
    data[0:4] = bytes(4)  # the GZIP header's magic gone
    f = tmp_path / "f.gz"
    f.write_bytes(bytes(data))
    ds = sk.FixedLengthRecordDataset(str(f), 4, header_bytes=7, compression_type="GZIP")
    with pytest.raises(sk.CorruptRecordError) as e:
        list(ds)
    assert e.value.file == str(f) and e.value.record == 0
    skipping = ds.ignore_errors()
    assert list(skipping) == []
    assert sum(s["rest_lost"] for s in skipping.stats()) == 1
    # A stream that ends inside the header: the file's error, named.
    f.write_bytes(gzip.compress(b"H" * 5))
    with pytest.raises(sk.InvalidArgumentError, match="within its 7-byte header"):
        list(sk.FixedLengthRecordDataset(str(f), 4, header_bytes=7, compression_type="GZIP"))


@pytest.mark.parametrize("damage", ["header_crc", "cut_in_the_middle", "zero_page"])
def test_global_shuffle_under_skip_reads_past_damaged_record_headers(tmp_path, damage):
    f = tmp_path / "g.tfrecord"
    with sk.io.TFRecordWriter(str(f)) as w:
        for i in range(300):
            w.write(b"record %d " % i + bytes(40))
    data = bytearray(f.read_bytes())
    starts = _record_starts(bytes(data))
    if damage == "header_crc":
        data[starts[40] + 9] ^= 1  # the length's CRC
    elif damage == "cut_in_the_middle":
        data = data[: starts[100] + 20] + data[starts[103] :]
    else:
        data[4096:8192] = bytes(4096)
    f.write_bytes(bytes(data))
    plain = sk.TFRecordDataset(str(f)).ignore_errors()
    want = sorted(bytes(r) for r in plain)
    lost = sum(s["skipped"] for s in plain.stats())
    assert 0 < len(want) < 300 and lost > 0
    shuffled = sk.TFRecordDataset(str(f)).global_shuffle(seed=3).ignore_errors()
    got = [bytes(r) for r in shuffled]
    assert sorted(got) == want and got != want
    assert sum(s["skipped"] for s in shuffled.stats()) == lost
    # Resumed part way: the rest of the pass, the header damage counted by the first run only.
    first = sk.TFRecordDataset(str(f)).global_shuffle(seed=3).ignore_errors()
    it = first.iterator()
    head = [bytes(next(it)) for _ in range(50)]
    again = sk.TFRecordDataset(str(f)).global_shuffle(seed=3).ignore_errors()
    assert head + [bytes(r) for r in again.iterator(state=it.state())] == got
    assert sum(s["skipped"] for s in again.stats()) == 0
    with pytest.raises(sk.CorruptRecordError):
        list(sk.TFRecordDataset(str(f)).global_shuffle(seed=3))


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
def test_a_compressed_read_resumes_past_damage_it_skipped(tmp_path, compression):
    # The restore passes over the records before its position again: it must pass over the
    # damage among them as the saved run did (and not raise it).
    good = tmp_path / "g.tfrecord"
    with sk.io.TFRecordWriter(str(good)) as w:
        for i in range(40):
            w.write(sk.io.serialize_example({"s": i}))
    data = bytearray(good.read_bytes())
    starts = _record_starts(bytes(data))
    data[starts[12] : starts[12] + 8] = (10**15).to_bytes(8, "little")  # a length, its CRC not made
    plain = tmp_path / "d.tfrecord"
    plain.write_bytes(bytes(data))
    f = tmp_path / f"d.{compression.lower()}"
    import gzip
    import zlib

    f.write_bytes(gzip.compress(bytes(data)) if compression == "GZIP" else zlib.compress(bytes(data)))

    def ds() -> sk.Dataset:
        return sk.TFRecordDataset(str(f), compression_type=compression).map(PARSE_S).ignore_errors()

    full = [int(e["s"]) for e in ds()]
    assert 12 not in full and full[:12] == list(range(12)) and len(full) >= 27
    for k in range(len(full) + 1):
        it = ds().iterator()
        head = [int(next(it)["s"]) for _ in range(k)]
        assert head + [int(e["s"]) for e in ds().iterator(state=it.state())] == full, k
