#!/usr/bin/env python3
"""Regenerates ``text/data.csv``, ``text/pipes.csv.gz`` and ``csv_expected.json``: what
tf.data's ``experimental.CsvDataset`` and ``tf.io.decode_csv`` make of small CSV files: a
header, quoted fields with commas and escaped quotes, empty fields taking defaults, an
``na_value``, ``select_cols`` and ``exclude_cols``, int64 / float64 / string columns, a ``|``
delimiter in a GZIP file, and quotes read literally (``use_quote_delim=False``); the error
kind for an empty required field.

    .venv/bin/python tests/golden/make_csv_golden.py

Deterministic (fixed content; GZIP header with mtime 0).
"""

from __future__ import annotations

import gzip
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TEXT = os.path.join(HERE, "text")

DATA = (b'id,name,score,weight\n'
        b'1,"Smith, J",3.5,10\n'
        b'2,"say ""hi""",,NA\n'
        b'3,plain,-1e3,7\n'
        b'40000000000,,0.25,\n')
PIPES = b"a|1|x\nb|2|\"q|r\"\nc||z\n"


def plain(v):
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, np.generic):
        return v.item()
    return v


def rows(ds) -> list:
    return [[plain(x) for x in r] for r in ds.as_numpy_iterator()]


def main() -> int:
    with open(os.path.join(TEXT, "data.csv"), "wb") as f:
        f.write(DATA)
    with open(os.path.join(TEXT, "pipes.csv.gz"), "wb") as f:
        f.write(gzip.compress(PIPES, mtime=0))
    data, pipes = os.path.join(TEXT, "data.csv"), os.path.join(TEXT, "pipes.csv.gz")
    CsvDataset = tf.data.experimental.CsvDataset
    out = {
        "tensorflow": tf.__version__,
        "all": rows(CsvDataset(data, [tf.int64, "", 0.0, tf.constant(-1.0, tf.float64)], header=True,
                               na_value="NA")),
        "select": rows(CsvDataset(data, [0.0, 5], header=True, select_cols=[2, 3], na_value="NA")),
        "exclude": rows(CsvDataset(data, [np.int64(0), "?"], header=True, exclude_cols=[2, 3])),
        "pipes": rows(CsvDataset(pipes, ["", 0, "-"], compression_type="GZIP", field_delim="|")),
        "literal_quotes": rows(CsvDataset(pipes, ["", 0, "-"], compression_type="GZIP", field_delim="|",
                                          use_quote_delim=False, select_cols=[0, 1, 2])),
        "decode_csv_batch": [[plain(x) for x in col] for col in
                             (c.numpy() for c in tf.io.decode_csv(["1,a", ",b", "3,"], [[7], ["z"]]))],
    }
    try:
        list(CsvDataset(data, [tf.int64, "", tf.float32, 0.0], header=True, na_value="NA"))
        out["required_error"] = None
    except Exception as e:  # noqa: BLE001 - the kind is what is recorded
        out["required_error"] = type(e).__name__
    with open(os.path.join(HERE, "csv_expected.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"tensorflow {tf.__version__}: text/data.csv, text/pipes.csv.gz, csv_expected.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
