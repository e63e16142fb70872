"""How `stoker.ray` splits W3's work between its actors: each actor's share of one epoch, run
here one after the other in this process (as actor `i` of `k` runs it), timed alone: its CPU
time (every thread of the process) and its clock time. The sum over the `k` shares is the work
the service does for an epoch; the slowest share is how long `k` actors, each on a core of its
own, take for it (before the transfer to the trainer). Two ways of sharing, in one run:

- the share each actor runs (`stoker.ray`'s: the planner moves it below the decode and the
  batch, each actor batching its own elements);
- `Dataset.shard(k, i)` (a user's shard, which keeps whole batches: it stays above the batch,
  so every share decodes every image and keeps every `k`-th batch).

    python bench/ray_split.py [--data /tmp/stoker-bench-data/w3-1200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

BATCH = 32
WORKERS = (1, 2, 4)


def pipeline(root: str):
    from stoker import workloads

    return workloads.imagenet_pipeline(root, size=224, batch_size=BATCH, seed=0, threads=1)


def run(ds) -> tuple[float, float, int]:
    """One epoch of `ds`: CPU seconds, clock seconds, images."""
    c0, t0 = time.process_time(), time.perf_counter()
    n = sum(len(b["label"]) for b in ds)
    return time.process_time() - c0, time.perf_counter() - t0, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="/tmp/stoker-bench-data/w3-1200")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    import stoker.ray as skr

    root = os.path.abspath(args.data)
    ways = {
        "stoker.ray's share": lambda ds, k, i: skr._share(ds, k, i),
        "Dataset.shard(k, i)": lambda ds, k, i: ds.shard(k, i) if k > 1 else ds,
    }
    # Per (way, k): per round, (CPU seconds summed over the shares, slowest share's clock).
    runs: dict[tuple[str, int], list[tuple[float, float]]] = {}
    images: dict[tuple[str, int], int] = {}
    for _ in range(args.rounds):
        for way, share in ways.items():
            for k in WORKERS:
                shares = [run(share(pipeline(root), k, i)) for i in range(k)]
                runs.setdefault((way, k), []).append((sum(c for c, _, _ in shares), max(w for _, w, _ in shares)))
                images[(way, k)] = sum(n for _, _, n in shares)
    one = (next(iter(ways)), 1)
    base = statistics.median(c for c, _ in runs[one])
    base_rate = images[one] / statistics.median(w for _, w in runs[one])

    print(f"Command: `python bench/ray_split.py --rounds {args.rounds}`; machine: {platform.machine()}, "
          f"{os.cpu_count()} cores, Python {platform.python_version()}; W3 over {args.data} "
          f"(224x224, batches of {BATCH}, threads=1); medians of {args.rounds} rounds.\n")
    print("| sharing | actors | images in the epoch | CPU s, all shares | vs one actor | slowest share, s | "
          "epoch rate with an actor per core, images/s | vs one actor |")
    print("|---|---|---|---|---|---|---|---|")
    for (way, k), rs in runs.items():
        cpu = statistics.median(c for c, _ in rs)
        wall = statistics.median(w for _, w in rs)
        n = images[(way, k)]
        print(f"| {way} | {k} | {n} | {cpu:.2f} | {cpu / base:.2f}× | {wall:.2f} | {n / wall:.0f} | "
              f"{n / wall / base_rate:.2f}× |")


if __name__ == "__main__":
    main()
