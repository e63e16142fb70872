"""End-to-end training throughput on a GPU: ResNet-50 (torchvision, AMP bf16, channels-last,
SGD) fed W3 (ImageFolder JPEGs → random-resized crop 224, flip, colour jitter, normalise,
batches of 256) by ``stoker.torch.loader(device="cuda")`` against torchvision's ``DataLoader``
(workers = all cores, ``pin_memory=True``). Images/s over the timed steps and the input stall
(share of step time spent waiting for the batch, measured with ``stoker.timed`` with a CUDA
synchronise at each step end).

    python bench/gpu_train.py --data /tmp/w3 --images 1000 --copies 8 --steps 80 --out gpu_train.json

With ``--feed-batches N``, first the loader alone: N batches of W3 to the device with no model,
``stoker_staged`` (the engine's batches in pageable memory, copied into pinned staging buffers
by the loader's thread, as before the engine wrote into pinned memory) against ``stoker`` (the
engine writes its batches into pinned memory, copied to the device from there). Each runs
``--feed-runs`` times, alternating; the medians are reported.

Writes the data first (stoker's own generator) unless it is there. One process, one contender
after the other, the same model and step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def engine_pinning(on: bool) -> None:
    """Whether the engine writes batches into pinned memory (what ``stoker.torch.loader`` turns
    on for a CUDA device). Off, through the module's private switch, only to measure the
    staging path it replaced."""
    import stoker.torch as skt
    import torch
    from stoker import _stoker

    if on:
        skt._engine_pinned = False
        assert skt._pin_engine_batches(torch.device("cuda", 0)), "the CUDA runtime's functions were not found"
    else:
        _stoker.set_batch_host_memory(None)
        skt._engine_pinned = True  # the loader then leaves the engine's memory as it is


def w3_stoker(root: str, threads: int, batch: int) -> Any:
    import stoker
    from stoker import workloads

    # W3's pipeline (workloads.imagenet_pipeline) with whole batches only, as the DataLoader's
    # drop_last: a short last batch would make cuDNN tune its kernels again in the timed steps.
    # Repeated after the shuffle (each epoch reshuffled), so that the map and batch run on
    # across epochs, as the DataLoader's persistent workers do.
    ds = stoker.Dataset.image_folder(root).with_options(threads=threads).shuffle(10_000, seed=0).repeat()
    ds = ds.map(workloads.imagenet_ops(224, 0), num_parallel_calls=stoker.AUTOTUNE)
    return ds.batch(batch, drop_remainder=True).prefetch(stoker.AUTOTUNE)


def stoker_batches(root: str, threads: int, batch: int) -> Any:
    import stoker.torch as skt

    loader = skt.loader(w3_stoker(root, threads, batch), device="cuda", prefetch=3)
    for b in loader:
        # NHWC float32 on the device: as NCHW it is channels-last already, no copy.
        yield b["image"].permute(0, 3, 1, 2), b["label"]


def torchvision_batches(root: str, threads: int, batch: int) -> Any:
    import torch
    from torch.utils.data import DataLoader
    from torchvision import transforms as T
    from torchvision.datasets import ImageFolder

    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                    T.ColorJitter(brightness=0.2, contrast=0.2), T.ToTensor(), T.Normalize(MEAN, STD)])
    loader = DataLoader(ImageFolder(root, transform=tf), batch_size=batch, shuffle=True, num_workers=threads,
                        pin_memory=True, persistent_workers=True, drop_last=True, prefetch_factor=4)
    while True:
        for x, y in loader:
            yield (x.to("cuda", non_blocking=True).contiguous(memory_format=torch.channels_last),
                   y.to("cuda", non_blocking=True))


def feed(root: str, threads: int, batch: int, batches: int) -> dict[str, Any]:
    """The loader alone: ``batches`` W3 batches to the device (after 3 unmeasured), no model."""
    import stoker.torch as skt
    import torch

    loader = skt.loader(w3_stoker(root, threads, batch), device="cuda", prefetch=3)
    it = iter(loader)
    for _ in range(3):
        next(it)
    torch.cuda.synchronize()
    t = time.perf_counter()
    n = 0
    for _ in range(batches):
        n += next(it)["image"].shape[0]
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t
    it.close()  # type: ignore[attr-defined]
    return {"images_per_s": n / seconds, "seconds": seconds, "staged_bytes": loader._staged_bytes}


def train(batches: Any, steps: int, warmup: int, arch: str = "resnet50") -> dict[str, Any]:
    import stoker
    import torch
    import torchvision

    torch.manual_seed(0)
    model = getattr(torchvision.models, arch)(num_classes=1000).cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    timer = stoker.timed(batches, warmup=warmup, synchronize=torch.cuda.synchronize)
    n = 0
    t0 = None
    for i, (x, y) in enumerate(timer):
        if i == warmup:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        if i >= warmup:
            n += x.shape[0]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if i == warmup + steps:
            break
    batches.close()  # stops the loader's threads before the next contender starts
    torch.cuda.synchronize()
    seconds = time.perf_counter() - (t0 or time.perf_counter())
    rep = timer.report()
    return {"images_per_s": n / seconds, "images": n, "seconds": seconds, "input_stall_percent": rep.input_percent,
            "step_ms_median": rep.percentile_ms(rep.step_s, 50), "input_ms_median": rep.percentile_ms(rep.input_s, 50),
            "step_ms_mean": 1e3 * sum(rep.step_s) / max(len(rep.step_s), 1), "verdict": rep.verdict,
            "loss": float(loss.detach())}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="/tmp/w3-gpu")
    p.add_argument("--images", type=int, default=3000)
    p.add_argument("--copies", type=int, default=1, help="hard links of each image (longer epochs, same data)")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--contenders", default="stoker,torchvision")
    p.add_argument("--feed-batches", type=int, default=0)
    p.add_argument("--feed-runs", type=int, default=3)
    p.add_argument("--out", default="gpu_train.json")
    args = p.parse_args()
    import stoker
    import torch
    import torchvision

    if not (Path(args.data) / "class00").exists():
        t = time.perf_counter()
        files = stoker.datasets.write_image_folder(args.data, n=args.images, num_classes=10, seed=0)
        for f in files:
            for c in range(1, args.copies):
                os.link(f, f"{f[:-4]}-{c}.jpg")
        print(f"data: {args.images} JPEGs (x{args.copies}) in {time.perf_counter() - t:.0f} s", flush=True)
    torch.backends.cudnn.benchmark = True
    results: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(0), "cpus": os.cpu_count(), "threads": args.threads,
        "torch": torch.__version__, "torchvision": torchvision.__version__, "stoker": stoker.__version__,
        "batch": args.batch, "steps": args.steps, "warmup": args.warmup, "images": args.images * args.copies,
        "command": "python bench/gpu_train.py " + " ".join(sys.argv[1:]), "rows": {},
    }
    if args.feed_batches:
        runs: dict[str, list[dict[str, Any]]] = {"stoker_staged": [], "stoker": []}
        for _ in range(args.feed_runs):
            for name in runs:
                engine_pinning(name == "stoker")
                r = feed(args.data, args.threads, args.batch, args.feed_batches)
                runs[name].append(r)
                print("feed", name, json.dumps(r), flush=True)
        results["feed"] = {
            "batches": args.feed_batches,
            "rows": {name: {"images_per_s": statistics.median(r["images_per_s"] for r in rs),
                            "runs": [r["images_per_s"] for r in rs], "staged_bytes": rs[-1]["staged_bytes"]}
                     for name, rs in runs.items()},
        }
    engine_pinning(True)
    makers = {"stoker": stoker_batches, "torchvision": torchvision_batches}
    for name in args.contenders.split(","):
        # "stoker:14": stoker with 14 threads.
        maker, _, threads = name.partition(":")
        r = train(makers[maker](args.data, int(threads or args.threads), args.batch), args.steps, args.warmup)
        results["rows"][name] = r
        print(name, json.dumps(r), flush=True)
    Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
