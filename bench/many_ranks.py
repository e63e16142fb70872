#!/usr/bin/env python3
"""Many ranks on one machine: W3 with one process against two processes at once on the same
cores, each a rank of a `torch.distributed` (gloo) job as DDP runs them, for stoker and for a
PyTorch `DataLoader` with a `DistributedSampler` and torchvision's transforms.

    python bench/many_ranks.py --data /tmp/stoker-bench-data/w3-1200 --runs 3 --out BENCHMARKS.md

Each rank builds its loader (`shard="auto"` for stoker), takes two batches of epoch 0 to warm
up, waits for every rank, then times whole epochs (1, 2, ...; `--epochs`). A mode's throughput is the
images of every rank over the time from the first rank's start to the last rank's end; CPU
seconds per image count every thread and worker process of every rank. Modes:

- `stoker, 1 rank`: the W3 pipeline (`stoker.workloads.imagenet_pipeline`) in one process;
- `stoker, 2 ranks`: two processes, each making only its share (the planner's `shard_down`),
  each with its share of the cores as thread budget (counted from the process group);
- `stoker, 2 ranks, as before`: the same with `shard_down` off and `threads` = all cores, what
  each rank did before: every rank decodes every image and keeps its batches;
- `DataLoader, 1 rank`: `num_workers` = cores; `DataLoader, 2 ranks`: a `DistributedSampler`
  per rank, `num_workers` = cores / 2 each.

The table goes into the file given with `--out`, replacing its "Many ranks on one machine"
section (or appended).
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
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BATCH = 64
EPOCHS = 3

CHILD = textwrap.dedent(
    """
    import json, os, resource, sys, time
    mode, data, out, barrier = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    BATCH = int(os.environ["BENCH_BATCH"])
    import torch
    import torch.distributed as dist
    if world > 1:
        dist.init_process_group("gloo")
    cores = len(os.sched_getaffinity(0))

    if mode.startswith("stoker"):
        import stoker as sk
        import stoker.torch as skt
        from stoker.workloads import imagenet_pipeline

        threads = cores if mode == "stoker-before" else None
        ds = imagenet_pipeline(data, batch_size=BATCH, threads=threads)
        if mode == "stoker-before":
            ds = ds.with_options(optimizations={"shard_down": False})
        loader = skt.loader(ds, shard="auto" if world > 1 else None)
        def epoch(n):
            loader.set_epoch(n)
            return iter(loader)
        info = {"budget": list(loader._sharded.stats().budget), "plan": loader.explain()}
    else:
        from torch.utils.data import DataLoader, DistributedSampler
        from torchvision import transforms as T
        from torchvision.datasets import ImageFolder

        tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                        T.ColorJitter(brightness=0.2, contrast=0.2), T.ToTensor(),
                        T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
        dataset = ImageFolder(data, transform=tf)
        sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=0, drop_last=True)
        workers = max(1, cores // world)
        loader = DataLoader(dataset, batch_size=BATCH, sampler=sampler, num_workers=workers)
        def epoch(n):
            sampler.set_epoch(n)
            return iter(loader)
        info = {"num_workers": workers}

    it = epoch(0)
    for _ in range(2):
        next(it)
    del it
    open(f"{barrier}.ready.{rank}", "w").close()
    while not os.path.exists(f"{barrier}.go"):
        time.sleep(0.005)

    def cpu():
        s = resource.getrusage(resource.RUSAGE_SELF)
        c = resource.getrusage(resource.RUSAGE_CHILDREN)
        return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime

    c0, t0 = cpu(), time.time()
    images = 0
    for n in range(1, 1 + int(os.environ["BENCH_EPOCHS"])):
        for b in epoch(n):
            x = b["image"] if isinstance(b, dict) else b[0]
            images += int(x.shape[0])
    t1 = time.time()
    del loader
    c1 = cpu()
    json.dump({"rank": rank, "start": t0, "end": t1, "cpu_s": c1 - c0, "images": images, **info}, open(out, "w"))
    if world > 1:
        dist.destroy_process_group()
    """
)

MODES = [
    ("stoker", 1, "stoker, 1 rank"),
    ("stoker", 2, "stoker, 2 ranks"),
    ("stoker-before", 2, "stoker, 2 ranks, as before (every rank decodes every image)"),
    ("torch", 1, "DataLoader, 1 rank"),
    ("torch", 2, "DataLoader + DistributedSampler, 2 ranks"),
]


def run_mode(python: str, mode: str, world: int, data: str, port: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "rank.py"
        script.write_text(CHILD)
        barrier = str(Path(tmp) / "barrier")
        procs = []
        for rank in range(world):
            env = {k: v for k, v in os.environ.items() if k != "LOCAL_WORLD_SIZE"}
            env.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                       BENCH_BATCH=str(BATCH), BENCH_EPOCHS=str(EPOCHS))
            out = Path(tmp) / f"out.{rank}"
            procs.append((subprocess.Popen([python, str(script), mode, data, str(out), barrier], env=env), out))
        deadline = time.time() + 600
        while not all(os.path.exists(f"{barrier}.ready.{r}") for r in range(world)):
            if any(p.poll() not in (None, 0) for p, _ in procs) or time.time() > deadline:
                for p, _ in procs:
                    p.kill()
                raise RuntimeError(f"{mode} x{world}: a rank failed while warming up")
            time.sleep(0.01)
        Path(f"{barrier}.go").touch()
        for p, _ in procs:
            if p.wait(timeout=900) != 0:
                raise RuntimeError(f"{mode} x{world}: a rank exited with {p.returncode}")
        ranks = [json.loads(out.read_text()) for _, out in procs]
    wall = max(r["end"] for r in ranks) - min(r["start"] for r in ranks)
    images = sum(r["images"] for r in ranks)
    cpu = sum(r["cpu_s"] for r in ranks)
    return {"images": images, "wall_s": wall, "images_per_s": images / wall, "cpu_s_per_image": cpu / images,
            "per_rank": ranks}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True, help="a W3 ImageFolder (bench/bench_data.py w3 DIR --n 1200)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=3, help="epochs timed per mode")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--out", default=None, help="Markdown file whose 'Many ranks on one machine' section is replaced")
    ap.add_argument("--json", default=str(HERE / "results" / "many_ranks.json"))
    args = ap.parse_args()
    global EPOCHS
    EPOCHS = args.epochs
    results: dict[str, list[dict]] = {label: [] for _, _, label in MODES}
    port = 29700
    load0 = os.getloadavg()[0]
    for run in range(args.runs):
        # Each round runs every mode once, in turn, so that a slow spell of the machine hits all.
        for mode, world, label in MODES:
            port += 1
            r = run_mode(args.python, mode, world, args.data, port)
            results[label].append(r)
            print(f"round {run + 1}: {label}: {r['images_per_s']:.1f} images/s, "
                  f"{r['cpu_s_per_image'] * 1000:.1f} CPU ms/image", flush=True)
    load1 = os.getloadavg()[0]
    import stoker

    versions = subprocess.run(
        [args.python, "-c", "import torch, torchvision, PIL; print(torch.__version__, torchvision.__version__, "
         "PIL.__version__)"], capture_output=True, text=True).stdout.split()
    meta = {
        "versions": dict(zip(("torch", "torchvision", "pillow"), versions)),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                 cwd=HERE).stdout.strip(),
        "cores": len(os.sched_getaffinity(0)),
        "cpu": platform.processor() or platform.machine(),
        "stoker": stoker.__version__,
        "batch": BATCH,
        "epochs": EPOCHS,
        "files": sum(len(f) for _, _, f in os.walk(args.data)) - 1,
        "load": [load0, load1],
        "command": "python bench/many_ranks.py " + " ".join(sys.argv[1:]),
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    table = render(meta, results)
    print(table)
    if args.out:
        replace_section(Path(args.out), table)
    return 0


def render(meta: dict, results: dict[str, list[dict]]) -> str:
    one = statistics.median(r["images_per_s"] for r in results["stoker, 1 rank"])
    torch_one = statistics.median(r["images_per_s"] for r in results["DataLoader, 1 rank"])
    lines = [
        "## Many ranks on one machine",
        "",
        f"Run {meta['date']} at commit `{meta['commit']}` · `{meta['command']}` · {meta['cores']} cores "
        f"· W3 on {meta['files']:,} JPEGs (~500x375), batch {meta['batch']} · load average (1 min) "
        f"{meta['load'][0]:.2f} at start, {meta['load'][1]:.2f} at end · "
        + ", ".join(f"{k} {v}" for k, v in meta.get("versions", {}).items())
        + (f" (CPU: {meta['cpu_model']})" if meta.get("cpu_model") else "") + ".",
        "Each rank is a process of a `torch.distributed` gloo job, all on the same cores; a mode's rate is "
        "the images of every rank over the time from the first rank's start to the last rank's end "
        f"({meta['epochs']} epochs, after a warm-up); CPU ms per image counts every thread and worker "
        f"process. Medians of {len(next(iter(results.values())))} rounds, each round running every mode "
        "in turn.",
        "",
        "| mode | images/s (median) | vs 1 rank of the same loader | CPU ms per image | runs (images/s) |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for label, runs in results.items():
        rate = statistics.median(r["images_per_s"] for r in runs)
        base = torch_one if label.startswith("DataLoader") else one
        cpu = statistics.median(r["cpu_s_per_image"] for r in runs) * 1000
        each = ", ".join(f"{r['images_per_s']:.1f}" for r in runs)
        lines.append(f"| {label} | {rate:.1f} | {rate / base:.3f} | {cpu:.2f} | {each} |")
    two = statistics.median(r["images_per_s"] for r in results["stoker, 2 ranks"])
    before = statistics.median(r["images_per_s"] for r in results[MODES[2][2]])
    torch_two = statistics.median(r["images_per_s"] for r in results["DataLoader + DistributedSampler, 2 ranks"])
    lines += [
        "",
        f"- Two stoker ranks together: {two / one:.1%} of one process's images/s (target: at least 95 %); "
        f"as before this change: {before / one:.1%}.",
        f"- stoker, 2 ranks against the DataLoader + DistributedSampler, 2 ranks: {two / torch_two:.2f}x.",
        "- Where each rank's share is made (`loader.explain()` of rank 0): "
        + "; ".join(f"`{line.strip()}`" for line in results["stoker, 2 ranks"][0]["per_rank"][0]["plan"].splitlines()
                    if "by rank" in line and "moved" in line)
        + f"; thread budget {results['stoker, 2 ranks'][0]['per_rank'][0]['budget'][0]} "
        f"({results['stoker, 2 ranks'][0]['per_rank'][0]['budget'][1]}).",
        "",
    ]
    return "\n".join(lines)


def replace_section(path: Path, section: str) -> None:
    text = path.read_text() if path.exists() else ""
    start = text.find("## Many ranks on one machine")
    if start < 0:
        path.write_text(text.rstrip() + "\n\n" + section)
        return
    end = text.find("\n## ", start + 1)
    path.write_text(text[:start] + section + ("" if end < 0 else text[end + 1:]))


if __name__ == "__main__":
    sys.exit(main())
