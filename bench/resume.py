"""Resume after preemption: state size and time to the first batch after a restore, stoker
against tf.data's own checkpoint (``tf.train.Checkpoint(iterator=...)``), on W1 and W3; and W1
throughput with ``global_shuffle`` over indexed files against the 10,000-record buffer shuffle.

    .venv-bench/bin/python bench/resume.py --out bench/results/resume.json

Every time is measured in a fresh process (the library imported first, not timed): the time
from building the pipeline to holding its first batch, fresh or restored from a state saved
in the middle of the first epoch by another process. Each restored first batch is checked
against the batch the saving process got next. Same cores for everyone (``--threads``).
Before each timed run the workload's files are read once, so that every run finds them in
the page cache: a restore reads records from the middle of the files, which the host may
have dropped from its cache, and a fresh start the files' beginnings.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def digest(batch: dict[str, Any]) -> str:
    import numpy as np

    h = hashlib.sha1()
    for k in sorted(batch):
        h.update(np.ascontiguousarray(np.asarray(batch[k])).tobytes())
    return h.hexdigest()


def w1_files(data: str) -> list[str]:
    return sorted(glob.glob(os.path.join(data, "w1-full", "*.tfrecord")))


def make(lib: str, workload: str, data: str, threads: int, variant: str = "") -> Any:
    """The pipeline; for tf.data its iterator comes with `iter()` of the dataset."""
    if lib == "stoker":
        from stoker import workloads

        if workload == "w1":
            if variant == "global_shuffle":
                import stoker as sk

                ds = sk.TFRecordDataset(w1_files(data)).with_options(threads=threads).global_shuffle(seed=0)
                ds = ds.batch(512, drop_remainder=True).map(workloads.chess_ops(), num_parallel_calls=sk.AUTOTUNE)
                return ds.map(workloads.chess_score).prefetch(sk.AUTOTUNE)
            return workloads.chess_pipeline(w1_files(data), seed=0, threads=threads)
        return workloads.imagenet_pipeline(os.path.join(data, "w3-3000"), seed=0, threads=threads)
    if workload == "w1":
        from bench.w1_peers import build_tf_fast

        return build_tf_fast(w1_files(data), threads)
    from bench.w3_peers import build_tf

    return build_tf(os.path.join(data, "w3-3000"), threads)


def tf_dataset(contender: Any, variant: str = "") -> Any:
    """The tf.data dataset inside a peer's contender (its epoch generator's closure). With
    variant `ignore_external_state`, checkpoints leave out the state of stateful ops (W3's
    `sample_distorted_bounding_box`), which tf.data otherwise refuses to checkpoint."""
    import tensorflow as tf

    for cell in contender.epoch.__closure__ or ():
        if hasattr(cell.cell_contents, "element_spec"):
            ds = cell.cell_contents
            if variant == "ignore_external_state":
                opts = tf.data.Options()
                opts.experimental_external_state_policy = tf.data.experimental.ExternalStatePolicy.IGNORE
                ds = ds.with_options(opts)
            return ds
    raise RuntimeError("no tf.data dataset in the contender")


def child(args: argparse.Namespace) -> None:
    """One measurement in this fresh process; prints a JSON line."""
    if args.lib == "tf":
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf
    else:
        import stoker  # noqa: F401
    out: dict[str, Any] = {}
    if args.mode == "versions":
        import numpy
        import stoker

        print(json.dumps({"tensorflow": tf.__version__, "stoker": stoker.__version__, "numpy": numpy.__version__}))
        return
    t0 = time.perf_counter()
    pipeline = make(args.lib, args.workload, args.data, args.threads, args.variant)
    if args.mode == "fresh":
        it = pipeline.iterator() if args.lib == "stoker" else iter(tf_dataset(pipeline, args.variant))
        next(it)
        out["seconds"] = time.perf_counter() - t0
    elif args.mode == "save":
        ds = None if args.lib == "stoker" else tf_dataset(pipeline, args.variant)
        it = pipeline.iterator() if args.lib == "stoker" else iter(ds)
        for _ in range(args.at):
            next(it)
        if args.lib == "stoker":
            state = it.state()
            Path(args.path).write_bytes(state)
            out["bytes"] = len(state)
        else:
            t = time.perf_counter()
            try:
                prefix = tf.train.Checkpoint(iterator=it).write(args.path)
            except tf.errors.OpError as e:
                print(json.dumps({"error": f"{type(e).__name__}: {e.message.strip()}"}))
                return
            out["save_seconds"] = time.perf_counter() - t
            out["bytes"] = sum(os.path.getsize(p) for p in glob.glob(prefix + "*"))
            out["prefix"] = prefix
        nxt = next(it)
        out["next"] = digest(nxt if args.lib == "stoker" else {k: v.numpy() for k, v in nxt.items()})
    elif args.mode == "restore":
        if args.lib == "stoker":
            it = pipeline.iterator(state=Path(args.path).read_bytes())
            first = next(it)
        else:
            ds = tf_dataset(pipeline, args.variant)
            it = iter(ds)
            tf.train.Checkpoint(iterator=it).read(args.path).expect_partial()
            first = next(it)
        out["seconds"] = time.perf_counter() - t0
        out["first"] = digest(first if args.lib == "stoker" else {k: v.numpy() for k, v in first.items()})
    elif args.mode == "epoch":
        it = pipeline.iterator()
        n = 0
        next(it)  # the start, not timed
        t = time.perf_counter()
        for b in it:
            n += len(b["score"])
        out["examples_per_s"] = n / (time.perf_counter() - t)
    print(json.dumps(out))


def warm(workload: str, data: str) -> None:
    """Reads every file of `workload` once (into the page cache)."""
    root = os.path.join(data, "w1-full" if workload == "w1" else "w3-3000")
    for path in glob.glob(os.path.join(root, "**", "*"), recursive=True):
        if os.path.isfile(path):
            with open(path, "rb") as f:
                while f.read(1 << 20):
                    pass


def run_child(**kw: Any) -> dict[str, Any]:
    if kw.get("mode") in ("fresh", "restore"):
        warm(kw["workload"], kw["data"])
    cmd = [sys.executable, __file__, "--child"]
    for k, v in kw.items():
        cmd += [f"--{k.replace('_', '-')}", str(v)]
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if r.returncode:
        raise RuntimeError(f"{cmd}: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--child", action="store_true")
    p.add_argument("--lib", default="stoker")
    p.add_argument("--workload", default="w1")
    p.add_argument("--variant", default="")
    p.add_argument("--mode", default="fresh")
    p.add_argument("--at", type=int, default=0)
    p.add_argument("--path", default="")
    p.add_argument("--data", default="/tmp/stoker-bench-data")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--out", default="bench/results/resume.json")
    args = p.parse_args()
    if args.child:
        child(args)
        return
    # Mid-epoch: W1 has 781 batches of 512 per epoch, W3 12 of 256.
    middle = {"w1": 390, "w3": 6}
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO)
    versions = run_child(mode="versions", lib="tf", workload="w1", data=args.data, threads=args.threads)
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "command": "bench/resume.py " + " ".join(sys.argv[1:]),
        "git": git.stdout.strip(),
        "cpu": next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if "model name" in line), "?"),
        "versions": versions,
        "threads": args.threads,
        "runs": args.runs,
        "rows": [],
    }
    # The saved states (TensorFlow checkpoints among them) run to gigabytes: gone at the end.
    with tempfile.TemporaryDirectory(prefix="stoker-resume-") as tmp:
        for workload in ("w1", "w3"):
            for lib in ("stoker", "tf"):
                row: dict[str, Any] = {"workload": workload, "lib": lib, "at_batch": middle[workload]}
                common = {"lib": lib, "workload": workload, "data": args.data, "threads": args.threads}
                if lib == "tf" and workload == "w3":
                    # tf.data refuses to checkpoint W3 as it is; say why, then measure it with the
                    # stateful op's state left out of the checkpoint.
                    path = os.path.join(tmp, "w3-tf-default")
                    refused = run_child(mode="save", at=middle[workload], path=path, **common)
                    row["default_policy"] = refused.get("error", "saved")
                    print(workload, lib, "default policy:", row["default_policy"][:200], flush=True)
                    common["variant"] = "ignore_external_state"
                    row["variant"] = "experimental_external_state_policy=IGNORE"
                fresh, restored, sizes, exact = [], [], [], []
                for r in range(args.runs):
                    fresh.append(run_child(mode="fresh", **common)["seconds"])
                    path = os.path.join(tmp, f"{workload}-{lib}-{r}")
                    saved = run_child(mode="save", at=middle[workload], path=path, **common)
                    sizes.append(saved["bytes"])
                    back = run_child(mode="restore", path=saved.get("prefix", path), **common)
                    restored.append(back["seconds"])
                    exact.append(back["first"] == saved["next"])
                    print(workload, lib, r, f"fresh {fresh[-1]:.3f}s restore {restored[-1]:.3f}s "
                          f"state {sizes[-1]} B exact {exact[-1]}", flush=True)
                row.update(
                    fresh_s=statistics.median(fresh),
                    restore_s=statistics.median(restored),
                    ratio=statistics.median(restored) / statistics.median(fresh),
                    state_bytes=statistics.median(sizes),
                    exact=all(exact),
                    fresh_all=fresh,
                    restore_all=restored,
                )
                results["rows"].append(row)
    throughput = []
    for variant in ("", "global_shuffle", "", "global_shuffle", "", "global_shuffle")[: 2 * args.runs]:
        r = run_child(mode="epoch", lib="stoker", workload="w1", data=args.data, threads=args.threads,
                      variant=variant or "buffer")
        throughput.append({"variant": variant or "shuffle(10000)", "examples_per_s": r["examples_per_s"]})
        print("w1 epoch", variant or "shuffle(10000)", round(r["examples_per_s"]), flush=True)
    results["w1_throughput"] = throughput
    Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
