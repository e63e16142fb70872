"""Exact resume: an iterator's state, saved at many points, restored in a new process (with
1 or 2 threads), continues with exactly the elements of the uninterrupted run."""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import stoker as sk

sys.path.insert(0, str(Path(__file__).parent))
import resume_pipelines as rp  # noqa: E402

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("resume")
    chess = sk.datasets.write_chess_tfrecords(str(root / "chess"), num_files=3, num_examples=1500, seed=5)
    tfr = []
    for f in range(3):
        path = root / f"s{f}.tfrecord"
        with sk.io.TFRecordWriter(str(path)) as w:
            for i in range(9 + 4 * f):
                w.write(sk.io.serialize_example({"s": 100 * f + i}))
        tfr.append(str(path))
    gz = root / "s.tfrecord.gz"
    with sk.io.TFRecordWriter(str(gz), "GZIP") as w:
        for i in range(25):
            w.write(sk.io.serialize_example({"s": i}))
    damaged = root / "damaged.tfrecord"
    with sk.io.TFRecordWriter(str(damaged)) as w:
        for i in range(37):
            # Every fifth record is not an Example: a batched parse drops it under "skip".
            w.write(b"\xff\xff not an example" if i % 5 == 2 else sk.io.serialize_example({"s": i}))
    npz = root / "a.npz"
    np.savez(npz, a=np.arange(30).reshape(15, 2), b=np.linspace(0, 1, 15))
    images = root / "images"
    sk.datasets.write_image_folder(str(images), n=24, num_classes=3, seed=1)
    # Copies with record indexes (`stoker index`): a shuffle restores its buffer by random
    # access through them, parsing the indexes only around the records it needs.
    indexed = root / "indexed"
    indexed.mkdir()
    chess_idx = [shutil.copy(f, indexed) for f in chess]
    tfr_idx = [shutil.copy(f, indexed) for f in tfr]
    cli = os.environ.get("STOKER_BIN")
    if not cli:
        pytest.fail("STOKER_BIN (the stoker CLI) is not set; run the tests through `make test`")
    subprocess.run([cli, "index", *chess_idx, *tfr_idx], check=True, capture_output=True)
    return {
        "chess": chess,
        "chess_indexed": chess_idx,
        "tfrecords_indexed": tfr_idx,
        "tfrecords": tfr,
        "gzip": str(gz),
        "damaged": str(damaged),
        "npz": str(npz),
        "images": str(images),
        "cache_file": str(root / "cache.bin"),
    }


def in_new_process(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    r = subprocess.run(
        [sys.executable, str(HERE / "resume_pipelines.py")],
        input=pickle.dumps(jobs),
        capture_output=True,
        timeout=600,
        check=False,
    )
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    return pickle.loads(r.stdout)


def full_run(data: dict[str, Any], name: str, threads: int) -> list[str]:
    return [rp.digest(e) for e in rp.pipelines(data)[name](threads)]


def skipped_in_full_run(data: dict[str, Any], name: str, threads: int) -> int:
    it = rp.pipelines(data)[name](threads).iterator()
    for _ in it:
        pass
    return it.skipped()


def states_at(
    data: dict[str, Any], name: str, threads: int, cuts: list[int]
) -> list[tuple[list[str], bytes, list[str]]]:
    """For each cut k: the first k elements of a fresh run, its state after them, and the rest
    of that same run."""
    out = []
    for k in cuts:
        it = rp.pipelines(data)[name](threads).iterator()
        head = [rp.digest(next(it)) for _ in range(k)]
        state = it.state()
        out.append((head, state, [rp.digest(e) for e in it]))
    return out


def cuts_for(n: int, seed: int, extra: list[int] = ()) -> list[int]:
    rng = np.random.default_rng(seed)
    points = {0, 1, n // 2, n - 1, n, *[int(k) for k in rng.integers(0, n + 1, 4)], *[k for k in extra if k <= n]}
    return sorted(points)


NAMES = sorted(
    rp.pipelines(
        {
            "chess": [],
            "chess_indexed": [],
            "tfrecords": [],
            "tfrecords_indexed": [],
            "gzip": "",
            "damaged": "",
            "npz": "",
            "images": "",
            "cache_file": "",
        }
    )
)


UNSEEDED = {"shuffle_unseeded"}


@pytest.mark.parametrize("name", NAMES)
def test_resume_in_a_new_process_gives_the_uninterrupted_stream(data, name):
    full = {t: full_run(data, name, t) for t in (1, 2)}
    # The stream does not depend on the thread budget, except where the budget picks the
    # order (how many AUTOTUNE files are read in turn): a restore keeps the order it was
    # saved with, whatever its own budget.
    if name not in ("w1", "w1_indexed", "shuffle_indexed", "tfrecord_parallel_reads", *UNSEEDED):
        assert full[1] == full[2], name
    assert len(full[2]) > 0
    extra = {
        "w1": [1, 15, 16],
        "w1_indexed": [1, 15, 16],
        "shuffle_indexed": [1, 38, 39, 40],
        "repeat": [7, 14, 21],
        "cache_memory": [12, 24],
        "mixed": [3, 9],
    }.get(name, [])
    jobs, expect = [], []
    for saved_with in (1, 2):
        cuts = cuts_for(len(full[saved_with]), seed=len(name) + saved_with, extra=extra)
        for (head, state, rest), k in zip(states_at(data, name, saved_with, cuts), cuts):
            # (An unseeded shuffle draws its seed when the dataset is made: each run differs,
            # and the state carries the seed of the run it was saved from.)
            if name not in UNSEEDED:
                assert head + rest == full[saved_with], (name, saved_with, k)
            for restored_with in (1, 2):
                jobs.append({"data": data, "name": name, "threads": restored_with, "state": state, "take": None})
                expect.append((saved_with, k, restored_with, rest))
    results = in_new_process(jobs)
    # Bad records skipped under ignore_errors(): a run resumed anywhere, in a new process,
    # counts the epoch's (those before the state, from it, and those after it) once.
    skipped = skipped_in_full_run(data, name, 2)
    if name.startswith("skips_"):
        assert skipped > 0
    for (saved_with, k, restored_with, rest), got in zip(expect, results):
        assert "error" not in got, (name, saved_with, k, restored_with, got)
        assert got["digests"] == rest, (name, saved_with, k, restored_with)
        assert got["skipped"] == skipped, (name, saved_with, k, restored_with)


@pytest.mark.parametrize("name", ["w1", "w3", "mixed", "shuffle", "repeat", "cache_memory", "interleave_python"])
def test_restoring_twice_in_one_epoch(data, name):
    full = full_run(data, name, 2)
    n = len(full)
    k1, k2 = n // 4, n // 4 + max(1, n // 3)
    [(_, s1, _)] = states_at(data, name, 2, [k1])
    [second] = in_new_process([{"data": data, "name": name, "threads": 1, "state": s1, "take": k2 - k1}])
    assert second["digests"] == full[k1:k2]
    [third] = in_new_process([{"data": data, "name": name, "threads": 2, "state": second["state"], "take": None}])
    assert third["digests"] == full[k2:]


def test_states_are_small(data):
    for name in ("w1", "w3"):
        it = rp.pipelines(data)[name](2).iterator()
        next(it)
        next(it)
        assert len(it.state()) <= 1024, (name, len(it.state()))
        it.close()
    # O(steps), not O(buffer): a 10,000-element shuffle buffer, half full or full.
    it = sk.Dataset.range(100_000).shuffle(10_000, seed=1).batch(512).iterator()
    for _ in range(30):
        next(it)
    assert len(it.state()) < 100
    it.close()


def test_bad_states_are_refused_saying_why(data):
    make = rp.pipelines(data)["shuffle"]
    it = make(2).iterator()
    next(it)
    state = it.state()
    it.close()
    with pytest.raises(sk.InvalidArgumentError, match="another pipeline: step 0 of this one, shuffle"):
        sk.Dataset.range(50).shuffle(15, seed=7).iterator(state=state)
    with pytest.raises(sk.InvalidArgumentError, match="another pipeline"):
        sk.Dataset.range(50).shuffle(16, seed=7).batch(2).iterator(state=state)
    with pytest.raises(sk.InvalidArgumentError, match="too few|damaged"):
        make(2).iterator(state=state[:-5])
    for i in range(len(state)):
        flipped = bytearray(state)
        flipped[i] ^= 0x10
        with pytest.raises(sk.InvalidArgumentError):
            make(2).iterator(state=bytes(flipped))
    with pytest.raises(TypeError, match="state must be bytes"):
        make(2).iterator(state="nope")  # type: ignore[arg-type]


def test_state_dict_and_load_state_dict(data):
    make = rp.pipelines(data)["w3"]
    full = full_run(data, "w3", 2)
    it = make(2).iterator()
    head = [rp.digest(next(it)) for _ in range(2)]
    sd = it.state_dict()
    assert set(sd) == {"stoker_iterator_state"}
    rest = [rp.digest(e) for e in it]
    assert head + rest == full
    # After the end, the state is the start of the next iteration (epoch 1).
    ended = it.state()
    assert [rp.digest(e) for e in make(1).iterator(state=ended)] == [
        rp.digest(e) for e in make(2).iterator(epoch=1)
    ]
    assert [rp.digest(e) for e in make(1).iterator(state=ended, epoch=4)] == [
        rp.digest(e) for e in make(2).iterator(epoch=4)
    ]
    other = make(1).iterator()
    other.load_state_dict(sd)
    assert [rp.digest(e) for e in other] == full[2:]


def test_an_unordered_map_cannot_save_its_position():
    ds = sk.Dataset.range(20).map([sk.ops.cast("value", sk.float32)], num_parallel_calls=2, deterministic=False)
    it = ds.with_options(threads=2).iterator()
    next(it)
    with pytest.raises(sk.InvalidArgumentError, match="deterministic=False"):
        it.state()
    it.close()


def test_after_a_restored_epoch_the_next_iteration_is_the_next_epoch():
    def make() -> sk.Dataset:
        return sk.Dataset.range(40).shuffle(40, seed=5)

    ds = make()
    epochs = [[int(v) for v in ds] for _ in range(3)]
    it = make().iterator()
    head = [int(next(it)) for _ in range(10)]
    state = it.state()
    it.close()
    resumed = make()
    assert head + [int(v) for v in resumed.iterator(state=state)] == epochs[0]
    assert [int(v) for v in resumed] == epochs[1]
    assert [int(v) for v in resumed] == epochs[2]


RESTORE_INTERRUPTED = """
import os, signal, threading, time
import stoker as sk

def slow(v):
    # Stands for work that does not stop on a signal (native code): the interrupt must not
    # depend on this function seeing it.
    try:
        time.sleep(0.002)
    except KeyboardInterrupt:
        pass
    return True

make = lambda: sk.Dataset.range(100_000).filter(slow).shuffle(8, seed=1)
it = make().iterator()
for _ in range(1500):
    next(it)
state = it.state()
it.close()
# The filter has no random access: the restore runs it again through 1,500 elements (3 s).
threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
t = time.perf_counter()
try:
    make().iterator(state=state)
    print("RESTORED")
except KeyboardInterrupt:
    print(f"INTERRUPTED {time.perf_counter() - t:.2f}")
"""


def test_ctrl_c_ends_a_long_restore_within_a_second():
    r = subprocess.run([sys.executable, "-c", RESTORE_INTERRUPTED], capture_output=True, text=True, timeout=120)
    assert "INTERRUPTED" in r.stdout, (r.stdout, r.stderr[-2000:])
    waited = float(r.stdout.split("INTERRUPTED")[1].split()[0])
    assert waited < 1.3, waited


UNSEEDED_SCRIPT = """
import pickle, sys
import numpy as np, stoker as sk

def make():
    images = (np.arange(60 * 2 * 2) % 251).astype(np.uint8).reshape(60, 2, 2, 1)
    a = sk.Dataset.from_tensor_slices({"y": np.arange(60), "img": images})
    b = sk.Dataset.from_tensor_slices({"y": np.arange(100, 130), "img": images[:30]})
    mixed = sk.Dataset.sample_from_datasets([a.shuffle(8), b.global_shuffle()])
    return mixed.map([sk.ops.random_flip_left_right("img")]).repeat(3)

def rows(it):
    return [(int(e["y"]), e["img"].tobytes()) for e in it]

path, mode = sys.argv[1], sys.argv[2]
ds = make()
if mode == "save":
    it = ds.iterator()
    states = {0: it.state()}
    full = []
    for e in it:
        full.extend(rows([e]))
        if len(full) in (7, 95, 150, 200):
            states[len(full)] = it.state()
    states[len(full)] = it.state()
    pickle.dump((full, states), open(path, "wb"))
else:
    full, states = pickle.load(open(path, "rb"))
    for k, state in states.items():
        rest = rows(ds.iterator(state=state))
        if k == len(full):
            # Saved after the end: the next iteration, a new order of the same elements.
            assert sorted(rest) != rest and sorted(y for y, _ in rest) == sorted(y for y, _ in full)
            assert [y for y, _ in rest] != [y for y, _ in full]
            continue
        assert rest == full[k:], (k, rest[:3], full[k : k + 3])
    print("ok", len(full), sorted(states))
"""


def test_steps_without_seeds_resume_exactly_in_a_new_process_in_every_later_epoch(tmp_path):
    # Steps without seeds: the epoch saved in, the epochs after it and a state saved before
    # the first element all draw the saved run's seeds in the new process.
    script = tmp_path / "unseeded.py"
    script.write_text(UNSEEDED_SCRIPT)
    state = str(tmp_path / "state.pkl")
    for mode in ("save", "restore"):
        r = subprocess.run([sys.executable, str(script), state, mode], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith("ok 270")


def test_datasets_made_from_one_unseeded_shuffle_split_one_order():
    # TensorFlow's image-loading tutorial splits train and validation this way: both halves
    # must see the one order the shuffle drew, never an element in both.
    ds = sk.Dataset.range(200).shuffle(200, reshuffle_each_iteration=False)
    val, train = ds.take(50), ds.skip(50)
    for epoch in range(3):
        v = [int(x) for x in val.iterator(epoch=epoch)]
        t = [int(x) for x in train.iterator(epoch=epoch)]
        assert sorted(v + t) == list(range(200)), epoch
    assert [int(x) for x in ds] == [int(x) for x in ds.take(50)] + [int(x) for x in ds.skip(50)]
