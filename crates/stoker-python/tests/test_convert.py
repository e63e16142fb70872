"""`Dataset.convert` / `stoker convert`: the offline part of a pipeline stored once as TFRecord
shards of Examples, read back by `from_converted` and by TensorFlow, resumable, the same bytes
on any number of threads and through Ray."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import stoker as sk
from stoker import ops, workloads

from .conftest import write_examples

REPO = Path(__file__).resolve().parents[3]


def shard_hashes(out: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.glob("part-*"))}


def same_elements(a: sk.Dataset, b: sk.Dataset) -> int:
    n = 0
    for x, y in zip(a.as_numpy_iterator(), b.as_numpy_iterator(), strict=True):
        assert x.keys() == y.keys()
        for k in x:
            xa, ya = np.asarray(x[k]), np.asarray(y[k])
            assert xa.dtype == ya.dtype and xa.shape == ya.shape, k
            assert xa.tobytes() == ya.tobytes(), k
        n += 1
    return n


def chess_offline(files: list[str]) -> sk.Dataset:
    """W1 with its parse and unpack before the shuffle: all of that is the offline part."""
    return (
        sk.TFRecordDataset(files)
        .map(workloads.chess_ops() + workloads.chess_score_ops())
        .shuffle(1000, seed=0)
        .batch(64)
    )


def test_w1_round_trip_and_what_stays_online(chess_files, tmp_path):
    ds = chess_offline(chess_files)
    m = ds.convert(tmp_path, num_shards=4, progress=False)
    assert m["complete"] and m["elements"] == 3000 and m["source_elements"] == 3000
    assert m["offline"][0].startswith("tfrecord") and m["online"] == ["shuffle(1000)", "batch(64)"]
    assert [f["stored"] for f in m["fields"]] == ["float", "float", "float"]
    assert sum(s["elements"] for s in m["shards"]) == 3000
    for s in m["shards"]:
        assert len(s["sha256"]) == 64 and (tmp_path / (s["file"] + ".idx")).is_file()
    offline = sk.TFRecordDataset(chess_files).map(workloads.chess_ops() + workloads.chess_score_ops())
    back = sk.Dataset.from_converted(tmp_path)
    assert same_elements(back, offline) == 3000
    # The online rest runs on the shards: the same batches as the original pipeline.
    again = back.shuffle(1000, seed=0).batch(64)
    for x, y in zip(again.as_numpy_iterator(), ds.as_numpy_iterator(), strict=True):
        assert all(np.array_equal(x[k], y[k]) for k in x)


def test_w2_offline_part_round_trips(tmp_path):
    images, labels, class_dict = sk.datasets.write_segmentation_pairs(
        str(tmp_path / "data"), n=6, height=120, width=160, num_classes=5, seed=3)
    prefix = sk.Dataset.from_tensor_slices({"image": np.array(images, dtype=object),
                                            "label": np.array(labels, dtype=object)}).map([
        ops.read_file("image"), ops.decode_image("image", channels=3), ops.resize_with_crop_or_pad("image", 96, 96),
        ops.read_file("label"), ops.decode_image("label", channels=3), ops.resize_with_crop_or_pad("label", 96, 96),
    ])
    colors = ops.read_class_colors(class_dict)
    ds = prefix.map([ops.one_hot_colors("label", colors), ops.rescale("image", 255.0)]).batch(3)
    out = tmp_path / "float"
    m = ds.convert(out, num_shards=2, progress=False)
    # The one-hot and the float image are deterministic too, so they would be offline; the
    # offline part stops at nothing random here: the whole element-wise chain runs once.
    assert m["online"] == ["batch(3)"]
    assert {f["name"]: f["stored"] for f in m["fields"]} == {"image": "float", "label": "float"}
    assert same_elements(sk.Dataset.from_converted(out), ds.unbatch()) == 6
    with pytest.raises(sk.InvalidArgumentError, match="no field is a uint8"):
        ds.convert(tmp_path / "no", images="png", progress=False)
    # The conversion W2 wants: the uint8 crop and the class index stored, /255 and the one-hot
    # left online, which give W2's elements again.
    index = prefix.map(ops.color_index("label", colors))
    m = index.shuffle(6, seed=1).convert(tmp_path / "index", num_shards=2, progress=False)
    assert [(f["name"], f["dtype"], f["shape"]) for f in m["fields"]] == [
        ("image", "uint8", [96, 96, 3]), ("label", "uint8", [96, 96])]
    online = sk.Dataset.from_converted(tmp_path / "index").map(
        [ops.one_hot("label", len(colors[1])), ops.rescale("image", 255.0)])
    assert same_elements(online, ds.unbatch()) == 6
    # uint8 crops stored raw or as PNG.
    for images_as in ("raw", "png"):
        out = tmp_path / f"crop-{images_as}"
        m = prefix.shuffle(6, seed=1).convert(out, num_shards=3, images=images_as, progress=False)
        assert {f["name"]: f["stored"] for f in m["fields"]} == {"image": images_as, "label": images_as}
        assert same_elements(sk.Dataset.from_converted(out), prefix) == 6


def test_w3_resized_jpegs_and_the_fused_online_decode(tmp_path):
    root = tmp_path / "folder"
    sk.datasets.write_image_folder(str(root), n=12, num_classes=3, seed=2)
    decoded = sk.Dataset.image_folder(root).map(
        [ops.read_file("filename", output="image"), ops.decode_image("image", channels=3),
         ops.select(["image", "label"])])
    m = decoded.convert(tmp_path / "png", num_shards=3, images="png", resize=128, progress=False)
    assert m["fields"][0] == {"name": "image", "dtype": "uint8", "shape": [None, None, 3], "stored": "png"}
    n = 0
    for got, src in zip(sk.Dataset.from_converted(tmp_path / "png").as_numpy_iterator(),
                        decoded.as_numpy_iterator(), strict=True):
        h, w, _ = src["image"].shape
        assert min(got["image"].shape[:2]) == 128
        assert got["image"].shape[:2] == ((128, 128 * w // h) if h <= w else (128 * h // w, 128))
        assert got["label"] == src["label"]
        # PNG is lossless: the stored pixels are the resize's, exactly.
        want = next(iter(sk.Dataset.from_tensors({"image": src["image"]}).map(
            ops.resize("image", got["image"].shape[:2]))))["image"]
        assert np.array_equal(got["image"], want)
        n += 1
    assert n == 12
    m = decoded.convert(tmp_path / "jpeg", num_shards=2, images="jpeg", resize=128, progress=False)
    assert m["fields"][0]["stored"] == "jpeg"
    # Left encoded, the JPEGs feed the fused decode + random crop of W3's online part.
    online = sk.Dataset.from_converted(tmp_path / "jpeg", decode_images=False).map(
        [ops.decode_image("image", channels=3), ops.random_resized_crop("image", 64, seed=0),
         ops.select(["image", "label"])])
    assert "decode_random_resized_crop" in online.explain()
    batch = next(iter(online.batch(12)))
    assert batch["image"].shape == (12, 64, 64, 3) and batch["image"].dtype == np.uint8
    near = sk.Dataset.from_converted(tmp_path / "jpeg")
    for got, want in zip(near.as_numpy_iterator(), sk.Dataset.from_converted(tmp_path / "png").as_numpy_iterator()):
        assert got["image"].shape == want["image"].shape
        assert np.abs(got["image"].astype(int) - want["image"]).mean() < 4  # quality 90


def augmented(root: Path) -> sk.Dataset:
    """Random crops and flips, then a shuffle: all of it element by element, before the batch."""
    return sk.Dataset.image_folder(root).map(
        [ops.read_file("filename", output="image"), ops.decode_image("image", channels=3),
         ops.random_resized_crop("image", 48, seed=3), ops.random_flip_left_right("image", seed=4),
         ops.select(["image", "label"])], num_parallel_calls=sk.AUTOTUNE).shuffle(8, seed=5)


def test_epochs_materialise_the_augmented_epochs(tmp_path):
    root = tmp_path / "folder"
    sk.datasets.write_image_folder(str(root), n=10, num_classes=2, seed=6)
    ds = augmented(root).batch(4)
    m = ds.convert(tmp_path / "out", num_shards=3, epochs=2, progress=False)
    assert m["online"] == ["batch(4)"] and m["elements"] == 20 and len(m["shards"]) == 6
    assert [s["epoch"] for s in m["shards"]] == [0, 0, 0, 1, 1, 1]
    assert [s["elements"] for s in m["shards"]] == [4, 3, 3] * 2
    # Epoch after epoch, each exactly the pipeline's own epoch (its reshuffle, its crops).
    aug = augmented(root)
    want = list(aug.as_numpy_iterator()) + list(aug.as_numpy_iterator())
    got = list(sk.Dataset.from_converted(tmp_path / "out").as_numpy_iterator())
    assert len(got) == len(want) == 20
    for g, w in zip(got, want):
        assert np.array_equal(g["image"], w["image"]) and g["label"] == w["label"]
    assert not all(np.array_equal(a["image"], b["image"]) for a, b in zip(want[:10], want[10:]))
    # The same bytes on another thread count; the deterministic conversion refuses the random
    # source, the epochs one takes it.
    ds.convert(tmp_path / "t1", num_shards=3, epochs=2, threads=1, progress=False)
    assert shard_hashes(tmp_path / "out") == shard_hashes(tmp_path / "t1")
    shuffled_files = sk.Dataset.list_files(str(root / "*" / "*.jpg"), shuffle=True, seed=1)
    with pytest.raises(sk.InvalidArgumentError, match="epochs"):
        shuffled_files.convert(tmp_path / "no", progress=False)
    m = shuffled_files.convert(tmp_path / "files", num_shards=2, epochs=2, progress=False)
    names = [e for e in sk.Dataset.from_converted(tmp_path / "files")]
    assert len(names) == 20 and sorted(names[:10]) == sorted(names[10:]) and names[:10] != names[10:]


def test_the_same_bytes_on_any_thread_count(chess_files, tmp_path):
    ds = chess_offline(chess_files)
    for threads in (1, 2):
        ds.convert(tmp_path / f"t{threads}", num_shards=3, compression="GZIP", threads=threads, progress=False)
    one, two = shard_hashes(tmp_path / "t1"), shard_hashes(tmp_path / "t2")
    assert len(one) == 3 and one == two
    # GZIP shards have no index, and read back the same.
    assert not list((tmp_path / "t1").glob("*.idx"))
    offline = sk.TFRecordDataset(chess_files).map(workloads.chess_ops() + workloads.chess_score_ops())
    assert same_elements(sk.Dataset.from_converted(tmp_path / "t1"), offline) == 3000


def test_global_shuffle_and_resume_through_the_index(chess_files, tmp_path):
    chess_offline(chess_files).convert(tmp_path, num_shards=3, progress=False)
    back = sk.Dataset.from_converted(tmp_path).global_shuffle(seed=4)
    it = back.iterator()
    first = [next(it)["score"] for _ in range(10)]
    state = it.state()
    rest = [e["score"].item() for e in it]
    resumed = [e["score"].item() for e in back.iterator(state=state)]
    assert resumed == rest and len(rest) == 2990
    everything = sorted([s.item() for s in first] + rest)
    assert everything == sorted(e["score"].item() for e in sk.Dataset.from_converted(tmp_path))


def test_tensorflow_reads_the_shards(chess_files, tmp_path):
    tf = pytest.importorskip("tensorflow")
    x = np.arange(5 * 6, dtype=np.float64).reshape(5, 2, 3) / 7
    ds = sk.Dataset.from_tensor_slices({
        "f64": x, "i64": np.arange(5, dtype=np.int64) * 2**40, "i16": np.arange(5, dtype=np.int16) - 2,
        "s": np.array([b"a", b"bc", b"", b"\xff", b"e"], dtype=object), "f32": x.astype(np.float32)})
    ds.convert(tmp_path / "a", num_shards=2, progress=False)
    code = sk.convert.tf_parse_code(tmp_path / "a")
    scope: dict = {}
    exec(code, scope)
    got = list(scope["dataset"].as_numpy_iterator())
    want = list(sk.Dataset.from_converted(tmp_path / "a").as_numpy_iterator())
    assert len(got) == len(want) == 5
    for g, w in zip(got, want):
        for k in w:
            if k == "s":
                assert g[k] == w[k]
                continue
            assert g[k].dtype == w[k].dtype and g[k].shape == w[k].shape, k
            assert g[k].tobytes() == w[k].tobytes(), k
    # Encoded and variable-sized images too.
    root = tmp_path / "folder"
    sk.datasets.write_image_folder(str(root), n=4, num_classes=2, seed=1)
    imgs = sk.Dataset.image_folder(root).map(
        [ops.read_file("filename", output="image"), ops.decode_image("image", channels=3), ops.select(["image"])])
    for images_as in ("raw", "png"):
        imgs.convert(tmp_path / images_as, num_shards=1, images=images_as, resize=100, progress=False)
        scope = {}
        exec(sk.convert.tf_parse_code(tmp_path / images_as), scope)
        for g, w in zip(scope["dataset"].as_numpy_iterator(), sk.Dataset.from_converted(tmp_path / images_as),
                        strict=True):
            assert g["image"].shape[2] == 3 and min(g["image"].shape[:2]) == 100
            assert np.array_equal(g["image"], w)
    assert tf.__version__


def test_a_killed_run_resumes_where_it_stopped(chess_files, tmp_path):
    spec = tmp_path / "w1.json"
    (sk.TFRecordDataset(chess_files).map(workloads.chess_ops() + workloads.chess_score_ops())
     .prefetch(2)).save_spec(spec)
    out = tmp_path / "out"
    code = (f"import time, stoker as sk\n"
            f"ds = sk.Dataset.load_spec({str(spec)!r}).map(sk.ops.rescale('score', 1.0))\n"
            f"ds.convert({str(out)!r}, num_shards=6, threads=1, progress=False)\n")
    # Killed as soon as one shard is listed complete.
    proc = subprocess.Popen([sys.executable, "-c", code])
    manifest = out / "manifest.json"
    deadline = time.time() + 60
    done_before: list[str] = []
    while time.time() < deadline and proc.poll() is None:
        try:
            m = json.loads(manifest.read_text())
        except (OSError, ValueError):
            m = None
        if m and any(s["complete"] for s in m["shards"]):
            proc.kill()
            proc.wait()
            done_before = [s["file"] for s in m["shards"] if s["complete"]]
            break
        time.sleep(0.005)
    if not done_before:
        ended = proc.poll() is not None
        pytest.fail("the run ended before it could be killed midway" if ended else "no shard completed")
    m = json.loads(manifest.read_text())
    assert not m["complete"]
    with pytest.raises(sk.InvalidArgumentError, match="not complete"):
        sk.Dataset.from_converted(out)
    before = {f: (out / f).stat().st_mtime_ns for f in done_before}
    ds = sk.Dataset.load_spec(spec).map(ops.rescale("score", 1.0))
    m = ds.convert(out, num_shards=6, threads=1, progress=False)
    assert m["complete"] and m["elements"] == 3000
    # The shards finished before the kill were not written again.
    assert {f: (out / f).stat().st_mtime_ns for f in done_before} == before
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]
    fresh = tmp_path / "fresh"
    ds.convert(fresh, num_shards=6, progress=False)
    assert shard_hashes(out) == shard_hashes(fresh)
    # A changed shard is noticed and written again.
    first = out / m["shards"][0]["file"]
    first.write_bytes(first.read_bytes()[:-1] + b"x")
    with pytest.raises(sk.InvalidArgumentError, match="sha256"):
        sk.convert.verify(out)
    ds.convert(out, num_shards=6, progress=False)
    assert shard_hashes(out) == shard_hashes(fresh)
    # Another conversion into the same folder is refused.
    with pytest.raises(sk.InvalidArgumentError, match="another conversion"):
        ds.convert(out, num_shards=5, progress=False)


def damaged_pair(tmp_path: Path) -> sk.Dataset:
    """Two TFRecord files of 40 Examples; record 20 of the second has a damaged payload."""
    good = write_examples(tmp_path / "a.tfrecord", list(range(40)))
    bad = tmp_path / "b.tfrecord"
    write_examples(bad, list(range(40, 80)))
    data = bytearray(bad.read_bytes())
    # Damage the payload of record 20 (its data CRC no longer matches; the framing holds).
    at = 0
    for _ in range(20):
        at += 16 + int.from_bytes(data[at:at + 8], "little")
    data[at + 12 + 3] ^= 0xFF
    bad.write_bytes(bytes(data))
    spec = {"s": sk.FixedLenFeature([], sk.int64)}
    return sk.TFRecordDataset([good, str(bad)]).map(ops.parse_example(spec))


def test_damaged_input_counted_under_skip_located_under_raise(tmp_path):
    ds = damaged_pair(tmp_path)
    with pytest.raises(sk.StokerError) as err:
        ds.convert(tmp_path / "raise", num_shards=2, threads=1, progress=False)
    assert "b.tfrecord" in str(err.value) and "record" in str(err.value)
    m = sk.convert.read_manifest(tmp_path / "raise")
    assert not m["complete"]
    # The shard over the good file was finished and stays usable.
    done = [s for s in m["shards"] if s["complete"]]
    assert [s["elements"] for s in done] == [40]
    m = ds.ignore_errors().convert(tmp_path / "skip", num_shards=2, threads=1, progress=False)
    assert m["complete"]
    skipped = [s for s in m["shards"] if s["skipped"]]
    assert len(skipped) == 1 and "b.tfrecord" in skipped[0]["last_skip"]
    assert m["elements"] == 80 - skipped[0]["skipped"] and skipped[0]["skipped"] >= 1
    got = [int(e) for e in sk.Dataset.from_converted(tmp_path / "skip")]
    assert got[:40] == list(range(40)) and len(got) == m["elements"]


def test_wrong_arguments_and_nothing_to_convert(tmp_path):
    ds = sk.Dataset.range(10)
    for kwargs, name in [({"num_shards": 0}, "num_shards"), ({"jpeg_quality": 0}, "jpeg_quality"),
                         ({"compression": "LZ4"}, "compression"), ({"resize": 0}, "resize"),
                         ({"threads": 0}, "threads")]:
        with pytest.raises(sk.InvalidArgumentError, match=name):
            ds.convert(tmp_path / "x", progress=False, **kwargs)
    with pytest.raises(sk.InvalidArgumentError, match="images"):
        ds.convert(tmp_path / "x", images="webp", progress=False)
    with pytest.raises(sk.InvalidArgumentError, match="no field is a uint8"):
        ds.convert(tmp_path / "x", images="png", progress=False)
    (tmp_path / "f").write_text("x")
    with pytest.raises(sk.InvalidArgumentError, match="nothing to run offline"):
        sk.Dataset.list_files(str(tmp_path / "*"), shuffle=True).convert(tmp_path / "y", progress=False)
    with pytest.raises(FileNotFoundError):
        sk.Dataset.from_converted(tmp_path / "missing")


def test_cli_convert_inspect_and_tf_spec(chess_files, tmp_path):
    exe = os.environ.get("STOKER_BIN", "stoker")
    spec = tmp_path / "w1.toml"
    sk.TFRecordDataset(chess_files).map(workloads.chess_ops() + workloads.chess_score_ops()).shuffle(
        100, seed=0).save_spec(spec)
    out = tmp_path / "out"
    r = subprocess.run([exe, "convert", str(spec), str(out), "--shards", "3", "--quiet"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "3000 elements in 3 shards" in r.stderr and "online (not converted): shuffle(100)" in r.stderr
    py = tmp_path / "py"
    sk.Dataset.load_spec(spec).convert(py, num_shards=3, progress=False)
    assert shard_hashes(out) == shard_hashes(py)
    r = subprocess.run([exe, "inspect", str(out)], capture_output=True, text=True)
    assert r.returncode == 0 and "3000 elements in 3 of 3 shards" in r.stdout and "matches" in r.stdout
    r = subprocess.run([exe, "convert", "--print-tf-spec", str(out)], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout == sk.convert.tf_parse_code(out)
    (out / "part-00001-of-00003.tfrecord").write_bytes(b"x")
    r = subprocess.run([exe, "inspect", str(out)], capture_output=True, text=True)
    assert r.returncode == 1 and "part-00001-of-00003.tfrecord" in r.stdout


def test_convert_says_up_front_what_raw_images_cost_and_points_at_the_right_python(tmp_path):
    exe = os.environ.get("STOKER_BIN", "stoker")
    root = tmp_path / "folder"
    sk.datasets.write_image_folder(str(root), n=6, num_classes=2, seed=4)
    ds = sk.Dataset.image_folder(root).map(
        [ops.read_file("filename", output="image"), ops.decode_image("image", channels=3),
         ops.resize_with_crop_or_pad("image", 40, 50), ops.select(["image", "label"])])
    spec = tmp_path / "images.json"
    ds.save_spec(spec)
    # Left to its default, raw: said before converting, with its size (6 x 40x50x3 bytes).
    r = subprocess.run([exe, "convert", str(spec), str(tmp_path / "raw"), "--shards", "2", "--quiet"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    note = r.stderr.splitlines()[0]
    assert "'image'" not in note and "image" in note and "stored raw" in note and "6000 bytes an element" in note
    assert "--images png" in note
    # Asked for: no note.
    r = subprocess.run([exe, "convert", str(spec), str(tmp_path / "asked"), "--images", "raw", "--quiet"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "stored raw" not in r.stderr
    with pytest.warns(UserWarning, match="stored raw"):
        ds.convert(tmp_path / "py", num_shards=2, progress=False)
    # TensorFlow names no compression "": "NONE" makes it log an error.
    code = subprocess.run([exe, "convert", "--print-tf-spec", str(tmp_path / "raw")], capture_output=True,
                          text=True).stdout
    assert 'compression_type=""' in code and "NONE" not in code
    # --ray with a Python that has no stoker: says which Python and how to choose another.
    bare = tmp_path / "bare-python"
    bare.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'stoker'\" >&2\nexit 1\n")
    bare.chmod(0o755)
    r = subprocess.run([exe, "convert", str(spec), str(tmp_path / "ray"), "--ray"], capture_output=True, text=True,
                       env={**os.environ, "STOKER_PYTHON": str(bare)})
    assert r.returncode != 0 and "STOKER_PYTHON" in r.stderr and str(bare) in r.stderr, r.stderr


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
             configure_logging=False)
    yield ray
    ray.shutdown()


def test_ray_writes_the_same_bytes_as_a_local_run(tmp_path, ray_cluster):
    root = tmp_path / "folder"
    sk.datasets.write_image_folder(str(root), n=20, num_classes=2, seed=4)
    ds = sk.Dataset.image_folder(root).map(
        [ops.read_file("filename", output="image"), ops.decode_image("image", channels=3),
         ops.select(["image", "label"])])
    local = ds.convert(tmp_path / "local", num_shards=4, images="jpeg", resize=96, progress=False)
    remote = ds.convert(tmp_path / "ray", num_shards=4, images="jpeg", resize=96, ray=True, progress=False)
    assert shard_hashes(tmp_path / "local") == shard_hashes(tmp_path / "ray")
    assert [s["sha256"] for s in local["shards"]] == [s["sha256"] for s in remote["shards"]]
    # Augmented epochs too: one task per epoch.
    aug = augmented(root).batch(4)
    aug.convert(tmp_path / "e-local", num_shards=2, epochs=2, progress=False)
    aug.convert(tmp_path / "e-ray", num_shards=2, epochs=2, ray=True, progress=False)
    assert len(shard_hashes(tmp_path / "e-ray")) == 8  # 4 shards and their indexes
    assert shard_hashes(tmp_path / "e-local") == shard_hashes(tmp_path / "e-ray")
    # The skip policy given after the offline part holds on the workers too.
    damaged = damaged_pair(tmp_path).ignore_errors()
    local = damaged.convert(tmp_path / "d-local", num_shards=2, progress=False)
    remote = damaged.convert(tmp_path / "d-ray", num_shards=2, ray=True, progress=False)
    assert remote["elements"] == local["elements"] < 80
    assert [s["skipped"] for s in remote["shards"]] == [s["skipped"] for s in local["shards"]]
    assert shard_hashes(tmp_path / "d-local") == shard_hashes(tmp_path / "d-ray")
    # A worker's located error reaches the driver as the same error class.
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "c").mkdir()
    (bad / "c" / "x.jpg").write_bytes(b"not a jpeg")
    broken = sk.Dataset.image_folder(bad).map([ops.read_file("filename", output="image"),
                                               ops.decode_image("image", channels=3), ops.select(["image"])])
    with pytest.raises(sk.StokerError, match="x.jpg"):
        broken.convert(tmp_path / "bad-out", num_shards=1, ray=True, progress=False)


def test_ctrl_c_stops_a_conversion_within_a_second(tmp_path):
    """SIGINT while shards are being written: the call raises KeyboardInterrupt within a second,
    no temporary file is left and nothing is listed complete that is not."""
    import signal

    out = tmp_path / "out"
    code = ("import stoker as sk\n"
            "ds = sk.Dataset.range(50_000_000)\n"
            f"ds.convert({str(out)!r}, num_shards=2, threads=2, progress=False)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    manifest = out / "manifest.json"
    deadline = time.time() + 60
    while not manifest.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.01)
    time.sleep(0.5)  # writing by now
    assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
    t = time.time()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=10)
    took = time.time() - t
    assert took < 1.0, took
    assert "KeyboardInterrupt" in err
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]
    m = json.loads(manifest.read_text())
    assert not m["complete"] and not any(s["complete"] for s in m["shards"])
