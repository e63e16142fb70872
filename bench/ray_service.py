"""stoker.ray on this machine: a trainer pinned to one core, whose step computes for about as long
as W3's pipeline takes per batch on one core, fed (a) by the pipeline in its own process, on its
own core, (b) by one Ray actor pinned to the other core (`stoker.ray.serve`), read with the
reader's default requests (2 batches each) and with requests of 1 batch, and (c) the service's
overhead: the same trainer with no step, fed locally and through the service.

Two pipelines, each measured both ways: W3 whole (float32 batches, 19.3 MB), and W3 up to its
flip (uint8 batches, 4.8 MB on the wire), the rest of its chain (float conversion, jitter,
normalisation) left to the trainer's device, as DALI and FFCV do; no device here, so it is not
timed.

    python bench/ray_service.py [--data /tmp/stoker-bench-data/w3-1200] [--batches 30] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

BATCH = 32


def pipeline(root: str):
    from stoker import workloads

    return workloads.imagenet_pipeline(root, size=224, batch_size=BATCH, seed=0, threads=1).repeat()


def uint8_pipeline(root: str):
    """W3's chain up to its flip (read, decode, crop, flip): uint8 crops."""
    from stoker import AUTOTUNE, Dataset, ops, workloads

    chain = workloads.imagenet_ops(224, seed=0)[:4] + [ops.select(["image", "label"])]
    ds = Dataset.image_folder(root).with_options(threads=1).shuffle(10_000, seed=0)
    return ds.map(chain, num_parallel_calls=AUTOTUNE).batch(BATCH).prefetch(AUTOTUNE).repeat()


PIPELINES = {
    "W3 (float32, 19.3 MB a batch)": pipeline,
    "W3 up to the flip (uint8, 4.8 MB a batch)": uint8_pipeline,
}


def _spin(seconds: float) -> None:
    """A training step's work: `seconds` of this thread's CPU time (not of the clock: on a
    shared core the step takes longer)."""
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        x += 1


def _pin(cores: set[int]) -> None:
    """Pins every thread of this process (Ray's included) to `cores`."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cores)
        except OSError:
            pass


WARMUP = 16


def measure(batches, n: int, step_s: float) -> float:
    """Images per second over `n` batches, with a step of `step_s` each, after `WARMUP` taken
    at once: a service that made batches ahead while the trainer did something else has
    handed them out by then, so the timed ones are made while they are timed."""
    it = iter(batches)
    for _ in range(WARMUP):
        next(it)
    t = time.perf_counter()
    for _ in range(n):
        next(it)
        _spin(step_s)
    return n * BATCH / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="/tmp/stoker-bench-data/w3-1200")
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    import ray
    import stoker.ray as skr

    root = os.path.abspath(args.data)
    # Ray's own processes start on core 1, with the actor: the trainer's core is the trainer's.
    _pin({1})
    ray.init(num_cpus=1, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
             configure_logging=False)
    _pin({0})
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    rows = []
    for name, make in PIPELINES.items():
        # As long as the pipeline takes per batch on one core (the median of 3 runs).
        step = BATCH / statistics.median(measure(make(root), args.batches, 0.0) for _ in range(3))

        def on_core_1(make=make):
            os.sched_setaffinity(0, {1})
            return make(root)

        service = skr.serve(on_core_1, num_workers=1)
        # The reader's default (requests of 2 batches), and requests of one batch each: two
        # readers of the actor's whole epoch, each with an iterator of its own there.
        batches = iter(skr.reader(service, 0, 2, mode="epoch"))
        singles = iter(skr.reader(service, 1, 2, mode="epoch", batches_per_request=1))
        # Rounds alternate the ways: this shared machine's speed moves between them.
        runs: dict[str, list[float]] = {k: [] for k in ("local", "local_step", "remote", "remote_step",
                                                         "remote1", "remote1_step")}
        for _ in range(args.rounds):
            runs["local"].append(measure(make(root), args.batches, 0.0))
            runs["local_step"].append(measure(make(root), args.batches, step))
            runs["remote_step"].append(measure(batches, args.batches, step))
            runs["remote"].append(measure(batches, args.batches, 0.0))
            runs["remote1_step"].append(measure(singles, args.batches, step))
            runs["remote1"].append(measure(singles, args.batches, 0.0))
        service.shutdown()
        rows.append((name, step, {k: statistics.median(v) for k, v in runs.items()}, runs))
    ray.shutdown()

    print(f"Command: `python bench/ray_service.py --batches {args.batches} --rounds {args.rounds}`; "
          f"machine: {platform.machine()}, "
          f"{os.cpu_count()} cores, Python {platform.python_version()}; W3 (224x224, batches of {BATCH}, "
          f"threads=1); the trainer pinned to core 0, the Ray actor and Ray's processes to core 1; the "
          f"reader's defaults (2 requests in flight, of 2 batches each) and requests of 1 batch; images/s, "
          f"medians of {args.rounds} rounds, {WARMUP} batches taken at once before each timed stretch.\n")
    print("| pipeline | trainer | fed locally (one core for both) | fed by one Ray actor (its own core) | ratio "
          "| the actor asked for 1 batch a request | ratio |")
    print("|---|---|---|---|---|---|---|")
    for name, step, m, _ in rows:
        for label, sfx in ((f"a step of {step * 1e3:.0f} ms per batch", "_step"), ("no step (the pipeline alone)", "")):
            local, remote, remote1 = m["local" + sfx], m["remote" + sfx], m["remote1" + sfx]
            print(f"| {name} | {label} | {local:.0f} | {remote:.0f} | {remote / local:.2f}× | {remote1:.0f} | "
                  f"{remote1 / local:.2f}× |")
    print("\nEach round, in order:\n")
    for name, *_, runs in rows:
        cells = "; ".join(f"{k}: {', '.join(f'{v:.0f}' for v in vs)}" for k, vs in runs.items())
        print(f"- {name}: {cells}")


if __name__ == "__main__":
    main()
