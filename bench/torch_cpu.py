"""W3 through ``stoker.torch.loader(device="cpu")`` against stoker's own NumPy iteration: the
loader's cost on the CPU path (it should be nothing: the tensors share the batches' memory).

    .venv-bench/bin/python bench/torch_cpu.py --data /tmp/stoker-bench-data/w3-3000 --epochs 3

One process; the two ways alternate epoch by epoch over the same pipeline (each epoch its own
iteration), so that drift on a shared machine hits both. Writes ``bench/results/torch_cpu.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="/tmp/stoker-bench-data/w3-3000")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "torch_cpu.json"))
    args = p.parse_args()
    import stoker
    import stoker.torch as skt
    import torch
    from stoker import workloads

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

    numpy_epoch()  # warm-up: page cache, buffer pool
    rates: dict[str, list[float]] = {"numpy": [], "torch_cpu": []}
    for _ in range(args.epochs):
        for name, run in (("numpy", numpy_epoch), ("torch_cpu", torch_epoch)):
            t = time.perf_counter()
            n = run()
            rates[name].append(n / (time.perf_counter() - t))
            print(name, round(rates[name][-1], 1), flush=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    out = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "threads": args.threads,
           "command": "bench/torch_cpu.py " + " ".join(sys.argv[1:]), "torch": torch.__version__,
           "stoker": stoker.__version__, "rates": rates, "median": med,
           "ratio": med["torch_cpu"] / med["numpy"]}
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
