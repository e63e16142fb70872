"""Random ops in TensorFlow map functions: tf.data, stoker with the random ops drawing from the
element's seed (their stateless forms, fed by ``sk.ops.element_seed``), and stoker running them
as they are, unseeded (how it ran before). Two functions on 64x64 uint8 images held in memory,
batched by 64: photometric jitter as users write it (random flip, /255,
``tf.image.random_brightness``, ``random_contrast``) and additive noise
(``tf.random.normal`` per pixel). One process, the same cores, elements per second, medians of
``--runs`` epochs after one warm-up, the three in turn. Then the noise function (nothing of it
translated) with its whole graph run once per batch against per element (before), and Keras's
RandomFlip + RandomRotation layers traced and seeded against run eagerly per element (before);
the TensorFlow tutorial's ``tf.random.Generator`` seeds; and the jitter function decorated with
``tf.function``, traced into the map's graph against left as a call of its own (before).

    python bench/tf_random.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from typing import Any, Callable
from unittest import mock

import numpy as np

N = 2048


def jitter(lib: Any, tf: Any, images: np.ndarray) -> Any:
    def augment(img: Any) -> Any:
        img = tf.image.random_flip_left_right(img)
        img = tf.cast(img, tf.float32) / 255.0
        img = tf.image.random_brightness(img, 0.2)
        return tf.image.random_contrast(img, 0.8, 1.2)

    return lib.Dataset.from_tensor_slices(images).map(augment, num_parallel_calls=lib.AUTOTUNE).batch(64)


def noise(lib: Any, tf: Any, images: np.ndarray) -> Any:
    def noisy(img: Any) -> Any:
        return tf.cast(img, tf.float32) / 255.0 + tf.random.normal(tf.shape(img), stddev=0.05)

    return lib.Dataset.from_tensor_slices(images).map(noisy, num_parallel_calls=lib.AUTOTUNE).batch(64)


def generator(lib: Any, tf: Any, images: np.ndarray) -> Any:
    """The TensorFlow tutorial's form: a ``tf.random.Generator`` hands out seeds for
    ``tf.image``'s stateless random functions."""
    rng = tf.random.Generator.from_seed(123, alg="philox")

    def augment(img: Any) -> Any:
        seed = rng.make_seeds(1)[:, 0]
        img = tf.image.stateless_random_flip_left_right(img, seed)
        img = tf.cast(img, tf.float32) / 255.0
        return tf.image.stateless_random_brightness(img, 0.2, seed)

    return lib.Dataset.from_tensor_slices(images).map(augment, num_parallel_calls=lib.AUTOTUNE).batch(64)


def decorated(lib: Any, tf: Any, images: np.ndarray) -> Any:
    """The jitter function decorated with ``tf.function``, as some users write it."""

    @tf.function
    def augment(img: Any) -> Any:
        img = tf.image.random_flip_left_right(img)
        img = tf.cast(img, tf.float32) / 255.0
        img = tf.image.random_brightness(img, 0.2)
        return tf.image.random_contrast(img, 0.8, 1.2)

    return lib.Dataset.from_tensor_slices(images).map(augment, num_parallel_calls=lib.AUTOTUNE).batch(64)


def keras_layers(lib: Any, tf: Any, images: np.ndarray) -> Any:
    import keras

    augment = keras.Sequential([keras.layers.RandomFlip("horizontal"), keras.layers.RandomRotation(0.1)])
    ds = lib.Dataset.from_tensor_slices(images).map(lambda x: tf.cast(x, tf.float32) / 255.0)
    return ds.map(lambda x: augment(x, training=True), num_parallel_calls=lib.AUTOTUNE).batch(64)


def rate(make: Callable[[], Any], runs: int) -> float:
    ds = make()
    for _ in ds:
        pass
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        for _ in ds:
            pass
        times.append(time.perf_counter() - t)
    return N / statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    import stoker as sk
    import tensorflow as tf
    from stoker import _tf_function

    images = np.random.default_rng(0).integers(0, 256, (N, 64, 64, 3), dtype=np.uint8)

    def ours(make: Any, seeded: bool) -> Callable[[], Any]:
        def run() -> Any:
            with mock.patch.object(_tf_function, "SEED", seeded):  # read when map is called
                return make(sk.data, tf, images)

        return run

    print(
        f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} · machine: {platform.machine()}, "
        f"{os.cpu_count()} cores, TensorFlow {tf.__version__}; elements/s, medians of {args.runs} epochs\n"
    )
    print("| function | tf.data | stoker, seeded | vs tf.data | stoker, unseeded | seeded / unseeded |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, make in (
        ("photometric jitter", jitter),
        ("additive noise", noise),
        ("tf.random.Generator seeds (the tutorial's)", generator),
    ):
        theirs = rate(lambda make=make: make(tf.data, tf, images), args.runs)
        seeded = rate(ours(make, True), args.runs)
        unseeded = rate(ours(make, False), args.runs)
        print(
            f"| {name} | {theirs:,.0f} | {seeded:,.0f} | {seeded / theirs:.2f}× | {unseeded:,.0f} | "
            f"{seeded / unseeded:.2f}× |",
            flush=True,
        )
    # The noise function has no op stoker translates: its whole graph runs once per batch
    # where the batch follows, against per element (how stoker ran it before).
    print("\n| function (seeded) | whole graph once per batch | per element (before) | per batch / per element |")
    print("|---|---:|---:|---:|")
    per_batch = rate(ours(noise, True), args.runs)
    with mock.patch.object(_tf_function, "WHOLE_PER_BATCH", False):
        per_element = rate(ours(noise, True), args.runs)
    print(f"| additive noise | {per_batch:,.0f} | {per_element:,.0f} | {per_batch / per_element:.2f}× |")
    def against_before(label: str, make: Any, flag: str, now: str, before: str) -> None:
        """tf.data, stoker, and stoker with ``_tf_function``'s ``flag`` off (how it ran before)."""
        print(f"\n| function | tf.data | stoker, {now} | vs tf.data | {before} (before) | ratio |")
        print("|---|---:|---:|---:|---:|---:|")
        theirs = rate(lambda: make(tf.data, tf, images), args.runs)
        ours_now = rate(ours(make, True), args.runs)
        with mock.patch.object(_tf_function, flag, False):  # read when map is called
            ours_before = rate(ours(make, True), args.runs)
        print(
            f"| {label} | {theirs:,.0f} | {ours_now:,.0f} | {ours_now / theirs:.2f}× | "
            f"{ours_before:,.0f} | {ours_now / ours_before:.2f}× |"
        )

    # Keras preprocessing layers: traced (and seeded) now, run eagerly per element before.
    against_before("Keras RandomFlip + RandomRotation", keras_layers, "TRACE", "traced and seeded", "stoker, eager")
    # A function decorated with tf.function: traced into the map's graph (its ops translated,
    # its random ops seeded) against left as a call of its own (before).
    against_before("jitter in a @tf.function", decorated, "INLINE", "traced into the graph", "left a call")
    for name, make in (
        ("photometric jitter", jitter),
        ("additive noise", noise),
        ("Generator seeds", generator),
        ("Keras layers", keras_layers),
        ("jitter in a @tf.function", decorated),
    ):
        print(f"\n{name}: {make(sk.data, tf, images).explain().split('TensorFlow functions:')[-1].strip()}")


if __name__ == "__main__":
    main()
