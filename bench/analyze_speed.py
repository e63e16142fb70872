#!/usr/bin/env python3
"""Speed of `stoker analyze` on a large trace, against HolisticTraceAnalysis (HTA) on the same
file, each on one pinned core.

    python bench/analyze_speed.py --hta-python /path/to/venv-with-HTA/bin/python

Makes a synthetic Kineto trace of ``--gb`` GB with bench/make_big_trace.py (the real ResNet-50
trace's events replicated), runs ``stoker analyze`` on it ``--runs`` times (median time, peak
RSS of the process from ``wait4``), then HTA once if its Python is given (``TraceAnalysis``
load + temporal and idle-time breakdowns), and writes bench/results/analyze.json, which
bench/run.py puts into BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
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


def timed_run(cmd: list[str]) -> tuple[float, float, str]:
    """(seconds, peak RSS MiB, stdout) of one pinned child."""
    t = time.perf_counter()
    p = subprocess.Popen(["taskset", "-c", "0", *cmd], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    out = p.stdout.read() if p.stdout else ""
    _, status, usage = os.wait4(p.pid, 0)
    secs = time.perf_counter() - t
    if status != 0:
        raise SystemExit(f"{cmd[0]} failed with status {status}")
    return secs, usage.ru_maxrss / 1024, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--trace", default=os.path.join(tempfile.gettempdir(), "stoker-big.pt.trace.json"))
    ap.add_argument("--stoker", default=os.path.join(ROOT, "target", "release", "stoker"))
    ap.add_argument("--hta-python", help="a Python with HolisticTraceAnalysis installed")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    if not os.path.exists(args.trace) or os.path.getsize(args.trace) < args.gb * 0.95e9:
        subprocess.run([sys.executable, os.path.join(HERE, "make_big_trace.py"), args.trace, "--gb", str(args.gb)],
                       check=True)
    size = os.path.getsize(args.trace)
    runs = [timed_run([args.stoker, "analyze", "--json", args.trace]) for _ in range(args.runs)]
    verdict = json.loads(runs[0][2])[0]["verdict"]
    doc = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": "python bench/analyze_speed.py " + " ".join(sys.argv[1:]),
        "trace_bytes": size,
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
    print(json.dumps(doc, indent=1))
    with open(os.path.join(HERE, "results", "analyze.json"), "w") as f:
        json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
