"""An XSpace whose allocator events come from four devices sharing one allocator name, as a TPU
host's four cores do: `jax/four_cores_memory.xplane.pb`.

No TPU profile was at hand, so the cores are made from the JAX GPU profile's allocator events
(`jax/jax_gpu_train.xplane.pb`): core k gets a copy of every `MemoryAllocation` /
`MemoryDeallocation` event on a host line of its own, its heap figures (`bytes_allocated`,
`peak_bytes_in_use`) scaled by 1 + k/2, a stack reservation (`bytes_reserved`) of
(k + 1) x 64 KiB, the allocator name `tpu_hbm` for every core, and the device stat
`device_ordinal` = k after the name. xprof itself is the reference for what the result means
(`xprof_reference.py` runs its memory profile on it): it keys the allocators by the device and
counts the stack with the heap.

    .venv/bin/python tests/traces/make/four_core_memory.py
"""

from __future__ import annotations

from pathlib import Path

TRACES = Path(__file__).resolve().parents[1]
SOURCE = TRACES / "jax" / "jax_gpu_train.xplane.pb"
OUT = TRACES / "jax" / "four_cores_memory.xplane.pb"
CORES = 4
STACK = 64 * 1024


def main() -> None:
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(SOURCE.read_bytes())
    host = next(p for p in space.planes if p.name == "/host:CPU")
    event_names = {k: v.name for k, v in host.event_metadata.items()}
    stat_ids = {v.name: k for k, v in host.stat_metadata.items()}

    def stat_id(name: str) -> int:
        if name not in stat_ids:
            new = max(host.stat_metadata) + 1
            host.stat_metadata[new].id = new
            host.stat_metadata[new].name = name
            stat_ids[name] = new
        return stat_ids[name]

    allocator = stat_id("tpu_hbm")
    memory = ("MemoryAllocation", "MemoryDeallocation")
    source = next(line for line in host.lines if any(event_names.get(e.metadata_id) in memory for e in line.events))
    events = [e for e in source.events if event_names.get(e.metadata_id) in memory]
    # The GPU's own allocator events leave: only the cores' remain.
    kept = [e for e in source.events if event_names.get(e.metadata_id) not in memory]
    del source.events[:]
    source.events.extend(kept)
    next_line = max(line.id for line in host.lines) + 1
    for k in range(CORES):
        line = host.lines.add()
        line.id = next_line + k
        line.name = f"tpu core {k} allocator"
        line.timestamp_ns = source.timestamp_ns
        for e in events:
            copy = line.events.add()
            copy.CopyFrom(e)
            del copy.stats[:]
            for s in e.stats:
                name = host.stat_metadata[s.metadata_id].name
                new = copy.stats.add()
                new.CopyFrom(s)
                if name == "allocator_name":
                    new.ref_value = allocator
                    ordinal = copy.stats.add()
                    ordinal.metadata_id = stat_id("device_ordinal")
                    ordinal.int64_value = k
                elif name in ("bytes_allocated", "peak_bytes_in_use"):
                    field = s.WhichOneof("value")
                    setattr(new, field, round(getattr(s, field) * (1 + k / 2)))
                elif name == "bytes_reserved":
                    setattr(new, s.WhichOneof("value"), (k + 1) * STACK)
    OUT.write_bytes(space.SerializeToString())
    print(OUT.name, len(events), "events on each of", CORES, "cores")


if __name__ == "__main__":
    main()
