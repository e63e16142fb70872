#!/usr/bin/env python3
"""A large XSpace for benchmarking: a real profile in tests/traces/ (by default JAX's on CPU;
`--source` picks another, such as the JAX GPU profile recorded on an H200) with its events
repeated, each copy shifted in time, its step numbers and correlation ids renumbered, so that a
reader sees one long run of many steps. Needs TensorFlow's protobuf
classes (the main .venv has them).

    .venv/bin/python bench/make_big_xspace.py OUT_DIR --mb 200 [--source jax/jax_gpu_train.xplane.pb]

Writes OUT_DIR/plugins/profile/run/host.xplane.pb (the layout xprof and xprof-rs read).
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TRACES = os.path.join(HERE, "..", "tests", "traces")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--mb", type=float, default=200.0)
    ap.add_argument("--source", default="jax/jax_train.xplane.pb", help="an XSpace under tests/traces/")
    args = ap.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    with open(os.path.join(TRACES, args.source), "rb") as fh:
        space.ParseFromString(fh.read())
    # The time the profile spans, and the largest step number and correlation id.
    start, end, max_step, max_corr = None, 0, 0, 0
    for plane in space.planes:
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        for line in plane.lines:
            for e in line.events:
                t0 = line.timestamp_ns * 1000 + e.offset_ps
                start = t0 if start is None else min(start, t0)
                end = max(end, t0 + e.duration_ps)
                for s in e.stats:
                    if names.get(s.metadata_id) == "step_num":
                        max_step = max(max_step, s.int64_value, s.uint64_value)
                    elif names.get(s.metadata_id) == "correlation_id":
                        max_corr = max(max_corr, s.int64_value, s.uint64_value)
    span_ps = end - (start or 0) + 1_000_000  # one µs apart
    one_copy = sum(e.ByteSize() for p in space.planes for line in p.lines for e in line.events)
    copies = max(1, int(args.mb * 1e6 / max(one_copy, 1)))
    for plane in space.planes:
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        for line in plane.lines:
            originals = list(line.events)
            for k in range(1, copies):
                for e in originals:
                    c = line.events.add()
                    c.CopyFrom(e)
                    c.offset_ps = e.offset_ps + k * span_ps
                    for s in c.stats:
                        name = names.get(s.metadata_id)
                        shift = {"step_num": (max_step + 1) * k, "correlation_id": (max_corr + 1) * k}.get(name)
                        if shift is None:
                            continue
                        if s.HasField("int64_value"):
                            s.int64_value += shift
                        elif s.HasField("uint64_value"):
                            s.uint64_value += shift
    out = os.path.join(args.out_dir, "plugins", "profile", "run")
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "host.xplane.pb")
    with open(path, "wb") as fh:
        fh.write(space.SerializeToString())
    print(f"wrote {path}: {os.path.getsize(path) / 1e6:.0f} MB, {copies} copies of the profile's events")
    return 0


if __name__ == "__main__":
    sys.exit(main())
