"""stoker.ray on this machine: a trainer pinned to one core, whose step computes for about as long
as W3's pipeline takes per batch on one core, fed (a) by the pipeline in its own process, on its
own core, (b) by one Ray actor pinned to the other core (`stoker.ray.serve`), and (c) the
service's overhead: the same trainer with no step, fed locally and through the service.

    python bench/ray_service.py [--data /tmp/stoker-bench-data/w3-1200] [--batches 20]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

BATCH = 32


def pipeline(root: str):
    from stoker import workloads

    return workloads.imagenet_pipeline(root, size=224, batch_size=BATCH, seed=0, threads=1).repeat()


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


def measure(batches, n: int, step_s: float) -> float:
    """Images per second over `n` batches after 3 of warm-up, with a step of `step_s` each."""
    it = iter(batches)
    for _ in range(3):
        next(it)
    t = time.perf_counter()
    for _ in range(n):
        next(it)
        _spin(step_s)
    return n * BATCH / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="/tmp/stoker-bench-data/w3-1200")
    ap.add_argument("--batches", type=int, default=20)
    args = ap.parse_args()
    import ray
    import stoker.ray as skr

    root = os.path.abspath(args.data)
    # Ray's own processes start on core 1, with the actor: the trainer's core is the trainer's.
    _pin({1})
    ray.init(num_cpus=1, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
             configure_logging=False)
    _pin({0})
    local = measure(pipeline(root), args.batches, 0.0)
    step = BATCH / local  # the trainer's step: as long as the pipeline takes per batch
    local_step = measure(pipeline(root), args.batches, step)

    def on_core_1():
        os.sched_setaffinity(0, {1})
        return pipeline(root)

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    service = skr.serve(on_core_1, num_workers=1)
    remote_step = measure(skr.reader(service), args.batches, step)
    service.shutdown()
    service = skr.serve(on_core_1, num_workers=1)
    remote = measure(skr.reader(service), args.batches, 0.0)
    service.shutdown()
    ray.shutdown()

    print(f"Command: `python bench/ray_service.py --batches {args.batches}`; machine: {platform.machine()}, "
          f"{os.cpu_count()} cores, Python {platform.python_version()}; W3 (224x224, batches of {BATCH}, "
          f"threads=1); the trainer pinned to core 0, the Ray actor and Ray's processes to core 1; "
          f"images/s.\n")
    print("| trainer | fed locally (one core for both) | fed by one Ray actor (its own core) | ratio |")
    print("|---|---|---|---|")
    print(f"| a step of {step * 1e3:.0f} ms per batch | {local_step:.0f} | {remote_step:.0f} | "
          f"{remote_step / local_step:.2f}× |")
    print(f"| no step (the pipeline alone) | {local:.0f} | {remote:.0f} | {remote / local:.2f}× |")


if __name__ == "__main__":
    main()
