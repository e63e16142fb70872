"""Soak: long runs and many early stops, watching memory, threads and file descriptors.

    python bench/soak.py run w1 --minutes 40 --out bench/results/soak_w1.json
    python bench/soak.py run w3 --minutes 40 --out bench/results/soak_w3.json
    python bench/soak.py run pyfn --minutes 40 --out bench/results/soak_pyfn.json
    python bench/soak.py breaks --count 10000 --out bench/results/soak_breaks.json
    python bench/soak.py sigint --count 200 --out bench/results/soak_sigint.json
    python bench/soak.py plot bench/results/soak_*.json --out bench/results/soak.png
    python bench/soak.py plot bench/results/logs/soak_round5_w3_*.json \
        bench/results/logs/soak_round6_w3_whole_huge_pages.json --curves rss_mib rss_thp_mib \
        --title "W3 soak: mimalloc with and without transparent huge pages" \
        --out bench/results/soak_huge_pages.png
    python bench/soak.py refit bench/results/soak_pyfn.json --warmup 10

`run` iterates a pipeline that never ends (`repeat()`) for the given time, sampling the
process's resident memory (anonymous and file pages apart, and the anonymous memory held in
transparent huge pages), its threads and its open file descriptors every `--interval` seconds
(from /proc), the C heap's bytes in use and held free (glibc's `mallinfo2`) and Python's
allocated blocks, with what autotuning chose where it changed (each stage's buffer capacity
and workers, which move the memory in use), and fits a line to each curve after the warm-up
(`--warmup` minutes, 10 by default: the allocators settle into their working set in the first
minutes, while the first epochs churn threads and buffers): a flat curve has a slope near 0 per
10 minutes. The pipelines: W1 (TFRecord → shuffle → batch → native parse and unpack in
parallel → prefetch), W3 (JPEG folder → shuffle → decode, crop, flip and normalise in parallel
→ batch → prefetch), and a Python-function pipeline (W1's batches through a NumPy function in
parallel calls). `--label` names the run in plots; `plot --curves` picks the curves.

`breaks` starts an iterator, takes 0 to 5 elements and drops it, `--count` times, over
pipelines with parallel maps, prefetch, shuffle and interleave; each start must end within
`--deadline` seconds (else the run stops as hung), and once every iterator is gone the process
must have the threads and descriptors it had before.

`sigint` sends SIGINT to the process while the main thread is blocked in `next()` (a stage
that never yields) and while a Python function runs (its worker busy in Python), `--count`
times each: every one must raise KeyboardInterrupt within `--deadline` seconds, and no thread
may be left afterwards.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()
    ]


def _mallinfo2():
    """glibc's `mallinfo2` (summed over its arenas), or None where the C library lacks it."""
    try:
        f = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    f.restype = _Mallinfo2
    return f


MALLINFO2 = _mallinfo2()


def _anon_huge_pages_mib() -> float | None:
    try:
        rollup = Path("/proc/self/smaps_rollup").read_text()
    except OSError:
        return None
    for line in rollup.splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1]) / 1024
    return None


def _thp_setting() -> str | None:
    """The kernel's transparent huge page mode (the bracketed word: always, madvise, never)."""
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return None
    return text[text.find("[") + 1 : text.find("]")] if "[" in text else text.strip()


def sample() -> dict:
    status = Path("/proc/self/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    out = {
        "rss_mib": int(fields["VmRSS"].split()[0]) / 1024,
        # Anonymous memory (the heaps) and file pages (libraries, mapped files) apart.
        "rss_anon_mib": int(fields["RssAnon"].split()[0]) / 1024,
        "rss_file_mib": int(fields["RssFile"].split()[0]) / 1024,
        # Python's own allocator's blocks in use (its small objects).
        "py_blocks": sys.getallocatedblocks(),
        "threads": int(fields["Threads"]),
        "fds": len(os.listdir("/proc/self/fd")),
    }
    thp = _anon_huge_pages_mib()
    if thp is not None:
        # Anonymous memory backed by transparent huge pages: the kernel maps (and khugepaged
        # later collapses) whole 2 MiB pages where an allocator asked for them, so a few live
        # bytes can make 2 MiB resident.
        out["rss_thp_mib"] = thp
    if MALLINFO2 is not None:
        # The C heap, where NumPy's arrays live (the engine's Rust memory is mimalloc's, and
        # Python's small objects are in its own arenas): the bytes handed out, and the freed
        # bytes glibc keeps for reuse instead of returning them. RSS can step while the first
        # stays flat: that is the allocator keeping memory, not a leak.
        m = MALLINFO2()
        out["malloc_in_use_mib"] = (m.uordblks + m.hblkhd) / 2**20
        out["malloc_free_held_mib"] = m.fordblks / 2**20
    return out


CURVES = (
    "rss_mib",
    "rss_anon_mib",
    "rss_file_mib",
    "rss_thp_mib",
    "py_blocks",
    "threads",
    "fds",
    "malloc_in_use_mib",
    "malloc_free_held_mib",
)


def slope_per_10min(ts: list[float], ys: list[float]) -> float:
    """Least-squares slope, in units per 10 minutes."""
    if len(ts) < 2:
        return 0.0
    return float(np.polyfit(np.array(ts), np.array(ys), 1)[0]) * 600


def data_dir() -> Path:
    d = Path(os.environ.get("STOKER_SOAK_DATA", Path(tempfile.gettempdir()) / "stoker-soak"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def pipeline(name: str):
    from stoker import datasets, workloads

    if name in ("w1", "pyfn"):
        out = data_dir() / "w1"
        files = sorted(str(p) for p in out.glob("*.tfrecord")) if out.exists() else []
        if not files:
            files = datasets.write_chess_tfrecords(str(out), num_files=4, num_examples=40_000)
        ds = workloads.chess_pipeline(files, seed=None, batch_size=256).repeat()
        if name == "pyfn":

            def rescale(b: dict) -> dict:
                return {**b, "board": b["board"] * np.float32(0.5), "score": np.tanh(b["score"])}

            ds = ds.map(rescale, num_parallel_calls=2).prefetch(2)
        return ds
    if name == "w3":
        out = data_dir() / "w3"
        if not any(out.glob("*/*.jpg")):
            datasets.write_image_folder(str(out), n=600)
        return workloads.imagenet_pipeline(str(out), size=224, batch_size=64, seed=0).repeat()
    raise SystemExit(f"unknown pipeline {name!r}")


def tuned(ds) -> dict:
    """What autotuning decided, which moves the memory in use: the elements the stages may
    buffer and their workers, per stage."""
    return {s["name"]: [s["buffer_capacity"], s["workers"]] for s in ds.stats() if s["buffer_capacity"] or s["workers"]}


def run(args) -> dict:
    ds = pipeline(args.pipeline)
    start = time.monotonic()
    samples = [{"t": 0.0, **sample(), "elements": 0}]
    elements = 0
    next_sample = start + args.interval
    end = start + args.minutes * 60
    last_tuned = None
    for _ in ds:
        elements += 1
        now = time.monotonic()
        if now >= next_sample:
            s = {"t": now - start, **sample(), "elements": elements}
            # Kept where it changed only: the samples are memory this process holds too.
            if (choice := tuned(ds)) != last_tuned:
                s["tuned"] = last_tuned = choice
            samples.append(s)
            next_sample += args.interval
            if now >= end:
                break
    result = {
        "kind": "run",
        "pipeline": args.pipeline,
        "label": args.label or args.pipeline,
        "transparent_hugepage": _thp_setting(),
        "minutes": args.minutes,
        "interval_s": args.interval,
        "elements": elements,
        "samples": samples,
    }
    return {**result, **fit(samples, args.warmup)}


def fit(samples: list[dict], warmup: float) -> dict:
    """The slope of each curve after `warmup` minutes, the RSS range then, and each curve's
    median per 10-minute window after the warm-up."""
    after = [s for s in samples if s["t"] >= warmup * 60]
    if not after:
        return {"warmup_min": warmup, "slopes_per_10min": {}, "rss_mib_after_warmup": None}
    ts = [s["t"] for s in after]
    windows = {}
    for start in range(int(warmup), int(samples[-1]["t"] // 60), 10):
        inside = [s for s in after if start * 60 <= s["t"] < (start + 10) * 60]
        if inside:
            medians = {k: float(np.median([s[k] for s in inside])) for k in CURVES if k in inside[0]}
            windows[f"{start}-{start + 10}"] = medians
    return {
        "warmup_min": warmup,
        "slopes_per_10min": {k: slope_per_10min(ts, [s[k] for s in after]) for k in after[0] if k in CURVES},
        "rss_mib_after_warmup": [min(s["rss_mib"] for s in after), max(s["rss_mib"] for s in after)],
        "medians_per_10min": windows,
    }


def refit(args) -> None:
    """Fits the curves of recorded runs again with another warm-up, in place."""
    for path in args.files:
        doc = json.loads(Path(path).read_text())
        if doc.get("kind") == "run":
            doc.update(fit(doc["samples"], args.warmup))
            Path(path).write_text(json.dumps(doc, indent=1) + "\n")


def watchdog(deadline: float, what: str) -> threading.Timer:
    """Ends the process (exit 3) if not cancelled within `deadline` seconds: a hang."""

    def hung() -> None:
        sys.stderr.write(f"HUNG: {what} did not end within {deadline} s\n")
        import faulthandler

        faulthandler.dump_traceback(all_threads=True)
        os._exit(3)

    t = threading.Timer(deadline, hung)
    t.daemon = True
    t.start()
    return t


def settle(baseline: dict, within: float = 10.0) -> dict:
    """Waits for the threads and descriptors to fall back to `baseline`; what is left."""
    until = time.monotonic() + within
    while True:
        gc.collect()
        now = sample()
        if (now["threads"] <= baseline["threads"] and now["fds"] <= baseline["fds"]) or time.monotonic() > until:
            return now
        time.sleep(0.05)


def breaks(args) -> dict:
    import stoker as sk

    rng = random.Random(0)
    chess = pipeline("w1")  # makes the data once
    files = sorted(str(p) for p in (data_dir() / "w1").glob("*.tfrecord"))
    kinds = {
        "w1": lambda: chess,
        "interleave": lambda: (
            sk.Dataset.from_tensor_slices(np.array(files))
            .interleave(lambda f: sk.TFRecordDataset(f), cycle_length=2, num_parallel_calls=2)
            .prefetch(4)
        ),
        "pyfn": lambda: sk.Dataset.range(10**9).map(lambda x: x * 2, num_parallel_calls=3).prefetch(8),
        "shuffle": lambda: sk.Dataset.range(10**9).shuffle(1000).batch(32).prefetch(2),
    }
    gc.collect()
    baseline = settle(sample(), within=0.5)
    by_kind = dict.fromkeys(kinds, 0)
    curve: list[dict] = []
    worst = 0.0
    t0 = time.monotonic()
    for i in range(args.count):
        kind = rng.choice(sorted(kinds))
        take = rng.randint(0, 5)
        dog = watchdog(args.deadline, f"early break {i} ({kind}, {take} elements)")
        start = time.perf_counter()
        it = iter(kinds[kind]())
        for _ in range(take):
            next(it)
        del it
        worst = max(worst, time.perf_counter() - start)
        dog.cancel()
        by_kind[kind] += 1
        if (i + 1) % 500 == 0:
            curve.append({"breaks": i + 1, **sample()})
    end = settle(baseline)
    return {
        "kind": "breaks",
        "count": args.count,
        "by_pipeline": by_kind,
        "seconds": time.monotonic() - t0,
        "worst_s": worst,
        "hangs": 0,
        "baseline": baseline,
        "after": end,
        "leaked_threads": max(0, end["threads"] - baseline["threads"]),
        "leaked_fds": max(0, end["fds"] - baseline["fds"]),
        "every_500": curve,
        "rss_mib_slope_per_1000_breaks": (
            float(np.polyfit([c["breaks"] for c in curve[1:]], [c["rss_mib"] for c in curve[1:]], 1)[0]) * 1000
            if len(curve) > 2
            else None
        ),
    }


def sigint(args) -> dict:
    import stoker as sk

    # A process started in the background by a non-interactive shell ignores SIGINT: use
    # Python's own handler.
    signal.signal(signal.SIGINT, signal.default_int_handler)

    def spin(x):
        # Busy in Python for a second: long enough to be inside it when the signal comes,
        # short enough that the workers are free soon after the iterator is dropped.
        t = time.monotonic()
        while time.monotonic() - t < 1.0:
            pass
        return x

    cases = {
        # The main thread blocked in next(): a filter that rejects every element, forever.
        "blocked_next": lambda: sk.Dataset.range(10).repeat().filter(lambda v: False),
        # A Python function running (its worker holds the GIL in Python code).
        "inside_python_function": lambda: sk.Dataset.range(10).map(spin, num_parallel_calls=2),
    }
    rng = random.Random(0)
    gc.collect()
    baseline = settle(sample(), within=0.5)
    results = {}
    for name, make in cases.items():
        delays = []
        for i in range(args.count):
            ds = make()
            it = iter(ds)
            sent: list[float] = []

            def fire(sent: list[float] = sent) -> None:
                sent.append(time.monotonic())
                os.kill(os.getpid(), signal.SIGINT)

            timer = threading.Timer(0.2 + 0.2 * rng.random(), fire)
            dog = watchdog(args.deadline + 5, f"SIGINT {name} {i}")
            timer.start()
            try:
                next(it)
                raise SystemExit(f"{name}: next() returned")
            except KeyboardInterrupt:
                delays.append(time.monotonic() - sent[0])
            finally:
                timer.join()
            dog.cancel()
            del it, ds
        left = settle(baseline)
        late = [d for d in delays if d > args.deadline]
        if late:
            raise SystemExit(f"{name}: {len(late)} interrupts took over {args.deadline} s: {late[:5]}")
        results[name] = {
            "count": args.count,
            "interrupted": len(delays),
            "median_s": float(np.median(delays)),
            "max_s": max(delays),
            "threads_after": left["threads"],
            "leaked_threads": max(0, left["threads"] - baseline["threads"]),
            "leaked_fds": max(0, left["fds"] - baseline["fds"]),
        }
    return {"kind": "sigint", "baseline": baseline, "cases": results, "hangs": 0}


TITLES = {
    "rss_mib": "resident memory (MiB)",
    "rss_anon_mib": "anonymous memory (MiB)",
    "rss_thp_mib": "of it in huge pages (MiB)",
    "threads": "threads",
    "fds": "open file descriptors",
}


def plot(args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [json.loads(Path(p).read_text()) for p in args.files]
    runs = [r for r in runs if r.get("kind") == "run"]
    fig, axes = plt.subplots(len(args.curves), 1, figsize=(9, 3 * len(args.curves)), sharex=True, squeeze=False)
    axes = axes[:, 0]
    for r in runs:
        t = [s["t"] / 60 for s in r["samples"]]
        name = r.get("label", r["pipeline"])
        for ax, key in zip(axes, args.curves):
            if key not in r["slopes_per_10min"]:
                continue
            label = f"{name} ({r['slopes_per_10min'][key]:+.2f} per 10 min after {r['warmup_min']:g} min)"
            ax.plot(t, [s[key] for s in r["samples"]], label=label)
    for ax in axes:
        for w in sorted({r["warmup_min"] for r in runs}):
            ax.axvline(w, color="grey", linestyle=":", linewidth=1)
    for ax, key in zip(axes, args.curves):
        ax.set_ylabel(TITLES.get(key, key))
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("minutes")
    fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.out, dpi=90)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("pipeline", choices=["w1", "w3", "pyfn"])
    r.add_argument("--minutes", type=float, default=40)
    r.add_argument("--interval", type=float, default=10)
    r.add_argument("--warmup", type=float, default=10)
    r.add_argument("--label", help="the run's name in plots (the pipeline's by default)")
    b = sub.add_parser("breaks")
    b.add_argument("--count", type=int, default=10_000)
    b.add_argument("--deadline", type=float, default=30)
    s = sub.add_parser("sigint")
    s.add_argument("--count", type=int, default=200)
    s.add_argument("--deadline", type=float, default=5)
    p = sub.add_parser("plot")
    p.add_argument("files", nargs="+")
    p.add_argument("--curves", nargs="+", default=["rss_mib", "threads", "fds"], choices=sorted(TITLES))
    p.add_argument("--title", default="stoker soak: samples every 10 s")
    for x in (r, b, s, p):
        x.add_argument("--out", required=True)
    f = sub.add_parser("refit")
    f.add_argument("files", nargs="+")
    f.add_argument("--warmup", type=float, default=10)
    args = ap.parse_args()
    if args.cmd == "plot":
        plot(args)
        return 0
    if args.cmd == "refit":
        refit(args)
        return 0
    result = {"run": run, "breaks": breaks, "sigint": sigint}[args.cmd](args)
    result["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    result["command"] = "python bench/soak.py " + " ".join(sys.argv[1:])
    result["cpus"] = os.cpu_count()
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
