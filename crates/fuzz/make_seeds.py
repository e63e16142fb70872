#!/usr/bin/env python3
"""Fills crates/fuzz/corpus/<target>/ with seeds made from the project's committed fixtures
(tests/golden/, tests/traces/), prefixed with the mode bytes each target reads first. The
fuzzer grows the corpus from there; seeds are remade on every `make fuzz`.

    python3 crates/fuzz/make_seeds.py
"""

from __future__ import annotations

import gzip
import json
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).resolve().parent / "corpus"
GOLDEN = ROOT / "tests" / "golden"
TRACES = ROOT / "tests" / "traces"


def put(target: str, name: str, data: bytes) -> None:
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / f"seed-{name}").write_bytes(data)


def records(path: Path) -> list[bytes]:
    """The payloads of a plain TFRecord file."""
    data, out, i = path.read_bytes(), [], 0
    while i + 12 <= len(data):
        (n,) = struct.unpack_from("<Q", data, i)
        out.append(data[i + 12 : i + 12 + n])
        i += 12 + n + 4
    return out


def main() -> int:
    for mode, name in [(0, "plain"), (1, "gzip"), (2, "zlib")]:
        data = (GOLDEN / f"w1_chess_{name}.tfrecord").read_bytes()[:4096]
        put("tfrecord", name, bytes([mode]) + data)
        put("tfrecord", f"{name}-crc", bytes([mode | 4]) + data)
    for i, r in enumerate(records(GOLDEN / "features.tfrecord")[:8]):
        put("example", f"features-{i}", r)
    for i, r in enumerate(records(GOLDEN / "w1_chess_plain.tfrecord")[:4]):
        put("example", f"chess-{i}", r)
    images = sorted((GOLDEN / "images").iterdir()) + sorted((GOLDEN / "w2").glob("*.png"))
    for i, img in enumerate(images):
        data = img.read_bytes()
        if len(data) > 64 * 1024:
            continue
        put("decode_image", img.name, bytes([i % 5 | (i & 1) << 3]) + data)
        put("decode_crop", img.name, bytes([(i * 37) & 0xFF, i]) + data)
    lines = (GOLDEN / "text" / "data.csv").read_bytes().splitlines()
    for i, line in enumerate(lines[:8]):
        put("decode_csv", f"line-{i}", bytes([i & 7]) + line)
    put("decode_csv", "quoted", b'\x04"1","2.5","a ""quoted"" field",7')
    small = [
        TRACES / "tensorflow" / "xprof" / "tf_trace_viewer_fixture.trace.json",
        TRACES / "tensorflow" / "tf1_timeline" / "cpu_timeline_01.json",
        TRACES / "pytorch" / "hta" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz",
        TRACES / "pytorch" / "hta" / "triton_example.json.gz",
        TRACES / "jax" / "jax_train.perfetto_trace.json.gz",
    ]
    for t in small:
        data = t.read_bytes()
        if t.suffix == ".gz":
            data = gzip.decompress(data)
        put("trace_json", t.name.removesuffix(".gz"), data[: 64 * 1024])
    for t in sorted(TRACES.rglob("*.xplane.pb")):
        if t.stat().st_size <= 64 * 1024:
            put("xspace", t.name, t.read_bytes())
    for i, spec in enumerate([
        {"op": "decode_image", "field": "x", "channels": 3, "max_pixels": 4096},
        {"op": "decode_raw", "field": "x", "dtype": "uint16"},
        {"op": "parse_example", "field": "x", "features": [{"name": "a", "kind": "fixed", "dtype": "int64"}]},
        {"op": "decode_csv", "field": "x", "columns": [{"name": "0", "dtype": "int32", "default": 0}]},
        {"op": "unpack_bits", "field": "x"},
        {"op": "decode_crop_or_pad", "decode": {"field": "x"}, "crop": {"field": "x", "height": 4, "width": 4}},
    ]):
        put("op_spec", f"spec-{i}", json.dumps(spec).encode())
    put("state", "empty", b"")
    return 0


if __name__ == "__main__":
    sys.exit(main())
