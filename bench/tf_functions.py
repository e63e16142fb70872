"""TensorFlow functions in ``map``: the same tf.data code run by tf.data and by stoker (only the
import changed), beside stoker's hand-written ``sk.ops`` pipeline where there is one, in one
process on the same cores. Elements per second, median of ``--runs`` epochs after one warm-up.

    .venv/bin/python bench/tf_functions.py --data /tmp/stoker-bench-data --out bench/results/tf_functions.json

Pipelines: BERT's pre-training ``input_fn`` (TFRecord → parse_single_example → int64 to int32
→ map_and_batch), W1 as tf.data's fast form writes it (batch → parse_example → bit math) and
as workloads.md words it (``// 2**k % 2``, a gather, signs), W2
(decode_png → float /255 → resize_with_crop_or_pad, the label one-hot per class colour) and W3 as its
users write it (decode_jpeg → random_crop → random_flip → /255 → normalise), and the TensorFlow
image tutorials' load (decode_jpeg → tf.image.resize → /255).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

BERT_RECORDS = 20_000
SEQ, PREDS = 128, 20


def write_bert(path: str, tf: Any) -> None:
    """Pre-training examples as BERT's create_pretraining_data.py writes them (seeded)."""
    rng = np.random.default_rng(0)

    def ints(v: Any) -> Any:
        return tf.train.Feature(int64_list=tf.train.Int64List(value=list(v)))

    with tf.io.TFRecordWriter(path) as w:
        for i in range(BERT_RECORDS):
            f = {
                "input_ids": ints(rng.integers(0, 30522, SEQ)),
                "input_mask": ints([1] * SEQ),
                "segment_ids": ints([0] * 64 + [1] * 64),
                "masked_lm_positions": ints(rng.integers(0, SEQ, PREDS)),
                "masked_lm_ids": ints(rng.integers(0, 30522, PREDS)),
                "masked_lm_weights": tf.train.Feature(float_list=tf.train.FloatList(value=[1.0] * PREDS)),
                "next_sentence_labels": ints([i % 2]),
            }
            w.write(tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString())


def bert(lib: Any, tf: Any, files: list[str]) -> Any:
    """google-research/bert run_pretraining.py's input_fn (its evaluation form, no shuffle)."""
    name_to_features = {
        "input_ids": tf.io.FixedLenFeature([SEQ], tf.int64),
        "input_mask": tf.io.FixedLenFeature([SEQ], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([SEQ], tf.int64),
        "masked_lm_positions": tf.io.FixedLenFeature([PREDS], tf.int64),
        "masked_lm_ids": tf.io.FixedLenFeature([PREDS], tf.int64),
        "masked_lm_weights": tf.io.FixedLenFeature([PREDS], tf.float32),
        "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
    }

    def _decode_record(record: Any, name_to_features: Any) -> Any:
        example = tf.io.parse_single_example(record, name_to_features)
        for name in list(example.keys()):
            t = example[name]
            if t.dtype == tf.int64:
                t = tf.cast(t, tf.int32)
            example[name] = t
        return example

    d = lib.TFRecordDataset(files)
    d = d.apply(
        lib.experimental.map_and_batch(
            lambda record: _decode_record(record, name_to_features),
            batch_size=32,
            num_parallel_batches=2,
            drop_remainder=True,
        )
    )
    return d


def w1(lib: Any, tf: Any, files: list[str]) -> Any:
    import w1_peers

    spec = w1_peers._tf_spec(tf)

    def parse(serialized: Any) -> dict:
        p = tf.io.parse_example(serialized, spec)
        return w1_peers._tf_math(tf, tf.io.decode_raw(p["d"], tf.uint8), p["s"], batched=True)

    ds = lib.TFRecordDataset(files, num_parallel_reads=lib.AUTOTUNE).batch(512, drop_remainder=True)
    return ds.map(parse, num_parallel_calls=lib.AUTOTUNE).prefetch(lib.AUTOTUNE)


def w1_literal(lib: Any, tf: Any, files: list[str]) -> Any:
    """W1 as workloads.md words it: ``(x // [128..1]) % 2`` in int32, a reshape, a gather of
    the channels and int32 signs, then the score."""
    import w1_peers

    spec = w1_peers._tf_spec(tf)
    channels = [0, 4, 8, 12, 16, 20, 1, 5, 9, 13, 17, 21, 2, 6, 10, 14, 18, 22, 3, 7, 11, 15, 19, 23]
    signs = [1] * 6 + [-1] * 6 + [1] * 6 + [-1] * 6

    def parse(serialized: Any) -> dict:
        p = tf.io.parse_example(serialized, spec)
        x = tf.io.decode_raw(p["d"], tf.uint8)
        pw = tf.constant([128, 64, 32, 16, 8, 4, 2, 1], dtype=tf.int32)
        bits = tf.reshape((tf.cast(x, tf.int32)[:, :, None] // pw) % 2, (-1, 1552))
        board = tf.reshape(bits[:, :1536], (-1, 8, 8, 24))
        board = tf.cast(tf.gather(board, channels, axis=-1) * tf.constant(signs, dtype=tf.int32), tf.float32)
        flags = tf.cast(bits[:, 1536:1546], tf.float32)
        is_mate = tf.cast(bits[:, 1546], tf.float32)
        s = tf.cast(p["s"], tf.float32)
        a, k, b = tf.constant(w1_peers.A), tf.constant(w1_peers.K), tf.constant(w1_peers.B)
        one, zero = tf.constant(1.0), tf.constant(0.0)
        slope = (one - a) / (b - one)
        score = (one - is_mate) * a * tf.math.tanh(s / k) + is_mate * tf.math.sign(s) * (
            a + slope * tf.math.maximum(zero, b - tf.math.abs(s))
        )
        return {"board": board, "flags": flags, "score": score}

    ds = lib.TFRecordDataset(files, num_parallel_reads=lib.AUTOTUNE).batch(512, drop_remainder=True)
    return ds.map(parse, num_parallel_calls=lib.AUTOTUNE).prefetch(lib.AUTOTUNE)


def w2(lib: Any, tf: Any, pairs: tuple[list[str], list[str], list[list[int]]]) -> Any:

    images, labels, colors = pairs
    rgb = tf.constant(np.asarray(colors, dtype=np.uint8))

    def load(image_path: Any, label_path: Any) -> dict:
        # The label one-hot as W2's users wrote it: one tf.equal per class colour.
        img = tf.io.decode_png(tf.io.read_file(image_path), channels=3)
        img = tf.image.resize_with_crop_or_pad(tf.cast(img, tf.float32) / 255.0, 512, 512)
        lab = tf.io.decode_png(tf.io.read_file(label_path), channels=3)
        lab = tf.image.resize_with_crop_or_pad(lab, 512, 512)
        one_hot = tf.stack([tf.reduce_all(tf.equal(lab, rgb[i]), axis=-1) for i in range(len(colors))], axis=-1)
        return {"image": img, "label": tf.cast(one_hot, tf.float32)}

    ds = lib.Dataset.from_tensor_slices((images, labels)).map(load, num_parallel_calls=lib.AUTOTUNE)
    return ds.batch(3).prefetch(lib.AUTOTUNE)


def w2_image_only(lib: Any, tf: Any, pairs: tuple[list[str], list[str], list[list[int]]]) -> Any:
    """W2's photo half alone (decode_png → /255 → resize_with_crop_or_pad): all of it native."""
    images = pairs[0]

    def load(image_path: Any) -> Any:
        img = tf.io.decode_png(tf.io.read_file(image_path), channels=3)
        return tf.image.resize_with_crop_or_pad(tf.cast(img, tf.float32) / 255.0, 512, 512)

    ds = lib.Dataset.from_tensor_slices(images).map(load, num_parallel_calls=lib.AUTOTUNE)
    return ds.batch(3).prefetch(lib.AUTOTUNE)


def w3(lib: Any, tf: Any, files: tuple[list[str], list[int]]) -> Any:
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]

    def preprocess(path: Any, label: Any) -> Any:
        img = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
        img = tf.image.random_crop(img, [224, 224, 3])
        img = tf.image.random_flip_left_right(img)
        img = tf.cast(img, tf.float32) / 255.0
        return (img - mean) / std, label

    ds = lib.Dataset.from_tensor_slices(files).map(preprocess, num_parallel_calls=lib.AUTOTUNE)
    return ds.batch(256).prefetch(lib.AUTOTUNE)


def tutorial(lib: Any, tf: Any, files: tuple[list[str], list[int]]) -> Any:
    """The TensorFlow image tutorials' load: decode_jpeg → tf.image.resize to 224x224 (bilinear,
    float32) → /255."""

    def load(path: Any, label: Any) -> Any:
        img = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
        return tf.image.resize(img, [224, 224]) / 255.0, label

    ds = lib.Dataset.from_tensor_slices(files).map(load, num_parallel_calls=lib.AUTOTUNE)
    return ds.batch(32).prefetch(lib.AUTOTUNE)


def w3_files(root: str, n: int) -> tuple[list[str], list[int]]:
    """The first ``n`` images of a W3 folder (``class*/``) and their labels, in a fixed order."""
    paths, labels = [], []
    for i, c in enumerate(sorted(d for d in os.listdir(root) if d.startswith("class"))):
        for f in sorted(os.listdir(os.path.join(root, c))):
            paths.append(os.path.join(root, c, f))
            labels.append(i)
    return paths[:n], labels[:n]


def rate(make: Callable[[], Any], elements: int, runs: int) -> dict:
    """Elements per second: the median of ``runs`` samples after one warm-up epoch, a sample
    being as many whole epochs as take at least half a second (short epochs are noisy)."""
    ds = make()
    for _ in ds:
        pass
    times = []
    for _ in range(runs):
        t, epochs = time.perf_counter(), 0
        while not epochs or time.perf_counter() - t < 0.5:
            for _ in ds:
                pass
            epochs += 1
        times.append((time.perf_counter() - t) / epochs)
    med = statistics.median(times)
    return {"elements_per_s": elements / med, "seconds": times}


def all_cases(data: str, bert_file: str, sk: Any) -> list[tuple[str, Callable[..., Any], Any, int, Any]]:
    """Every row's pipeline, data and hand-written ``sk.ops`` peer (the W data made by the
    other benchmarks, under ``data``)."""
    w1_files = sorted(
        os.path.join(data, "w1-ab", f) for f in os.listdir(os.path.join(data, "w1-ab")) if f.endswith(".tfrecord")
    )
    w1_n = json.load(open(os.path.join(data, "w1-ab", "meta.json")))["num_examples"] // 512 * 512
    w2_dir = os.path.join(data, "w2-240")
    import w2_peers

    w2_images = sorted(os.path.join(w2_dir, "images", f) for f in os.listdir(os.path.join(w2_dir, "images")))[:60]
    w2_labels = sorted(os.path.join(w2_dir, "labels", f) for f in os.listdir(os.path.join(w2_dir, "labels")))[:60]
    colors = w2_peers.read_colors(os.path.join(w2_dir, "class_dict.csv"))
    paths, labels = w3_files(os.path.join(data, "w3-1200"), 600)

    cases: list[tuple[str, Callable[..., Any], Any, int, Callable[[], Any] | None]] = [
        ("BERT input_fn", bert, [bert_file], BERT_RECORDS // 32 * 32, None),
        (
            "W1 (tf.data's fast form)",
            w1,
            w1_files,
            w1_n,
            lambda: sk.workloads.chess_pipeline(w1_files, shuffle_buffer=0),
        ),
        (
            "W1 (workloads.md's form)",
            w1_literal,
            w1_files,
            w1_n,
            lambda: sk.workloads.chess_pipeline(w1_files, shuffle_buffer=0),
        ),
        (
            "W2 photo: decode_png, /255, crop/pad",
            w2_image_only,
            (w2_images, w2_labels, colors),
            len(w2_images),
            lambda: (
                sk.Dataset.from_tensor_slices(np.array(w2_images, dtype=object))
                .map(
                    [
                        sk.ops.read_file("value"),
                        sk.ops.decode_image("value", channels=3),
                        sk.ops.resize_with_crop_or_pad("value", 512, 512),
                        sk.ops.rescale("value", divisor=255.0),
                    ],
                    num_parallel_calls=sk.AUTOTUNE,
                )
                .batch(3)
                .prefetch(sk.AUTOTUNE)
            ),
        ),
        (
            "W2 (photo and per-colour one-hot label)",
            w2,
            (w2_images, w2_labels, colors),
            len(w2_images),
            lambda: sk.workloads.segmentation_pipeline(w2_images, w2_labels, colors),
        ),
        (
            "W3 as users write it (random_crop)",
            w3,
            (paths, labels),
            len(paths),
            lambda: (
                sk.Dataset.from_tensor_slices((np.array(paths, dtype=object), np.array(labels)))
                .map(
                    [
                        sk.ops.read_file("0"),
                        sk.ops.decode_image("0", channels=3),
                        sk.ops.random_crop("0", 224),
                        sk.ops.random_flip_left_right("0"),
                        sk.ops.rescale("0", divisor=255.0),
                        sk.ops.normalize("0", [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
                    ],
                    num_parallel_calls=sk.AUTOTUNE,
                )
                .batch(256)
                .prefetch(sk.AUTOTUNE)
            ),
        ),
    ]
    cases.append(
        (
            "TF tutorials' images (decode_jpeg, resize, /255)",
            tutorial,
            (paths, labels),
            len(paths),
            lambda: (
                sk.Dataset.from_tensor_slices((np.array(paths, dtype=object), np.array(labels)))
                .map(
                    [
                        sk.ops.read_file("0"),
                        sk.ops.decode_image("0", channels=3),
                        sk.ops.resize_bilinear("0", 224),
                        sk.ops.compute("0", sk.ops.field("0") / 255.0),
                    ],
                    num_parallel_calls=sk.AUTOTUNE,
                )
                .batch(32)
                .prefetch(sk.AUTOTUNE)
            ),
        )
    )
    return cases


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/tmp/stoker-bench-data")
    ap.add_argument("--out", default="bench/results/tf_functions.json")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", help="run only the rows whose name starts with this (e.g. BERT)")
    args = ap.parse_args()

    import stoker as sk
    import stoker.workloads
    import tensorflow as tf
    from stoker import _tf_function

    os.makedirs(os.path.join(args.data, "bert"), exist_ok=True)
    bert_file = os.path.join(args.data, "bert", "pretrain.tfrecord")
    if not os.path.exists(bert_file):
        write_bert(bert_file, tf)
    if args.only and "BERT input_fn".startswith(args.only):  # its data is made here
        cases: list[tuple[str, Callable[..., Any], Any, int, Callable[[], Any] | None]] = [
            ("BERT input_fn", bert, [bert_file], BERT_RECORDS // 32 * 32, None)
        ]
    else:
        cases = all_cases(args.data, bert_file, sk)
    cases = [c for c in cases if not args.only or c[0].startswith(args.only)]
    rows = []
    for name, fn, data, n, native in cases:
        row: dict[str, Any] = {"pipeline": name, "elements": n}

        def on(lib: Any, fn: Callable[..., Any] = fn, data: Any = data) -> Callable[[], Any]:
            return lambda: fn(lib, tf, data)

        row["tf.data"] = rate(on(tf.data), n, args.runs)
        row["stoker"] = rate(on(sk.data), n, args.runs)
        row["stoker_explain"] = on(sk.data)().explain().split("TensorFlow functions:")[-1].strip()
        if native is not None:
            row["stoker sk.ops"] = rate(native, n, args.runs)
        if name.startswith("BERT"):
            _tf_function.TRACE = False
            row["stoker eager (before)"] = rate(on(sk.data), n, 1)
            _tf_function.TRACE = True
        rows.append(row)
        print(name, {k: round(v["elements_per_s"]) for k, v in row.items() if isinstance(v, dict)}, flush=True)
    doc = {
        "command": " ".join([os.path.relpath(sys.executable), *sys.argv]),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "affinity": len(os.sched_getaffinity(0)),
        "tensorflow": tf.__version__,
        "rows": rows,
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
