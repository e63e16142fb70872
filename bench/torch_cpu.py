"""W3 into PyTorch on the CPU: ``stoker.torch.loader(device="cpu")`` against stoker's own NumPy
iteration (the loader's cost: it should be nothing, the tensors share the batches' memory),
torchvision's ``DataLoader`` (workers = cores) and NVIDIA DALI's CPU pipeline.

    .venv-bench/bin/python bench/torch_cpu.py --data /tmp/stoker-bench-data/w3-3000 --epochs 5

One process; the contenders take turns epoch by epoch (each epoch its own iteration), so that
drift on a shared machine hits all of them. Every contender gets ``--threads`` threads or
worker processes. After each epoch the run pauses (``--pause`` seconds) so that read-ahead
work (DALI decodes its next epoch's first batches, ``prefetch_queue_depth`` = 2, as soon as an
epoch ends) is not done on the next contender's time; that read-ahead then counts for DALI, so
its figure is if anything high. A contender whose package is missing (DALI) is left out and
said so. Writes ``bench/results/torch_cpu.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="/tmp/stoker-bench-data/w3-3000")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--pause", type=float, default=2.0)
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "torch_cpu.json"))
    args = p.parse_args()
    import stoker
    import stoker.torch as skt
    import torch
    from stoker import workloads

    from bench import w3_peers

    ds = workloads.imagenet_pipeline(args.data, batch_size=256, seed=0, threads=args.threads)
    loader = skt.loader(ds)

    def numpy_epoch() -> int:
        n = 0
        for b in ds:
            n += len(b["label"])
        return n

    def torch_epoch() -> int:
        n = 0
        for b in loader:
            assert isinstance(b["image"], torch.Tensor)
            n += len(b["label"])
        return n

    contenders: dict[str, Callable[[], int]] = {"numpy": numpy_epoch, "torch_cpu": torch_epoch}
    notes: dict[str, str] = {}
    versions: dict[str, Any] = {"torch": torch.__version__, "stoker": stoker.__version__}
    tv = w3_peers.build_torch(args.data, args.threads)
    versions.update(tv.versions)
    notes["torchvision"] = tv.notes

    def torchvision_epoch() -> int:
        return sum(len(lab) for _, lab in tv.epoch())

    contenders["torchvision"] = torchvision_epoch
    missing: dict[str, str] = {}
    try:
        dali_epoch, dali_versions, notes["dali_cpu"] = w3_peers.build_dali_torch(args.data, args.threads)
    except ImportError as e:
        missing["dali_cpu"] = f"{type(e).__name__}: {e}"
    else:
        versions.update(dali_versions)

        def dali_cpu_epoch() -> int:
            n = 0
            for img, lab in dali_epoch():
                assert isinstance(img, torch.Tensor)
                n += len(lab)
            return n

        contenders["dali_cpu"] = dali_cpu_epoch

    for run in contenders.values():  # warm-up: page cache, buffer pools, worker start
        run()
        time.sleep(args.pause)
    rates: dict[str, list[float]] = {k: [] for k in contenders}
    for _ in range(args.epochs):
        for name, run in contenders.items():
            t = time.perf_counter()
            n = run()
            rates[name].append(n / (time.perf_counter() - t))
            print(name, n, round(rates[name][-1], 1), flush=True)
            time.sleep(args.pause)
    med = {k: statistics.median(v) for k, v in rates.items()}
    out = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "threads": args.threads,
           "command": "bench/torch_cpu.py " + " ".join(sys.argv[1:]), "torch": torch.__version__, "pause_s": args.pause,
           "stoker": stoker.__version__, "versions": versions, "notes": notes, "missing": missing,
           "cpu": next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if "model name" in line), "?"),
           "rates": rates, "median": med, "ratio": med["torch_cpu"] / med["numpy"],
           "loader_over": {k: med["torch_cpu"] / v for k, v in med.items() if k != "torch_cpu"}}
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(json.dumps(out["median"]), json.dumps(out["loader_over"]))


if __name__ == "__main__":
    main()
