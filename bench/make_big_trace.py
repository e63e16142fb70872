#!/usr/bin/env python3
"""Writes a large synthetic Kineto trace for the analyzer's speed benchmark, by replicating the
steps of a real one (tests/traces/pytorch/kineto_tb_samples/resnet50_num_workers_0…): every
event of the real trace is written again for each copy, shifted in time by the real trace's
length (and correlation ids and flow ids by a fixed stride), so the result has the real
structure — CPU ops, runtime launches, kernels, copies, flows, ProfilerSteps, DataLoader spans —
at any size.

    python bench/make_big_trace.py /tmp/big.pt.trace.json --gb 1
    python bench/make_big_trace.py /tmp/nccl.pt.trace.json --gb 1 \
        --source 'tests/traces/pytorch/hta/ns_resolution_rank-0.*'   # the newer schema, NCCL
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "..", "tests", "traces", "pytorch", "kineto_tb_samples", "resnet50_num_workers_0.*")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--source", default=SOURCE, help="the real trace to replicate (a gzipped Kineto JSON; a glob)")
    args = ap.parse_args()
    src = glob.glob(args.source)[0]
    with gzip.open(src, "rt") as f:
        doc = json.load(f)
    events = doc.pop("traceEvents")
    meta = [e for e in events if e.get("ph") == "M"]
    timed = [e for e in events if e.get("ph") != "M" and "ts" in e]
    t0 = min(float(e["ts"]) for e in timed)
    t1 = max(float(e["ts"]) + float(e.get("dur", 0)) for e in timed)
    span = t1 - t0 + 1000.0
    target = int(args.gb * 1e9)
    step = 0
    with open(args.out, "w") as out:
        head = json.dumps(doc)[:-1]
        out.write(head + (", " if doc else "") + '"traceEvents": [\n')
        out.write(",\n".join(json.dumps(e) for e in meta))
        copy = 0
        while out.tell() < target:
            shift = copy * span
            for e in timed:
                e2 = dict(e)
                e2["ts"] = float(e["ts"]) + shift
                if "id" in e2 and isinstance(e2["id"], int):
                    e2["id"] = e2["id"] + copy * 10_000_000
                a = e2.get("args")
                if isinstance(a, dict):
                    a = dict(a)
                    for k in ("correlation", "external id", "External id"):
                        if isinstance(a.get(k), int):
                            a[k] = a[k] + copy * 10_000_000
                    e2["args"] = a
                if str(e2.get("name", "")).startswith("ProfilerStep#"):
                    e2["name"] = f"ProfilerStep#{step}"
                    step += 1
                out.write(",\n" + json.dumps(e2))
            copy += 1
        out.write("\n]}\n")
    print(f"wrote {args.out}: {os.path.getsize(args.out) / 1e9:.2f} GB, {copy} copies of {len(timed)} events, "
          f"{step} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
