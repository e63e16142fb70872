#!/usr/bin/env python3
"""Speed of `stoker analyze` on a large trace, against HolisticTraceAnalysis (HTA) on the same
file, and on a large XSpace against xprof-rs and xprof (the overview page), each on one pinned
core.

    python bench/analyze_speed.py --hta-python .venv/bin/python \
        --xprof-python .venv/bin/python --xprof-rs $(which xprof-rs)

Makes a synthetic Kineto trace of ``--gb`` GB with bench/make_big_trace.py (the real ResNet-50
trace's events replicated), runs ``stoker analyze`` on it ``--runs`` times (median time, peak
RSS of the process as GNU time reports it), then HTA once if its Python is given (``TraceAnalysis``
load + temporal and idle-time breakdowns). Then, with ``--xspace-mb``, a synthetic XSpace made
by bench/make_big_xspace.py (needs TensorFlow's protobuf classes in ``--xprof-python``'s
environment) read by ``stoker analyze``, by ``xprof-rs get_overview`` and by xprof's
``xspace_to_tool_data(..., "overview_page")``, each from a fresh copy of the session. Writes
bench/results/analyze.json, which bench/run.py puts into BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

HTA_SCRIPT = """
import sys, time
t = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[1])
ta.get_temporal_breakdown(visualize=False)
ta.get_idle_time_breakdown(visualize=False)
print(time.perf_counter() - t)
"""

XPROF_SCRIPT = """
import sys
from xprof.convert import raw_to_tool_data
data, _ = raw_to_tool_data.xspace_to_tool_data([sys.argv[1]], "overview_page", {})
print(len(data))
"""


def timed_run(cmd: list[str]) -> tuple[float, float, str]:
    """(seconds, peak RSS MiB, stdout) of one pinned child.

    The peak is the child's own, as GNU time reports it: `wait4` on a child of this process
    would report at least this process's own peak, since the child starts as a (v)fork of it
    and the kernel keeps the largest resident size over exec; this process grows as it keeps
    the outputs.
    """
    gnu_time = shutil.which("time") or "/usr/bin/time"
    with tempfile.NamedTemporaryFile("r") as peak:
        t = time.perf_counter()
        p = subprocess.run([gnu_time, "-f", "%M", "-o", peak.name, "taskset", "-c", "0", *cmd],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        secs = time.perf_counter() - t
        if p.returncode != 0:
            raise SystemExit(f"{cmd[0]} failed with status {p.returncode}")
        kib = int(peak.read().split()[-1])
    return secs, kib / 1024, p.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--trace", default=os.path.join(tempfile.gettempdir(), "stoker-big.pt.trace.json"))
    ap.add_argument("--stoker", default=os.path.join(ROOT, "target", "release", "stoker"))
    ap.add_argument("--hta-python", help="a Python with HolisticTraceAnalysis installed")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--xspace-mb", type=float, default=200.0, help="0: no XSpace part")
    ap.add_argument("--xprof-rs", help="the xprof-rs binary (pip install xprof-rs)")
    ap.add_argument("--xprof-python", help="a Python with xprof and TensorFlow installed")
    ap.add_argument("--source", help="the real Kineto trace make_big_trace.py replicates (default: its ResNet-50 one)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "analyze.json"), help="the results' JSON")
    args = ap.parse_args()
    if not os.path.exists(args.trace) or os.path.getsize(args.trace) < args.gb * 0.95e9:
        source = ["--source", args.source] if args.source else []
        subprocess.run([sys.executable, os.path.join(HERE, "make_big_trace.py"), args.trace, "--gb", str(args.gb),
                        *source], check=True)
    size = os.path.getsize(args.trace)
    runs = [timed_run([args.stoker, "analyze", "--json", args.trace]) for _ in range(args.runs)]
    verdict = json.loads(runs[0][2])[0]["verdict"]
    doc = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": "python bench/analyze_speed.py " + " ".join(sys.argv[1:]),
        "trace_bytes": size,
        "source": os.path.basename(glob.glob(args.source)[0]) if args.source else None,
        "stoker_seconds": [round(r[0], 2) for r in runs],
        "stoker_seconds_median": statistics.median(r[0] for r in runs),
        "stoker_peak_rss_mib": max(r[1] for r in runs),
        "stoker_verdict": verdict,
    }
    if args.hta_python:
        d = tempfile.mkdtemp()
        os.symlink(os.path.abspath(args.trace), os.path.join(d, "rank-0.pt.trace.json"))
        secs, rss, _ = timed_run([args.hta_python, "-c", HTA_SCRIPT, d])
        version = subprocess.run([args.hta_python, "-c",
                                  "from importlib.metadata import version; print(version('HolisticTraceAnalysis'))"],
                                 capture_output=True, text=True).stdout.strip()
        doc.update(hta_seconds=secs, hta_peak_rss_mib=rss, hta_version=version)
    if args.xspace_mb > 0:
        doc.update(xspace_part(args))
    print(json.dumps(doc, indent=1))
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    return 0


def fresh_session(source: str) -> str:
    """A new session folder holding a copy of `source` (xprof caches its results per folder)."""
    d = tempfile.mkdtemp(prefix="xs-")
    run = os.path.join(d, "plugins", "profile", "run")
    os.makedirs(run)
    dest = os.path.join(run, "host.xplane.pb")
    subprocess.run(["cp", source, dest], check=True)
    return run


def xspace_part(args: argparse.Namespace) -> dict:
    py = args.xprof_python or sys.executable
    base = os.path.join(tempfile.gettempdir(), f"stoker-big-xspace-{int(args.xspace_mb)}")
    source = os.path.join(base, "plugins", "profile", "run", "host.xplane.pb")
    if not os.path.exists(source):
        subprocess.run([py, os.path.join(HERE, "make_big_xspace.py"), base, "--mb", str(args.xspace_mb)], check=True)
    out: dict = {"xspace_bytes": os.path.getsize(source)}
    runs = []
    for _ in range(args.runs):
        session = fresh_session(source)
        runs.append(timed_run([args.stoker, "analyze", "--json", os.path.join(session, "host.xplane.pb")]))
    report = json.loads(runs[0][2])[0]
    out.update(xs_stoker_seconds=[round(r[0], 2) for r in runs],
               xs_stoker_seconds_median=statistics.median(r[0] for r in runs),
               xs_stoker_peak_rss_mib=max(r[1] for r in runs),
               xs_stoker_events=report["events"], xs_stoker_steps=len(report["steps"]),
               xs_stoker_step_ms=report["step_ms"])
    if args.xprof_rs:
        runs = [timed_run([args.xprof_rs, "get_overview", fresh_session(source)]) for _ in range(args.runs)]
        summary = json.loads(runs[0][2])["performance_summary"]
        version = subprocess.run([py, "-c", "from importlib.metadata import version; print(version('xprof-rs'))"],
                                 capture_output=True, text=True).stdout.strip()
        out.update(xprof_rs_seconds=[round(r[0], 2) for r in runs],
                   xprof_rs_seconds_median=statistics.median(r[0] for r in runs),
                   xprof_rs_peak_rss_mib=max(r[1] for r in runs),
                   xprof_rs_step_ms=summary["steptime_ms_average"], xprof_rs_version=version or "0.1.3")
    if args.xprof_python:
        session = fresh_session(source)
        secs, rss, _ = timed_run([py, "-c", XPROF_SCRIPT, os.path.join(session, "host.xplane.pb")])
        version = subprocess.run([py, "-c", "from importlib.metadata import version; print(version('xprof'))"],
                                 capture_output=True, text=True).stdout.strip()
        out.update(xprof_seconds=secs, xprof_peak_rss_mib=rss, xprof_version=version)
    return out


if __name__ == "__main__":
    sys.exit(main())
