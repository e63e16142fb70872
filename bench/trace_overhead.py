#!/usr/bin/env python3
"""What tracing costs: W1 with and without ``stoker.trace``, alternating, on the same cores.

    .venv/bin/python bench/trace_overhead.py            # writes bench/results/trace_overhead.json
    .venv/bin/python bench/run.py ... --out BENCHMARKS.md  # the report shows it

Each pass runs in its own child process pinned with taskset (stoker ``threads=`` = cores): one
warm-up pass, then ``--batches`` batches of 512 timed. Passes alternate off/on so that drift of
the shared machine falls on both; medians are reported. The traced pass's file is written after
the timed part and its size and write time reported apart.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def child(args: argparse.Namespace) -> None:
    sys.path.insert(0, ROOT)
    import stoker as sk

    from examples.w1_chess import build_pipeline

    files = sorted(glob.glob(os.path.join(args.data, "*.tfrecord")))
    ds = build_pipeline(files, seed=0, threads=args.cores)

    def run() -> float:
        it = iter(ds)
        for _ in range(20):
            next(it)
        t = time.perf_counter()
        for _ in range(args.batches):
            next(it)
        return args.batches * 512 / (time.perf_counter() - t)

    out: dict[str, float] = {}
    if args.trace:
        path = os.path.join(tempfile.mkdtemp(), "w1.trace.json")
        with sk.trace(path):
            t0 = time.perf_counter()
            out["examples_per_s"] = run()
            t1 = time.perf_counter()
        out["write_s"] = time.perf_counter() - t1
        out["trace_mb"] = os.path.getsize(path) / 1e6
        doc = json.load(open(path))
        out["dropped_spans"] = doc["otherData"]["dropped_spans"]
        out["dropped_samples"] = doc["otherData"]["dropped_counter_samples"]
        out["spans"] = sum(1 for e in doc["traceEvents"] if e["ph"] == "X")
        out["traced_s"] = t1 - t0
    else:
        out["examples_per_s"] = run()
    print(json.dumps(out))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/tmp/stoker-bench-data/w1-full")
    ap.add_argument("--cores", default="1,2")
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--batches", type=int, default=300)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--trace", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        args.cores = int(args.cores)
        child(args)
        return 0
    if not glob.glob(os.path.join(args.data, "*.tfrecord")):
        sys.path.insert(0, ROOT)
        import stoker as sk

        sk.datasets.write_chess_tfrecords(args.data)
    results = []
    for cores in [int(c) for c in args.cores.split(",")]:
        cpus = ",".join(str(i) for i in range(cores))
        runs: dict[int, list[dict]] = {0: [], 1: []}
        for _ in range(args.runs):
            for trace in (0, 1):
                cmd = ["taskset", "-c", cpus, sys.executable, __file__, "--child", "--cores", str(cores),
                       "--trace", str(trace), "--data", args.data, "--batches", str(args.batches)]
                r = subprocess.run(cmd, capture_output=True, text=True, check=True)
                runs[trace].append(json.loads(r.stdout.strip().splitlines()[-1]))
        off = statistics.median(r["examples_per_s"] for r in runs[0])
        on = statistics.median(r["examples_per_s"] for r in runs[1])
        row = {
            "cores": cores,
            "off_examples_per_s": off,
            "on_examples_per_s": on,
            "overhead_percent": (off / on - 1) * 100,
            "off_runs": [round(r["examples_per_s"]) for r in runs[0]],
            "on_runs": [round(r["examples_per_s"]) for r in runs[1]],
            "trace_mb": statistics.median(r["trace_mb"] for r in runs[1]),
            "spans": statistics.median(r["spans"] for r in runs[1]),
            "dropped_spans": max(r["dropped_spans"] for r in runs[1]),
            "dropped_counter_samples": max(r["dropped_samples"] for r in runs[1]),
            "write_s": statistics.median(r["write_s"] for r in runs[1]),
        }
        print(json.dumps(row))
        results.append(row)
    doc = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": "python bench/trace_overhead.py " + " ".join(sys.argv[1:]),
        "batches": args.batches,
        "runs": args.runs,
        "rows": results,
    }
    with open(os.path.join(HERE, "results", "trace_overhead.json"), "w") as f:
        json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
