"""The device `Steps` line that xprof derives, in both of the forms a user meets it.

TensorFlow's GPU profiles carry, on each `/device:GPU:N` plane, a `Steps` line that xprof derives
from its grouping of the host's step markers, and xprof reads its steps from it; xprof's trace
viewer (TensorBoard's, and `xprof`'s JSON export) shows it as a thread of the device's process.
No TensorFlow with a GPU was at hand, so the line comes from xprof itself, run on the JAX GPU
XSpace recorded for this project (`jax/jax_gpu_train.xplane.pb`):

- `jax/jax_gpu_train.xprof_trace_viewer.json.gz`: xprof's trace viewer JSON of that XSpace,
  unchanged (`xspace_to_tool_data([...], "trace_viewer", {})`): the device's derived lines
  (`Steps`, `XLA Modules`, `XLA Ops`) beside its stream, kernels tied to their launch by flows
  only.
- `jax/jax_gpu_train.xprof_trace_viewer_streaming.json.gz`: the same from the streaming trace
  viewer that TensorBoard's profile plugin now uses (`"trace_viewer@"`): processes named after
  the host (`jax_gpu_train /device:GPU:0`) and numbered anew.
- `jax/jax_gpu_train_steps_line.xplane.pb`: the same XSpace with that `Steps` line (xprof's
  events, times and `group_id`s) written into its device plane as TensorFlow writes it, and the
  `step_num` taken off the host's step markers: a file whose only steps are the device's line,
  as in the GPU XSpaces where the host's markers are not `step_num` annotations.

    .venv/bin/python tests/traces/make/xprof_steps_line.py
"""

from __future__ import annotations

import gzip
import importlib.metadata
import json
import os
import shutil
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

TRACES = Path(__file__).resolve().parents[1]
SOURCE = TRACES / "jax" / "jax_gpu_train.xplane.pb"
# The line id xprof gives the derived `Steps` line (the trace viewer's thread id for it).
STEPS_LINE_ID = 0xDEADBEEF


def trace_viewer(path: Path, tool: str) -> dict:
    from xprof.convert import raw_to_tool_data

    # Each tool in a folder of its own: xprof caches what it made per folder.
    with tempfile.TemporaryDirectory() as d:
        alone = Path(d) / path.name
        shutil.copyfile(path, alone)
        out = raw_to_tool_data.xspace_to_tool_data([str(alone)], tool, {})
    return json.loads(out[0] if isinstance(out, tuple) else out)


def steps_line(viewer: dict) -> list[dict]:
    """The `Steps` thread of the device process: its events, in time order."""
    events = viewer["traceEvents"]
    devices = {
        e["pid"] for e in events
        if e.get("ph") == "M" and e.get("name") == "process_name" and e["args"]["name"].endswith("/device:GPU:0")
    }
    steps_tid = {
        (e["pid"], e["tid"]) for e in events
        if e.get("ph") == "M" and e.get("name") == "thread_name" and e["pid"] in devices
        and e["args"]["name"] == "Steps"
    }
    line = [e for e in events if e.get("ph") == "X" and (e.get("pid"), e.get("tid")) in steps_tid]
    if not line:
        raise SystemExit("xprof's trace viewer shows no Steps line on /device:GPU:0")
    return sorted(line, key=lambda e: e["ts"])


def with_steps_line(xspace_bytes: bytes, line: list[dict], first_kernel_ts: float) -> bytes:
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(xspace_bytes)
    device = next(p for p in space.planes if p.name == "/device:GPU:0")
    host = next(p for p in space.planes if p.name == "/host:CPU")
    stream = next(line for line in device.lines if line.name.startswith("Stream #"))

    def stat_id(plane, name: str) -> int:
        for sid, meta in plane.stat_metadata.items():
            if meta.name == name:
                return sid
        sid = max(plane.stat_metadata, default=0) + 1
        plane.stat_metadata[sid].id = sid
        plane.stat_metadata[sid].name = name
        return sid

    # The viewer counts microseconds from a start of its own: the stream's first kernel, in
    # both, gives the shift.
    first = min(stream.events, key=lambda ev: ev.offset_ps)
    first_ps = stream.timestamp_ns * 1000 + first.offset_ps
    shift_ps = first_ps - round(first_kernel_ts * 1e6)
    group_id = stat_id(device, "group_id")
    out = device.lines.add()
    out.id = STEPS_LINE_ID
    out.display_id = STEPS_LINE_ID
    out.name = "Steps"
    out.timestamp_ns = stream.timestamp_ns
    next_meta = max(device.event_metadata, default=0) + 1
    for e in line:
        meta = device.event_metadata[next_meta]
        meta.id = next_meta
        meta.name = e["name"]
        ev = out.events.add()
        ev.metadata_id = next_meta
        ev.offset_ps = round(e["ts"] * 1e6) + shift_ps - stream.timestamp_ns * 1000
        ev.duration_ps = round(e["dur"] * 1e6)
        st = ev.stats.add()
        st.metadata_id = group_id
        st.int64_value = int(e["args"]["group_id"])
        next_meta += 1

    # The host's step markers lose their step_num: the device's line is then the only step
    # information, as in the profiles whose host markers are not step_num annotations.
    step_num = [sid for sid, m in host.stat_metadata.items() if m.name == "step_num"]
    removed = 0
    for host_line in host.lines:
        for ev in host_line.events:
            keep = [s for s in ev.stats if s.metadata_id not in step_num]
            if len(keep) != len(ev.stats):
                removed += 1
                del ev.stats[:]
                ev.stats.extend(keep)
    if not removed:
        raise SystemExit("no host step marker with step_num in the source XSpace")
    return space.SerializeToString()


def first_kernel_ts(viewer: dict) -> float:
    """The viewer's time of the first event on the device's stream."""
    events = viewer["traceEvents"]
    stream = {
        (e["pid"], e["tid"]) for e in events
        if e.get("ph") == "M" and e.get("name") == "thread_name" and e["args"]["name"].startswith("Stream #")
    }
    return min(e["ts"] for e in events if e.get("ph") == "X" and (e.get("pid"), e.get("tid")) in stream)


def main() -> None:
    names = []
    for tool, name in [("trace_viewer", "jax_gpu_train.xprof_trace_viewer.json.gz"),
                       ("trace_viewer@", "jax_gpu_train.xprof_trace_viewer_streaming.json.gz")]:
        out = TRACES / "jax" / name
        with gzip.open(out, "wt") as f:
            json.dump(trace_viewer(SOURCE, tool), f)
        names.append(name)
    viewer = trace_viewer(SOURCE, "trace_viewer")
    line = steps_line(viewer)
    xplane = TRACES / "jax" / "jax_gpu_train_steps_line.xplane.pb"
    xplane.write_bytes(with_steps_line(SOURCE.read_bytes(), line, first_kernel_ts(viewer)))
    print(f"xprof {importlib.metadata.version('xprof')}: {', '.join(names)}, {xplane.name} ({len(line)} steps)")


if __name__ == "__main__":
    main()
