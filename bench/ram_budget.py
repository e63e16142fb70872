"""The RAM budget on W2's large elements: the peak RSS of a fresh process running W2 (18 pairs in
batches of 3, 110 MiB each) for a consumer slower than the pipeline, so that every buffer
fills, with no room in the budget (the engine's working set), with the default budget, and with
budgets of one and two batches. `test_ram_budget.py` runs the same child.

    python bench/ram_budget.py [--runs 5]      # prints the BENCHMARKS.md table
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import glob, json, os, sys, time
import stoker
from stoker import workloads
root, budget, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
images = sorted(glob.glob(os.path.join(root, "images", "*.png")))
labels = sorted(glob.glob(os.path.join(root, "labels", "*.png")))
_, colors = stoker.ops.read_class_colors(os.path.join(root, "class_dict.csv"))
ds = workloads.segmentation_pipeline(images, labels, colors).with_options(threads=threads)
if budget != "default":
    ds = ds.with_options(ram_budget=int(budget))
n = 0
for batch in ds:
    n += len(batch["image"])
    del batch
    time.sleep(0.2)
# VmHWM, not ru_maxrss: the latter keeps the parent's peak across fork and exec.
with open("/proc/self/status") as f:
    peak = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
held = max(s.get("buffered_bytes_peak", 0) for s in ds.stats())
print(json.dumps({"pairs": n, "peak_rss": peak, "held": held}))
"""

PAIRS = 18
BATCH = 3 * 512 * 512 * (3 + 32) * 4
MIB = 1 << 20


def run_child(root: str, budget: str, threads: int = 2) -> dict:
    """One run in a fresh process, its thread budget `threads`: {"pairs", "peak_rss", "held"}
    (bytes)."""
    out = subprocess.run(
        [sys.executable, "-c", CHILD, root, budget, str(threads)], capture_output=True, text=True, timeout=300
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    import stoker as sk

    with tempfile.TemporaryDirectory() as root:
        sk.datasets.write_segmentation_pairs(root, n=PAIRS, seed=0)
        settings = [("no room (ram_budget=1)", "1"), ("one batch", str(BATCH)), ("two batches", str(2 * BATCH)),
                    ("default (half of what is available)", "default")]
        rows = []
        fixed = None
        for label, budget in settings:
            runs = [run_child(root, budget) for _ in range(args.runs)]
            peak = statistics.median(r["peak_rss"] for r in runs)
            most = max(r["peak_rss"] for r in runs)
            held = max(r["held"] for r in runs)
            fixed = peak if fixed is None else fixed
            rows.append((label, budget, held, peak, most, peak - fixed))
    print(f"Command: `python bench/ram_budget.py --runs {args.runs}`; machine: {platform.machine()}, "
          f"{os.cpu_count()} cores, Python {platform.python_version()}. Peak RSS (VmHWM) of a fresh process, "
          f"median and most of {args.runs} runs.\n")
    print("| ram_budget | bytes | buffers held at most | peak RSS, median | peak RSS, most | over the working set |")
    print("|---|---|---|---|---|---|")
    for label, budget, held, peak, most, over in rows:
        print(f"| {label} | {budget} | {held / MIB:.0f} MiB | {peak / MIB:.0f} MiB | {most / MIB:.0f} MiB | "
              f"{over / MIB:+.0f} MiB |")


if __name__ == "__main__":
    main()
