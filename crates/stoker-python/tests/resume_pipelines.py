"""Pipelines for the resume tests, built the same way in the test process and in the fresh
processes that restore their states (``python resume_pipelines.py`` reads jobs on stdin)."""

from __future__ import annotations

import hashlib
import pickle
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import stoker as sk
from stoker import workloads


def digest(element: Any) -> str:
    """A hash of an element's structure, dtypes, shapes and bytes."""
    h = hashlib.sha1()

    def walk(x: Any, path: str) -> None:
        if isinstance(x, dict):
            for k in sorted(x):
                walk(x[k], f"{path}/{k}")
        elif isinstance(x, (tuple, list)):
            for i, v in enumerate(x):
                walk(v, f"{path}/{i}")
        else:
            a = np.asarray(x)
            h.update(f"{path}:{a.dtype}:{a.shape}:".encode())
            if a.dtype == object:
                h.update(b"|".join(bytes(v) for v in a.ravel()))
            else:
                h.update(np.ascontiguousarray(a).tobytes())

    walk(element, "")
    return h.hexdigest()


def _parse_s(record: Any) -> dict[str, Any]:
    return {"s": sk.io.parse_example_proto(bytes(record))["s"][1][0]}


def _seq(e: dict[str, Any]) -> dict[str, Any]:
    s = int(e["s"])
    return {"s": np.int64(s), "seq": np.arange(s % 4, dtype=np.int64) + s}


def _even(e: dict[str, Any]) -> bool:
    return int(e["s"]) % 3 != 0


def _raises_on_some(e: dict[str, Any]) -> dict[str, Any]:
    if int(e["s"]) % 6 == 1:
        raise ValueError(f"no {int(e['s'])}")
    return e


TEXT = Path(__file__).resolve().parents[3] / "tests" / "golden" / "text"


def _squares() -> Any:
    for i in range(15):
        yield {"i": i, "sq": np.full(i % 3, i * i)}


class _Spec:
    def __init__(self, shape: tuple, dtype: str) -> None:
        self.shape, self.dtype = shape, dtype


def _traced(t: int) -> sk.Dataset:
    """TensorFlow functions as tf.data code writes them: a traced filter predicate computed
    natively, and a map whose untranslated rest (``cumsum``) runs once per batch."""
    import tensorflow as tf  # only this pipeline imports it

    def keep(v: Any) -> Any:
        return tf.math.logical_or(tf.cast(v, tf.float32) * 0.5 < 12.0, tf.cast(v, tf.float32) > 30.0)

    def rest(v: Any) -> Any:
        x = tf.cast(v, tf.float32) / 4.0
        return {"x": tf.math.cumsum(tf.stack([x, x + 1.0, x * 2.0])), "v": v}

    ds = sk.data.Dataset.range(40).shuffle(7, seed=5).filter(keep).map(rest).batch(4)
    return ds.with_options(threads=t)


def pipelines(data: dict[str, Any]) -> dict[str, Callable[[int], sk.Dataset]]:
    """Name → (threads → dataset). ``data``: paths of the files the pipelines read."""
    chess, tfr, npz, images = data["chess"], data["tfrecords"], data["npz"], data["images"]
    s_only = [sk.ops.parse_example({"s": sk.FixedLenFeature([], sk.int64)})]
    x = np.arange(60, dtype=np.float32).reshape(20, 3)

    def opt(ds: sk.Dataset, t: int) -> sk.Dataset:
        return ds.with_options(threads=t)

    return {
        "w1": lambda t: workloads.chess_pipeline(chess, seed=0, batch_size=64, shuffle_buffer=1000, threads=t),
        "w1_indexed": lambda t: workloads.chess_pipeline(
            data["chess_indexed"], seed=0, batch_size=64, shuffle_buffer=1000, threads=t
        ),
        # Files of 9, 13 and 17 records, two read in turn: a restore finds its buffer's records
        # in files read to their end and in files read part-way.
        "shuffle_indexed": lambda t: opt(
            sk.TFRecordDataset(data["tfrecords_indexed"], num_parallel_reads=2)
            .map(s_only)
            .shuffle(6, seed=3)
            .repeat(2),
            t,
        ),
        "w3": lambda t: workloads.imagenet_pipeline(images, size=24, batch_size=5, seed=0, threads=t),
        "mixed": lambda t: opt(
            sk.Dataset.list_files(tfr, shuffle=True, seed=1)
            .interleave(sk.TFRecordDataset, cycle_length=2, block_length=3, num_parallel_calls=2)
            .map(s_only)
            .filter(_even)
            .repeat(2)
            .skip(5)
            .take(70)
            .map(_seq)
            .padded_batch(4),
            t,
        ),
        "range": lambda t: opt(sk.Dataset.range(3, 40, 2), t),
        "from_tensor_slices": lambda t: opt(sk.Dataset.from_tensor_slices({"x": x, "y": np.arange(20)}), t),
        "from_npz": lambda t: opt(sk.Dataset.from_npz(npz), t),
        "list_files": lambda t: opt(sk.Dataset.list_files(tfr, shuffle=True, seed=4).repeat(3), t),
        "tfrecord": lambda t: opt(sk.TFRecordDataset(tfr), t),
        "tfrecord_parallel_reads": lambda t: opt(sk.TFRecordDataset(tfr, num_parallel_reads=sk.AUTOTUNE), t),
        "tfrecord_gzip": lambda t: opt(sk.TFRecordDataset(data["gzip"], compression_type="GZIP"), t),
        "shuffle": lambda t: opt(sk.Dataset.range(50).shuffle(16, seed=7), t),
        "global_shuffle": lambda t: opt(
            sk.TFRecordDataset(tfr, num_parallel_reads=sk.AUTOTUNE).map(s_only).global_shuffle(seed=5).repeat(2), t
        ),
        "refill": lambda t: opt(sk.TFRecordDataset(data["damaged"]).batch(4).map(s_only).ignore_errors(), t),
        # Bad records skipped by a parallel parse, a Python function that raises, a global
        # shuffle and the steps of a concatenation: a resumed run counts each once.
        "skips_parallel": lambda t: opt(
            sk.TFRecordDataset([data["damaged"], data["damaged"]], num_parallel_reads=2)
            .map(s_only, num_parallel_calls=2)
            .map(_raises_on_some)
            .shuffle(5, seed=2)
            .repeat(2)
            .batch(3)
            .ignore_errors(),
            t,
        ),
        "skips_global": lambda t: opt(
            sk.TFRecordDataset(data["damaged"])
            .map(s_only)
            .global_shuffle(seed=1)
            .concatenate(sk.TFRecordDataset(data["damaged"]).map(s_only).map(_raises_on_some))
            .batch(4)
            .ignore_errors(),
            t,
        ),
        "shuffle_unseeded": lambda t: opt(sk.Dataset.range(50).shuffle(16), t),
        "map_random_parallel": lambda t: opt(
            sk.Dataset.from_tensor_slices(
                {"image": np.arange(20 * 4 * 4 * 3, dtype=np.uint8).reshape(20, 4, 4, 3)}
            ).map([sk.ops.random_flip_left_right("image", seed=3)], num_parallel_calls=sk.AUTOTUNE),
            t,
        ),
        "map_python": lambda t: opt(sk.Dataset.range(30).map(lambda v: v * v), t),
        "batch": lambda t: opt(sk.Dataset.range(23).batch(4), t),
        "map_and_batch": lambda t: opt(
            sk.TFRecordDataset(tfr).map(s_only, num_parallel_calls=sk.AUTOTUNE).batch(3, drop_remainder=True),
            t,
        ),
        "padded_batch": lambda t: opt(sk.Dataset.range(17).map(lambda v: np.arange(int(v) % 5)).padded_batch(3), t),
        "unbatch": lambda t: opt(sk.Dataset.range(23).batch(4).unbatch(), t),
        "interleave_python": lambda t: opt(
            sk.Dataset.range(5).interleave(lambda v: sk.Dataset.range(int(v) * 3), cycle_length=2, block_length=2),
            t,
        ),
        "filter": lambda t: opt(sk.Dataset.range(40).filter(lambda v: int(v) % 3 == 0), t),
        "take": lambda t: opt(sk.Dataset.range(40).take(13), t),
        "take_while": lambda t: opt(sk.Dataset.range(40).repeat().take_while(lambda v: int(v) < 33), t),
        "assert_cardinality": lambda t: opt(
            sk.Dataset.range(40).filter(lambda v: int(v) % 2 == 0).assert_cardinality(20), t
        ),
        "unique": lambda t: opt(sk.Dataset.from_tensor_slices(np.arange(60) % 17).unique(), t),
        "rejection_resample": lambda t: opt(
            sk.Dataset.from_tensor_slices(np.arange(60) % 4).rejection_resample(
                lambda v: int(v) % 2, [0.5, 0.5], initial_dist=[0.5, 0.5], seed=3
            ),
            t,
        ),
        "ragged_batch": lambda t: opt(sk.Dataset.range(1, 14).map(lambda v: np.arange(int(v))).ragged_batch(3), t),
        "skip": lambda t: opt(sk.Dataset.range(40).skip(13), t),
        "repeat": lambda t: opt(sk.Dataset.range(7).shuffle(7, seed=2).repeat(4), t),
        "cache_memory": lambda t: opt(
            sk.Dataset.range(12).map([sk.ops.cast("value", sk.float32)]).cache().repeat(3), t
        ),
        "cache_file": lambda t: opt(sk.Dataset.range(12).cache(data["cache_file"]).repeat(2), t),
        "prefetch": lambda t: opt(sk.Dataset.range(30).prefetch(4), t),
        "shard": lambda t: opt(sk.Dataset.range(40).shard(3, 1), t),
        "zip": lambda t: opt(sk.Dataset.zip((sk.Dataset.range(10), sk.Dataset.range(20).shuffle(5, seed=1))), t),
        "enumerate": lambda t: opt(sk.Dataset.range(10, 20).enumerate(5), t),
        # The boundary between the two parts falls inside the runs above (batches of 3).
        "concatenate": lambda t: opt(
            sk.Dataset.range(7).shuffle(7, seed=2).concatenate(sk.Dataset.range(100, 108).shuffle(4, seed=5)), t
        ),
        "flat_map": lambda t: opt(sk.Dataset.range(6).flat_map(lambda v: sk.Dataset.range(int(v))), t),
        "rebatch": lambda t: opt(sk.Dataset.range(23).batch(4).rebatch(3), t),
        # Draws, ended datasets (the shorter one ends inside the run) and choices all restored.
        "sample_from_datasets": lambda t: opt(
            sk.Dataset.sample_from_datasets(
                [sk.Dataset.range(6), sk.Dataset.range(100, 120).shuffle(5, seed=4)], weights=[1, 2], seed=9
            ),
            t,
        ),
        "choose_from_datasets": lambda t: opt(
            sk.Dataset.choose_from_datasets(
                [sk.Dataset.range(5), sk.Dataset.range(50, 70)],
                sk.Dataset.range(40).map(lambda v: np.int64(v % 3 % 2)),
                stop_on_empty_dataset=False,
            ),
            t,
        ),
        "text_line": lambda t: opt(
            sk.TextLineDataset([str(TEXT / "a.txt"), str(TEXT / "a.txt.gz"), str(TEXT / "b.txt")]).concatenate(
                sk.TextLineDataset([str(TEXT / "b.txt"), str(TEXT / "a.txt")], num_parallel_reads=2)
            ),
            t,
        ),
        "fixed_length_record": lambda t: opt(
            sk.FixedLengthRecordDataset([str(TEXT / "records.bin"), str(TEXT / "records.bin")], 8, 3, 2).concatenate(
                sk.FixedLengthRecordDataset(str(TEXT / "records.bin.gz"), 8, 3, 2, compression_type="GZIP")
            ),
            t,
        ),
        "window": lambda t: opt(
            sk.Dataset.range(30).shuffle(6, seed=2).window(4, shift=3, stride=2).flat_map(lambda w: w.batch(4)), t
        ),
        "scan": lambda t: opt(
            sk.Dataset.range(25).shuffle(6, seed=1).scan(0, lambda s, v: (s + int(v), np.int64(s * 3 - int(v)))), t
        ),
        "group_by_window": lambda t: opt(
            sk.Dataset.range(40)
            .shuffle(9, seed=4)
            .group_by_window(lambda v: int(v) % 3, lambda k, w: w.batch(4), window_size=4),
            t,
        ),
        "csv": lambda t: opt(
            sk.CsvDataset([str(TEXT / "data.csv")] * 3, [np.int64(0), "", 0.0, 0.0], header=True, na_value="NA"), t
        ),
        "from_generator": lambda t: opt(
            sk.Dataset.from_generator(
                _squares, output_signature={"i": _Spec((), "int64"), "sq": _Spec((None,), "int32")}
            ).shuffle(4, seed=3),
            t,
        ),
        "tf_filter_and_per_batch_rest": _traced,
        "zip_after_python_map": lambda t: opt(
            sk.Dataset.zip((sk.Dataset.range(12).map(lambda v: {"sq": v * v}), sk.Dataset.range(12).enumerate())),
            t,
        ),
    }


def run_jobs(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each job restores ``name`` (with ``threads``) from ``state``; then takes ``take``
    elements and saves the state again, or, with ``take`` None, takes the rest."""
    out = []
    for job in jobs:
        ds = pipelines(job["data"])[job["name"]](job["threads"])
        try:
            it = ds.iterator(state=job["state"])
        except sk.StokerError as e:
            out.append({"error": f"{type(e).__name__}: {e}"})
            continue
        if job["take"] is None:
            out.append({"digests": [digest(e) for e in it], "skipped": it.skipped()})
        else:
            got = [digest(next(it)) for _ in range(job["take"])]
            out.append({"digests": got, "state": it.state()})
        it.close()
    return out


if __name__ == "__main__":
    sys.stdout.buffer.write(pickle.dumps(run_jobs(pickle.loads(sys.stdin.buffer.read()))))
