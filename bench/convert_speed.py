"""stoker convert: its throughput on 1 and 2 cores and through a local Ray cluster (2 CPUs),
and what training gains from converted shards: W3 read from JPEGs resized to 256 (shorter
side) against the original JPEGs, W2 from its cropped uint8 image and label map against the
original PNGs, each beside tf.data reading the same shards. Writes bench/results/convert.json
(run.py renders it into BENCHMARKS.md).

    .venv-bench/bin/python bench/convert_speed.py [--runs 3]

Every measurement runs in a child process pinned with taskset to its cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
DATA = "/tmp/stoker-bench-data"
THREAD_VARS = ["OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "TF_NUM_INTRAOP_THREADS",
               "TF_NUM_INTEROP_THREADS"]
SHARDS = 8


# ---- what the children run ---------------------------------------------------------------

def w3_offline(root: str) -> Any:
    import stoker as sk
    from stoker import ops

    return sk.Dataset.image_folder(root).map(
        [ops.read_file("filename", output="image"), ops.decode_image("image", channels=3),
         ops.select(["image", "label"])])


def w2_offline(w2: str) -> Any:
    """W2's decode and crop, the label map as class indices (uint8): the one-hot stays online."""
    import stoker as sk
    from stoker import ops

    colors = ops.read_class_colors(os.path.join(w2, "class_dict.csv"))
    images = sorted(os.path.join(w2, "images", f) for f in os.listdir(os.path.join(w2, "images")))
    labels = sorted(os.path.join(w2, "labels", f) for f in os.listdir(os.path.join(w2, "labels")))
    import numpy as np

    return sk.Dataset.from_tensor_slices(
        {"image": np.array(images, dtype=object), "label": np.array(labels, dtype=object)}).map([
            ops.read_file("image"), ops.decode_image("image", channels=3),
            ops.resize_with_crop_or_pad("image", 512, 512),
            ops.read_file("label"), ops.decode_image("label", channels=3),
            ops.resize_with_crop_or_pad("label", 512, 512), ops.color_index("label", colors),
        ])


def child_convert(args: argparse.Namespace) -> dict:
    """Converts W3's offline part (decode → resize 256 → JPEG 90) into a fresh folder."""
    ds = w3_offline(args.w3)
    times = []
    if args.ray:
        import ray

        ray.init(num_cpus=args.cores, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False)
    for _ in range(args.runs):
        out = tempfile.mkdtemp(prefix="convert-bench-")
        t = time.perf_counter()
        m = ds.convert(out, num_shards=SHARDS, images="jpeg", resize=256, threads=args.cores,
                       ray=True if args.ray else None, progress=False)
        times.append(time.perf_counter() - t)
        shutil.rmtree(out)
    return {"elements": m["elements"], "seconds": times}


def timed_passes(epoch: Any, runs: int) -> list[float]:
    """Examples/s of `runs` passes after one warm-up pass."""
    out = []
    for i in range(runs + 1):
        t, n = time.perf_counter(), 0
        for b in epoch():
            n += len(b)
        if i:
            out.append(n / (time.perf_counter() - t))
    return out


def child_read(args: argparse.Namespace) -> dict:
    import numpy as np
    import stoker as sk
    from stoker import ops, workloads

    kind, source = args.read.split(":")
    files = sorted(os.path.join(args.shards_dir, f) for f in os.listdir(args.shards_dir)
                   if f.startswith("part-") and f.endswith(".tfrecord"))
    if kind == "w3":
        if source == "files":
            ds = workloads.imagenet_pipeline(args.w3, threads=args.cores)
        elif source == "shards":
            ds = (sk.Dataset.from_converted(args.shards_dir, decode_images=False).with_options(threads=args.cores)
                  .shuffle(10_000, seed=0)
                  .map(workloads.imagenet_ops()[1:], num_parallel_calls=sk.AUTOTUNE)
                  .batch(256).prefetch(sk.AUTOTUNE))
        else:
            return {"runs": timed_passes(tf_w3_shards(files, args.cores), args.runs)}

        def epoch() -> Any:
            for b in ds:
                yield b["image"]
        return {"runs": timed_passes(epoch, args.runs)}
    colors = ops.read_class_colors(os.path.join(args.w2, "class_dict.csv"))
    if source == "files":
        images = sorted(os.path.join(args.w2, "images", f) for f in os.listdir(os.path.join(args.w2, "images")))
        labels = sorted(os.path.join(args.w2, "labels", f) for f in os.listdir(os.path.join(args.w2, "labels")))
        ds = workloads.segmentation_pipeline(images, labels, colors, threads=args.cores)
    elif source == "shards":
        ds = (sk.Dataset.from_converted(args.shards_dir).with_options(threads=args.cores)
              .map([ops.rescale("image", divisor=255.0), ops.one_hot("label", len(colors[1]))],
                   num_parallel_calls=sk.AUTOTUNE)
              .batch(3).prefetch(sk.AUTOTUNE))
    else:
        return {"runs": timed_passes(tf_w2_shards(files, len(colors[1]), args.cores), args.runs)}

    def epoch2() -> Any:
        for b in ds:
            yield np.asarray(b["image"])
    return {"runs": timed_passes(epoch2, args.runs)}


def tf_w3_shards(files: list[str], threads: int) -> Any:
    """W3's tf.data pipeline (bench/w3_peers.py) on the converted shards instead of the files."""
    import tensorflow as tf
    from stoker.workloads import IMAGENET_MEAN, IMAGENET_STD

    mean, std = tf.constant(IMAGENET_MEAN, tf.float32), tf.constant(IMAGENET_STD, tf.float32)
    no_boxes = tf.zeros([1, 0, 4], tf.float32)
    features = {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}

    def preprocess(record: Any) -> dict:
        f = tf.io.parse_single_example(record, features)
        data = f["image"]
        shape = tf.image.extract_jpeg_shape(data)
        begin, crop, _ = tf.image.sample_distorted_bounding_box(
            shape, bounding_boxes=no_boxes, min_object_covered=0.1, aspect_ratio_range=(3 / 4, 4 / 3),
            area_range=(0.08, 1.0), max_attempts=10, use_image_if_no_bounding_boxes=True)
        oy, ox, _ = tf.unstack(begin)
        th, tw, _ = tf.unstack(crop)
        img = tf.image.decode_and_crop_jpeg(data, tf.stack([oy, ox, th, tw]), channels=3)
        img = tf.image.resize(img, [224, 224], method=tf.image.ResizeMethod.BILINEAR)
        img = tf.image.random_flip_left_right(img) / 255.0
        img = tf.image.random_contrast(tf.image.random_brightness(img, 0.2), 0.8, 1.2)
        return {"image": (img - mean) / std, "label": f["label"]}

    opts = tf.data.Options()
    opts.threading.private_threadpool_size = threads
    ds = (tf.data.TFRecordDataset(files).shuffle(10_000, seed=0).map(preprocess, num_parallel_calls=tf.data.AUTOTUNE)
          .batch(256).prefetch(tf.data.AUTOTUNE).with_options(opts))
    return lambda: (b["image"] for b in ds.as_numpy_iterator())


def tf_w2_shards(files: list[str], classes: int, threads: int) -> Any:
    """W2's tf.data pipeline (bench/w2_peers.py) on the converted shards: the uint8 crop and
    the class-index map stored raw, /255 and tf.one_hot online."""
    import tensorflow as tf

    features = {"image": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.string)}

    def load(record: Any) -> dict:
        f = tf.io.parse_single_example(record, features)
        img = tf.reshape(tf.io.decode_raw(f["image"], tf.uint8), [512, 512, 3])
        lab = tf.reshape(tf.io.decode_raw(f["label"], tf.uint8), [512, 512])
        return {"image": tf.cast(img, tf.float32) / 255.0, "label": tf.one_hot(lab, classes)}

    opts = tf.data.Options()
    opts.threading.private_threadpool_size = threads
    ds = (tf.data.TFRecordDataset(files).map(load, num_parallel_calls=tf.data.AUTOTUNE).batch(3)
          .prefetch(tf.data.AUTOTUNE).with_options(opts))
    return lambda: (b["image"] for b in ds.as_numpy_iterator())


# ---- the parent ---------------------------------------------------------------------------

def run_child(extra: list[str], cores: int, args: argparse.Namespace) -> dict:
    out = tempfile.mktemp(suffix=".json")
    cmd = ["taskset", "-c", ",".join(str(c) for c in range(cores)), sys.executable, os.path.abspath(__file__),
           "--child", out, "--cores", str(cores), "--runs", str(args.runs), "--w3", args.w3, "--w2", args.w2] + extra
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", PYTHONPATH=ROOT)
    env.update({v: str(cores) for v in THREAD_VARS})
    print("[run]", " ".join(extra), f"{cores} core(s)", flush=True)
    subprocess.run(cmd, check=True, env=env, cwd=ROOT)
    with open(out) as f:
        r = json.load(f)
    os.remove(out)
    return dict(r)


def median(xs: list[float]) -> float:
    return float(statistics.median(xs))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--w3", default=os.path.join(DATA, "w3-3000"))
    ap.add_argument("--w2", default=os.path.join(DATA, "w2-240"))
    ap.add_argument("--child")
    ap.add_argument("--cores", type=int, default=1)
    ap.add_argument("--ray", action="store_true")
    ap.add_argument("--read")
    ap.add_argument("--shards-dir")
    args = ap.parse_args()
    if args.child:
        r = child_read(args) if args.read else child_convert(args)
        with open(args.child, "w") as f:
            json.dump(r, f)
        return 0
    for d in (args.w3, args.w2):
        if not os.path.isdir(d):
            raise SystemExit(f"{d}: no data; run `bench/run.py --workload w2` and `--workload w3` once first")
    doc: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": "python bench/convert_speed.py " + " ".join(sys.argv[1:]),
        "git": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=ROOT).stdout.strip(),
        "cpu": platform.processor() or platform.machine(), "runs": args.runs, "shards": SHARDS}
    import ray
    import stoker
    import tensorflow as tf

    doc["versions"] = {"stoker": stoker.__version__, "ray": ray.__version__, "tensorflow": tf.__version__}
    # 1. Converting W3's 3,000 JPEGs: decode → resize (shorter side 256) → JPEG 90.
    conv = {}
    for name, cores, extra in [("local, 1 core", 1, []), ("local, 2 cores", 2, []), ("Ray, 2 CPUs", 2, ["--ray"])]:
        r = run_child(extra, cores, args)
        conv[name] = {"elements": r["elements"], "seconds": r["seconds"],
                      "per_s": r["elements"] / median(r["seconds"])}
        print(f"    {conv[name]['per_s']:,.1f} images/s", flush=True)
    doc["convert"] = conv
    # 2. Training-time reads: from the original files against the converted shards.
    work = tempfile.mkdtemp(prefix="convert-shards-")
    w3_dir, w2_dir = os.path.join(work, "w3"), os.path.join(work, "w2")
    sys.path.insert(0, ROOT)
    w3 = w3_offline(args.w3).convert(w3_dir, num_shards=SHARDS, images="jpeg", resize=256, progress=False)
    w2 = w2_offline(args.w2).convert(w2_dir, num_shards=SHARDS, progress=False)
    doc["shards_bytes"] = {"w3": sum(s["bytes"] for s in w3["shards"]), "w2": sum(s["bytes"] for s in w2["shards"])}
    reads = []
    for wl, shards_dir in (("w3", w3_dir), ("w2", w2_dir)):
        for source in ("files", "shards", "tf-shards"):
            for cores in (1, 2):
                r = run_child(["--read", f"{wl}:{source}", "--shards-dir", shards_dir], cores, args)
                reads.append({"workload": wl, "source": source, "cores": cores, "runs": r["runs"],
                              "per_s": median(r["runs"])})
                print(f"    {reads[-1]['per_s']:,.1f} examples/s", flush=True)
    doc["reads"] = reads
    shutil.rmtree(work)
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "convert.json"), "w") as f:
        json.dump(doc, f, indent=1)
    sys.path.insert(0, HERE)
    import run

    docs = []
    for w in run.WORKLOADS:
        p = os.path.join(RESULTS, f"{w}.json")
        if os.path.exists(p):
            with open(p) as f:
                docs.append(json.load(f))
    run.render(docs, os.path.join(ROOT, "BENCHMARKS.md"))
    print("[done] bench/results/convert.json, BENCHMARKS.md", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
