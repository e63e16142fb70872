#!/usr/bin/env python3
"""One benchmark measurement: one (workload, contender, cores), in its own process.

Started by run.py under ``taskset`` with the thread variables already in the environment;
writes a JSON result to ``--out`` (also on failure: ``{"ok": false, "error": ...}``).

Protocol: build the pipeline, one warm-up pass (W1: one run's worth of batches; W4: epoch 1,
which fills the cache), then ``--runs`` timed passes. Each pass makes a fresh iterator
(= a new epoch) and consumes every batch as NumPy arrays; for each batch every output array
is touched (first and last element read), the same for every contender.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(1, ROOT)  # for examples.w1_chess / examples.w4_mnist

import numpy as np  # noqa: E402

# The contender under test, kept here so main() can drop it (and so shut down and reap any
# worker processes, whose peak RSS then counts in this process's rusage) before exiting.
_LIVE: list[Any] = []


def set_library_threads(contender: str, cores: int) -> None:
    if contender.startswith("tf."):
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(cores)
        tf.config.threading.set_inter_op_parallelism_threads(cores)
    elif contender.startswith("torch"):
        import torch

        torch.set_num_threads(cores)
        torch.set_num_interop_threads(cores)


def sample_tree(res: dict) -> None:
    """Peak (over calls) of this process tree's summed PSS / RSS, into res (not timed)."""
    try:
        from bench_mem import tree_mem_kib

        pss, rss, _ = tree_mem_kib(os.getpid())
        res["child_tree_pss_kib"] = max(res.get("child_tree_pss_kib", 0), pss)
        res["child_tree_rss_kib"] = max(res.get("child_tree_rss_kib", 0), rss)
    except Exception as e:  # noqa: BLE001 - best effort (no /proc)
        res["child_tree_error"] = repr(e)


TOUCH_ALL = False  # --touch all: sum every array (a full read) instead of reading its ends


def timed_pass(epoch: Callable[[], Iterator[Sequence[np.ndarray]]], max_batches: int,
               check: Callable[[Sequence[np.ndarray]], None] | None = None) -> dict:
    sink = 0.0
    n = nb = 0
    t0 = time.perf_counter()
    it = epoch()
    for batch in it:
        if check is not None and nb == 0:
            check(batch)
        if TOUCH_ALL:
            for a in batch:
                sink += float(a.sum())
        else:
            for a in batch:
                sink += float(a.flat[0]) + float(a.flat[-1])
        n += len(batch[0])
        nb += 1
        if max_batches and nb >= max_batches:
            break
    dt = time.perf_counter() - t0
    close = getattr(it, "close", None)
    if close is not None:
        close()
    return {"seconds": dt, "examples": n, "batches": nb, "ex_per_s": n / dt if dt > 0 else 0.0, "sink": sink}


# ---- output checks (first batch of the warm-up pass; not timed) ----------------------------

def check_w1(batch: Sequence[np.ndarray]) -> None:
    board, flags, score = batch
    want = [((512, 8, 8, 24), np.float32), ((512, 10), np.float32), ((512,), np.float32)]
    for name, a, (shape, dt) in zip(("board", "flags", "score"), batch, want):
        if not isinstance(a, np.ndarray) or a.shape != shape or a.dtype != dt:
            raise AssertionError(f"W1 {name}: got {type(a).__name__} {getattr(a, 'shape', '?')} "
                                 f"{getattr(a, 'dtype', '?')}, want {shape} {np.dtype(dt)}")
    neg = np.zeros(24, bool)
    neg[6:12] = neg[18:24] = True
    if not (np.isin(board, (-1.0, 0.0, 1.0)).all() and (board[..., neg] <= 0).all() and (board[..., ~neg] >= 0).all()):
        raise AssertionError("W1 board: values not in {0,1} (channels 0-5, 12-17) / {-1,0} (6-11, 18-23)")
    if not np.isin(flags, (0.0, 1.0)).all():
        raise AssertionError("W1 flags: values not in {0, 1}")
    if not (np.isfinite(score).all() and (np.abs(score) <= 1.0).all() and np.abs(score).max() > 0.1):
        raise AssertionError("W1 score: values not finite in [-1, 1] (or all ~0)")


def make_check_w4(x: np.ndarray, y: np.ndarray) -> Callable[[Sequence[np.ndarray]], None]:
    def check(batch: Sequence[np.ndarray]) -> None:
        bx, by = batch
        n = min(128, len(x))
        if not isinstance(bx, np.ndarray) or bx.shape != (n, 28, 28) or bx.dtype != np.float32:
            raise AssertionError(f"W4 x: got {getattr(bx, 'shape', '?')} {getattr(bx, 'dtype', '?')}, "
                                 f"want ({n}, 28, 28) float32")
        if not np.array_equal(bx, x[:n].astype(np.float32) / np.float32(255.0)):
            raise AssertionError("W4 x: first batch != x[:128] / 255 (float32)")
        if not isinstance(by, np.ndarray) or by.dtype != np.int64 or not np.array_equal(by, y[:n]):
            raise AssertionError("W4 y: first batch != y[:128] (int64)")
    return check


# ---- workloads ------------------------------------------------------------------------------

def run_w1(args: argparse.Namespace, res: dict) -> None:
    import w1_peers

    with open(os.path.join(args.data_dir, "meta.json")) as f:
        meta = json.load(f)
    files = [os.path.join(args.data_dir, n) for n in meta["files"]]
    t = time.perf_counter()
    c = w1_peers.CONTENDERS[args.contender](files, args.cores)
    _LIVE.append(c)
    res["build_s"] = time.perf_counter() - t
    res["versions"].update(c.versions)
    res["notes"] = c.notes
    res["warmup"] = timed_pass(c.epoch, args.batches, check_w1)
    sample_tree(res)
    res["runs"] = [timed_pass(c.epoch, args.batches) for _ in range(args.runs)]
    sample_tree(res)


def run_w4(args: argparse.Namespace, res: dict) -> None:
    import w4_peers

    x = np.load(os.path.join(args.data_dir, "x.npy"))
    y = np.load(os.path.join(args.data_dir, "y.npy"))
    t = time.perf_counter()
    c = w4_peers.CONTENDERS[args.contender](x, y, args.cores)
    _LIVE.append(c)
    res["build_s"] = time.perf_counter() - t
    res["versions"].update(c.versions)
    res["notes"] = c.notes
    check = make_check_w4(x, y)
    res["warmup"] = timed_pass(c.epoch, 0, check)  # epoch 1: fills the cache
    sample_tree(res)
    runs: list[dict] = []
    # At least --runs epochs, and more (up to 500) until --min-seconds of timed epochs.
    while len(runs) < args.runs or (sum(r["seconds"] for r in runs) < args.min_seconds and len(runs) < 500):
        r = timed_pass(c.epoch, 0)
        if r["examples"] != len(x):
            raise AssertionError(f"W4 epoch gave {r['examples']} examples, want {len(x)}")
        runs.append(r)
    sample_tree(res)
    res["runs"] = runs
    # One more (untimed) cached epoch, checked in full against x / 255 and y, batch by batch
    # (no big temporaries, so the check doesn't inflate the peak RSS).
    start = 0
    for bx, by in c.epoch():
        end = min(start + 128, len(x))
        if len(bx) != end - start:
            raise AssertionError(f"W4: batch at {start} has {len(bx)} examples, want {end - start}")
        if not (np.array_equal(bx, x[start:end].astype(np.float32) / np.float32(255.0))
                and np.array_equal(by, y[start:end])):
            raise AssertionError(f"W4: cached batch at {start} differs from (x / 255, y)")
        start = end
    if start != len(x):
        raise AssertionError(f"W4: cached epoch has {start} examples, want {len(x)}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", required=True, choices=["w1", "w4"])
    ap.add_argument("--contender", required=True)
    ap.add_argument("--cores", type=int, required=True)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--batches", type=int, default=0, help="W1: batches per pass (0 = whole epoch)")
    ap.add_argument("--min-seconds", type=float, default=0.0,
                    help="W4: keep timing epochs until this many seconds are timed (at most 500 epochs)")
    ap.add_argument("--touch", choices=["ends", "all"], default="ends")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    global TOUCH_ALL
    TOUCH_ALL = args.touch == "all"
    res: dict = {"workload": args.workload, "contender": args.contender, "cores": args.cores, "ok": False,
                 "affinity": sorted(os.sched_getaffinity(0)), "pid": os.getpid(),
                 "versions": {"python": platform.python_version(), "numpy": np.__version__}}
    t0 = time.perf_counter()
    try:
        set_library_threads(args.contender, args.cores)
        (run_w1 if args.workload == "w1" else run_w4)(args, res)
        rates = [r["ex_per_s"] for r in res["runs"]]
        res["median_ex_per_s"] = float(np.median(rates))
        res["ok"] = True
    except BaseException as e:  # noqa: BLE001 - every failure is reported, none crashes the run
        res["error"] = f"{type(e).__name__}: {e}".strip()[:2000]
        res["traceback"] = traceback.format_exc()[-6000:]
    res["child_wall_s"] = time.perf_counter() - t0
    try:
        _LIVE.clear()
        gc.collect()
        self_ru = resource.getrusage(resource.RUSAGE_SELF)
        kids_ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        res["self_maxrss_mib"] = self_ru.ru_maxrss / 1024
        res["reaped_children_maxrss_mib"] = kids_ru.ru_maxrss / 1024
    except BaseException as e:  # noqa: BLE001
        res["shutdown_error"] = repr(e)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(res, f, indent=1)
    os.replace(tmp, args.out)
    # Skip interpreter teardown (TF/torch worker threads can hang or crash at exit); the
    # result is already on disk.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if res["ok"] else 3)


if __name__ == "__main__":
    main()
