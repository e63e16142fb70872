"""W1 chess-tfrecord with stoker: TFRecord → shuffle(10000) → batch(512) → parse → unpack → score,
all native (no Python function: the pipeline saves as a spec file and runs in `stoker bench`).

    python examples/w1_chess.py --data /tmp/chess            # generate (once) and run
    python examples/w1_chess.py --data /tmp/chess --save-spec w1.toml   # for `stoker bench`

The pipeline itself is `stoker.workloads.chess_pipeline`:

    ds = (stoker.TFRecordDataset(files, num_parallel_reads=stoker.AUTOTUNE)
            .shuffle(10_000, seed=0)
            .batch(512, drop_remainder=True)
            .map(stoker.workloads.chess_ops() + stoker.workloads.chess_score_ops(),
                 num_parallel_calls=stoker.AUTOTUNE)
            .prefetch(stoker.AUTOTUNE))
"""

from __future__ import annotations

import argparse
import glob
import os
import time
from collections.abc import Sequence

import stoker
from stoker import workloads


def build_pipeline(files: Sequence[str], seed: int = 0, threads: int | None = None) -> stoker.Dataset:
    return workloads.chess_pipeline(files, seed=seed, threads=threads)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="data/chess", help="folder of W1 TFRecord files (generated if empty)")
    p.add_argument("--examples", type=int, default=400_000)
    p.add_argument("--files", type=int, default=8)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--save-spec", help="write the pipeline as a spec file and exit")
    args = p.parse_args()

    files = sorted(glob.glob(os.path.join(args.data, "*.tfrecord")))
    if not files:
        print(f"generating {args.examples} examples in {args.data} ...")
        files = stoker.datasets.write_chess_tfrecords(args.data, args.files, args.examples, seed=0)
    if args.save_spec:
        build_pipeline(files).save_spec(args.save_spec)
        print(f"wrote {args.save_spec}; run: stoker bench {args.save_spec}")
        return
    ds = build_pipeline(files)
    for epoch in range(args.epochs):
        t, n = time.perf_counter(), 0
        for batch in ds:
            n += len(batch["score"])
        secs = time.perf_counter() - t
        print(f"epoch {epoch + 1}: {n} examples, {n / secs:,.0f} examples/s")
    for s in ds.stats():
        print(f"  {s['name'][:60]:<60} busy {s['busy_s']:.2f}s wait {s['wait_input_s']:.2f}s")


if __name__ == "__main__":
    main()
