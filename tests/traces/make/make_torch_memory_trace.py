"""Record a small, real PyTorch (Kineto) trace with memory events (`profile_memory=True`): a
small CNN trained for a few steps, on the GPU when there is one (else on the CPU), fed by a
DataLoader whose samples take a few milliseconds of NumPy work each, so that the trace shows
input waits, launches, kernels, memcpys and the allocator's events.

Usage:
  python make_torch_memory_trace.py <outdir> [--workers N]

Output: <outdir>/torch_memory_<device>_w<N>.pt.trace.json.gz
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

STEPS = 8  # profiled: wait 1, warmup 1, active 6


class Slow(Dataset):
    """64x64 RGB images made with some NumPy work per sample (an input pipeline's stand-in)."""

    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, i: int):
        rng = np.random.default_rng(i)
        img = rng.random((64, 64, 3), dtype=np.float32)
        for _ in range(6):  # a few milliseconds of "augmentation"
            img = np.clip(np.sqrt(img * 1.01 + 0.001), 0, 1)
        return torch.from_numpy(img.transpose(2, 0, 1).copy()), int(i % 10)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--workers", type=int, default=0)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 16 * 16, 10),
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Slow(), batch_size=64, num_workers=args.workers, pin_memory=device == "cuda")
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    os.makedirs(args.outdir, exist_ok=True)
    raw = os.path.join(args.outdir, "trace.json")
    with torch.profiler.profile(
        activities=activities,
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=STEPS - 2),
        on_trace_ready=lambda p: p.export_chrome_trace(raw),
        profile_memory=True,
        record_shapes=True,
    ) as prof:
        for step, (x, y) in enumerate(loader):
            if step == STEPS:
                break
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
    if device == "cuda":
        torch.cuda.synchronize()
    name = f"torch_memory_{device}_w{args.workers}.pt.trace.json.gz"
    with open(raw, "rb") as src, gzip.GzipFile(os.path.join(args.outdir, name), "wb", mtime=0) as dst:
        shutil.copyfileobj(src, dst)
    os.remove(raw)
    print(f"wrote {name} ({torch.__version__}, {device}, {time.strftime('%Y-%m-%d')})")


if __name__ == "__main__":
    main()
