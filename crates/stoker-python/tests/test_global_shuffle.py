"""`global_shuffle` over random-access sources, and `stoker index`."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import stoker as sk

from .conftest import write_examples


def values(ds: sk.Dataset) -> list[int]:
    return [int(e["s"]) if isinstance(e, dict) else int(e) for e in ds]


@pytest.fixture()
def files(tmp_path: Path) -> list[str]:
    return [write_examples(tmp_path / f"f{i}.tfrecord", list(range(100 * i, 100 * i + 30 + 7 * i))) for i in range(3)]


S_ONLY = [sk.ops.parse_example({"s": sk.FixedLenFeature([], sk.int64)})]


def test_every_element_once_per_epoch_a_new_order_each_epoch(files):
    everything = sorted(values(sk.TFRecordDataset(files).map(S_ONLY)))
    ds = sk.TFRecordDataset(files).map(S_ONLY).global_shuffle(seed=3).repeat(3)
    got = values(ds)
    n = len(everything)
    epochs = [got[i * n : (i + 1) * n] for i in range(3)]
    for e in epochs:
        assert sorted(e) == everything
        assert e != everything  # shuffled, not in file order
    assert epochs[0] != epochs[1] != epochs[2]
    # Across the whole pass, not within a window: the first tenth comes from all files.
    assert {v // 100 for v in epochs[0][: n // 10]} == {0, 1, 2}
    # The same seed gives the same epochs; another seed other orders; 1 and 2 threads agree.
    assert values(sk.TFRecordDataset(files).map(S_ONLY).global_shuffle(seed=3).repeat(3)) == got
    assert values(sk.TFRecordDataset(files).map(S_ONLY).global_shuffle(seed=4).repeat(3)) != got
    for t in (1, 2):
        par = sk.TFRecordDataset(files, num_parallel_reads=sk.AUTOTUNE).map(S_ONLY, num_parallel_calls=sk.AUTOTUNE)
        got_t = values(par.global_shuffle(seed=3).with_options(threads=t))
        assert sorted(got_t) == everything
    # reshuffle_each_iteration=False: the same order every epoch.
    once = sk.TFRecordDataset(files).map(S_ONLY).global_shuffle(seed=3, reshuffle_each_iteration=False)
    fixed = values(once.repeat(2))
    assert fixed[:n] == fixed[n:]


def test_other_random_access_sources_and_maps():
    x = np.arange(50)
    ds = sk.Dataset.from_tensor_slices({"x": x}).map(lambda e: {"x": e["x"] * 2}).global_shuffle(seed=1)
    got = [int(e["x"]) for e in ds]
    assert sorted(got) == list(range(0, 100, 2)) and got != sorted(got)
    assert sorted(int(v) for v in sk.Dataset.range(5, 60, 3).global_shuffle(seed=2)) == list(range(5, 60, 3))
    # A random op sees the same element index wherever the element lands: the same output
    # as without the shuffle, element for element.
    images = np.arange(20 * 2 * 2 * 3, dtype=np.uint8).reshape(20, 2, 2, 3)
    base = sk.Dataset.from_tensor_slices({"image": images, "i": np.arange(20)})
    flip = [sk.ops.random_flip_left_right("image", seed=9)]
    plain = {int(e["i"]): e["image"].tobytes() for e in base.map(flip)}
    shuffled = {int(e["i"]): e["image"].tobytes() for e in base.map(flip).global_shuffle(seed=1)}
    assert shuffled == plain


def test_inputs_without_random_access_are_refused_when_built(files, tmp_path):
    with pytest.raises(sk.SchemaError, match="needs random access") as e:
        sk.TFRecordDataset(files).filter(lambda r: True).global_shuffle()
    assert e.value.step == "global_shuffle"
    gz = tmp_path / "g.tfrecord.gz"
    write_examples(gz, [1, 2], compression="GZIP")
    with pytest.raises(sk.SchemaError, match="needs random access"):
        sk.TFRecordDataset(str(gz), compression_type="GZIP").global_shuffle()


def test_stoker_index_writes_dali_style_indexes_that_global_shuffle_reads(files):
    cli = os.environ.get("STOKER_BIN")
    if not cli:
        pytest.fail("STOKER_BIN (the stoker CLI) is not set; run the tests through `make test`")
    r = subprocess.run([cli, "index", *files], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    assert f"{files[0]}: 30 records -> {files[0]}.idx" in r.stdout
    lines = Path(files[0] + ".idx").read_text().splitlines()
    offsets = [int(line.split()[0]) for line in lines]
    sizes = [int(line.split()[1]) for line in lines]
    assert len(lines) == 30 and offsets[0] == 0
    assert all(o + s == n for o, s, n in zip(offsets, sizes, offsets[1:]))
    assert offsets[-1] + sizes[-1] == os.path.getsize(files[0])
    want = values(sk.TFRecordDataset(files).map(S_ONLY).global_shuffle(seed=3))
    # An index that no longer fits its file is a clear error naming it, not a wrong record.
    Path(files[1] + ".idx").write_text("0 10\n")
    os.utime(files[1], (1, 1))
    with pytest.raises(sk.StokerError, match=r"f1\.tfrecord\.idx"):
        values(sk.TFRecordDataset(files).map(S_ONLY).global_shuffle(seed=3))
    # An index older than its file is not trusted: the file is scanned instead.
    os.utime(files[1] + ".idx", (0, 0))
    os.utime(files[1], None)
    assert values(sk.TFRecordDataset(files).map(S_ONLY).global_shuffle(seed=3)) == want
    bad = subprocess.run([cli, "index", files[0] + ".idx"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "only uncompressed TFRecord files" in bad.stderr


@pytest.mark.parametrize("lines_kept", [500, 0])
def test_a_short_or_empty_index_newer_than_its_file_is_refused_not_trusted(tmp_path, lines_kept):
    f = str(tmp_path / "d.tfrecord")
    with sk.io.TFRecordWriter(f) as w:
        for i in range(1000):
            w.write(b"record %d" % i)
    starts = [sum(12 + len(b"record %d" % j) + 4 for j in range(i)) for i in range(1000)]
    idx = Path(f + ".idx")
    text = "".join(f"{o} {12 + len(b'record %d' % i) + 4}\n" for i, o in enumerate(starts[:lines_kept]))
    idx.write_text(text)
    os.utime(f, (1, 1))  # the index is newer than its file
    with pytest.raises(sk.InvalidArgumentError, match=r"d\.tfrecord\.idx does not match .*stoker index"):
        list(sk.TFRecordDataset(f).global_shuffle(seed=1))
    assert idx.read_text() == text  # not stoker's to replace
    # An index older than its file is not used: the file is scanned.
    os.utime(idx, (0, 0))
    got = sorted(sk.TFRecordDataset(f).global_shuffle(seed=1))
    assert got == sorted(b"record %d" % i for i in range(1000))
