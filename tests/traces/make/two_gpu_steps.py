"""A two-GPU XSpace whose devices run the same steps at different times and speeds, as on a
multi-GPU machine whose GPUs are not in step: `jax/jax_gpu_train_two_gpus.xplane.pb`.

No profile of two GPUs was at hand, so the second GPU is made from the first: the XSpace with
xprof's `Steps` line (`jax/jax_gpu_train_steps_line.xplane.pb`, see `xprof_steps_line.py`) gets
a plane `/device:GPU:1` copied from `/device:GPU:0`, its lines starting SHIFT_NS later and every
event's offset and duration stretched by STRETCH (the same steps, taking longer there). xprof
itself is the reference for what the result means (`xprof_reference.py` runs its overview page
on it): a step is as long as its longest device's span. xprof's trace viewer JSON of the result
is written beside it (`jax/jax_gpu_train_two_gpus.xprof_trace_viewer.json.gz`, see
`xprof_steps_line.py`), so that the JSON path is checked on two devices too.

    PYTHONPATH=<xprof> .venv/bin/python tests/traces/make/two_gpu_steps.py
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

TRACES = Path(__file__).resolve().parents[1]
SOURCE = TRACES / "jax" / "jax_gpu_train_steps_line.xplane.pb"
OUT = TRACES / "jax" / "jax_gpu_train_two_gpus.xplane.pb"
VIEWER = TRACES / "jax" / "jax_gpu_train_two_gpus.xprof_trace_viewer.json.gz"
SHIFT_NS = 2_000_000  # 2 ms later: longer than the steps themselves
STRETCH = 1.07


def main() -> None:
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(SOURCE.read_bytes())
    gpu0 = next(p for p in space.planes if p.name == "/device:GPU:0")
    gpu1 = space.planes.add()
    gpu1.CopyFrom(gpu0)
    gpu1.id = max(p.id for p in space.planes) + 1
    gpu1.name = "/device:GPU:1"
    for line in gpu1.lines:
        line.timestamp_ns += SHIFT_NS
        for ev in line.events:
            ev.offset_ps = round(ev.offset_ps * STRETCH)
            ev.duration_ps = round(ev.duration_ps * STRETCH)
    OUT.write_bytes(space.SerializeToString())
    from xprof_steps_line import trace_viewer

    with gzip.open(VIEWER, "wt") as f:
        json.dump(trace_viewer(OUT, "trace_viewer"), f)
    print(OUT.name, VIEWER.name)


if __name__ == "__main__":
    main()
