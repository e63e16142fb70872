"""flat_map / interleave functions that call TensorFlow: tf.data, stoker with the function traced
(its ops one graph call per element, the dataset it returns made from their values), and stoker
running it as Python with TensorFlow eager (how it ran before). Words of lines
(``Dataset.from_tensor_slices(tf.strings.split(line))``) and an interleave of repeated values
(``from_tensors(x * 2).repeat(tf.cast(x % 4 + 1, tf.int64))``), batched by 64. One process, the
same cores, elements per second, medians of ``--runs`` runs, the three in turn. Then datasets
made per element with a TensorFlow ``map`` of their own (``Dataset.range(x, x + 4).map(scaled)``):
tf.data, stoker keeping the inner function's trace, stoker tracing it again per element. Last,
the words of lines as a map and an unbatch (a flat_map of the slices of the graph's values)
against a dataset made per element (before).

    python bench/tf_flat_map.py [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from typing import Any, Callable
from unittest import mock


def words(lib: Any, tf: Any) -> Any:
    lines = [" ".join(f"w{j}" for j in range(i % 9 + 1)) for i in range(3000)]
    return lib.Dataset.from_tensor_slices(lines).flat_map(
        lambda line: lib.Dataset.from_tensor_slices(tf.strings.split(line))
    ).batch(64)


def repeats(lib: Any, tf: Any) -> Any:
    return lib.Dataset.range(3000).interleave(
        lambda x: lib.Dataset.from_tensors(x * 2).repeat(tf.cast(x % 4 + 1, tf.int64)), cycle_length=4
    ).batch(64)


def inner_map(lib: Any, tf: Any) -> Any:
    def scaled(v: Any) -> Any:
        return tf.cast(v, tf.float32) * 2.0 + 1.0

    return lib.Dataset.range(1000).flat_map(lambda x: lib.Dataset.range(x, x + 4).map(scaled)).batch(64)


def rate(make: Callable[[], Any]) -> float:
    t = time.perf_counter()
    n = sum(len(b) for b in make())
    return n / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    import stoker as sk
    import tensorflow as tf
    from stoker import _tf_function

    def ours(make: Any, traced: bool) -> Callable[[], Any]:
        def run() -> Any:
            _tf_function.TRACE = traced  # read when flat_map / interleave is called
            try:
                return make(sk.data, tf)
            finally:
                _tf_function.TRACE = True

        return run

    print(f"Command: `python bench/tf_flat_map.py --runs {args.runs}`; machine: {platform.machine()}, "
          f"{os.cpu_count()} cores, Python {platform.python_version()}, TensorFlow {tf.__version__}; "
          f"elements per second, medians of {args.runs} runs.\n")
    print("| pipeline | tf.data | stoker, traced | vs tf.data | stoker, eager (before) | traced / eager |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, make in (("flat_map: words of lines", words), ("interleave: repeated values", repeats)):
        runs: dict[str, list[float]] = {"tf": [], "traced": [], "eager": []}
        for _ in range(args.runs):
            runs["tf"].append(rate(lambda make=make: make(tf.data, tf).as_numpy_iterator()))
            runs["traced"].append(rate(ours(make, True)))
            runs["eager"].append(rate(ours(make, False)))
        m = {k: statistics.median(v) for k, v in runs.items()}
        print(f"| {name} | {m['tf']:,.0f} | {m['traced']:,.0f} | {m['traced'] / m['tf']:.2f}× | "
              f"{m['eager']:,.0f} | {m['traced'] / m['eager']:.1f}× |")

    from stoker import dataset

    print("\n| pipeline | tf.data | stoker, trace kept | vs tf.data | stoker, traced per element (before) "
          "| kept / before |")
    print("|---|---:|---:|---:|---:|---:|")
    kept: dict[str, list[float]] = {"tf": [], "kept": [], "again": []}
    for _ in range(args.runs):
        kept["tf"].append(rate(lambda: inner_map(tf.data, tf).as_numpy_iterator()))
        kept["kept"].append(rate(lambda: inner_map(sk.data, tf)))
        with mock.patch.object(dataset._TRACES, "SIGNATURES", 0):
            kept["again"].append(rate(lambda: inner_map(sk.data, tf)))
    m = {k: statistics.median(v) for k, v in kept.items()}
    print(f"| flat_map: an inner TensorFlow map | {m['tf']:,.0f} | {m['kept']:,.0f} | {m['kept'] / m['tf']:.2f}× | "
          f"{m['again']:,.0f} | {m['kept'] / m['again']:.1f}× |")

    # A flat_map of the slices of the graph's values: a map and an unbatch, against a dataset
    # made per element (before).
    print("\n| pipeline | tf.data | stoker, map and unbatch | vs tf.data | stoker, a dataset per element (before) "
          "| ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    sliced: dict[str, list[float]] = {"tf": [], "unbatch": [], "datasets": []}
    for _ in range(args.runs):
        sliced["tf"].append(rate(lambda: words(tf.data, tf).as_numpy_iterator()))
        sliced["unbatch"].append(rate(lambda: words(sk.data, tf)))
        with mock.patch.object(_tf_function, "SLICES", False):  # read when flat_map is called
            sliced["datasets"].append(rate(lambda: words(sk.data, tf)))
    m = {k: statistics.median(v) for k, v in sliced.items()}
    print(f"| flat_map: words of lines | {m['tf']:,.0f} | {m['unbatch']:,.0f} | {m['unbatch'] / m['tf']:.2f}× | "
          f"{m['datasets']:,.0f} | {m['unbatch'] / m['datasets']:.1f}× |")


if __name__ == "__main__":
    main()
