#!/usr/bin/env python3
"""Regenerates ``text/`` and ``text_expected.json``: small text and binary files (plain, GZIP,
ZLIB) and what tf.data's ``TextLineDataset`` and ``FixedLengthRecordDataset`` read from them:
lines ending in ``\\n``, ``\\r\\n`` and nothing, ``\\r`` inside a line, empty lines, an empty
file, two files read with ``num_parallel_reads=2``; records after a header and before a
footer, and a file whose body is not a whole number of records (TF's error kind).

    .venv/bin/python tests/golden/make_text_golden.py

Deterministic (fixed content; GZIP headers with mtime 0).
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TEXT = os.path.join(HERE, "text")

LINES_A = b"alpha,1,2.5\r\nbeta,2,\n\ngam\rma,3,1e3\nlast line without newline"
LINES_B = b"one\ntwo\nthree\nfour\nfive\n"
BINARY = b"HDR" + bytes(range(40)) + b"FT"


def write(name: str, data: bytes) -> str:
    path = os.path.join(TEXT, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def main() -> int:
    os.makedirs(TEXT, exist_ok=True)
    a = write("a.txt", LINES_A)
    b = write("b.txt", LINES_B)
    write("a.txt.gz", gzip.compress(LINES_A, mtime=0))
    write("a.txt.zz", zlib.compress(LINES_A))
    write("empty.txt", b"")
    write("records.bin", BINARY)
    write("records.bin.gz", gzip.compress(BINARY, mtime=0))
    write("ragged.bin", BINARY + b"X")

    def lines(*args, **kw) -> list[str]:
        return [v.hex() for v in tf.data.TextLineDataset(*args, **kw).as_numpy_iterator()]

    def records(path: str, **kw) -> list[str]:
        ds = tf.data.FixedLengthRecordDataset(path, 8, header_bytes=3, footer_bytes=2, **kw)
        return [v.hex() for v in ds.as_numpy_iterator()]

    out = {
        "tensorflow": tf.__version__,
        "lines/a": lines(a),
        "lines/a.gz": lines(os.path.join(TEXT, "a.txt.gz"), compression_type="GZIP"),
        "lines/a.zz": lines(os.path.join(TEXT, "a.txt.zz"), compression_type="ZLIB"),
        "lines/empty": lines(os.path.join(TEXT, "empty.txt")),
        "lines/a+b parallel 2": lines([a, b], num_parallel_reads=2),
        "lines/a+b": lines([a, b]),
        "records": records(os.path.join(TEXT, "records.bin")),
        "records.gz": records(os.path.join(TEXT, "records.bin.gz"), compression_type="GZIP"),
    }
    try:
        records(os.path.join(TEXT, "ragged.bin"))
        out["ragged_error"] = None
    except Exception as e:  # noqa: BLE001 - the kind is what is recorded
        out["ragged_error"] = type(e).__name__
    with open(os.path.join(HERE, "text_expected.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"tensorflow {tf.__version__}: text/, text_expected.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
