"""Runs HolisticTraceAnalysis (HTA, `pip install HolisticTraceAnalysis`) on the single-rank
Kineto GPU traces in tests/traces/ and records its temporal breakdown (idle, compute and
non-compute time and their shares) and its idle time breakdown (host wait, kernel wait, other)
per trace, in tests/traces/hta_breakdown.json with HTA's version.

    .venv/bin/python tests/traces/make/hta_reference.py
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

TRACES = Path(__file__).resolve().parents[1]
KINETO_GPU = [
    "pytorch/kineto_tb_samples/resnet50_num_workers_0.worker0.1623143089861.pt.trace.json.gz",
    "pytorch/kineto_tb_samples/resnet50_num_workers_4.worker0.1623212756351.pt.trace.json.gz",
    "pytorch/hta/ns_resolution_rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "pytorch/memory/torch_memory_cuda_w0.pt.trace.json.gz",
    "pytorch/memory/torch_memory_cuda_w4.pt.trace.json.gz",
]


def breakdown(path: Path) -> dict:
    from hta.trace_analysis import TraceAnalysis

    # HTA reads every trace in a folder as one job's ranks: each is read alone.
    with tempfile.TemporaryDirectory() as d:
        shutil.copyfile(path, Path(d) / path.name)
        a = TraceAnalysis(trace_dir=d)
        t = a.get_temporal_breakdown(visualize=False).iloc[0]
        idle, _stats = a.get_idle_time_breakdown(visualize=False, show_idle_interval_stats=True)
    by_cause: dict[str, float] = {}
    for _, row in idle.iterrows():
        by_cause[str(row["idle_category"])] = by_cause.get(str(row["idle_category"]), 0.0) + float(row["idle_time"])
    return {
        "idle_us": float(t["idle_time(us)"]),
        "compute_us": float(t["compute_time(us)"]),
        "non_compute_us": float(t["non_compute_time(us)"]),
        "idle_percent": float(t["idle_time_pctg"]),
        "compute_percent": float(t["compute_time_pctg"]),
        "non_compute_percent": float(t["non_compute_time_pctg"]),
        "idle_by_category_us": by_cause,
    }


def main() -> int:
    out = {"HolisticTraceAnalysis": importlib.metadata.version("HolisticTraceAnalysis"), "traces": {}}
    devnull = open(os.devnull, "w")
    for rel in KINETO_GPU:
        stdout, sys.stdout = sys.stdout, devnull  # HTA prints its progress
        try:
            out["traces"][rel] = breakdown(TRACES / rel)
        finally:
            sys.stdout = stdout
        print(rel, out["traces"][rel]["idle_percent"])
    with open(TRACES / "hta_breakdown.json", "w") as fh:
        json.dump(out, fh, indent=1, sort_keys=True)
        fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
