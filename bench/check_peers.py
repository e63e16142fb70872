#!/usr/bin/env python3
"""Checks the benchmark's peer implementations against the golden fixtures (tests/golden/),
so the numbers in BENCHMARKS.md come from pipelines that compute the right thing.

    /opt/venvs/bench/bin/python bench/check_peers.py [--stoker]

W1: tf.data fast form, tf.data slow form and the torch reader, run unshuffled with batch 16
over tests/golden/w1_chess_plain.tfrecord, must equal w1_expected.npz (score: TF forms bit for
bit; torch uses np.tanh, which may differ from TF's tanh by a couple of ULPs).
W4: tf.data and both torch loaders over w4_input.npz, epoch 2, must equal w4_expected.npz.
W2: tf.data (packed-code and per-colour one-hot) and the torch/OpenCV loader (0 and 1 worker)
over tests/golden/w2/ (crop to 48x64, batch 3) must equal w2_expected.npz bit for bit.
``--stoker`` also checks the stoker pipelines on the same data (their shuffle is on, so W1 is
compared as a multiset of examples).
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(1, ROOT)

import numpy as np  # noqa: E402
import w1_peers  # noqa: E402
import w2_peers  # noqa: E402
import w4_peers  # noqa: E402

GOLDEN = os.path.join(ROOT, "tests", "golden")


def collect(batches) -> dict:
    cols = list(zip(*batches))
    return {k: np.concatenate(v) for k, v in zip(("board", "flags", "score"), cols)}


def check_w1(name: str, got: dict, exp: dict, exact_score: bool) -> bool:
    ok = True
    for k in ("board", "flags", "score"):
        g, e = got[k], exp[k]
        if g.shape != e.shape or g.dtype != e.dtype:
            print(f"  FAIL {name} {k}: {g.shape} {g.dtype} != {e.shape} {e.dtype}")
            ok = False
            continue
        if k == "score" and not exact_score:
            good = np.allclose(g, e, rtol=1e-6, atol=1e-7)
        else:
            good = np.array_equal(g, e)
        if k == "board" and np.signbit(g[g == 0]).any():
            good = False
            print(f"  FAIL {name}: -0.0 in board")
        if not good:
            print(f"  FAIL {name} {k}: values differ (max abs diff {np.abs(g - e).max()})")
            ok = False
    print(f"  {'ok  ' if ok else 'FAIL'} W1 {name}")
    return ok


def rows(d: dict, keys: tuple = ("board", "flags", "score")) -> np.ndarray:
    """Examples as sorted byte rows (for order-free comparison)."""
    n = len(d[keys[0]])
    parts = [d[k].reshape(n, -1) for k in keys]
    r = np.concatenate([p.astype(np.float32) for p in parts], axis=1)
    return np.sort(r.view(np.dtype((np.void, r.shape[1] * 4))).ravel())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--stoker", action="store_true", help="also check the stoker pipelines")
    args = ap.parse_args()
    ok = True
    files = [os.path.join(GOLDEN, "w1_chess_plain.tfrecord")]
    exp = dict(np.load(os.path.join(GOLDEN, "w1_expected.npz")))
    for name, build, exact in (("tf.data fast", w1_peers.build_tf_fast, True),
                               ("tf.data slow", w1_peers.build_tf_slow, True),
                               ("torch (0 workers)", lambda f, t, **kw: w1_peers.build_torch(f, t, num_workers=0, **kw),
                                False),
                               ("torch (1 worker)", lambda f, t, **kw: w1_peers.build_torch(f, t, num_workers=1, **kw),
                                False)):
        c = build(files, 1, batch=16, shuffle=0)
        ok &= check_w1(name, collect(list(c.epoch())), exp, exact)
        # With shuffling on: same multiset of examples as the unshuffled run (70 examples, batch
        # 16 drops 6, so compare only when nothing is dropped: batch 10 → 7 full batches).
        a = collect(list(build(files, 1, batch=10, shuffle=0).epoch()))
        b = collect(list(build(files, 1, batch=10, shuffle=32).epoch()))
        same = np.array_equal(rows(a), rows(b)) and not np.array_equal(a["score"], b["score"])
        print(f"  {'ok  ' if same else 'FAIL'} W1 {name}: shuffled = permutation of unshuffled")
        ok &= same

    w4in = np.load(os.path.join(GOLDEN, "w4_input.npz"))
    w4exp = np.load(os.path.join(GOLDEN, "w4_expected.npz"))
    w4 = [("tf.data", w4_peers.build_tf),
          ("torch (0 workers)", lambda x, y, t: w4_peers.build_torch(x, y, t, num_workers=0)),
          ("torch (2 workers)", lambda x, y, t: w4_peers.build_torch(x, y, t, num_workers=2))]
    if args.stoker:
        w4.append(("stoker", w4_peers.build_stoker))
    for name, build in w4:
        c = build(w4in["x"], w4in["y"], 1)
        list(c.epoch())  # epoch 1 fills the cache
        batches = list(c.epoch())
        gx = np.concatenate([b[0] for b in batches])
        gy = np.concatenate([b[1] for b in batches])
        sizes = [len(b[0]) for b in batches]
        good = (gx.dtype == np.float32 and np.array_equal(gx, w4exp["x"]) and gy.dtype == np.int64
                and np.array_equal(gy, w4exp["y"]) and sizes == list(w4exp["batch_sizes"]))
        print(f"  {'ok  ' if good else 'FAIL'} W4 {name}")
        ok &= good

    w2dir = os.path.join(GOLDEN, "w2")
    w2img = [os.path.join(w2dir, f"image{i}.png") for i in range(3)]
    w2lab = [os.path.join(w2dir, f"label{i}.png") for i in range(3)]
    w2cd = os.path.join(w2dir, "class_dict.csv")
    w2colors = w2_peers.read_colors(w2cd)
    w2exp = np.load(os.path.join(GOLDEN, "w2_expected.npz"))
    w2 = [("tf.data (packed one-hot)", lambda: w2_peers.build_tf(w2img, w2lab, w2colors, 1, size=(48, 64))),
          ("tf.data (per-colour one-hot)",
           lambda: w2_peers.build_tf(w2img, w2lab, w2colors, 1, size=(48, 64), onehot="per-colour")),
          ("torch (0 workers)", lambda: w2_peers.build_torch(w2img, w2lab, w2colors, 1, size=(48, 64), num_workers=0)),
          ("torch (1 worker)", lambda: w2_peers.build_torch(w2img, w2lab, w2colors, 1, size=(48, 64), num_workers=1))]
    if args.stoker:
        def stoker_w2() -> w2_peers.Contender:
            from stoker import workloads

            ds = workloads.segmentation_pipeline(w2img, w2lab, w2colors, size=(48, 64), threads=1)
            return w2_peers.Contender(lambda: ((b["image"], b["label"]) for b in ds.as_numpy_iterator()), {}, "")
        w2.append(("stoker", stoker_w2))
    for name, build in w2:
        batches = list(build().epoch())
        good = len(batches) == 1 and all(
            g.dtype == e.dtype and g.shape == e.shape and np.array_equal(g, e)
            for g, e in zip(batches[0], (w2exp["image"], w2exp["label"])))
        print(f"  {'ok  ' if good else 'FAIL'} W2 {name}")
        ok &= good

    if args.stoker:
        # 1024 examples = 2 full batches of 512, fewer than the shuffle buffer: stoker's epoch
        # must be a permutation of all of them; compare with tf.data (unshuffled) as multisets.
        import tempfile

        import stoker.datasets

        from examples.w1_chess import build_pipeline
        with tempfile.TemporaryDirectory() as tmp:
            files = stoker.datasets.write_chess_tfrecords(tmp, num_files=2, num_examples=1024, seed=1)
            ds = build_pipeline(files, seed=0, threads=1)
            got = collect([w1_peers._stoker_fields(b) for b in ds.as_numpy_iterator()])
            ref = collect(list(w1_peers.build_tf_fast(files, 1, shuffle=0).epoch()))
        good = all(got[k].shape == ref[k].shape and got[k].dtype == ref[k].dtype for k in ref)
        good = good and np.array_equal(rows(got, ("board", "flags")), rows(ref, ("board", "flags")))
        close = good and np.allclose(np.sort(got["score"]), np.sort(ref["score"]), rtol=1e-6, atol=1e-7)
        print(f"  {'ok  ' if close else 'FAIL'} W1 stoker (1024 examples vs tf.data, as multisets)")
        ok &= close
    print("all ok" if ok else "FAILURES")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
