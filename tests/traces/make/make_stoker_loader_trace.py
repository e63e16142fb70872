"""Record a real PyTorch (Kineto) trace of a training loop fed by `stoker.torch.loader` with a
slow pipeline: a Python map that waits (`time.sleep`, the GIL released) makes each batch take
longer than the step, so the loop spends most of each step in the loader's `next()`. The
loader leaves `stoker:next#torch.Loader` spans (`record_function`) while the profiler records.

Usage:
  python make_stoker_loader_trace.py <outdir>

Output: <outdir>/stoker_loader_<device>.pt.trace.json.gz, and beside it
stoker_loader_<device>.next.json: the time measured around each `next()` of the profiled
steps and each step's time (the reference the analyzer's input share is checked against).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import time

import numpy as np
import stoker as sk
import stoker.torch as skt
import torch
from torch import nn

STEPS = 8  # profiled: wait 1, warmup 1, active 6
WAIT_S = 0.06  # the pipeline's wait per batch


def slow(batch: dict) -> dict:
    time.sleep(WAIT_S)  # e.g. a remote read: the GIL is released, the loop waits
    return batch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    images = rng.random((512, 3, 32, 32), dtype=np.float32)
    labels = rng.integers(0, 10, 512)
    ds = sk.Dataset.from_tensor_slices({"x": images, "y": labels}).batch(32).map(slow).prefetch(1)
    loader = skt.loader(ds, device=None if device == "cpu" else device)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 512), nn.ReLU(), nn.Linear(512, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    waits: list[float] = []
    steps: list[float] = []
    tmp = os.path.join(args.outdir, "tmp_trace")
    os.makedirs(tmp, exist_ok=True)
    schedule = torch.profiler.schedule(wait=1, warmup=1, active=STEPS - 2, repeat=1)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(
        activities=activities,
        schedule=schedule,
        on_trace_ready=torch.profiler.tensorboard_trace_handler(tmp),
    ) as prof:
        it = iter(loader)
        for step in range(STEPS):
            t0 = time.perf_counter()
            batch = next(it)
            t1 = time.perf_counter()
            x, y = batch["x"].to(device), batch["y"].to(device)
            for _ in range(3):  # a short step
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
            if device == "cuda":
                torch.cuda.synchronize()
            prof.step()
            t2 = time.perf_counter()
            if step >= 2:  # the active steps
                waits.append((t1 - t0) * 1000)
                steps.append((t2 - t0) * 1000)
    (name,) = [f for f in os.listdir(tmp) if f.endswith(".json")]
    out = os.path.join(args.outdir, f"stoker_loader_{device}.pt.trace.json.gz")
    with open(os.path.join(tmp, name), "rb") as src, gzip.open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    shutil.rmtree(tmp)
    reference = {
        "next_ms": waits,
        "step_ms": steps,
        "input_percent": 100 * sum(waits) / sum(steps),
        "torch": torch.__version__,
        "stoker": sk.__version__,
    }
    with open(os.path.join(args.outdir, f"stoker_loader_{device}.next.json"), "w") as f:
        json.dump(reference, f, indent=1)
    print(out, reference["input_percent"])


if __name__ == "__main__":
    main()
