#!/usr/bin/env python3
"""stoker vs its peers on the reference workloads, in one run, on the same cores.

    python bench/run.py --workload all --out BENCHMARKS.md     # the full benchmark
    python bench/run.py --workload w1 --quick                   # a smoke run (tiny data)

Workloads (docs: workloads): W1 chess-tfrecord, W2 segmentation-png, W3 imagenet-jpeg, W4
mnist-small, and W3L: W3 on photos twice as large (~1000x750), where stoker's DCT-scaled JPEG
decode applies. Every (workload, contender, cores) runs in its own child process
(bench_child.py), pinned with ``taskset -c 0`` (1 core) or ``taskset -c 0,1`` (2 cores), with
OMP_NUM_THREADS & co. set to the core count; the child also sets TF's intra/inter-op threads /
torch's threads / stoker's ``threads=`` to it. Peak RSS is
the child's ``ru_maxrss`` from ``os.wait4``; the tree's summed PSS (the child plus any worker
processes) is sampled from /proc meanwhile. Results go to ``bench/results/<workload>.json``
and ``.png``, and a report to ``--out``. A contender that fails is reported as failed.
W2/W3/W3L also measure the decode-only limit (decode_limit.py: every file in memory, decoded alone
on one pinned core, by stoker's decoder and, as reference lines, PIL, OpenCV and tf.io); the
limit for N cores is that 1-core rate × N.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import glob
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from importlib import metadata

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
sys.path.insert(0, HERE)

import decode_limit  # noqa: E402
from bench_mem import tree_mem_kib  # noqa: E402

WORKLOADS = ["w1", "w2", "w3", "w3l", "w4"]
#: W3L is W3's pipeline and peers (the child runs "w3") on photos twice as large.
CHILD_WORKLOAD = {"w3l": "w3"}
W1_CONTENDERS = ["stoker", "tf.data (fast form)", "tf.data (slow form)", "torch DataLoader (workers=cores)"]
W2_CONTENDERS = ["stoker", "tf.data", "torch DataLoader (OpenCV, workers=cores)"]
W3_CONTENDERS = ["stoker", "tf.data (ResNet preprocessing)", "torch DataLoader (torchvision, workers=cores)"]
W4_CONTENDERS = ["stoker", "tf.data", "torch DataLoader (0 workers)", "torch DataLoader (2 workers)"]
TITLES = {"w1": "W1 chess-tfrecord", "w2": "W2 segmentation-png", "w3": "W3 imagenet-jpeg",
          "w3l": "W3L imagenet-jpeg on ~1000x750 photos (DCT-scaled decode)", "w4": "W4 mnist-small"}
UNITS = {"w1": "ex/s", "w2": "pairs/s", "w3": "images/s", "w3l": "images/s", "w4": "ex/s"}
# The targets (the issue): stoker ÷ peer ≥ x, per workload; and ≥ LIMIT_TARGET of the decode-only limit.
TARGETS = {"w2": {"tf.data": 1.5},
           "w3": {"tf.data (ResNet preprocessing)": 1.5, "torch DataLoader (torchvision, workers=cores)": 2.0}}
LIMIT_TARGET = 0.9
#: Where decoding less than the whole file is the point: W3L decodes most crops at 1/2 scale.
LIMIT_TARGETS = {"w3l": 1.0}

THREAD_VARS = ["OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "BLIS_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS",
               "RAYON_NUM_THREADS", "TOKIO_WORKER_THREADS", "STOKER_THREADS"]


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------

def stoker_importable(py: str) -> tuple[bool, str]:
    p = subprocess.run([py, "-c", "import stoker, stoker.datasets; "
                        "print(getattr(stoker, '__version__', '?'), stoker.JPEG_BACKEND)"],
                       check=False, capture_output=True, text=True, cwd="/")
    if p.returncode == 0:
        return True, p.stdout.strip()
    err = p.stderr.strip().splitlines()
    return False, err[-1] if err else f"exit status {p.returncode}"


def prepare_data(workload: str, data_dir: str, params: dict, prefer_stoker: bool, py: str) -> dict:
    """Generates the data into data_dir unless its meta.json already matches."""
    meta_path = os.path.join(data_dir, "meta.json")
    try:
        with open(meta_path) as f:
            meta = json.load(f)
        same = all(meta.get(k) == v for k, v in params.items())
        same = same and (meta["generator"].startswith("stoker") == prefer_stoker)
        if workload in ("w1", "w2", "w3", "w3l"):
            same = same and all(os.path.exists(os.path.join(data_dir, n)) for n in meta["files"])
        else:
            same = same and all(os.path.exists(os.path.join(data_dir, n)) for n in ("x.npy", "y.npy"))
        if same:
            return meta
    except (OSError, ValueError, KeyError):
        pass
    cmd = [py, os.path.join(HERE, "bench_data.py"), CHILD_WORKLOAD.get(workload, workload), data_dir]
    if workload == "w1":
        cmd += ["--num-files", str(params["num_files"]), "--num-examples", str(params["num_examples"])]
    else:
        cmd += ["--n", str(params["n"])]
    if "size_scale" in params:
        cmd += ["--size-scale", str(params["size_scale"])]
    cmd += ["--seed", str(params["seed"])]
    print(f"[data] {' '.join(shlex.quote(c) for c in cmd)}", flush=True)
    t = time.time()
    subprocess.run(cmd, check=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES=""))
    print(f"[data] done in {time.time() - t:.0f} s", flush=True)
    with open(meta_path) as f:
        return json.load(f)


# --------------------------------------------------------------------------------------------
# Children
# --------------------------------------------------------------------------------------------

def run_child(workload: str, contender: str, cores: int, cpus: list[int], data_dir: str, runs: int,
              batches: int, min_seconds: float, touch: str, timeout: float, py: str, log_dir: str,
              sample_s: float) -> dict:
    slug = "".join(ch if ch.isalnum() else "_" for ch in contender).strip("_")
    base = os.path.join(log_dir, f"{workload}-{slug}-{cores}c")
    out_json = base + ".json"
    if os.path.exists(out_json):
        os.remove(out_json)
    cpu_list = ",".join(str(c) for c in cpus[:cores])
    cmd = ["taskset", "-c", cpu_list, py, os.path.join(HERE, "bench_child.py"),
           "--workload", CHILD_WORKLOAD.get(workload, workload),
           "--contender", contender, "--cores", str(cores), "--data-dir", data_dir, "--runs", str(runs),
           "--batches", str(batches), "--min-seconds", str(min_seconds), "--touch", touch, "--out", out_json]
    env = dict(os.environ)
    env.update({v: str(cores) for v in THREAD_VARS})
    env.update(TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")
    print(f"[run] {workload} | {contender} | {cores} core(s) (cpus {cpu_list}) ...", flush=True)
    t0 = time.time()
    with open(base + ".log", "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                start_new_session=True)
        peak_pss = peak_rss_sum = max_procs = 0
        timed_out = False
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.time() - t0 > timeout:
                timed_out = True
                os.killpg(proc.pid, 9)
                pid, status, ru = os.wait4(proc.pid, 0)
                break
            pss, rss, n = tree_mem_kib(proc.pid)
            peak_pss, peak_rss_sum, max_procs = max(peak_pss, pss), max(peak_rss_sum, rss), max(max_procs, n)
            time.sleep(sample_s)
        proc.returncode = os.waitstatus_to_exitcode(status)
        try:  # leftovers of the child's session (e.g. orphaned loader workers)
            os.killpg(proc.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
    wall = time.time() - t0
    try:
        with open(out_json) as f:
            res = json.load(f)
    except (OSError, ValueError):
        res = {"workload": workload, "contender": contender, "cores": cores, "ok": False}
    if not res.get("ok") and "error" not in res:
        with open(base + ".log", errors="replace") as f:
            tail = [ln.rstrip() for ln in f.readlines()[-15:] if ln.strip()]
        why = f"timed out after {timeout:.0f} s" if timed_out else f"exit status {proc.returncode}"
        res["error"] = f"child died ({why}) without a result; log tail: " + " | ".join(tail[-5:])
    # The child also samples its tree after the warm-up and after the timed passes (short
    # children can finish between two of our samples).
    peak_pss = max(peak_pss, res.get("child_tree_pss_kib", 0))
    peak_rss_sum = max(peak_rss_sum, res.get("child_tree_rss_kib", 0))
    res.update({"cmd": " ".join(shlex.quote(c) for c in cmd), "exit_code": proc.returncode, "wall_s": wall,
                "peak_rss_mib": ru.ru_maxrss / 1024, "cpu_user_s": ru.ru_utime, "cpu_sys_s": ru.ru_stime,
                "peak_tree_pss_mib": peak_pss / 1024, "peak_tree_rss_sum_mib": peak_rss_sum / 1024,
                "max_procs": max_procs, "log": os.path.relpath(base + ".log", ROOT)})
    if res.get("ok"):
        rates = [r["ex_per_s"] for r in res["runs"]]
        print(f"[run]   {res['median_ex_per_s']:,.0f} ex/s ({len(rates)} runs, {min(rates):,.0f}–{max(rates):,.0f}), "
              f"peak RSS {res['peak_rss_mib']:.0f} MiB, tree PSS {res['peak_tree_pss_mib']:.0f} MiB, "
              f"{wall:.0f} s", flush=True)
    else:
        print(f"[run]   FAILED: {res['error'][:300]}", flush=True)
    return res


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------

def sh(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine_info() -> dict:
    model = ""
    for line in sh(["lscpu"]).splitlines():
        if line.startswith("Model name:"):
            model = line.split(":", 1)[1].strip()
            break
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            mem = f"{int(f.readline().split()[1]) / 1024 / 1024:.1f} GiB"
    except (OSError, ValueError):
        pass
    return {"cpu_model": model, "logical_cpus": os.cpu_count(), "affinity": sorted(os.sched_getaffinity(0)),
            "memory": mem, "kernel": platform.release(), "os": platform.platform(),
            "python": platform.python_version()}


SPIN = ("import time\nt = time.perf_counter(); n = 0\n"
        "while time.perf_counter() - t < 2.0:\n    for _ in range(10000): n += 1\nprint(n)")


def core_scaling(py: str, cpus: list[int]) -> float | None:
    """Work done on 2 pinned cores at once / work done on 1 (a spin loop); None if < 2 cpus."""
    if len(cpus) < 2:
        return None
    try:
        def spin(cpu: int) -> subprocess.Popen:
            return subprocess.Popen(["taskset", "-c", str(cpu), py, "-c", SPIN], stdout=subprocess.PIPE, text=True)
        solo = int(spin(cpus[0]).communicate()[0])
        pair = [spin(cpus[0]), spin(cpus[1])]
        both = sum(int(p.communicate()[0]) for p in pair)
        return both / solo if solo else None
    except (OSError, ValueError):
        return None


def lib_versions() -> dict:
    out = {}
    for pkg in ("stoker", "tensorflow", "tensorflow-cpu", "torch", "torchvision", "numpy", "protobuf", "pillow",
                "opencv-python-headless", "opencv-python", "matplotlib"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


def fmt_rate(r: dict | None) -> str:
    if r is None:
        return "—"
    if not r.get("ok"):
        err = r.get("error", "?").replace("\n", " ").replace("|", "\\|")
        return f"**failed**: `{err[:70]}{'…' if len(err) > 70 else ''}`"
    rates = [x["ex_per_s"] for x in r["runs"]]
    med = r["median_ex_per_s"]
    spread = (max(rates) - min(rates)) / 2 / med * 100 if med else 0
    return f"{med:,.0f} ±{spread:.0f}%"


def ratio(s: dict | None, p: dict | None) -> str:
    if not (s and p and s.get("ok") and p.get("ok")) or not p["median_ex_per_s"]:
        return "n/a"
    return f"{s['median_ex_per_s'] / p['median_ex_per_s']:.2f}×"


def mib(r: dict | None, key: str) -> str:
    if r is None or not r.get("ok") or not r.get(key):
        return "—"
    return f"{r[key]:.0f}"


def plot(doc: dict, path: str) -> str | None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.transforms import blended_transform_factory
    except Exception as e:  # noqa: BLE001
        return f"no plot ({type(e).__name__}: {e})"
    names = doc["contenders"]
    cores = doc["cores"]
    fig, ax = plt.subplots(figsize=(1.9 * len(names) + 2, 4.2))
    width = 0.8 / len(cores)
    x_data_y_axes = blended_transform_factory(ax.transData, ax.transAxes)
    for j, c in enumerate(cores):
        xs, ys, labels = [], [], []
        for i, n in enumerate(names):
            r = doc["results"].get(n, {}).get(str(c))
            xs.append(i + (j - (len(cores) - 1) / 2) * width)
            ok = bool(r and r.get("ok"))
            ys.append(r["median_ex_per_s"] if ok else 0)
            labels.append(f"{ys[-1]:,.0f}" if ok else "failed")
        ax.bar(xs, [y if y > 0 else float("nan") for y in ys], width, label=f"{c} core{'s' if c > 1 else ''}",
               color=f"C{j}")
        lim = limit_rate(doc)
        if lim:
            ax.axhline(lim * c, color=f"C{j}", linestyle="--", linewidth=1,
                       label=f"decode-only limit, {c} core{'s' if c > 1 else ''} (stoker decoder × {c})")
        for x, y, lab in zip(xs, ys, labels):
            if y > 0:
                ax.annotate(lab, (x, y), ha="center", va="bottom", fontsize=7, rotation=90,
                            xytext=(0, 2), textcoords="offset points")
            else:
                ax.text(x, 0.02, lab, transform=x_data_y_axes, ha="center", va="bottom", fontsize=7,
                        rotation=90, color="red")
    ax.set_yscale("log")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([n.replace(" (", "\n(") for n in names], fontsize=8)
    ax.set_ylabel(f"{UNITS.get(doc['workload'], 'ex/s').replace('/s', ' / s')} (median, log scale)")
    ax.set_title(f"{TITLES[doc['workload']]}{' (quick smoke run)' if doc['quick'] else ''}")
    ax.margins(y=0.25)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def limit_rate(doc: dict, decoder: str | None = None) -> float | None:
    """The 1-core decode-only rate (examples/s) of ``decoder`` (default: the stoker decoder). The
    stoker decoder is timed before the pipelines and again after them: its rate is the mean of the
    two medians, so that the machine's load drifting during the run favours neither side."""
    name = decoder or doc.get("limit_decoder", "")
    rates = [r["median_ex_per_s"] for r in (doc.get("decode", {}).get(name), doc.get("decode_after", {}).get(name))
             if r and r.get("ok") and r.get("median_ex_per_s")]
    return sum(rates) / len(rates) if rates else None


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:.0f}%"


def decode_section(doc: dict, s: dict) -> list[str]:
    """W2/W3: the decode-only limit table and the targets."""
    cores, unit = doc["cores"], UNITS[doc["workload"]]
    dec = doc.get("decode", {})
    after = doc.get("decode_after", {})
    L = [f"Decode-only limit (every {'pair (photo + label map)' if doc['workload'] == 'w2' else 'file'} "
         "already in memory, decoded alone on one thread, one pinned core; the limit for N cores is the "
         "1-core rate × N). The stoker decoder's is the limit; the others are reference lines."
         + (" The stoker decoder is timed before the pipelines and again after them; its limit is the mean "
            "of the two medians." if after else ""), ""]
    head = ["decoder", f"{unit}, 1 core", "peak RSS MiB"] + [f"limit, {c}c" for c in cores] + \
        [f"stoker pipeline ÷ limit, {c}c" for c in cores]
    L += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for n in doc.get("decoders", []):
        r = dec.get(n)
        rate = limit_rate(doc, n)
        rates = fmt_rate(r) + (f", after: {fmt_rate(after[n])}" if n in after else "")
        row = [f"**{n}**" if n == doc.get("limit_decoder") else n, rates, mib(r, "peak_rss_mib")]
        row += ["—" if rate is None else f"{rate * c:,.0f}" for c in cores]
        row += [pct(s[c]["median_ex_per_s"] / (rate * c)) if rate and s[c] and s[c].get("ok") else "n/a"
                for c in cores]
        L.append("| " + " | ".join(row) + " |")
    L.append("")
    res = doc["results"]
    L += ["Targets (from the issue):", ""]
    for peer, want in TARGETS.get(doc["workload"], {}).items():
        got = []
        for c in cores:
            p = res.get(peer, {}).get(str(c))
            r = ratio(s[c], p)
            ok = r != "n/a" and s[c]["median_ex_per_s"] / p["median_ex_per_s"] >= want
            got.append(f"{c}c {r} ({'met' if ok else 'not met'})" if r != "n/a" else f"{c}c n/a")
        L.append(f"- stoker ≥ {want:g}× {peer}: " + ", ".join(got))
    lim, want = limit_rate(doc), LIMIT_TARGETS.get(doc["workload"], LIMIT_TARGET)
    got = []
    for c in cores:
        if lim and s[c] and s[c].get("ok"):
            f = s[c]["median_ex_per_s"] / (lim * c)
            ok = f > want if want >= 1 else f >= want
            got.append(f"{c}c {pct(f)} ({'met' if ok else 'not met'})")
        else:
            got.append(f"{c}c n/a")
    what = "above the decode-only limit" if want >= 1 else f"≥ {want * 100:.0f}% of the decode-only limit"
    L += [f"- stoker {what}: " + ", ".join(got), ""]
    return L


def workload_section(doc: dict, out_dir: str) -> list[str]:
    names, cores = doc["contenders"], doc["cores"]
    res = doc["results"]
    unit = UNITS.get(doc["workload"], "ex/s")
    s = {c: res.get("stoker", {}).get(str(c)) for c in cores}
    L = [f"## {TITLES[doc['workload']]}", ""]
    if doc["quick"]:
        L += ["> **Quick smoke run on tiny data: these numbers are not representative.**", ""]
    L += [(f"Run {doc['date']} at commit `{doc.get('git', '?')}` · `{doc['command']}` · data: {doc['data']['desc']} "
           f"(generator: `{doc['data']['generator']}`) · {doc['protocol']} · load average (1 min) "
           f"{doc['loadavg_start'][0]:.2f} at start, {doc.get('loadavg_end', [float('nan')])[0]:.2f} at end"), ""]
    head = ["contender"] + [f"{unit}, {c} core{'s' if c > 1 else ''}" for c in cores] + \
        ["peak RSS MiB (" + " / ".join(f"{c}c" for c in cores) + ")",
         "tree PSS MiB (" + " / ".join(f"{c}c" for c in cores) + ")"] + \
        [f"stoker ÷ this, {c}c" for c in cores]
    L += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for n in names:
        rs = [res.get(n, {}).get(str(c)) for c in cores]
        row = [f"**{n}**" if n == "stoker" else n] + [fmt_rate(r) for r in rs]
        row += [" / ".join(mib(r, "peak_rss_mib") for r in rs), " / ".join(mib(r, "peak_tree_pss_mib") for r in rs)]
        row += ["—" if n == "stoker" else ratio(s[c], r) for c, r in zip(cores, rs)]
        L.append("| " + " | ".join(row) + " |")
    L.append("")
    if doc.get("decoders"):
        L += decode_section(doc, s)
    png = doc.get("plot")
    if png:
        L += [f"![{TITLES[doc['workload']]}]({os.path.relpath(os.path.join(ROOT, png), out_dir)})", ""]
    fails = [(n, c, res[n][str(c)]) for n in names for c in cores
             if res.get(n, {}).get(str(c)) is not None and not res[n][str(c)].get("ok")]
    fails += [(n, 1, r) for n, r in doc.get("decode", {}).items() if not r.get("ok")]
    if fails:
        L += ["Failures:", ""]
        for n, c, r in fails:
            err = r.get("error", "?").replace("\n", " ").replace("|", "\\|")
            L.append(f"- {n}, {c} core(s): `{err[:500]}` (log: `{r.get('log', '?')}`)")
        L.append("")
    L += ["Setups:", ""]
    for n in names:
        note = next((r.get("notes") for r in res.get(n, {}).values() if r.get("notes")), None)
        if note:
            L.append(f"- {n}: {note}")
    for n, r in doc.get("decode", {}).items():
        if r.get("notes"):
            L.append(f"- {n}: {r['notes']}")
    L.append("")
    return L


METHOD = """## Method

- Each (workload, contender, cores) runs in its own process (`bench/bench_child.py`), started by
  `bench/run.py` under `taskset -c 0` (1 core) or `taskset -c 0,1` (2 cores), with
  `OMP_NUM_THREADS`, `MKL_NUM_THREADS`, `OPENBLAS_NUM_THREADS`, `TF_NUM_INTRAOP_THREADS`,
  `TF_NUM_INTEROP_THREADS`, `RAYON_NUM_THREADS` (and a few more) set to the core count. In the
  child: TF gets `tf.config.threading.set_{intra,inter}_op_parallelism_threads(cores)` and
  `tf.data.Options().threading.private_threadpool_size = cores`; torch gets
  `torch.set_num_threads(cores)`; stoker gets `build_pipeline(..., threads=cores)`. DataLoader
  worker processes inherit the pinning, so they share the same cores.
- In each child: build the pipeline, one warm-up pass, then the timed passes; the number is the
  median examples/s of the timed passes (± is half the min–max spread over the median). Every
  pass makes a fresh iterator (a new epoch: stoker/tf.data reshuffle, torch workers restart
  their file share), so per-epoch start-up (e.g. filling the shuffle buffer) is included.
  W1: a pass is the first 200 batches of 512 of a fresh epoch (102,400 examples; so each pass
  includes filling the 10,000-example shuffle buffer from scratch, for every contender alike).
  `--w1-batches 0` makes a pass one whole epoch (400,000 examples → 781 full batches; the torch
  contender drops each worker's own remainder, e.g. 780 batches with 2 workers).
  W4: epoch 1 is the warm-up and fills the cache; each timed pass is one whole later epoch
  served from the cache (60,000 examples, 469 batches); at least 10 epochs are timed, more
  until 2 s have been timed.
  W2: a pass is one epoch of all 240 pairs (80 batches of 3; no shuffle). W3: a pass is one
  epoch of all 3,000 files (11 batches of 256 + one of 184), reshuffled by every contender.
  `--w2-pairs N` / `--w3-files N` change the sizes (`--quick`: 6 pairs, 24 files).
  W3L: W3's pipelines, peers, checks and decode-only limit on 1,200 JPEGs twice W3's size
  (~1000x750, `stoker.datasets.write_image_folder(size_scale=2)`; a pass is 4 batches of 256
  + one of 176). Its random crops (scale 0.08–1 of the area) go from ~210 px across to the
  whole photo; about 60 % of them (754 of 1,200 boxes drawn with seed 0) are at least 448 px
  both ways, and stoker decodes those at 1/2 scale in the DCT domain, the rest at full scale
  (only the crop's region, as on W3, whose ~500x375 photos never give a crop twice the output
  size). The target there is to exceed the full-decode limit.
- Consumption, identical for all: every batch is taken as NumPy arrays (tf.data:
  `as_numpy_iterator()`; stoker: `as_numpy_iterator()`; torch: `tensor.numpy()`, zero-copy) and
  the first and last element of every output array are read (`touch=ends`; no model, no
  copy). So a pipeline that hands out cached batches without copying (W4) is measured by its
  per-batch overhead, not by memory bandwidth. `--touch all` sums every array of every batch
  instead (a full read of the data, the same work added to every contender).
- The first batch of the warm-up pass is checked (not timed): W1 shapes/dtypes (board
  (512,8,8,24) f32, flags (512,10) f32, score (512,) f32), board values in {0,1} on channels
  0-5, 12-17 and {-1,0} on 6-11, 18-23, flags in {0,1}, score finite in [-1,1]; W4 first batch
  equal to `x[:128] / 255` and `y[:128]`, every timed epoch has 60,000 examples, and one more
  (untimed) cached epoch after the timed ones must equal `(x / 255, y)` in full, in batches of
  128. W2: every batch image (3,512,512,3) f32 and label (3,512,512,32) f32 (only the last may be
  smaller), every epoch 240 pairs; the first batch equals pairs 0-2 computed with PIL + NumPy
  (image within 1e-6 of `float32(x) / 255` centre-cropped, label exactly one-hot with the same
  classes). W3: every batch image (B,224,224,3) f32 (torchvision: (B,3,224,224)) and label (B,)
  int64, B = 256 except the last, every epoch 3,000 images with each class's count exactly as on
  disk; the first batch finite, in a normalised range and not constant. A contender failing a
  check is reported as failed. `bench/check_peers.py` checks the peers' outputs bit for bit
  against the golden fixtures in `tests/golden/` (W2 on `tests/golden/w2/`).
- Decode-only limit (W2, W3, W3L), measured in the same run: one child per decoder pinned to one core
  (`taskset -c 0`, 1 thread) reads every file into memory, then decodes them one at a time to
  uint8 RGB (H,W,3) — 1 warm-up pass (every shape checked; the first file(s) vs PIL: PNG bit-equal,
  JPEG mean abs diff ≤ 3), then ≥3 timed passes (more until 2 s are timed), median. W2 counts a
  pair (photo + label map) as one example. The limit for N cores is the 1-core rate × N (perfect
  scaling, which favours the limit; a pipeline that decodes less than the whole image, like
  TF's `decode_and_crop_jpeg`, a DCT-scaled JPEG decode or stoker's PNG crop decode (W2: the
  rows down to the crop's last, each unfiltered only up to the crop's right edge), can exceed
  100% of it; W2's
  pipeline also writes a 512x512x32 float32 one-hot, 33.5 MB per pair, that the limit does not:
  `bench/w2_one_hot_cost.py` times W2 with and without it against the decode-only pass). The limit
  proper is stoker's decoder, timed twice: before the pipelines and again after them (the limit is
  the mean of the two medians, so that the load of the shared machine drifting over the run's
  minutes favours neither the limit nor the pipelines):
  `Dataset.from_tensor_slices(np.array(blobs, dtype=object)).with_options(threads=1)
  .map(ops.decode_image("value", channels=3))`, iterated (8-bit PNGs go through stoker's own
  row decoder, the one the crop decode uses, reading whole images: since da5a079, 5–12 % faster
  than the png crate it replaced there, which raised W2's limit by as much); PIL
  (`np.asarray(Image.open(BytesIO(b)).convert("RGB"))`, libjpeg-turbo / zlib), OpenCV
  (`cv2.imdecode(..., IMREAD_COLOR_RGB)`, `cv2.setNumThreads(1)`) and TF
  (`tf.io.decode_jpeg` / `decode_png(channels=3)` eagerly) are reference lines.
- Peak RSS: `ru_maxrss` of the child from `os.wait4` (Linux: the max over the process and the
  descendants it reaped, e.g. DataLoader workers; not their sum). Tree PSS: the peak summed PSS
  of the child and all its descendants, from `/proc/*/smaps_rollup`, sampled every 0.5 s by the
  parent and by the child itself after the warm-up and after the timed passes (shared pages
  split fairly between processes; the better number for multi-process loaders).
- The machine is shared and noisy: compare ratios within one run, not across runs. "2-core
  scaling" under Machine is a pure-Python spin loop run on CPU 0 alone, then on CPUs 0 and 1 at
  once: the total work done by 2 cores relative to 1 (2.00 would be two full cores).

### Peer implementations

- **W1 tf.data fast form**: `TFRecordDataset(files, num_parallel_reads=AUTOTUNE) → shuffle(10000)
  → batch(512, drop_remainder=True) → map(tf.io.parse_example + vectorised math,
  num_parallel_calls=AUTOTUNE) → prefetch(AUTOTUNE)`. The math is bit-exact with the golden
  generator's (`tests/golden/make_golden.py`) but written for speed (~3× faster here than the
  literal formula): bits as `(x >> [7..0]) & 1` on uint8, the channel order as a transpose of
  the channel axis seen as (6, 4) → (4, 6) instead of `tf.gather`, signs in int8, then cast.
- **W1 tf.data slow form**: `TFRecordDataset(files)` (sequential reads) → shuffle(10000) →
  `map(parse_single_example + the same math per example, num_parallel_calls=AUTOTUNE)` →
  batch(512, drop_remainder=True) → prefetch(AUTOTUNE). (The map is parallel; what makes it
  slow is the per-element work.)
- **W1 torch**: `DataLoader(IterableDataset, batch_size=None, num_workers=cores,
  persistent_workers=True)`. Each worker reads its share of the files
  (`files[worker_id::num_workers]`, via `get_worker_info`) with a `struct`-based TFRecord reader
  (CRCs not verified — which favours it), parses each record with the `protobuf` package (upb
  backend; `tensorflow.Example` message class built from a hand-written descriptor, so TF is
  not imported), shuffles with its own 10,000-example buffer (reshuffled per epoch), batches
  512 (drop remainder) and does the math vectorised per batch in NumPy (`np.unpackbits` = the
  bit formula; `np.tanh` — may differ from TF's tanh by a couple of ULPs). Batches are returned
  as torch tensors through the DataLoader's shared-memory transfer.
- **W2 tf.data**: `from_tensor_slices((image paths, label paths)) → map(load,
  num_parallel_calls=AUTOTUNE) → batch(3) → prefetch(AUTOTUNE)`; `load`: image `read_file →
  decode_png(channels=3) → cast(float32) / 255 → resize_with_crop_or_pad(512, 512)`; label
  `read_file → decode_png(channels=3) → resize_with_crop_or_pad(512, 512)` → one-hot by colour
  equality → float32 (512,512,32). The one-hot compares a packed colour code `r·65536 + g·256 + b`
  (int32) with the 32 class codes — the same values as the usual
  `tf.stack([reduce_all(equal(label, c), -1) for c in colors], -1)`, but ~15× faster in TF (5.5
  vs 89 ms per 512x512 label on one core here), so the peer is in its fast form. The label is
  cropped before the one-hot (as stoker does; the same values).
- **W2 torch**: `DataLoader(map-style Dataset, batch_size=3, shuffle=False, num_workers=cores,
  persistent_workers=True)`; in each worker (`cv2.setNumThreads(1)`): `cv2.imread(IMREAD_COLOR)`
  → `cvtColor(BGR2RGB)` → `astype(float32) / 255` → NumPy centre crop / zero pad with TF's
  `resize_with_crop_or_pad` offsets; label `imread → cvtColor → crop/pad` → NumPy one-hot (packed
  colour code == class codes) → float32; default collate stacks (shared-memory transfer).
- **W3 tf.data** (TF's official ResNet preprocessing): `from_tensor_slices((paths, labels)) →
  shuffle(3000, reshuffle_each_iteration=True) → map(preprocess, AUTOTUNE) → batch(256) →
  prefetch(AUTOTUNE)`; `preprocess`: `read_file → extract_jpeg_shape →
  sample_distorted_bounding_box(no boxes, min_object_covered=0.1, aspect_ratio_range=(3/4, 4/3),
  area_range=(0.08, 1), max_attempts=10, use_image_if_no_bounding_boxes=True) →
  decode_and_crop_jpeg(channels=3)` (decodes only the crop window) `→ resize(224x224, bilinear) →
  random_flip_left_right → / 255 → random_brightness(0.2) → random_contrast(0.8, 1.2) →
  (x − mean) / std` with ImageNet's mean (0.485, 0.456, 0.406) and std (0.229, 0.224, 0.225).
- **W3 torch**: torchvision `ImageFolder(root, transform)` (PIL `Image.open(f).convert("RGB")`)
  in `DataLoader(batch_size=256, shuffle=True, num_workers=cores, persistent_workers=True)`;
  transform `RandomResizedCrop(224) → RandomHorizontalFlip() → ColorJitter(brightness=0.2,
  contrast=0.2) → ToTensor() → Normalize(mean, std)` (output CHW; the others give HWC).
- **W4 tf.data**: `from_tensor_slices((x, y)).map(cast / 255, num_parallel_calls=AUTOTUNE)
  .batch(128).cache().prefetch(AUTOTUNE)`.
- **W4 torch**: map-style `Dataset` whose arrays are rescaled to float32 / 255 once, up front
  (that's its "cache"); `__getitem__` returns one example, default collate stacks 128;
  `DataLoader(batch_size=128, shuffle=False, num_workers=0 or 2, persistent_workers=workers>0)`.
  The 2-worker loader runs its 2 workers on the 1 or 2 pinned cores.
"""


def last_result(name: str) -> dict | None:
    """The results a benchmark script last wrote to bench/results/`name`, or None."""
    path = os.path.join(RESULTS, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def trace_overhead_section() -> list[str]:
    """The cost of `stoker.trace` on W1, from bench/trace_overhead.py's last run."""
    doc = last_result("trace_overhead.json")
    if doc is None:
        return []
    L = ["## Tracing overhead (W1)", "",
         f"Run {doc['date']} · `{doc['command']}` · per pass: W1 (`examples/w1_chess.py`), 20 warm-up "
         f"batches then {doc['batches']} batches of 512 timed, in its own pinned child; {doc['runs']} passes "
         "traced and untraced, alternating; medians.", "",
         "| cores | untraced ex/s | traced ex/s | overhead | trace file | spans kept | spans / counter samples "
         "dropped | file write |", "|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        L.append(f"| {r['cores']} | {r['off_examples_per_s']:,.0f} | {r['on_examples_per_s']:,.0f} | "
                 f"{r['overhead_percent']:+.1f} % | {r['trace_mb']:.1f} MB | {r['spans']:,.0f} | "
                 f"{r['dropped_spans']} / {r.get('dropped_counter_samples', '?')} | {r['write_s']:.2f} s |")
    L += ["", "Runs (ex/s): " + "; ".join(
        f"{r['cores']} core(s) untraced {r['off_runs']}, traced {r['on_runs']}" for r in doc["rows"]), ""]
    return L


def analyze_section() -> list[str]:
    """`stoker analyze` on a large trace against HTA, from bench/analyze_speed.py's last runs:
    the ResNet-50 one (analyze.json) and the newer schema's NCCL one (analyze_nccl.json)."""
    L: list[str] = []
    for name in ("analyze.json", "analyze_nccl.json"):
        path = os.path.join(RESULTS, name)
        if os.path.exists(path):
            with open(path) as f:
                L += analyze_part(json.load(f), heading=not L)
    # The XSpace part run again on its own (analyze_xspace.json; its Kineto runs are the NCCL
    # file's, without HTA, and not shown again).
    d = last_result("analyze_xspace.json")
    if L and d is not None:
        L += [f"The XSpace part again, run {d['date']} · `{d['command']}`, with the analysis as it is "
              "now (steps per device, the queued cause):", ""] + xspace_part(d)
    return L


def analyze_part(d: dict, heading: bool) -> list[str]:
    gb = d["trace_bytes"] / 1e9
    source = ("the real ResNet-50 `num_workers=0` trace's events replicated" if not d.get("source") else
              f"the events of the real trace `{d['source']}` (Kineto's newer schema, NCCL collectives, "
              "flows) replicated")
    L = (["## stoker analyze: a large trace", ""] if heading else []) + [
         f"Run {d['date']} · `{d['command']}` · a synthetic {gb:.2f} GB Kineto trace "
         f"(`bench/make_big_trace.py`: {source}, "
         "shifted in time), each tool on one pinned core, the peak RSS of its process as GNU time "
         "reports it.", "",
         "| tool | seconds | peak RSS MiB | GB/s |", "|---|---|---|---|",
         f"| **stoker analyze** | {d['stoker_seconds_median']:.1f} (runs {d['stoker_seconds']}) | "
         f"{d['stoker_peak_rss_mib']:.0f} | {gb / d['stoker_seconds_median']:.2f} |"]
    if "hta_seconds" in d:
        L.append(f"| HolisticTraceAnalysis {d.get('hta_version', '')} (load + temporal and idle-time breakdowns) | "
                 f"{d['hta_seconds']:.1f} | {d['hta_peak_rss_mib']:.0f} | {gb / d['hta_seconds']:.3f} |")
        L += ["", f"stoker is {d['hta_seconds'] / d['stoker_seconds_median']:.1f}× faster than HTA on this file. "
              "Target (issue 23): < 2 s and < 200 MiB RSS on one core. The first of the runs reads "
              "the file from disk, the others from the page cache."]
    L += ["", f"Verdict on the file: {d['stoker_verdict']}.", ""]
    return L + xspace_part(d)


def xspace_part(d: dict) -> list[str]:
    """The large-XSpace table of an analyze_speed.py run, if it has one."""
    L: list[str] = []
    if "xspace_bytes" in d:
        mb = d["xspace_bytes"] / 1e6
        L += [f"An XSpace of {mb:.0f} MB (`bench/make_big_xspace.py`: the real JAX CPU profile in "
              f"`tests/traces/jax/` with its events repeated, shifted in time, steps and correlation ids "
              f"renumbered; {d['xs_stoker_events']:,} events, {d['xs_stoker_steps']:,} steps), each tool on "
              "one pinned core from a fresh copy of the session, for the overview page's figures (step "
              "time, busy and idle, input share):", "",
              "| tool | seconds | peak RSS MiB | step time ms |", "|---|---|---|---|",
              f"| **stoker analyze** | {d['xs_stoker_seconds_median']:.2f} (runs {d['xs_stoker_seconds']}) | "
              f"{d['xs_stoker_peak_rss_mib']:.0f} | {d['xs_stoker_step_ms']:.3f} |"]
        if "xprof_rs_seconds" in d:
            L.append(f"| xprof-rs {d['xprof_rs_version']} `get_overview` | {d['xprof_rs_seconds_median']:.2f} "
                     f"(runs {d['xprof_rs_seconds']}) | {d['xprof_rs_peak_rss_mib']:.0f} | {d['xprof_rs_step_ms']} |")
        if "xprof_seconds" in d:
            L.append(f"| xprof {d['xprof_version']} overview page (`xspace_to_tool_data`) | "
                     f"{d['xprof_seconds']:.2f} | {d['xprof_peak_rss_mib']:.0f} | |")
        share = d["xs_stoker_peak_rss_mib"] * 2**20 / d["xspace_bytes"]
        L += ["", f"stoker's peak RSS is {share:.0%} of the file's size. The file is mapped, its pages let "
              "go as they are decoded; the host spans are not held: the analysis sweeps the steps in order "
              "while the file's host lines are decoded again and merged by start. Every byte of this "
              "synthetic file is an event, the worst case; in a real profile the HLO protos and other "
              "payloads are skipped unread.", ""]
    return L


def ab_runs(pattern: str) -> list[dict]:
    """bench/ab_builds.py's runs saved as `pattern` in bench/results, oldest first."""
    docs = []
    for path in sorted(glob.glob(os.path.join(RESULTS, pattern))):
        with open(path) as f:
            docs.append(json.load(f))
    return sorted(docs, key=lambda d: d["started"])


def ab_table(d: dict, name: dict | None = None, digits: int = 1) -> list[str]:
    """One bench/ab_builds.py run: its command, and per core count each build's rate, B's ratio to
    A and their peak RSS. `name`: how to call each build in the header (default its label); the
    run's `commits`, where it names them, say what each build was built from."""
    a, b = list(d["builds"])
    name = name or {a: a, b: b}
    unit = {"w1": "ex/s", "w2": "pairs/s", "w4": "ex/s"}.get(d["workload"], "images/s")
    built = ", ".join(f"`{k}`: the extension built at commit `{c}`" for k, c in d.get("commits", {}).items())
    built = f"; {built}" if built else ""
    L = [f"Run {d['started']}–{d['ended'][-9:]} · `{d['command']}` · {d['workload'].upper()}, "
         f"{d['rounds']} rounds × {d['runs_per_child']} timed epochs per child{built}", "",
         f"| cores | {name[a]} {unit} | {name[b]} {unit} | {b} ÷ {a} | peak RSS MiB ({a} / {b}) |",
         "|---|---|---|---|---|"]
    for cores, v in d["summary"].items():
        r = v[f"{b}/{a}"]
        L.append(f"| {cores} | {v[a]['ex_per_s']:,.{digits}f} | {v[b]['ex_per_s']:,.{digits}f} | "
                 f"{r['ex_per_s']:.3f} | {v[a]['peak_rss_mib']:.0f} / {v[b]['peak_rss_mib']:.0f} |")
    return L + [""]


def allocator_section() -> list[str]:
    """The extension's allocator settings against each other, from bench/ab_builds.py's runs
    (bench/results/ab_*.json)."""
    docs = ab_runs("ab_*.json")
    if not docs:
        return []
    L = ["## Allocator: mimalloc without transparent huge pages", "",
         "The extension's mimalloc is built with `no_thp`: it does not ask the kernel for transparent huge "
         "pages, because with them the resident memory of a long run crept up (RELIABILITY.md, \"Soak\"). "
         "What that costs in speed, and what a setting that keeps huge pages but returns only whole ones "
         "(`MIMALLOC_ALLOW_THP=2`) gives, measured with `bench/ab_builds.py`: the two builds or settings "
         "alternating, the stoker contender of the workload's table, medians over the rounds of each "
         "child's median rate and its peak RSS. `thp` is the extension as built at commit `77eb9e0` "
         "(mimalloc's default: huge pages asked for), `no_thp` the same code built with the feature.", ""]
    for d in docs:
        a, b = list(d["builds"])
        name = {k: k + (f" ({' '.join(f'{e}={v}' for e, v in env.items())})" if env else "")
                for k, env in ((k, d.get("env", {}).get(k, {})) for k in (a, b))}
        L += ab_table(d, name, digits=0)
    L += ["Workload tables above that ran before this change (each names its commit) had mimalloc's "
          "huge pages: on two cores the build of now gives less than their stoker rows, for W3 by the "
          "ratio here. The stoker decode-only limits were not measured again.", ""]
    return L


def decode_checks_section() -> list[str]:
    """What this wave's decode changes cost or gain, from bench/ab_builds.py's runs of the build
    before them against the build with them (bench/results/decode_ab_*.json)."""
    docs = ab_runs("decode_ab_*.json")
    if not docs:
        return []
    L = ["## Decoding as TensorFlow does, and checking every PNG stream", "",
         "Two changes to decoding, measured with `bench/ab_builds.py` (the two builds alternating, the "
         "stoker contender of the workload's table, medians over the rounds of each child's median "
         "rate and its peak RSS): `decode_image` runs TensorFlow's default IDCT for JPEG (the fast "
         "integer one, `dct_method=\"\"`; before it ran the accurate one, PIL's), which W3 decodes "
         "with; and every PNG path inflates the image data to its end to check its zlib checksum, "
         "which W2's fused crop decodes skipped below the crop before (they still unfilter only "
         "down to the crop).", ""]
    for d in docs:
        L += ab_table(d)
    L += ["The W2 and W3 tables above ran before these changes (each names its commit): by the ratios "
          "here, W2's stoker rows are now that much slower; W3's are unchanged within the noise (its "
          "crops decode only their region, where the IDCT is a small part of the work).", ""]
    return L


def refactor_section() -> list[str]:
    """The restructuring of issue 40 (operators behind a trait object and a registry, the split
    parallel maps, the analyzer's dialects) against the build before it, from bench/ab_builds.py's
    runs (bench/results/refactor_ab_*.json)."""
    docs = ab_runs("refactor_ab_*.json")
    if not docs:
        return []
    L = ["## Restructured code, same speed", "",
         "The operators behind a trait object and a registry instead of a closed enum, the parallel "
         "maps' thread bodies split into functions, and the other restructuring of issue 40 were to "
         "change no figure. Measured with `bench/ab_builds.py` (the two builds alternating, the stoker "
         "contender of the workload's table, medians over the rounds of each child's median rate and "
         "its peak RSS):", ""]
    spreads = []
    for d in docs:
        L += ab_table(d)
        for build, by_cores in d.get("runs", {}).items():
            for cores, runs in by_cores.items():
                rss = [r["peak_rss_mib"] for r in runs]
                spreads.append(f"{d['workload'].upper()} {build} {cores} core(s) {min(rss):.0f}–{max(rss):.0f}")
    L += ["Peak RSS spreads between runs of either build, so a difference of the medians is not the "
          f"build's: the range over the rounds, MiB: {'; '.join(spreads)}.", ""]
    return L


def wheel_section() -> list[str]:
    """The portable wheel: its size and install time (tools/wheel_check.py --json →
    bench/results/wheel.json), and the abi3 build against one for a single CPython
    (bench/ab_builds.py → bench/results/wheel_ab_*.json)."""
    w = last_result("wheel.json")
    docs = ab_runs("wheel_ab_*.json")
    if w is None and not docs:
        return []
    L = ["## The portable wheel", "",
         "`make wheel` builds one wheel for every CPython from 3.9 on (abi3), linked by zig against glibc "
         "2.28's symbols (`manylinux_2_28`, as `auditwheel show` reports), libjpeg-turbo inside. "
         "`make wheel-test` (`tools/wheel_check.py`) installs it into fresh venvs with no Rust toolchain "
         "on `PATH`, of CPython 3.11 and of CPython 3.9 (Debian 11's, `tools/python39.sh`), and runs a "
         "pipeline of each kind there.", ""]
    if w is not None:
        L += [f"Run {w['date']} · `{w['command']}` · {w['cpus']} cores · `{w['wheel']}`, "
              f"{w['size_bytes'] / 1e6:.1f} MB, `{w['tag']}`", "",
              "| Python of the fresh venv | `pip install` of the wheel (numpy from PyPI included) "
              "| from the start of `pip install` to the first batch |", "|---|---|---|"]
        L += [f"| {r['python']} | {r['pip_install_s']:.1f} s | {r['first_batch_s']:.1f} s |" for r in w["runs"]]
        L += [""]
    if docs:
        L += ["What abi3 costs: the stable ABI replaces some of CPython's inline macros with function calls, "
              "and stoker crosses the Python boundary once per batch. The wheel (`abi3`: zig-linked, abi3) "
              "against the same commit built for CPython 3.11 alone with the system's toolchain (`cp311`: "
              "`maturin build --release --strip` without the abi3 feature), the two alternating, with "
              "`bench/ab_builds.py` (the stoker contender of each workload's table, medians over the rounds "
              "of each child's median rate and its peak RSS):", ""]
        for d in docs:
            L += ab_table(d)
        L += ["- W3 and W1 run at the same speed in either build, within what this shared machine moves "
              "between rounds.",
              "- W4 is the cheapest pipeline there is (a shuffle and a batch of 128 small rows, some 30 µs a "
              "batch), so the per-batch crossing is most of its cost, and its runs move a lot: on 2026-11-28 "
              "the same comparison also gave 0.81 / 0.87 and 0.94 / 1.10 (1 / 2 cores), and the wheel against "
              "an abi3 build with the system's toolchain 0.83 / 0.93, then 0.92 / 0.98. If part of it is real, "
              "it is a few microseconds a batch at 3 million examples a second, far past what a model "
              "consumes: not a reason to give up one wheel for every Python version.",
              "- The same build linked by the system's linker (glibc 2.36 here) is `manylinux_2_34` at best "
              "(newer glibc symbol versions); zig's link gives 2.28. Without `--strip` (the release profile "
              "keeps line tables) the wheel is 21.7 MB.", ""]
    return L


def tf_functions_section() -> list[str]:
    """tf.data code with TensorFlow functions in its maps, run by tf.data and by stoker with only
    the import changed (bench/tf_functions.py → bench/results/tf_functions.json)."""
    d = last_result("tf_functions.json")
    if not d:
        return []
    L = ["## TensorFlow functions in map", "",
         "The same tf.data code, its map functions calling TensorFlow, run by tf.data and by stoker with "
         "only the import changed (`import stoker as sk` and `sk.data` for `tf.data`), beside stoker's "
         "hand-written `sk.ops` pipeline for the same work where there is one. One process, the same "
         f"{d['affinity']} cores, elements per second, the median of 3 samples after one warm-up epoch, "
         "each sample as many whole epochs as take at least half a second "
         f"(TensorFlow {d['tensorflow']}, {d['date']}):", "",
         "```", d["command"], "```", "",
         "| pipeline | tf.data | stoker, same code | vs tf.data | stoker `sk.ops` | same code / `sk.ops` "
         "| how stoker ran the function |",
         "|---|---:|---:|---:|---:|---:|---|"]
    for r in d["rows"]:
        tf_rate, ours = r["tf.data"]["elements_per_s"], r["stoker"]["elements_per_s"]
        native = r.get("stoker sk.ops", {}).get("elements_per_s")
        how = r["stoker_explain"].split(": TensorFlow function ", 1)[-1]
        how = how.split(":", 1)[0] if how.startswith("translated") else how
        L.append(f"| {r['pipeline']} | {tf_rate:,.0f} | {ours:,.0f} | {ours / tf_rate:.2f}× | "
                 + (f"{native:,.0f} | {ours / native:.0%}" if native else "– | –") + f" | {how} |")
    L += ["", "Where every op of a function has a native counterpart, the same code becomes the same native "
          "ops as the hand-written pipeline, fusions included, and runs as fast: W1's bit unpacking, in either "
          "form (integer division and modulo with a gather, or shifts, masks, a bitcast and a transpose), becomes "
          "three `bit_planes` straight from the packed bytes (the two forms and `chess_pipeline` run the same "
          "native ops; their rows differ by this machine's noise, as the two `sk.ops` columns, the same "
          "pipeline measured twice, do); W2's per-colour `tf.equal` one-hot one "
          "`one_hot_colors` fused into the decode; `tf.image.resize` a `resize_bilinear` with TensorFlow's "
          "values. The tutorials' load is decode-bound on both sides (the JPEG decode is most of each "
          "element's time, in stoker as in tf.data). tf.data's own rate moves between runs on this shared "
          "machine (its BERT epochs, in particular, take one of two durations), so its ratios do too: the "
          "samples are in `bench/results/tf_functions.json`."]
    for r in d["rows"]:
        if "stoker eager (before)" in r:
            before = r["stoker eager (before)"]["elements_per_s"]
            L += ["", f"{r['pipeline']}, as stoker ran it before this (the function called eagerly per element): "
                  f"{before:,.0f} elements/s, {r['stoker']['elements_per_s'] / before:.0f}× slower than now."]
    return L + [""]


def resume_section() -> list[str]:
    """Resume after preemption, stoker against tf.train.Checkpoint, from bench/resume.py's last run."""
    path = os.path.join(RESULTS, "resume.json")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        d = json.load(f)
    names = {"stoker": "**stoker** `it.state()`", "tf": "tf.data `tf.train.Checkpoint(iterator=it)`"}
    titles = {"w1": "W1 chess-tfrecord", "w3": "W3 imagenet-jpeg"}
    L = ["## Resume after preemption", "",
         f"Run {d['date']} · `{d['command']}` · commit `{d['git']}` · {d['cpu']} · "
         + ", ".join(f"{k} {v}" for k, v in d["versions"].items()) + f" · {d['threads']} threads for everyone.",
         "",
         "Each pipeline is saved in the middle of its first epoch by one process and restored by another; "
         "times are from building the pipeline to holding its first batch (the library's import not timed), "
         f"fresh or restored, medians of {d['runs']} runs. *Exact*: the restored first batch equals the batch "
         "the saving process got next (byte for byte); tf.data's first batches after a restore come from the "
         "prefetch buffer its checkpoint holds. stoker's whole resumed streams are checked by its tests "
         "(`crates/stoker-python/tests/test_resume.py`). Before each timed run the workload's files are read "
         "once, so that every run, fresh or restored, stoker or tf.data, finds them in the page cache (a "
         "restore reads records from the middle of the files, which this host may have evicted).", "",
         "| workload | library | saved after batch | state size | fresh start | restore | restore / fresh | exact |",
         "|---|---|---|---|---|---|---|---|"]
    for r in d["rows"]:
        size = r["state_bytes"]
        size_s = f"{size:,.0f} B" if size < 10_000 else f"{size / 1e6:.1f} MB"
        label = names[r["lib"]] + (f" ({r['variant']})" if r.get("variant") else "")
        L.append(f"| {titles[r['workload']]} | {label} | {r['at_batch']} | {size_s} | {r['fresh_s'] * 1000:.0f} ms | "
                 f"{r['restore_s'] * 1000:.0f} ms | {r['ratio']:.2f} | {'yes' if r['exact'] else '**no**'} |")
    L.append("")
    for r in d["rows"]:
        if r.get("default_policy"):
            why = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", r["default_policy"])[:160]
            L += [f"tf.data does not checkpoint {titles[r['workload']]} as it is: `{why}`. "
                  "Its row is measured with `experimental_external_state_policy=IGNORE`, which leaves the stateful "
                  "op's random state out of the checkpoint.", ""]
    tp = d.get("w1_throughput", [])
    if tp:
        by: dict[str, list[float]] = {}
        for t in tp:
            by.setdefault(t["variant"], []).append(t["examples_per_s"])
        L += ["W1 throughput over one epoch (400,000 examples, batches of 512, "
              f"{d['threads']} threads), shuffle buffer against `global_shuffle` over the record-indexed files "
              "(`stoker index`), alternating, medians:", "",
              "| shuffle | examples/s | runs |", "|---|---|---|"]
        for v, xs in by.items():
            xs_sorted = sorted(xs)
            L.append(f"| `{v}` | {xs_sorted[len(xs) // 2]:,.0f} | {', '.join(f'{x:,.0f}' for x in xs)} |")
        L.append("")
    return L


def convert_section() -> list[str]:
    """stoker convert, from bench/convert_speed.py's last run."""
    path = os.path.join(RESULTS, "convert.json")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        d = json.load(f)
    c = d["convert"]
    one, two, ray = c["local, 1 core"], c["local, 2 cores"], c["Ray, 2 CPUs"]
    L = ["## Preprocess once: `stoker convert`", "",
         f"Run {d['date']} · `{d['command']}` · commit `{d['git']}` · "
         + ", ".join(f"{k} {v}" for k, v in d["versions"].items())
         + f" · medians of {d['runs']} runs, each in a child process pinned to its cores.", "",
         "Converting W3's offline part (3,000 JPEGs: read → decode → resize, shorter side 256 → JPEG 90) into "
         f"{d['shards']} shards:", "",
         "| how | images/s | runs (s) | vs 1 core | vs local, 2 cores |", "|---|---|---|---|---|"]
    for name, r in c.items():
        runs = ", ".join(f"{s:.2f}" for s in r["seconds"])
        L.append(f"| {name} | {r['per_s']:,.0f} | {runs} | {r['per_s'] / one['per_s']:.2f}× | "
                 f"{r['per_s'] / two['per_s']:.2f}× |")
    overhead = (two["per_s"] / ray["per_s"] - 1) * 100
    L += ["", f"Scaling 1 → 2 cores: {two['per_s'] / one['per_s']:.2f}×; the local Ray cluster (2 CPUs, one task "
          f"per shard, the same bytes) takes {overhead:+.1f} % time against the local run on the same 2 cores.", "",
          "Reading for training, from the original files against the converted shards "
          f"(W3: {d['shards_bytes']['w3'] / 1e6:.0f} MB of JPEGs resized to 256, read with W3's online ops from the "
          "decode on; W2: the 512x512 uint8 image crop and class-index map (`color_index`) stored raw, "
          f"{d['shards_bytes']['w2'] / 1e6:.0f} MB, the /255 and the `one_hot` left online), examples/s, medians:",
          "",
          "| workload | read from | 1 core | 2 cores | vs the files, 1c | vs the files, 2c |",
          "|---|---|---|---|---|---|"]
    names = {"files": "original files (stoker)", "shards": "**converted shards (stoker)**",
             "tf-shards": "converted shards (tf.data)"}
    titles = {"w3": "W3 imagenet-jpeg", "w2": "W2 segmentation-png"}
    by = {(r["workload"], r["source"], r["cores"]): r["per_s"] for r in d["reads"]}
    for wl in ("w3", "w2"):
        for src in ("files", "shards", "tf-shards"):
            a, b = by[(wl, src, 1)], by[(wl, src, 2)]
            L.append(f"| {titles[wl]} | {names[src]} | {a:,.1f} | {b:,.1f} | {a / by[(wl, 'files', 1)]:.2f}× | "
                     f"{b / by[(wl, 'files', 2)]:.2f}× |")
    L.append("")
    return L


def torch_section() -> list[str]:
    """stoker.torch: the CPU path's cost (bench/torch_cpu.py) and training on a GPU fed by W3
    (bench/gpu_train.py, on the device machine), from their last runs."""
    L: list[str] = []
    cpu = os.path.join(RESULTS, "torch_cpu.json")
    if os.path.exists(cpu):
        with open(cpu) as f:
            c = json.load(f)
        names = {"numpy": "stoker, NumPy batches (`for b in ds`)",
                 "torch_cpu": "**stoker** `stoker.torch.loader(device=\"cpu\")`",
                 "torchvision": "torchvision `DataLoader(workers=cores)`",
                 "dali_cpu": "NVIDIA DALI, CPU pipeline (`device_id=None`)"}
        versions = ", ".join(f"{k} {v}" for k, v in c.get("versions", {"torch": c["torch"]}).items())
        L += ["## Feeding PyTorch on the CPU (W3)", "",
              f"Run {c['date']} · `{c['command']}` · {c.get('cpu', '?')} · {c['threads']} threads or worker "
              f"processes each · {versions}. W3's pipeline (3,000 JPEGs, batches of 256, float32 224x224 HWC, "
              "random-resized crop, flip, brightness/contrast, normalise) as each library writes it; one process, "
              f"the contenders take turns epoch by epoch, a {c.get('pause_s', 0):g} s pause after each epoch (see "
              "`bench/torch_cpu.py`: DALI reads its next epoch's first two batches ahead, which then count for "
              "it). Medians of the epochs' images/s.", "",
              "| contender | images/s | loader / it | epochs |", "|---|---|---|---|"]
        for k, rates in c["rates"].items():
            over = "" if k == "torch_cpu" else f"{c['median']['torch_cpu'] / c['median'][k]:.2f}"
            L.append(f"| {names.get(k, k)} | {c['median'][k]:,.0f} | {over} | "
                     + ", ".join(f"{x:,.0f}" for x in rates) + " |")
        L.append("")
        L += [f"The loader hands out **{100 * c['ratio']:.0f} %** of stoker's NumPy rate (the tensors share "
              "the batches' memory). " + " ".join(f"{k}: {v}." for k, v in c.get("notes", {}).items())
              + "".join(f" {k} not measured: {v}." for k, v in c.get("missing", {}).items()), ""]
    return L + gpu_section() + gpu_decode_section()


def gpu_decode_section() -> list[str]:
    """Decoding on the GPU, from bench/gpu_decode.py's last run (on the device machine),
    rendered by that script."""
    d = last_result("gpu_decode.json")
    if d is None:
        return []
    import gpu_decode

    return gpu_decode.render(d).splitlines() + [""]


def many_ranks_section() -> list[str]:
    """Many ranks on one machine, from bench/many_ranks.py's last run, rendered by that script."""
    d = last_result("many_ranks.json")
    if d is None:
        return []
    import many_ranks

    return ["", *many_ranks.render(d["meta"], d["results"]).splitlines()]


def gpu_section() -> list[str]:
    """Training on a GPU fed by W3, from bench/gpu_train.py's last run (on the device machine)."""
    d = last_result("gpu_train.json")
    if d is None:
        return []
    names = {"stoker": "**stoker** `stoker.torch.loader(device=\"cuda\")`",
             "torchvision": "torchvision `DataLoader(workers=cores, pin_memory=True)`"}
    rows = d["rows"]
    L = ["## Training on a GPU (W3 into ResNet-50)", "",
         f"`{d['command']}` · {d['gpu']}, {d['cpus']} CPU cores · torch {d['torch']}, torchvision "
         f"{d['torchvision']}, stoker {d['stoker']} · {d['images']:,} JPEGs (W3's generator), batches of "
         f"{d['batch']}, {d['steps']} timed steps after {d['warmup']} warm-up steps, one process, one "
         "contender after the other.", "",
         "ResNet-50 (torchvision), bf16 autocast, channels-last, SGD. W3's augmentation on both sides "
         "(random-resized crop 224, horizontal flip, brightness/contrast jitter, normalise). Input stall: the "
         "share of step time spent waiting for the batch (`stoker.timed`, CUDA synchronise at each step end). "
         "stoker's pipeline: shuffle → repeat → map → batch → prefetch (the map runs on across epochs, as the "
         "DataLoader's persistent workers do), `threads` = cores.", "",
         "| loader | images/s | input stall | median step | mean step | verdict |", "|---|---|---|---|---|---|"]
    for name, r in rows.items():
        L.append(f"| {names.get(name, name)} | {r['images_per_s']:,.0f} | {r['input_stall_percent']:.1f} % | "
                 f"{r['step_ms_median']:.1f} ms | {r['step_ms_mean']:.1f} ms | {r['verdict']} |")
    if "stoker" in rows and "torchvision" in rows:
        ratio = rows["stoker"]["images_per_s"] / rows["torchvision"]["images_per_s"]
        L += ["", f"stoker / torchvision: **{ratio:.2f}×** images/s. NVIDIA DALI, the issue's third peer, is not "
              "installed on the device machine and its wheel (788 MB installed) is larger than what may be "
              "carried there (64 MiB): not measured."]
    feed = d.get("feed")
    if feed:
        f_rows = feed["rows"]
        L += ["", f"The loader alone, same run: {feed['batches']} W3 batches to the GPU after 3 unmeasured, no "
              "model (`--feed-batches`); medians of the runs, the two variants alternating.", "",
              "| batches on the host | images/s (median) | runs | bytes through staging buffers |",
              "|---|---|---|---|"]
        labels = {"stoker_staged": "pageable, copied into pinned staging buffers by the loader's thread",
                  "stoker": "**written by the engine into pooled pinned memory**, copied from there"}
        for name, r in f_rows.items():
            L.append(f"| {labels.get(name, name)} | {r['images_per_s']:,.0f} | "
                     f"{', '.join(f'{x:,.0f}' for x in r['runs'])} | {r['staged_bytes']:,} |")
        if "stoker" in f_rows and "stoker_staged" in f_rows:
            gain = f_rows["stoker"]["images_per_s"] / f_rows["stoker_staged"]["images_per_s"]
            L += ["", f"Pinned batches from the engine: **{gain:.2f}×** the staging path's rate to the device."]
    L.append("")
    return L


def render(docs: list[dict], out_path: str) -> str:
    out_dir = os.path.dirname(os.path.abspath(out_path))
    first = docs[0]
    L = ["# stoker benchmarks", "",
         "Generated by `bench/run.py`; raw results in `bench/results/*.json`. Regenerate with:", "",
         "```", "make bench   # = .venv/bin/python bench/run.py --workload all --out BENCHMARKS.md", "```", ""]
    if any(d["quick"] for d in docs):
        L += ["> **Contains quick smoke-run results (tiny data); not representative.**", ""]
    m = first["machine"]
    L += ["## Machine and versions", "",
          f"- Date: {', '.join(sorted({d['date'] for d in docs}))}",
          f"- Command: {', '.join(sorted({'`' + d['command'] + '`' for d in docs}))}",
          (f"- CPU: {m['cpu_model']} — {m['logical_cpus']} logical CPUs visible (affinity {m['affinity']}), "
           f"{m['memory']} RAM; {m['os']}"),
          "- 2-core scaling (see Method): " + ", ".join(
              f"{d['machine'].get('core_scaling') or 0:.2f}× ({TITLES[d['workload']]} run)" for d in docs),
          f"- Python {m['python']}; " + ", ".join(f"{k} {v}" for k, v in first["versions"].items()),
          "- Repository commit (each workload's run): " + ", ".join(
              f"`{d.get('git', '?')}` ({TITLES[d['workload']]})" for d in docs), ""]
    for d in docs:
        L += workload_section(d, out_dir)
    L += trace_overhead_section()
    L += resume_section()
    L += convert_section()
    L += torch_section()
    L += analyze_section()
    L += allocator_section()
    L += decode_checks_section()
    L += refactor_section()
    L += tf_functions_section()
    L += wheel_section()
    L += [METHOD]
    L += many_ranks_section()
    text = "\n".join(L).rstrip() + "\n"
    with open(out_path, "w") as f:
        f.write(text)
    return text


# --------------------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", choices=WORKLOADS + ["all"], default="all")
    ap.add_argument("--quick", action="store_true", help="tiny data, smoke run only (results to bench/results/quick/)")
    ap.add_argument("--out", default=None, help="Markdown report (default: BENCHMARKS.md; with --quick: "
                    "bench/results/quick/BENCHMARKS.md)")
    ap.add_argument("--contenders", default="", help="comma-separated substrings: run only matching contenders")
    ap.add_argument("--cores", default="1,2", help="core counts to pin to (default 1,2)")
    ap.add_argument("--runs", type=int, default=0, help="timed passes per child (default: W1-W3 3, W4 10)")
    ap.add_argument("--w1-batches", type=int, default=200,
                    help="W1 batches per pass (default 200 = 102,400 examples; 0 = the whole epoch)")
    ap.add_argument("--w2-pairs", type=int, default=None, help="W2 pairs per pass (default 240; --quick 6)")
    ap.add_argument("--w3-files", type=int, default=None, help="W3 files per pass (default 3000; --quick 24)")
    ap.add_argument("--w3l-files", type=int, default=None, help="W3L files per pass (default 1200; --quick 12)")
    ap.add_argument("--decode-seconds", type=float, default=None,
                    help="W2/W3 decode-only limit: time more passes until this many seconds are timed "
                    "(default 2; --quick 0.5)")
    ap.add_argument("--w4-seconds", type=float, default=None,
                    help="W4: time more epochs until this many seconds are timed (default 2; --quick 0.5)")
    ap.add_argument("--touch", choices=["ends", "all"], default="ends",
                    help="per batch, read the first and last element of every array (ends, default) or "
                    "sum every array (all: adds a full read of the data, the same for every contender)")
    ap.add_argument("--data-dir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "stoker-bench-data"))
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per child before it is killed")
    ap.add_argument("--sample", type=float, default=0.5, help="seconds between tree-PSS samples")
    ap.add_argument("--python", default=sys.executable, help="interpreter for the children")
    args = ap.parse_args()
    if args.w4_seconds is None:
        args.w4_seconds = 0.5 if args.quick else 2.0
    if args.decode_seconds is None:
        args.decode_seconds = 0.5 if args.quick else 2.0
    if args.w2_pairs is None:
        args.w2_pairs = 6 if args.quick else 240
    if args.w3_files is None:
        args.w3_files = 24 if args.quick else 3000
    if args.w3l_files is None:
        args.w3l_files = 12 if args.quick else 1200

    res_dir = os.path.join(RESULTS, "quick") if args.quick else RESULTS
    out = args.out or (os.path.join(res_dir, "BENCHMARKS.md") if args.quick else os.path.join(ROOT, "BENCHMARKS.md"))
    log_dir = os.path.join(res_dir, "logs")
    os.makedirs(log_dir, exist_ok=True)
    cpus = sorted(os.sched_getaffinity(0))
    cores = [int(c) for c in args.cores.split(",") if c.strip()]
    skipped = [c for c in cores if c > len(cpus)]
    cores = [c for c in cores if c <= len(cpus)]
    if skipped:
        print(f"[warn] only {len(cpus)} CPU(s) available; skipping core counts {skipped}", flush=True)
    command = "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])
    machine, versions = machine_info(), lib_versions()
    machine["core_scaling"] = core_scaling(args.python, cpus)
    print(f"[env] {machine['cpu_model']}, cpus {cpus}, 2-core scaling {machine['core_scaling']}", flush=True)
    git = sh(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"])
    has_stoker, stoker_msg = stoker_importable(args.python)
    if has_stoker:  # "VERSION BACKEND": which JPEG decoder the measured build has
        versions["stoker JPEG decoder"] = stoker_msg.split()[-1]
    print(f"[env] stoker importable: {has_stoker} ({stoker_msg}); versions {versions}", flush=True)
    wanted = [w.strip() for w in args.contenders.split(",") if w.strip()]

    docs = []
    for workload in (WORKLOADS if args.workload == "all" else [args.workload]):
        decoders: list[str] = []
        if workload == "w1":
            params = {"num_files": 8, "num_examples": 16_384 if args.quick else 400_000, "seed": 0}
            desc = f"{params['num_files']} TFRecord files, {params['num_examples']:,} examples"
            names, runs = W1_CONTENDERS, args.runs or 3
            per = f"{args.w1_batches} batches" if args.w1_batches else "one whole epoch"
            protocol = f"per child: 1 warm-up pass + {runs} timed passes of {per}; touch={args.touch}"
        elif workload == "w2":
            params = {"n": args.w2_pairs, "seed": 0}
            desc = f"{params['n']:,} pairs of 960x720 PNG photo + PNG label map (32 classes)"
            names, runs = W2_CONTENDERS, args.runs or 3
            decoders = decode_limit.names()
            protocol = (f"per child: 1 warm-up epoch + {runs} timed epochs of all {params['n']:,} pairs; "
                        f"decode-only: 1 warm-up + ≥{runs} timed passes (more until ≥{args.decode_seconds:g} s), "
                        f"1 core; touch={args.touch}")
        elif workload in ("w3", "w3l"):
            if workload == "w3":
                params = {"n": args.w3_files, "seed": 0}
                desc = f"{params['n']:,} JPEGs (~500x375, quality 90), ImageFolder layout, 10 classes"
            else:
                params = {"n": args.w3l_files, "seed": 0, "size_scale": 2}
                desc = (f"{params['n']:,} JPEGs (~1000x750: W3's sizes × 2, quality 90), ImageFolder layout, "
                        "10 classes")
            names, runs = W3_CONTENDERS, args.runs or 3
            decoders = decode_limit.names()
            protocol = (f"per child: 1 warm-up epoch + {runs} timed epochs of all {params['n']:,} files; "
                        f"decode-only: 1 warm-up + ≥{runs} timed passes (more until ≥{args.decode_seconds:g} s), "
                        f"1 core; touch={args.touch}")
        else:
            params = {"n": 6_000 if args.quick else 60_000, "seed": 0}
            desc = f"{params['n']:,} examples of 28x28 uint8 + int64 label"
            names, runs = W4_CONTENDERS, args.runs or (3 if args.quick else 10)
            protocol = (f"per child: epoch 1 fills the cache (warm-up), then ≥{runs} timed epochs from the cache "
                        f"(more until ≥{args.w4_seconds:g} s timed); touch={args.touch}")
        if wanted:
            names = [n for n in names if any(w.lower() in n.lower() for w in wanted)]
            decoders = [n for n in decoders if any(w.lower() in n.lower() for w in wanted)]
        # W2/W3 data dirs are named by size (e.g. w3-3000), so --w3-files N doesn't overwrite the full set.
        size_tag = str(params["n"]) if workload in ("w2", "w3", "w3l") else "quick" if args.quick else "full"
        data_dir = os.path.join(args.data_dir, f"{workload}-{size_tag}")
        meta = prepare_data(workload, data_dir, params, has_stoker, args.python)
        # Big per-file lists stay in meta.json, not in the results.
        meta = {k: v for k, v in meta.items() if not (isinstance(v, list) and len(v) > 32)}
        date = _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
        doc = {"workload": workload, "quick": args.quick, "date": date,
               "command": command, "machine": machine, "versions": versions, "git": git,
               "stoker_importable": has_stoker, "data": {"dir": data_dir, "desc": desc, **meta},
               "protocol": protocol, "cores": cores, "contenders": names, "loadavg_start": os.getloadavg(),
               "results": {n: {} for n in names}}
        if decoders:
            doc["decoders"] = decoders
            doc["limit_decoder"] = decode_limit.LIMIT_DECODER
            doc["decode"] = {}
        # The decode-only limit first, on one core (the limit for N cores is its rate × N).
        for n in decoders:
            doc["decode"][n] = run_child(workload, n, 1, cpus, data_dir, runs, 0, args.decode_seconds,
                                         args.touch, args.timeout, args.python, log_dir, args.sample)
        for c in cores:
            for n in names:
                doc["results"][n][str(c)] = run_child(workload, n, c, cpus, data_dir, runs,
                                                      args.w1_batches if workload == "w1" else 0,
                                                      args.w4_seconds if workload == "w4" else 0.0, args.touch,
                                                      args.timeout, args.python, log_dir, args.sample)
        # The limit decoder once more, after the pipelines (see limit_rate).
        if decoders:
            n = decode_limit.LIMIT_DECODER
            doc["decode_after"] = {n: run_child(workload, n, 1, cpus, data_dir, runs, 0, args.decode_seconds,
                                                args.touch, args.timeout, args.python, log_dir, args.sample)}
        doc["loadavg_end"] = os.getloadavg()
        png = os.path.join(res_dir, f"{workload}.png")
        err = plot(doc, png)
        doc["plot"] = None if err else os.path.relpath(png, ROOT)
        if err:
            print(f"[warn] {err}", flush=True)
        with open(os.path.join(res_dir, f"{workload}.json"), "w") as f:
            json.dump(doc, f, indent=1)
        docs.append(doc)

    # Workloads not run this time: keep their last results in the report.
    for workload in WORKLOADS:
        if all(d["workload"] != workload for d in docs):
            try:
                with open(os.path.join(res_dir, f"{workload}.json")) as f:
                    docs.append(json.load(f))
            except (OSError, ValueError):
                pass
    docs.sort(key=lambda d: d["workload"])
    render(docs, out)
    print(f"[done] wrote {os.path.relpath(out, os.getcwd())} and {os.path.relpath(res_dir, os.getcwd())}/*.json",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
