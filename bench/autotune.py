"""AUTOTUNE against a grid of manual settings and tf.data's AUTOTUNE, on pipelines where the
right setting differs: W1, W3, W2's photos (large elements), a source whose reads wait 20 ms
(I/O-bound), a Python function between native ops (GIL-bound), and a cheap pipeline whose
consumer sleeps per batch (consumer-bound).

For each pipeline, in one process, on the same cores:
- the grid: stoker with the tuner off (``with_options(autotune=False, threads=n)``: the map gets
  ``n`` workers), for each ``n``;
- stoker AUTOTUNE as users write it (the tuner on, the default budget): the rate per second
  over ``--tune-seconds``, its final rate (the median of the last 5 s) and when it first came
  within 5 % of it;
- tf.data AUTOTUNE on the same code (``lib`` is ``tf.data`` or ``stoker``).

Rates are elements (images, examples) per second. Writes ``bench/results/autotune.json``;
``python bench/autotune.py --section`` prints the BENCHMARKS.md section from it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time
from typing import Any, Callable

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

GRID = (1, 2, 4, 8, 16, 32)


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def stream(make: Callable[[], Any], per: int, seconds: float, warm: float, sleep_s: float = 0.0) -> dict:
    """Iterates ``make()`` (repeated) for ``warm`` + ``seconds``; ``per`` elements per item. The
    rate of each second, the rate over the measured part, and the cores the process used."""
    it = iter(make())
    t0 = time.perf_counter()
    marks, n, next_mark = [], 0, t0 + 1.0
    start_n, start_t, start_cpu = None, None, None
    while True:
        next(it)
        n += per
        if sleep_s:
            time.sleep(sleep_s)
        now = time.perf_counter()
        if start_t is None and now - t0 >= warm:
            start_n, start_t, start_cpu = n, now, _cpu()
        if now >= next_mark:
            marks.append(n)
            next_mark += 1.0
        if now - t0 >= warm + seconds:
            break
    per_second = [b - a for a, b in zip([0] + marks, marks)]
    wall = now - (start_t or t0)
    return {
        "rate": (n - (start_n or 0)) / wall,
        "per_second": per_second,
        "cores": (_cpu() - (start_cpu or 0.0)) / wall,
    }


def settle(per_second: list[int]) -> tuple[float, float | None]:
    """The final rate (median of the last 5 s) and the first second from which the rate
    averaged over 3 s stays within 5 % of it (or above): single seconds of a pipeline with
    large batches are noisy."""
    final = statistics.median(per_second[-5:])
    means = [statistics.mean(per_second[i : i + 3]) for i in range(max(1, len(per_second) - 2))]
    for i in range(len(means)):
        if all(m >= 0.95 * final for m in means[i:]):
            return final, float(i + 1)
    return final, None


# ------------------------------------------------------------------------------------ pipelines
def io_bound(lib: Any, tf: Any) -> Any:
    """A source whose every read waits 20 ms (remote storage), then a native cast."""

    def read(i: Any) -> Any:
        time.sleep(0.02)
        return np.full(256, int(i) % 251, np.uint8)

    if lib.__name__.startswith("tensorflow"):
        fn = lambda i: tf.ensure_shape(tf.py_function(read, [i], tf.uint8), [256])  # noqa: E731
    else:
        fn = read
    ds = lib.Dataset.range(10**9).map(fn, num_parallel_calls=lib.AUTOTUNE)
    return ds.map(lambda x: tf.cast(x, tf.float32), num_parallel_calls=lib.AUTOTUNE).batch(16)


def python_between(lib: Any, tf: Any) -> Any:
    """Native ops, a Python function that computes (holds the GIL), native ops."""

    def tokenize(x: Any) -> Any:
        v = int(np.asarray(x).sum())
        return np.array([(v * 31 + k) % 1000 for k in range(200)], np.int64)

    if lib.__name__.startswith("tensorflow"):
        fn = lambda x: tf.ensure_shape(tf.py_function(tokenize, [x], tf.int64), [200])  # noqa: E731
    else:
        fn = tokenize
    ds = lib.Dataset.range(10**9).batch(64)
    ds = ds.map(lambda v: v * 3 + 1, num_parallel_calls=lib.AUTOTUNE)
    ds = ds.map(fn, num_parallel_calls=lib.AUTOTUNE)
    return ds.map(lambda t: tf.cast(t, tf.float32) / 1000.0, num_parallel_calls=lib.AUTOTUNE).batch(32)


def consumer_bound(lib: Any, tf: Any) -> Any:
    """A cheap native map over vectors of 1,024; the consumer sleeps 10 ms per batch of 16 (a
    training step)."""
    ds = lib.Dataset.range(10**9).batch(1024)
    ds = ds.map(lambda v: tf.cast(v, tf.float32) * 0.5, num_parallel_calls=lib.AUTOTUNE)
    return ds.batch(16).prefetch(lib.AUTOTUNE)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/tmp/stoker-bench-data")
    ap.add_argument("--out", default="bench/results/autotune.json")
    ap.add_argument("--tune-seconds", type=float, default=20.0)
    ap.add_argument("--grid-seconds", type=float, default=2.0)
    ap.add_argument("--only", default=None, help="comma-separated case names")
    ap.add_argument("--section", action="store_true", help="print the BENCHMARKS.md section")
    args = ap.parse_args()
    if args.section:
        print(section(json.load(open(args.out))))
        return 0

    import stoker as sk
    import tensorflow as tf
    import tf_functions as tff

    w1_dir = os.path.join(args.data, "w1-ab")
    w1_files = sorted(os.path.join(w1_dir, f) for f in os.listdir(w1_dir) if f.endswith(".tfrecord"))
    paths, labels = tff.w3_files(os.path.join(args.data, "w3-1200"), 600)
    w2_dir = os.path.join(args.data, "w2-240", "images")
    w2_images = sorted(os.path.join(w2_dir, f) for f in os.listdir(w2_dir))[:60]

    cases: list[tuple[str, Callable[[Any], Any], int, float]] = [
        ("W1 (tf.data's fast form)", lambda lib: tff.w1(lib, tf, w1_files), 512, 0.0),
        (
            "W3 (decode_jpeg, random_crop, flip, normalise)",
            lambda lib: tff.w3(lib, tf, (paths, labels)),
            256,
            0.0,
        ),
        ("W2 photos (large elements)", lambda lib: tff.w2_image_only(lib, tf, (w2_images, [], [])), 3, 0.0),
        ("I/O-bound: 20 ms per read", lambda lib: io_bound(lib, tf), 16, 0.0),
        ("Python function between native ops", lambda lib: python_between(lib, tf), 32, 0.0),
        ("consumer-bound: 10 ms step per batch", lambda lib: consumer_bound(lib, tf), 16, 0.01),
    ]
    only = set(args.only.split(",")) if args.only else None
    results: dict[str, Any] = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, TensorFlow {tf.__version__}",
        "command": " ".join(["python", "bench/autotune.py"] + sys.argv[1:]),
        "cases": {},
    }
    for name, make, per, sleep_s in cases:
        if only and not any(o in name for o in only):
            continue
        print(name, flush=True)
        grid = {}
        for n in GRID:
            run = stream(
                lambda m=make, n=n: m(sk).with_options(autotune=False, threads=n).repeat(),  # type: ignore[misc]
                per,
                args.grid_seconds,
                1.0,
                sleep_s,
            )
            grid[n] = run
            print(f"  grid threads={n}: {run['rate']:.0f}/s, {run['cores']:.2f} cores", flush=True)
        tuned = stream(lambda m=make: m(sk).repeat(), per, args.tune_seconds, 0.0, sleep_s)  # type: ignore[misc]
        final, within = settle(tuned["per_second"])
        print(f"  stoker AUTOTUNE: {final:.0f}/s within 5 % after {within} s; {tuned['per_second']}", flush=True)
        tfd = stream(lambda m=make: m(tf.data).repeat(), per, 3.0, 2.0, sleep_s)  # type: ignore[misc]
        print(f"  tf.data AUTOTUNE: {tfd['rate']:.0f}/s, {tfd['cores']:.2f} cores", flush=True)
        results["cases"][name] = {
            "grid": {str(k): v for k, v in grid.items()},
            "autotune": {**tuned, "final": final, "within_5pct_s": within},
            "tf_data": tfd,
        }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    print(section(results))
    return 0


def section(results: dict) -> str:
    lines = [
        f"Command: `{results['command']}`; machine: {results['machine']}. One process, the same two "
        "cores for every row; elements per second.",
        "",
        "| pipeline | grid's best (threads) | stoker AUTOTUNE | of grid's best | within 5 % after | "
        "tf.data AUTOTUNE | stoker / tf.data | cores used (AUTOTUNE, grid's best) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, c in results["cases"].items():
        best_n, best = max(c["grid"].items(), key=lambda kv: kv[1]["rate"])
        a, t = c["autotune"], c["tf_data"]
        _, settled = settle(a["per_second"])
        within = "–" if settled is None else f"{settled:.0f} s"
        lines.append(
            f"| {name} | {best['rate']:,.0f} ({best_n}) | {a['final']:,.0f} | {100 * a['final'] / best['rate']:.0f} % "
            f"| {within} | {t['rate']:,.0f} | {a['final'] / t['rate']:.2f}× | {a['cores']:.2f}, {best['cores']:.2f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
