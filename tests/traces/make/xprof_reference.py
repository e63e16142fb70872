"""Runs xprof's overview page (the TensorFlow Profiler's, `pip install xprof`) on every XSpace in
tests/traces/ and records what stoker's analyzer must agree with: the steps xprof finds, their
mean step time, device compute time, the input ('Input') and 'All others' shares of step time,
the hardware type, and xprof's input-bound conclusion; and where the XSpace has allocator events,
xprof's memory profile per allocator (xprof's key: the device where the events name one, else the
allocator; the peak in use within the profile, heap plus stack, and the heap and stack then; the
allocator's lifetime peak); written to tests/traces/xprof_overview.json with xprof's version.

    .venv/bin/python tests/traces/make/xprof_reference.py
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

TRACES = Path(__file__).resolve().parents[1]


def overview(path: Path) -> dict:
    from xprof.convert import raw_to_tool_data

    # xprof caches its analysis per folder (a session): each trace is read alone, from a
    # folder of its own, so that neither the cache nor a neighbour mixes in.
    with tempfile.TemporaryDirectory() as d:
        alone = Path(d) / path.name
        shutil.copyfile(path, alone)
        out = raw_to_tool_data.xspace_to_tool_data([str(alone)], "overview_page", {})
        memory = memory_profile(alone)
    pages = json.loads(out[0] if isinstance(out, tuple) else out)
    analysis = pages[1]
    cols = [c["id"] for c in analysis["cols"]]
    steps = [dict(zip(cols, (c.get("v") for c in row["c"]))) for row in analysis["rows"]]
    total = sum(s["stepTimeMs"] for s in steps)
    share = lambda key: 100 * sum(s[key] for s in steps) / total if total else 0.0  # noqa: E731
    p = analysis["p"]
    conclusion = p.get("input_conclusion", "")
    m = re.search(r"because ([\d.]+)% of the total step time sampled is (waiting for input|spent on 'All Others')",
                  conclusion)
    band = re.search(r"is (HIGHLY|MODERATELY|POTENTIALLY|NOT) input-bound", conclusion)
    return {
        "hardware_type": p.get("hardware_type"),
        "steps": [s["stepnum"] for s in steps],
        "step_ms": total / len(steps) if steps else 0.0,
        "step_ms_each": [s["stepTimeMs"] for s in steps],
        "device_compute_ms": sum(s["deviceComputeTimeMs"] for s in steps) / len(steps) if steps else 0.0,
        "device_compute_percent": share("deviceComputeTimeMs"),
        "input_percent": share("infeedTimeMs"),
        "all_others_percent": share("otherTimeMs"),
        "host_compute_percent": share("hostComputeTimeMs"),
        "conclusion": conclusion,
        "conclusion_band": band.group(1).lower() if band else None,
        "conclusion_percent": float(m.group(1)) if m else None,
        "step_columns": cols,
        "memory": memory,
    }


def memory_profile(path: Path) -> dict:
    """Per allocator: xprof's peak heap in use within the profile, its time (ps from xprof's
    origin) and the allocator's lifetime peak; empty when the XSpace has no allocator events."""
    from xprof.convert import raw_to_tool_data

    try:
        out = raw_to_tool_data.xspace_to_tool_data([str(path)], "memory_profile", {})
    except Exception:  # noqa: BLE001 (xprof raises when there is nothing to profile)
        return {}
    data = json.loads(out[0] if isinstance(out, tuple) else out)
    result = {}
    for name, a in (data.get("memoryProfilePerAllocator") or {}).items():
        summary = a["profileSummary"]
        peak = summary["peakStats"]
        result[name] = {
            # xprof's peak in use is the heap plus the stack reservation.
            "peak_in_use_bytes": int(peak.get("peakBytesInUse", 0)),
            "peak_stack_bytes": int(peak.get("stackReservedBytes", 0)),
            "peak_heap_bytes": int(peak.get("heapAllocatedBytes", 0)),
            "peak_time_ps": int(summary["peakStatsTimePs"]),
            "lifetime_peak_bytes": int(summary["peakBytesUsageLifetime"]),
        }
    return result


def main() -> int:
    files = sorted(TRACES.rglob("*.xplane.pb"))
    out = {"xprof": importlib.metadata.version("xprof"), "traces": {}}
    for f in files:
        out["traces"][str(f.relative_to(TRACES))] = overview(f)
        print(f.relative_to(TRACES), out["traces"][str(f.relative_to(TRACES))]["conclusion"])
    with open(TRACES / "xprof_overview.json", "w") as fh:
        json.dump(out, fh, indent=1, sort_keys=True)
        fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
