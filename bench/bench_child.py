#!/usr/bin/env python3
"""One benchmark measurement: one (workload, contender, cores), in its own process.

Started by run.py under ``taskset`` with the thread variables already in the environment;
writes a JSON result to ``--out`` (also on failure: ``{"ok": false, "error": ...}``).

Protocol: build the pipeline, one warm-up pass (W1: one run's worth of batches; W2/W3: one
epoch; W4: epoch 1, which fills the cache), then ``--runs`` timed passes. Each pass makes a
fresh iterator (= a new epoch) and consumes every batch as NumPy arrays; for each batch every
output array is touched (first and last element read), the same for every contender.

W2/W3 "decode-only: <decoder>" contenders measure the decode-only limit instead: every file
read into memory first, then decoded one at a time on one thread (see decode_limit.py); a pass
decodes every file once (W2: a pair = photo + label map counts as one example).
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
sys.path.insert(1, ROOT)  # for examples.w1_chess, ...

import numpy as np  # noqa: E402

# The contender under test, kept here so main() can drop it (and so shut down and reap any
# worker processes, whose peak RSS then counts in this process's rusage) before exiting.
_LIVE: list[Any] = []


def set_library_threads(contender: str, cores: int) -> None:
    if contender.startswith("tf.") or contender == "decode-only: tf.io":
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
               check: Callable[[Sequence[np.ndarray]], None] | None = None,
               each: Callable[[Sequence[np.ndarray]], None] | None = None) -> dict:
    """One pass; ``check`` runs on the first batch, ``each`` (cheap: shapes, dtypes, label
    counts) on every batch."""
    sink = 0.0
    n = nb = 0
    t0 = time.perf_counter()
    it = epoch()
    for batch in it:
        if check is not None and nb == 0:
            check(batch)
        if each is not None:
            each(batch)
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


class BatchShapes:
    """``each`` check for W2/W3: every batch's shapes/dtypes, every batch but the last full,
    and (W3) the labels seen, for a per-pass count check."""

    def __init__(self, batch: int, image: Sequence[tuple[int, ...]], label: tuple[int, ...], label_dtype: Any,
                 num_classes: int = 0) -> None:
        self.batch, self.image, self.label, self.label_dtype = batch, list(image), label, np.dtype(label_dtype)
        self.num_classes = num_classes
        self.reset()

    def reset(self) -> BatchShapes:
        self.short = False
        self.counts = np.zeros(self.num_classes, np.int64)
        return self

    def __call__(self, b: Sequence[np.ndarray]) -> None:
        img, lab = b[0], b[1]
        n = len(img)
        if self.short or not 0 < n <= self.batch:
            raise AssertionError(f"batch of {n} after a short batch or not in 1..{self.batch}")
        self.short = n < self.batch
        if not isinstance(img, np.ndarray) or img.dtype != np.float32 or img.shape[1:] not in self.image:
            raise AssertionError(f"image: got {type(img).__name__} {getattr(img, 'shape', '?')} "
                                 f"{getattr(img, 'dtype', '?')}, want (B,) + one of {self.image} float32")
        if not isinstance(lab, np.ndarray) or lab.dtype != self.label_dtype or lab.shape != (n,) + self.label:
            raise AssertionError(f"label: got {type(lab).__name__} {getattr(lab, 'shape', '?')} "
                                 f"{getattr(lab, 'dtype', '?')}, want {(n,) + self.label} {self.label_dtype}")
        if self.num_classes:
            self.counts += np.bincount(lab, minlength=self.num_classes)[:self.num_classes]


def make_check_w2(images: Sequence[str], labels: Sequence[str], colors: Sequence[Sequence[int]]
                  ) -> Callable[[Sequence[np.ndarray]], None]:
    """First batch (pairs 0..B-1; W2 doesn't shuffle) vs PIL + NumPy: image within 1e-6 (in
    practice bit-equal: float32(x) / 255), label one-hot with exactly the reference classes."""
    import w2_peers

    codes = w2_peers.color_codes(colors)

    def check(batch: Sequence[np.ndarray]) -> None:
        bimg, blab = batch[0], batch[1]
        for i in range(len(bimg)):
            rimg, rlab = w2_peers.reference_pair(images[i], labels[i], codes)
            diff = float(np.abs(bimg[i] - rimg).max())
            if diff > 1e-6:
                raise AssertionError(f"W2 image {i}: max abs diff {diff:g} vs PIL decode / 255, centre crop")
            if not (np.isin(blab[i], (0.0, 1.0)).all() and (blab[i].sum(-1) == 1).all()):
                raise AssertionError(f"W2 label {i}: not one-hot (values not 0/1 or a row sum != 1)")
            if not np.array_equal(blab[i].argmax(-1), rlab.argmax(-1)):
                raise AssertionError(f"W2 label {i}: classes differ from the reference one-hot")
    return check


def check_w3(batch: Sequence[np.ndarray]) -> None:
    """First batch: finite, normalised range, not constant, labels in range."""
    img, lab = batch[0], batch[1]
    if not np.isfinite(img).all():
        raise AssertionError("W3 image: non-finite values")
    lo, hi = float(img.min()), float(img.max())
    if lo < -5 or hi > 6 or float(img.std()) < 0.2:
        raise AssertionError(f"W3 image: range [{lo:.2f}, {hi:.2f}], std {float(img.std()):.3f} "
                             "not like ImageNet-normalised data")
    if len(img) > 1 and np.array_equal(img[0], img[1]):
        raise AssertionError("W3 image: first two images identical")
    if (lab < 0).any():
        raise AssertionError("W3 label: negative class")


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


def load_meta(args: argparse.Namespace) -> dict:
    with open(os.path.join(args.data_dir, "meta.json")) as f:
        return json.load(f)


def timed_runs(args: argparse.Namespace, one: Callable[[], dict]) -> list[dict]:
    """At least --runs passes, more (up to 100) until --min-seconds of them are timed."""
    runs: list[dict] = []
    while len(runs) < args.runs or (sum(r["seconds"] for r in runs) < args.min_seconds and len(runs) < 100):
        runs.append(one())
    return runs


def run_decode(args: argparse.Namespace, res: dict, paths: Sequence[str], per_example: int, fmt: str,
               shapes: Sequence[Sequence[int]]) -> None:
    """The decode-only limit: ``paths`` read into memory, then each decoded alone (one thread)."""
    import decode_limit
    from PIL import Image

    blobs = []
    for p in paths:
        with open(p, "rb") as f:
            blobs.append(f.read())
    res["input_bytes"] = sum(len(b) for b in blobs)
    t = time.perf_counter()
    d = decode_limit.build(args.contender, blobs, fmt, threads=args.cores)
    _LIVE.append(d)
    res["build_s"] = time.perf_counter() - t
    res["versions"].update(d.versions)
    res["notes"] = d.notes

    def check(i: int, a: np.ndarray) -> None:
        want = tuple(shapes[i]) + (3,)
        if not isinstance(a, np.ndarray) or a.dtype != np.uint8 or a.shape != want:
            raise AssertionError(f"file {i}: got {type(a).__name__} {getattr(a, 'shape', '?')} "
                                 f"{getattr(a, 'dtype', '?')}, want {want} uint8")
        if i < per_example:  # the first file(s) vs PIL: PNG bit-equal, JPEG close
            ref = np.asarray(Image.open(paths[i]).convert("RGB"))
            err = float(np.abs(a.astype(np.int16) - ref).mean())
            if (fmt == "png" and err != 0) or err > 3:
                raise AssertionError(f"file {i}: mean abs diff {err:.3f} vs PIL's decode")

    def one(checked: bool = False) -> dict:
        sink = 0.0
        n = 0
        t0 = time.perf_counter()
        for a in d.epoch():
            if checked:
                check(n, a)
            sink += float(a.sum()) if TOUCH_ALL else float(a.flat[0]) + float(a.flat[-1])
            n += 1
        dt = time.perf_counter() - t0
        if n != len(blobs):
            raise AssertionError(f"decoded {n} files, want {len(blobs)}")
        ex = n // per_example
        return {"seconds": dt, "examples": ex, "files": n, "batches": n, "ex_per_s": ex / dt if dt > 0 else 0.0,
                "sink": sink}

    res["warmup"] = one(checked=True)
    sample_tree(res)
    res["runs"] = timed_runs(args, one)
    sample_tree(res)


def run_pipeline(args: argparse.Namespace, res: dict, build: Callable[[], Any], n: int,
                 check: Callable[[Sequence[np.ndarray]], None], each: BatchShapes,
                 want_counts: Sequence[int] | None = None) -> None:
    """W2/W3: warm-up epoch (first batch checked), then timed epochs; every batch's shapes and
    every epoch's count (W3: and label counts) checked."""
    t = time.perf_counter()
    c = build()
    _LIVE.append(c)
    res["build_s"] = time.perf_counter() - t
    res["versions"].update(c.versions)
    res["notes"] = c.notes

    def one(first: Callable[[Sequence[np.ndarray]], None] | None = None) -> dict:
        r = timed_pass(c.epoch, 0, first, each.reset())
        if r["examples"] != n:
            raise AssertionError(f"{args.workload} epoch gave {r['examples']} examples, want {n}")
        if want_counts is not None and each.counts.tolist() != list(want_counts):
            raise AssertionError(f"{args.workload} epoch label counts {each.counts.tolist()} != {list(want_counts)}")
        return r

    res["warmup"] = one(check)
    sample_tree(res)
    res["runs"] = timed_runs(args, one)
    sample_tree(res)


def run_w2(args: argparse.Namespace, res: dict) -> None:
    import w2_peers

    meta = load_meta(args)
    images = [os.path.join(args.data_dir, p) for p in meta["images"]]
    labels = [os.path.join(args.data_dir, p) for p in meta["labels"]]
    class_dict = os.path.join(args.data_dir, meta["class_dict"])
    if args.contender.startswith("decode-only: "):
        pairs = [p for pair in zip(images, labels) for p in pair]  # photo, label, photo, label, ...
        run_decode(args, res, pairs, 2, "png", [(meta["height"], meta["width"])] * len(pairs))
        return
    colors = w2_peers.read_colors(class_dict)
    h, w = w2_peers.SIZE
    each = BatchShapes(w2_peers.BATCH, [(h, w, 3)], (h, w, len(colors)), np.float32)
    run_pipeline(args, res, lambda: w2_peers.CONTENDERS[args.contender](images, labels, class_dict, args.cores),
                 len(images), make_check_w2(images, labels, colors), each)


def run_w3(args: argparse.Namespace, res: dict) -> None:
    import w3_peers

    meta = load_meta(args)
    if args.contender.startswith("decode-only: "):
        paths = [os.path.join(args.data_dir, p) for p in meta["files"]]
        run_decode(args, res, paths, 1, "jpeg", meta["shapes"])
        return
    _, labels, classes = w3_peers.image_folder(args.data_dir)
    if len(labels) != meta["n"]:
        raise AssertionError(f"W3: {len(labels)} files in {args.data_dir}, meta says {meta['n']}")
    s = w3_peers.SIZE
    each = BatchShapes(w3_peers.BATCH, [(s, s, 3), (3, s, s)], (), np.int64, len(classes))
    run_pipeline(args, res, lambda: w3_peers.CONTENDERS[args.contender](args.data_dir, args.cores),
                 len(labels), check_w3, each, w3_peers.expected_counts(labels, len(classes)))


RUNNERS = {"w1": run_w1, "w2": run_w2, "w3": run_w3, "w4": run_w4}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", required=True, choices=sorted(RUNNERS))
    ap.add_argument("--contender", required=True)
    ap.add_argument("--cores", type=int, required=True)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--batches", type=int, default=0, help="W1: batches per pass (0 = whole epoch)")
    ap.add_argument("--min-seconds", type=float, default=0.0,
                    help="W4 (and W2/W3): keep timing passes until this many seconds are timed "
                    "(at most 500 W4 epochs, 100 W2/W3 passes)")
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
        RUNNERS[args.workload](args, res)
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
