"""Damaged input, generated and read (issue 36): seeded damaged files, each read in a fresh
process under a time limit and a memory bound, each read classified.

    .venv/bin/python bench/damage_matrix.py --quick       # 195 reads, about 20 s on 2 cores
    .venv/bin/python bench/damage_matrix.py               # the full matrix, 1,636 reads, 3-4 min
    .venv/bin/python bench/damage_matrix.py --case tfrecord/GZIP/flip/3/raw_skip   # one read, verbose
    .venv/bin/python bench/damage_matrix.py --list [--quick]                     # the reads' names

Every read is named ``family/variant/damage/index/mode``; the file it reads is made from
``random.Random(f"{seed}/{family}/{variant}/{damage}/{index}")``, so a name and ``--seed`` (0
by default) reproduce it. ``--case`` makes that one file (kept, in ``--keep`` or a temporary
folder) and runs its read in this process, printing what it saw.

What is damaged, and how it is read:

- ``tfrecord`` (plain, GZIP, ZLIB): ``tf.train.Example`` records written with
  ``stoker.io.TFRecordWriter``. Damage: bytes flipped, the file cut, a 4 KiB page zeroed, a
  record's length rewritten with a valid CRC, a record written in part and then more records
  appended; for compressed files also flips inside the records before compression and a
  compressed stream cut short with a new stream appended. Reads: the records and
  ``parse_example`` per element and per batch of 8, each under the raise and the skip policy;
  ``shuffle`` resumed from a saved state at several points and (plain files)
  ``global_shuffle``, resumed once, under ``ignore_errors()``.
- ``text`` and ``csv`` (plain, GZIP): ``TextLineDataset`` and ``CsvDataset`` (quoted fields
  with commas, doubled quotes and line breaks; ``\\n`` or ``\\r\\n``; half the files with a
  header). Damage: flips, cuts, a zeroed page, a quote opened where a field starts, a stray
  or a lost quote, under both policies.
- ``fixed_length`` (plain, GZIP): ``FixedLengthRecordDataset`` with and without header and
  footer bytes, also through ``decode_raw``. Damage: flips, cuts, a zeroed page, a
  decompressed body cut to a part of a record.
- ``png``, ``jpeg``: five files ``[good, damaged, good, good, good]`` through ``read_file``
  and ``decode_image(channels=3)``: whole (raise and skip policy, 1 and 2 workers), and the
  fused paths ``resize_with_crop_or_pad`` and ``random_resized_crop`` under the skip policy,
  each fused read checked against the same ops kept apart (a Python function between decode
  and crop). Damage: PNG bytes flipped with and without their chunk's CRC made to match, IHDR
  changed with a valid CRC, cuts; JPEG entropy data and header bytes flipped, cuts, a header
  libjpeg rejects (an SOF with a dimension or the components 0, a DQT with table id 7).

Outcomes (the first five are what stoker promises, the rest are failures):

- ``clean``: every element equals what was written (for a file cut where a record ends: what
  the file still holds).
- ``as_damaged``: the damage changed data that the format has no check for (plain text, CSV,
  fixed-length records, deflate data before its stream's checksum, JPEG's entropy data, a PNG
  whose changed header has a valid CRC): the changed elements were read as the damaged file
  holds them, every element the damage did not touch equals what was written, and any loss is
  counted. A JPEG that libjpeg warned about counts here too (the image is used, the warning
  counted in ``stats()``).
- ``located``: a stoker error naming the file and, where it applies, the record (or line)
  and the offset, after only elements that were written.
- ``counted_skip``: under ``ignore_errors()``, the elements handed out are a subset of what was
  written, in order where order is defined, none altered, and ``stats()`` accounts for every
  element lost: ``skipped``, ``rest_lost`` and, for TFRecord, ``skipped_bytes`` (records lost
  <= skipped + skipped_bytes // 16, the smallest record's size, or rest_lost > 0); a reason
  naming the file.
- ``wrong``: an element altered or lost without a count, a resume that differs from the run it
  resumes, a fused path giving other pixels than the same ops apart, a CSV record read where
  TensorFlow's rules refuse it.
- ``bad_error``: an error that does not say where, one that is not stoker's, or a record error
  that escaped ``ignore_errors()``.
- ``crash`` (the process died: a signal, a Rust panic, a non-zero exit without a result),
  ``hang`` (no result within ``--timeout`` seconds), ``memory`` (peak RSS, VmHWM of the child,
  over 150 MB + 2x the larger of the file and its decompressed contents).

A CSV record is also judged by TensorFlow's rules (the reference reading, itself checked
against tf.data's ``CsvDataset`` on these files): one that stoker hands out where those rules
refuse it, or read to other values, is ``wrong``; one that stoker refuses where TensorFlow reads
it is counted in ``disagree``, as is a fused image path refusing an image that the same ops apart
read. The JSON's ``notes`` count the shuffles resumed whose two parts together counted more
skips than the run whole (a damaged record counted again after a restore), and the reads of
damaged GZIP/ZLIB bytes that handed out changed elements before the stream's damage was found
(deflate checks its data only at the end of the stream).

Results: a table per family on stdout, JSON in ``bench/results/damage_matrix.json`` (the quick
run: ``damage_matrix_quick.json``), with every read's outcome and every failure's name.
"""

from __future__ import annotations

import argparse
import datetime
import difflib
import gzip
import json
import os
import pickle
import platform
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import zlib
from collections import Counter
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")

FAMILIES = ("tfrecord", "text", "csv", "fixed_length", "png", "jpeg")
GOOD = ("clean", "as_damaged", "located", "counted_skip")
BAD = ("wrong", "bad_error", "crash", "hang", "memory")
OUTCOMES = GOOD + BAD

TF_MODES = (
    "raw_raise",
    "raw_skip",
    "parse_raise",
    "parse_skip",
    "batch_parse_raise",
    "batch_parse_skip",
    "shuffle_resume_skip",
    "global_shuffle_skip",
)
IMAGE_MODES = ("whole_raise", "whole_skip", "whole_skip_par2", "crop_or_pad_skip", "rrc_skip")

# (family, variant) -> (damages, modes, files per damage in the full run, in the quick run)
PLAN: dict[tuple[str, str], tuple[tuple[str, ...], tuple[str, ...], int, int]] = {
    ("tfrecord", "plain"): (("flip", "cut", "zero_page", "length_crc", "partial_append"), TF_MODES, 6, 1),
    **{
        ("tfrecord", c): (
            ("flip", "cut", "zero_page", "length_crc", "partial_append", "inner_flip", "cut_append"),
            TF_MODES[:-1],
            6,
            1,
        )
        for c in ("GZIP", "ZLIB")
    },
    ("text", "plain"): (("flip", "cut", "zero_page"), ("raise", "skip"), 10, 2),
    ("text", "GZIP"): (("flip", "cut", "zero_page", "inner_flip"), ("raise", "skip"), 10, 2),
    ("csv", "plain"): (("flip", "cut", "zero_page", "open_quote", "stray_quote"), ("raise", "skip"), 10, 2),
    ("csv", "GZIP"): (("flip", "cut", "zero_page", "open_quote"), ("raise", "skip"), 10, 2),
    ("fixed_length", "plain"): (("flip", "cut", "zero_page"), ("raise", "skip", "decode_raw_skip"), 8, 1),
    ("fixed_length", "GZIP"): (("flip", "cut", "zero_page", "inner_cut"), ("raise", "skip", "decode_raw_skip"), 8, 1),
    ("png", "file"): (("flip", "flip_fixcrc", "header_fixcrc", "cut"), IMAGE_MODES, 8, 1),
    ("jpeg", "file"): (("flip", "header_flip", "cut", "bad_header"), IMAGE_MODES, 8, 1),
}


def case_names(quick: bool) -> list[str]:
    """Every read of the run, in a fixed order. The quick run takes the first file of each
    damage and, for TFRecord, every other mode (alternating with the damage, so that every mode
    and every damage is read)."""
    names = []
    for (family, variant), (damages, modes, full, fast) in PLAN.items():
        for d, damage in enumerate(damages):
            for index in range(fast if quick else full):
                for m, mode in enumerate(modes):
                    if quick and family == "tfrecord" and (m + d) % 2:
                        continue
                    names.append(f"{family}/{variant}/{damage}/{index}/{mode}")
    return names


# ---------------------------------------------------------------------------------------------
# Bytes: CRCs and framing


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        table.append(c)
    return table


CRC32C = _crc32c_table()


def masked_crc(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc = CRC32C[(crc ^ b) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def frame_starts(recs: list[bytes]) -> list[int]:
    starts, at = [], 0
    for r in recs:
        starts.append(at)
        at += 12 + len(r) + 4
    return starts


def compress(data: bytes, variant: str) -> bytes:
    return gzip.compress(data, mtime=0) if variant == "GZIP" else zlib.compress(data)


def inflate_prefix(data: bytes, variant: str) -> tuple[bytes, bool]:
    """What zlib inflates of `data` before it finds damage, and whether the stream was whole
    (ended, nothing after it). Fed a byte at a time, so that the output stops where zlib
    stopped."""
    d = zlib.decompressobj(31 if variant == "GZIP" else 15)
    out = []
    i = -1
    try:
        for i in range(len(data)):
            out.append(d.decompress(data[i : i + 1]))
            if d.eof:
                break
    except zlib.error:
        return b"".join(out), False
    return b"".join(out), d.eof and not d.unused_data and i == len(data) - 1


def flip(rng: random.Random, data: bytearray, lo: int, hi: int, count: int) -> list[int]:
    where = sorted(rng.randrange(lo, hi) for _ in range(count))
    for i in where:
        data[i] ^= rng.randrange(1, 256)
    return where


def zero_page(rng: random.Random, data: bytearray) -> int:
    page = 4096 * rng.randrange(0, (len(data) + 4095) // 4096)
    data[page : page + 4096] = bytes(len(data[page : page + 4096]))
    return page


# ---------------------------------------------------------------------------------------------
# Making the damaged files. Each maker writes into `folder` and returns the meta the reads
# need: "path", what was written, and where the damage lies.


def make_tfrecord(rng: random.Random, folder: str, variant: str, damage: str) -> dict[str, Any]:
    import stoker as sk

    n = 150
    recs = []
    for i in range(n):
        x = np.array([rng.uniform(-1e3, 1e3) for _ in range(4)], np.float32)
        recs.append(sk.io.serialize_example({"id": i, "x": x, "name": rng.randbytes(rng.randrange(0, 300))}))
    compression = None if variant == "plain" else variant
    path = os.path.join(folder, "data.tfrecord" + ("" if compression is None else "." + variant.lower()))
    with sk.io.TFRecordWriter(path, compression) as w:
        for r in recs:
            w.write(r)
    plain_path = os.path.join(folder, "plain.tfrecord")
    with sk.io.TFRecordWriter(plain_path) as w:
        for r in recs:
            w.write(r)
    with open(plain_path, "rb") as f:
        plain = f.read()
    os.remove(plain_path)
    with open(path, "rb") as f:
        stored = bytearray(f.read())
    starts = frame_starts(recs)
    written = list(recs)
    how: dict[str, Any] = {}
    inner: bytearray | None = None  # damage done to the records before compression
    if damage == "flip":
        how["at"] = flip(rng, stored, 0, len(stored), rng.randrange(1, 6))
    elif damage == "cut":
        if compression is None and rng.random() < 0.3:
            # Where a record ends, or inside a header.
            r = rng.randrange(len(recs))
            cut = starts[r] + rng.choice([0, 0, rng.randrange(1, 12)])
        else:
            cut = rng.randrange(0, len(stored))
        stored = stored[:cut]
        how["cut"] = cut
        if compression is None:
            written = [r for r, s in zip(recs, starts) if s < cut]
    elif damage == "zero_page":
        how["page"] = zero_page(rng, stored)
    elif damage in ("length_crc", "partial_append", "inner_flip"):
        inner = bytearray(plain)
        if damage == "length_crc":
            r = rng.randrange(len(recs) - 1)
            length = rng.choice(
                [
                    max(0, len(recs[r]) + rng.choice([-1, 1]) * rng.randrange(1, 40)),
                    rng.randrange(0, 20000),
                    (1 << 31) - 1,
                    1 << 40,
                ]
            )
            head = struct.pack("<Q", length)
            inner[starts[r] : starts[r] + 12] = head + struct.pack("<I", masked_crc(head))
            how.update(record=r, length=length)
        elif damage == "partial_append":
            r = rng.randrange(1, len(recs) - 10)
            keep = rng.randrange(1, 12 + len(recs[r]) + 4)
            end = starts[r + 1]
            inner = bytearray(plain[: starts[r] + keep] + plain[end:])
            how.update(record=r, kept_bytes=keep)
        else:
            how["at"] = flip(rng, inner, 0, len(inner), rng.randrange(1, 4))
        stored = bytearray(inner if compression is None else compress(bytes(inner), variant))
    elif damage == "cut_append":
        # A writer stopped in the middle of its stream, then another appended a stream.
        r = rng.randrange(1, len(recs) - 1)
        first = compress(plain[: starts[r]], variant)
        cut = rng.randrange(1, len(first))
        stored = bytearray(first[:cut] + compress(plain[starts[r] :], variant))
        how.update(record=r, cut=cut)
    else:
        raise ValueError(damage)
    with open(path, "wb") as f:
        f.write(stored)
    return {
        "path": path,
        "compression": compression,
        "written": written,
        "how": how,
        "file_bytes": len(stored),
        "content_bytes": len(plain),
    }


TEXT_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ,.;:-_'\"!?()[]{}\t#é€"


def make_text(rng: random.Random, folder: str, variant: str, damage: str) -> dict[str, Any]:
    lines = ["".join(rng.choice(TEXT_CHARS) for _ in range(rng.randrange(0, 100))).encode() for _ in range(600)]
    content = b"".join(line + b"\n" for line in lines)
    if rng.random() < 0.3:
        content = content[:-1]  # a last line without its line break
    return _damage_stream(rng, folder, variant, damage, content, "data.txt", {"split": "lines"})


def _csv_rows(rng: random.Random, n: int) -> tuple[bytes, list[tuple[int, float, bytes]]]:
    """CSV rows `id,x,name` and the values they hold, TensorFlow's quoting."""
    eol = rng.choice([b"\n", b"\r\n"])
    out, values = [], []
    for i in range(n):
        x = float(np.float32(rng.uniform(-1e4, 1e4)))
        r = rng.random()
        xs = b"" if r < 0.1 else (b"%.8e" % x if r < 0.3 else repr(x).encode())
        if not xs:
            x = 0.0
        r = rng.random()
        word = "".join(rng.choice("abcdefghij klmnopqrstuvwxyz0123456789") for _ in range(rng.randrange(1, 30)))
        if r < 0.15:
            name, field = b"", b""
        elif r < 0.6:
            name = word.strip().encode() or b"w"
            field = name
        else:
            parts = [word.encode(), b",", b'""', b"\n", b"\r\n", b"x"]
            inside = b"".join(rng.choice(parts) for _ in range(rng.randrange(1, 6)))
            field = b'"' + inside + b'"'
            name = inside.replace(b'""', b'"')
        out.append(b"%d,%s,%s%s" % (i, xs, field, eol))
        values.append((i, x, name))
    return b"".join(out), values


def make_csv(rng: random.Random, folder: str, variant: str, damage: str, index: int) -> dict[str, Any]:
    body, values = _csv_rows(rng, 500)
    header = index % 2 == 1
    content = (b"id,x,name\n" if header else b"") + body
    return _damage_stream(
        rng, folder, variant, damage, content, "data.csv", {"split": "csv", "header": header, "values": values}
    )


def make_fixed(rng: random.Random, folder: str, variant: str, damage: str, index: int) -> dict[str, Any]:
    size = rng.randrange(4, 33)
    head, foot = (7, 3) if index % 2 else (0, 0)
    n = 1500
    content = rng.randbytes(head + n * size + foot)
    meta = {"split": "fixed", "record_bytes": size, "header_bytes": head, "footer_bytes": foot}
    return _damage_stream(rng, folder, variant, damage, content, "data.bin", meta)


def _field_starts(content: bytes) -> list[int]:
    """Where unquoted, non-empty name fields (the third column) start, for quote damage."""
    starts, at = [], 0
    for line in content.split(b"\n"):
        parts = line.split(b",")
        if len(parts) == 3 and parts[0].isdigit() and parts[2][:1].isalnum():
            starts.append(at + len(parts[0]) + len(parts[1]) + 2)
        at += len(line) + 1
    return starts


def _damage_stream(
    rng: random.Random, folder: str, variant: str, damage: str, content: bytes, name: str, meta: dict[str, Any]
) -> dict[str, Any]:
    """Damages a text, CSV or fixed-length file; `meta["ranges"]` are the ranges of the
    decompressed contents the damage reached (found by inflating with zlib for compressed
    files, where damage to the stream changes what comes out from some point on)."""
    compression = None if variant == "plain" else variant
    path = os.path.join(folder, name + ("" if compression is None else "." + variant.lower()))
    stored = bytearray(content if compression is None else compress(content, variant))
    inner = bytearray(content)
    ranges: list[tuple[int, int]] = []
    inner_damage = compression is None or damage in ("inner_flip", "inner_cut", "open_quote", "stray_quote")
    how: dict[str, Any] = {}
    target = inner if inner_damage else stored
    if damage in ("flip", "inner_flip"):
        how["at"] = flip(rng, target, 0, len(target), rng.randrange(1, 5))
        ranges = [(i, i + 1) for i in how["at"]]
    elif damage in ("cut", "inner_cut"):
        cut = rng.randrange(0, len(target))
        if damage == "inner_cut" or (meta["split"] == "fixed" and rng.random() < 0.3):
            size = meta["record_bytes"]
            cut = max(0, cut - cut % size + rng.choice([0, rng.randrange(1, size)]))
        del target[cut:]
        how["cut"] = cut
        ranges = [(cut, 1 << 62)]
    elif damage == "zero_page":
        page = zero_page(rng, target)
        how["page"] = page
        ranges = [(page, page + 4096)]
    elif damage in ("open_quote", "stray_quote"):
        starts = _field_starts(bytes(inner))
        at = rng.choice(starts)
        if damage == "stray_quote":
            closing = [i + 1 for i in range(len(inner) - 1) if inner[i + 1 : i + 2] == b'"' and inner[i] != 44]
            if rng.random() < 0.5 or not closing:
                at += 1 if inner[at + 1 : at + 2] not in (b"\n", b"\r", b"") else 0  # inside the field
                inner[at] = ord('"')
            else:
                at = rng.choice(closing)  # a closing quote lost
                inner[at] = ord("x")
        else:
            inner[at] = ord('"')
        how["at"] = [at]
        ranges = [(at, at + 1)]
    else:
        raise ValueError(damage)
    if compression is None:
        stored = inner
    elif inner_damage:
        stored = bytearray(compress(bytes(inner), variant))
    stream_whole = True
    if compression is not None and not inner_damage:
        got, stream_whole = inflate_prefix(bytes(stored), variant)
        diff = next((i for i, (a, b) in enumerate(zip(got, content)) if a != b), min(len(got), len(content)))
        if got[: len(content)] == content and stream_whole and len(got) == len(content):
            ranges = []
        else:
            ranges = [(diff, 1 << 62)]
        inner = bytearray(got)
    with open(path, "wb") as f:
        f.write(stored)
    meta.update(
        path=path,
        compression=compression,
        content=content,
        damaged_content=bytes(inner),
        stream_whole=stream_whole,
        ranges=ranges,
        how=how,
        file_bytes=len(stored),
        content_bytes=len(content),
    )
    return meta


def _png_chunks(png: bytes) -> list[tuple[int, bytes, int]]:
    """(offset, type, data length) of each chunk."""
    out, at = [], 8
    while at + 8 <= len(png):
        (n,) = struct.unpack(">I", png[at : at + 4])
        out.append((at, png[at + 4 : at + 8], n))
        at += 12 + n
    return out


def jpeg_sos_end(jpg: bytes) -> int:
    sos = jpg.find(b"\xff\xda")
    return sos + 2 + int.from_bytes(jpg[sos + 2 : sos + 4], "big")


def image_dims(data: bytes, kind: str) -> tuple[int, int] | None:
    """(height, width) that the (damaged) file's header claims, or None."""
    try:
        if kind == "png":
            w, h = struct.unpack(">II", data[16:24])
            return h, w
        at = 2
        while at + 4 <= len(data):
            if data[at] != 0xFF:
                at += 1
                continue
            marker = data[at + 1]
            if marker in (0xFF, 0x01) or 0xD0 <= marker <= 0xD8:
                at += 1 if marker == 0xFF else 2
                continue
            n = int.from_bytes(data[at + 2 : at + 4], "big")
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
                h, w = struct.unpack(">HH", data[at + 5 : at + 9])
                return h, w
            if marker == 0xDA:
                return None
            at += 2 + n
    except struct.error:
        return None
    return None


def make_image(rng: random.Random, folder: str, kind: str, damage: str) -> dict[str, Any]:
    import stoker as sk
    from stoker.datasets import natural_photo

    def picture() -> np.ndarray:
        h, w = rng.randrange(40, 140), rng.randrange(40, 140)
        img = natural_photo(np.random.default_rng(rng.randrange(1 << 30)), h, w)
        if kind == "png":
            c = rng.choice([3, 3, 4, 1])
            if c == 4:
                img = np.concatenate([img, img[..., :1]], axis=-1)
            elif c == 1:
                img = img.mean(axis=-1, keepdims=True).astype(np.uint8)
        return img

    def encode(img: np.ndarray) -> bytes:
        return sk.io.encode_png(img) if kind == "png" else sk.io.encode_jpeg(img, rng.choice([75, 90, 95]))

    names = ["good0", "damaged", "good1", "good2", "good3"]
    files = {n: encode(picture()) for n in names}
    original = files["damaged"]
    data = bytearray(original)
    how: dict[str, Any] = {}
    if kind == "png":
        chunks = _png_chunks(original)
        if damage == "flip":
            how["at"] = flip(rng, data, 8, len(data), rng.randrange(1, 4))
        elif damage in ("flip_fixcrc", "header_fixcrc"):
            want = b"IDAT" if damage == "flip_fixcrc" else b"IHDR"
            at, ctype, n = rng.choice([c for c in chunks if c[1] == want])
            how["at"] = flip(rng, data, at + 8, at + 8 + n, rng.randrange(1, 4) if want == b"IDAT" else 1)
            data[at + 8 + n : at + 12 + n] = struct.pack(">I", zlib.crc32(bytes(data[at + 4 : at + 8 + n])))
        elif damage == "cut":
            how["cut"] = rng.randrange(8, len(data))
            del data[how["cut"] :]
    else:
        sos_end = jpeg_sos_end(original)
        if damage == "flip":
            how["at"] = flip(rng, data, sos_end, len(data) - 2, rng.randrange(1, 4))
        elif damage == "header_flip":
            how["at"] = flip(rng, data, 2, sos_end, rng.randrange(1, 3))
        elif damage == "cut":
            how["cut"] = rng.randrange(2, len(data))
            del data[how["cut"] :]
        elif damage == "bad_header":
            sof = original.find(b"\xff\xc0")
            which = rng.choice(["height", "width", "components", "dqt"])
            if which == "height":
                data[sof + 5 : sof + 7] = b"\0\0"
            elif which == "width":
                data[sof + 7 : sof + 9] = b"\0\0"
            elif which == "components":
                data[sof + 9] = 0
            else:
                dqt = original.find(b"\xff\xdb")
                data[dqt + 4] = (data[dqt + 4] & 0xF0) | 7
            how["what"] = which
    files["damaged"] = bytes(data)
    paths = {}
    for n, b in files.items():
        paths[n] = os.path.join(folder, f"{n}.{kind}")
        with open(paths[n], "wb") as f:
            f.write(b)
    orig_path = os.path.join(folder, f"original.{kind}")
    with open(orig_path, "wb") as f:
        f.write(original)
    order = [paths[n] for n in names]
    # What each pipeline gives for the files undamaged (the damaged one's original in its place).
    expect = {}
    for pipeline in ("whole", "crop_or_pad", "rrc"):
        undamaged = [orig_path if p == paths["damaged"] else p for p in order]
        ds = image_dataset(undamaged, pipeline, parallel=None, apart=False)
        expect[pipeline] = [e["f"] for e in ds]
    return {
        "kind": kind,
        "paths": order,
        "damaged_path": paths["damaged"],
        "expect": expect,
        "claimed_dims": image_dims(files["damaged"], kind),
        "how": how,
        "file_bytes": len(files["damaged"]),
        "content_bytes": max(int(a.nbytes) for a in expect["whole"]),
    }


def image_dataset(paths: list[str], pipeline: str, parallel: int | None, apart: bool) -> Any:
    """read_file, decode_image and the pipeline's crop over `paths`; `apart` puts a Python
    function between decode and crop, so that they are not fused."""
    import stoker as sk

    ds = sk.Dataset.from_tensor_slices({"f": np.array([p.encode() for p in paths], dtype=object)})
    decode = [sk.ops.read_file("f"), sk.ops.decode_image("f", channels=3)]
    crop = {
        "whole": [],
        "crop_or_pad": [sk.ops.resize_with_crop_or_pad("f", 72, 90)],
        "rrc": [sk.ops.random_resized_crop("f", 32, seed=5)],
    }[pipeline]
    if not crop:
        return ds.map(decode, num_parallel_calls=parallel)
    if apart:
        return ds.map(decode, num_parallel_calls=parallel).map(lambda x: x).map(crop, num_parallel_calls=parallel)
    return ds.map(decode + crop, num_parallel_calls=parallel)


def make_case(name: str, seed: int, folder: str) -> dict[str, Any]:
    family, variant, damage, index, _mode = name.split("/")
    rng = random.Random(f"{seed}/{family}/{variant}/{damage}/{index}")
    if family == "tfrecord":
        meta = make_tfrecord(rng, folder, variant, damage)
    elif family == "text":
        meta = make_text(rng, folder, variant, damage)
    elif family == "csv":
        meta = make_csv(rng, folder, variant, damage, int(index))
    elif family == "fixed_length":
        meta = make_fixed(rng, folder, variant, damage, int(index))
    else:
        meta = make_image(rng, folder, family, damage)
    meta["family"], meta["damage"] = family, damage
    with open(os.path.join(folder, "meta.pkl"), "wb") as f:
        pickle.dump(meta, f)
    return meta


# ---------------------------------------------------------------------------------------------
# Reading and judging (in the child)


class Verdict(Exception):
    """The outcome of a read, raised from deep inside a check."""

    def __init__(self, outcome: str, detail: str = "") -> None:
        super().__init__(outcome, detail)
        self.outcome = outcome
        self.detail = detail


def drain(ds: Any, limit: int | None = None) -> tuple[list[Any], BaseException | None]:
    """The elements `ds` hands out, and the exception that ended it (None at its end)."""
    out: list[Any] = []
    try:
        for e in ds:
            out.append(e)
            if limit is not None and len(out) >= limit:
                break
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # a Rust panic arrives as a BaseException
        return out, e
    return out, None


def loss(ds: Any) -> dict[str, Any]:
    st = ds.stats()
    got: dict[str, Any] = {k: sum(int(s.get(k) or 0) for s in st) for k in ("skipped", "skipped_bytes", "rest_lost")}
    got["warnings"] = sum(int(s.get("warnings") or 0) for s in st)
    got["reasons"] = [s["last_skip_reason"] for s in st if s.get("last_skip_reason")]
    return got


def error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e)[:300]}"


def check_error(e: BaseException, path: str, record: Any = None, offset: Any = None, where: bool = True) -> None:
    """A located error, or a Verdict: a stoker error naming `path` (and, with `where`, a record
    and an offset: `record`/`offset` when given, a range (lo, hi) or an exact value)."""
    import stoker as sk

    if "Panic" in type(e).__name__:
        raise Verdict("crash", "a Rust panic reached Python: " + error_text(e))
    if not isinstance(e, sk.StokerError):
        raise Verdict("bad_error", "not a stoker error: " + error_text(e))
    if getattr(e, "file", None) not in (path, None) or path not in str(e):
        raise Verdict("bad_error", f"the error does not name {path}: " + error_text(e))
    if not where:
        return
    got_record, got_offset = getattr(e, "record", None), getattr(e, "offset", None)
    if not isinstance(got_record, int) or not isinstance(got_offset, int) or got_offset < 0:
        raise Verdict("bad_error", f"no record/offset ({got_record}, {got_offset}): " + error_text(e))
    for what, want, got in (("record", record, got_record), ("offset", offset, got_offset)):
        if want is None:
            continue
        ok = want[0] <= got < want[1] if isinstance(want, tuple) else got == want
        if not ok:
            raise Verdict("bad_error", f"{what} {got}, expected {want}: " + error_text(e))


def check_reasons(lost: dict[str, Any], path: str) -> None:
    if not lost["reasons"]:
        raise Verdict("wrong", f"elements lost without a reason in stats(): {lost}")
    if not any(path in r for r in lost["reasons"]):
        raise Verdict("bad_error", f"the skip reasons do not name {path}: {lost['reasons']}")


def is_subsequence(part: list[Any], whole: list[Any]) -> bool:
    it = iter(whole)
    return all(any(p == w for w in it) for p in part)


# TFRecord ------------------------------------------------------------------------------------


def parsed_value(record: bytes) -> tuple[int, tuple[float, ...], bytes]:
    import stoker as sk

    ex = sk.io.parse_example_proto(record)
    return ex["id"][1][0], tuple(float(v) for v in np.float32(ex["x"][1])), ex["name"][1][0]


def element_value(e: Any) -> tuple[int, tuple[float, ...], bytes]:
    return int(e["id"]), tuple(float(v) for v in np.asarray(e["x"], np.float32)), bytes(e["name"])


def read_tfrecord(meta: dict[str, Any], mode: str) -> tuple[str, str, dict[str, Any]]:
    import stoker as sk

    path, compression, written = meta["path"], meta["compression"], meta["written"]
    spec = {
        "id": sk.FixedLenFeature([], sk.int64),
        "x": sk.FixedLenFeature([4], sk.float32),
        "name": sk.FixedLenFeature([], sk.string),
    }
    parse = sk.ops.parse_example(spec)
    skip = mode.endswith("_skip")
    info: dict[str, Any] = {}

    def source() -> Any:
        return sk.TFRecordDataset(path, compression_type=compression)

    if mode.startswith("raw"):
        ds, want = source(), list(written)
        flatten = lambda out: [bytes(r) for r in out]  # noqa: E731
    elif mode.startswith("parse"):
        ds, want = source().map(parse), [parsed_value(r) for r in written]
        flatten = lambda out: [element_value(e) for e in out]  # noqa: E731
    elif mode.startswith("batch_parse"):
        par = 2 if len(written) % 2 else None
        ds, want = source().batch(8).map(parse, num_parallel_calls=par), [parsed_value(r) for r in written]

        def flatten(out: list[Any]) -> list[Any]:
            sizes = [len(b["id"]) for b in out]
            if any(s != 8 for s in sizes[:-1]):
                raise Verdict("wrong", f"batches of {sizes}: only the last may be short")
            return [element_value({k: b[k][i] for k in b}) for b in out for i in range(len(b["id"]))]

    elif mode == "shuffle_resume_skip":
        return shuffle_resume(meta, lambda: source().shuffle(16, seed=7).ignore_errors(), global_=False)
    elif mode == "global_shuffle_skip":
        return shuffle_resume(meta, lambda: source().global_shuffle(seed=3).ignore_errors(), global_=True)
    else:
        raise ValueError(mode)

    if skip:
        ds = ds.ignore_errors()
    out, err = drain(ds)
    got = flatten(out)
    lost = loss(ds)
    info.update(read=len(got), written=len(want), **{k: v for k, v in lost.items() if k != "reasons"})
    if not skip:
        if got != want[: len(got)]:
            raise Verdict("wrong", f"{len(got)} elements read, not the first {len(got)} written")
        if err is None:
            if len(got) != len(want):
                raise Verdict("wrong", f"{len(got)} of {len(want)} read, then the end without an error")
            return "clean", "", info
        if mode.startswith("batch"):
            check_error(err, path, record=(len(got), len(got) + 8))
        else:
            check_error(err, path, record=len(got))
        return "located", error_text(err), info
    if err is not None:
        check_error(err, path, where=False)
        raise Verdict("bad_error", "an error escaped ignore_errors(): " + error_text(err))
    if not is_subsequence(got, want):
        raise Verdict("wrong", "elements handed out that were not written, or out of order")
    return judge_tfrecord_loss(len(want) - len(got), lost, path, info)


def judge_tfrecord_loss(n_lost: int, lost: dict[str, Any], path: str, info: dict[str, Any]) -> tuple[str, str, dict]:
    if n_lost == 0:
        if lost["skipped"] or lost["rest_lost"]:
            check_reasons(lost, path)
            return "counted_skip", "nothing lost; damage reported", info
        return "clean", "", info
    if lost["rest_lost"] == 0 and n_lost > lost["skipped"] + lost["skipped_bytes"] // 16:
        raise Verdict("wrong", f"{n_lost} records lost, {lost['skipped']} skipped, {lost['skipped_bytes']} bytes")
    check_reasons(lost, path)
    return "counted_skip", f"{n_lost} lost", info


def shuffle_resume(meta: dict[str, Any], make: Any, global_: bool) -> tuple[str, str, dict[str, Any]]:
    """A shuffle under the skip policy, then resumed from states saved at several points: the
    run resumed equals the run whole, what it hands out was written, and the loss is counted."""
    path, written = meta["path"], meta["written"]
    full_ds = make()
    full, err = drain(full_ds)
    if err is not None:
        check_error(err, path, where=False)
        raise Verdict("bad_error", "an error escaped ignore_errors(): " + error_text(err))
    got = [bytes(r) for r in full]
    if Counter(got) - Counter(written):
        raise Verdict("wrong", "records handed out that were not written")
    lost = loss(full_ds)
    info: dict[str, Any] = {"read": len(got), "written": len(written)}
    info.update({k: v for k, v in lost.items() if k != "reasons"})
    points = sorted({0, len(got) // 3, 2 * len(got) // 3, len(got)} if not global_ else {len(got) // 2})
    counts = []
    for k in points:
        first = make()
        it = first.iterator()
        head, err = drain(it, limit=k) if k else ([], None)
        if err is not None:
            raise Verdict("bad_error", f"resume point {k}: the first part failed: " + error_text(err))
        again = make()
        rest, err = drain(again.iterator(state=it.state()))
        if err is not None:
            raise Verdict("bad_error", f"resumed at {k}: " + error_text(err))
        if [bytes(r) for r in head + rest] != got:
            raise Verdict("wrong", f"resumed at {k}: {len(head)} + {len(rest)} elements, not the run whole")
        counts.append(loss(first)["skipped"] + loss(again)["skipped"])
    info["resume_points"] = points
    info["skips_over_resume"] = counts
    return judge_tfrecord_loss(len(written) - len(got), lost, path, info)


# Text, CSV, fixed-length -----------------------------------------------------------------------


class Item:
    """One element of the reference reading of the damaged contents."""

    __slots__ = ("start", "end", "line", "value", "touched", "tail")

    def __init__(self, start: int, end: int, line: int, value: Any, touched: bool, tail: str = "") -> None:
        self.start, self.end, self.line, self.value, self.touched, self.tail = start, end, line, value, touched, tail


def split_lines(data: bytes) -> list[tuple[int, int, int, bytes, str]]:
    """(start, end, line, value, tail) as TensorFlow's line reader: each line without `\\n` and
    without any `\\r`."""
    out, at = [], 0
    while at < len(data):
        j = data.find(b"\n", at)
        end = len(data) if j < 0 else j + 1
        out.append((at, end, len(out), data[at : end if j < 0 else j].replace(b"\r", b""), ""))
        at = end
    return out


def split_csv(data: bytes) -> list[tuple[int, int, int, bytes, str]]:
    """(start, end, first line, record, tail) as tf.data's CSV reader splits records: at a line
    break outside a quoted field, a field quoted only where it starts with a quote; tail
    "quote" for a file that ends inside a quoted field."""
    out = []
    at, line, n = 0, 0, len(data)
    while at < n:
        start, start_line, state, cr, lines = at, line, "start", False, 0
        k, end_at = at, None
        while k < n:
            b = data[k]
            if cr and b != 10:
                lines += 1
            cr = b == 13
            if b == 10:
                lines += 1
            if state == "start" and b == 34:
                state = "quoted"
            elif state == "quoted":
                state = "quote_in_quoted" if b == 34 else "quoted"
            elif state == "quote_in_quoted" and b not in (44, 10, 13):
                state = "quoted"
            elif b == 44:
                state = "start"
            elif b in (10, 13):
                end_at = k
                break
            else:
                state = "unquoted"
            k += 1
        if end_at is None:
            lines += int(cr)
            out.append((start, n, start_line, data[start:n], "quote" if state == "quoted" else ""))
            break
        nxt = end_at + 1
        if cr:
            if nxt < n and data[nxt] == 10:
                nxt += 1
            lines += 1
        out.append((start, nxt, start_line, data[start:end_at], ""))
        line += lines
        at = nxt
    return out


def parse_csv(record: bytes) -> tuple[int, float, bytes] | None:
    """TensorFlow's reading of a record `id,x,name` (int64 required, float32 and string with
    defaults), or None for an error. Used only to note disagreements on damaged records."""
    fields, at, n = [], 0, len(record)
    while True:
        if at < n and record[at] == 34:
            j, buf = at + 1, bytearray()
            while True:
                if j >= n:
                    return None
                if record[j] == 34:
                    if record[j + 1 : j + 2] == b'"':
                        buf.append(34)
                        j += 2
                        continue
                    if j + 1 == n or record[j + 1] == 44:
                        j += 1
                        break
                    return None
                buf.append(record[j])
                j += 1
            fields.append(bytes(buf))
            at = j
        else:
            j = record.find(b",", at)
            j = n if j < 0 else j
            if b'"' in record[at:j]:
                return None
            fields.append(record[at:j])
            at = j
        if at >= n:
            break
        at += 1
        if at == n:
            fields.append(b"")
            break
    if len(fields) != 3:
        return None
    try:
        ident = int(fields[0]) if fields[0].strip() else None
        x = float(np.float32(float(fields[1]))) if fields[1] else 0.0
    except ValueError:
        return None
    return None if ident is None else (ident, x, fields[2])


def reference(meta: dict[str, Any]) -> tuple[list[Item], str]:
    """The elements a correct reader gives for the damaged file, each marked touched (the
    damage reached it: its value may be anything, or it may be an error) or not (it must equal
    what was written), and how the file ends: "" (whole), "stream" (damaged compressed
    stream: an error or rest_lost expected), "quote" (a CSV file ending inside a quoted field),
    "partial" (a fixed-length body that is not a whole number of records)."""
    original, damaged, ranges = meta["content"], meta["damaged_content"], meta["ranges"]
    tail = "" if meta["stream_whole"] else "stream"

    def hit(s: int, e: int) -> bool:
        return any(s < hi and lo < e for lo, hi in ranges)

    if meta["split"] == "fixed":
        size, head, foot = meta["record_bytes"], meta["header_bytes"], meta["footer_bytes"]
        body = len(damaged) - head - foot
        if tail == "" and (body < 0 or body % size):
            # Refused: a plain file at once, a compressed one (whose size is known only at its
            # end) after the whole records before its end.
            tail = "partial"
            count = 0 if meta["compression"] is None else max(0, (len(damaged) - head) // size)
        elif tail == "":
            count = body // size
        else:
            # A damaged stream ends before its footer is known: records up to where it broke.
            count = max(0, (len(damaged) - head) // size)
        items = []
        for i in range(count):
            s = head + i * size
            items.append(Item(s, s + size, i, damaged[s : s + size], hit(s, s + size) or s + size > len(original)))
        return items, tail

    split = split_lines if meta["split"] == "lines" else split_csv
    got = split(damaged)
    if tail and got and (got[-1][4] or not damaged.endswith((b"\n", b"\r"))):
        # Only what came out whole before the damage: a last record without its end is cut.
        got = got[:-1]
    written_spans = {(s, e): v for s, e, _, v, _ in split(original)}
    items = []
    for s, e, line, v, t in got:
        if t:
            tail = t
            break
        ok = (s, e) in written_spans and written_spans[(s, e)] == v and not hit(s, e)
        items.append(Item(s, e, line, v, not ok))
    if meta["split"] == "csv" and meta["header"] and items:
        items = items[1:]
    return items, tail


def read_stream(meta: dict[str, Any], mode: str) -> tuple[str, str, dict[str, Any]]:
    """Text, CSV and fixed-length reads, against the reference reading."""
    import stoker as sk

    path, comp, family = meta["path"], meta["compression"], meta["family"]
    skip = mode.endswith("skip")
    if family == "text":
        ds = sk.TextLineDataset(path, compression_type=comp)
        value = bytes
    elif family == "csv":
        ds = sk.CsvDataset(path, [sk.int64, 0.0, ""], compression_type=comp, header=meta["header"])

        def value(e: Any) -> Any:
            return int(e[0]), float(e[1]), bytes(e[2])

    else:
        ds = sk.FixedLengthRecordDataset(
            path, meta["record_bytes"], meta["header_bytes"], meta["footer_bytes"], compression_type=comp
        )
        value = bytes
        if mode == "decode_raw_skip":
            ds = ds.map(sk.ops.decode_raw("record", "uint8"))

            def value(e: Any) -> Any:
                return np.asarray(e, np.uint8).tobytes()

    if skip:
        ds = ds.ignore_errors()
    items, tail = reference(meta)
    if family == "csv":
        for it in items:
            it.value = parse_csv(it.value) if it.touched else meta["values"][_csv_index(it, meta)]
    out, err = drain(ds)
    got = [value(e) for e in out]
    lost = loss(ds)
    info: dict[str, Any] = {"read": len(got), "reference": len(items), "tail": tail}
    info.update({k: v for k, v in lost.items() if k != "reasons"})
    disagree: list[str] = []
    altered = 0

    if err is not None:
        if family == "fixed_length" and tail == "partial" and type(err).__name__ == "InvalidArgumentError":
            check_error(err, path, where=False)
            # A body that is not whole records: refused, by the file's name, whatever the policy.
            if got != [it.value for it in items[: len(got)]]:
                raise Verdict("wrong", "records before the refusal differ from the file's")
            return "located", error_text(err), info
        if skip:
            check_error(err, path, where=False)
            raise Verdict("bad_error", "an error escaped ignore_errors(): " + error_text(err))

    if not skip:
        for i, g in enumerate(got):
            if i >= len(items):
                raise Verdict("wrong", f"element {i} read, the file holds {len(items)}")
            it = items[i]
            if not it.touched and g != it.value:
                raise Verdict("wrong", f"element {i} (untouched by the damage) differs: {g!r} != {it.value!r}")
            if it.touched:
                altered += 1
                if family == "csv" and g != it.value:
                    disagree.append(tf_disagreement(it, g))
        info["disagree"] = disagree
        info["altered"] = altered
        csv_verdict(disagree)
        if err is None:
            if len(got) != len(items) or tail:
                raise Verdict("wrong", f"{len(got)} of {len(items)} elements, then the end without an error ({tail})")
            return ("as_damaged" if altered else "clean"), "", info
        n = len(got)
        if n < len(items):
            it = items[n]
            if not it.touched and tail != "stream":
                raise Verdict("bad_error", f"error on element {n}, untouched by the damage: " + error_text(err))
            if family == "csv" and it.value is not None and tail != "stream":
                disagree.append(tf_disagreement(it, None))
            if family == "csv":
                check_error(err, path, record=it.line, offset=it.start if comp is None else None)
            else:
                check_error(err, path, record=n)
        elif tail:
            check_error(err, path)
        else:
            raise Verdict("bad_error", "an error after every element of the file: " + error_text(err))
        return "located", error_text(err), info

    # Skip policy: the untouched elements, in order; touched ones read as damaged or skipped.
    j, missing, last_matched = 0, [], -1
    for i, g in enumerate(got):
        while True:
            if j >= len(items):
                raise Verdict("wrong", f"element {i} read beyond the {len(items)} the file holds: {g!r}"[:300])
            it = items[j]
            if not it.touched:
                if g != it.value:
                    raise Verdict("wrong", f"element {i}: {g!r} where the untouched {it.value!r} was"[:300])
                j += 1
                break
            nxt = next((k for k in range(j + 1, len(items)) if not items[k].touched), None)
            if nxt is not None and g == items[nxt].value:
                missing.extend(range(j, nxt))
                j = nxt + 1
                break
            # Which damaged record this is cannot always be told apart from the one after it
            # (either may have been skipped): disagreements are noted under the raise policy,
            # where elements and records pair one to one.
            altered += 1
            j += 1
            break
        last_matched = j - 1
    info["altered"] = altered
    if family == "csv":
        # What TensorFlow's rules hand out under ignore_errors(): every record they read. The
        # reads pair with it by their longest common run, which tells a damaged record
        # skipped from one read otherwise.
        tf_out = [it.value for it in items if it.value is not None]
        pairs = difflib.SequenceMatcher(a=tf_out, b=got, autojunk=False).get_opcodes()
        for tag, i1, i2, j1, j2 in pairs:
            if tag in ("insert", "replace"):
                disagree += [
                    f"stoker reads what TensorFlow does not: element {k}: {got[k]!r}"[:300] for k in range(j1, j2)
                ]
            if tag == "delete":
                disagree += [f"TensorFlow reads, stoker refuses: {v!r}"[:300] for v in tf_out[i1:i2]]
        info["disagree"] = disagree
        csv_verdict(disagree)
    after = list(range(j, len(items)))
    untouched_after = [k for k in after if not items[k].touched]
    if tail or (untouched_after and lost["rest_lost"]):
        if not lost["rest_lost"]:
            raise Verdict("wrong", f"the file ends in damage ({tail}), no rest_lost: {lost}")
        uncounted = len(missing)
    else:
        if untouched_after:
            raise Verdict("wrong", f"{len(untouched_after)} untouched elements after element {last_matched} lost")
        uncounted = len(missing) + len(after)
    if uncounted > lost["skipped"]:
        raise Verdict("wrong", f"{uncounted} damaged elements lost, {lost['skipped']} counted")
    if uncounted or lost["rest_lost"] or lost["skipped"]:
        check_reasons(lost, path)
        return "counted_skip", f"{uncounted} skipped, rest_lost {lost['rest_lost']}", info
    return ("as_damaged" if altered else "clean"), "", info


def tf_disagreement(it: Item, got: Any) -> str:
    """A damaged CSV record that stoker reads otherwise than TensorFlow's rules (the reference
    reading, checked against tf.data's CsvDataset on these files) do."""
    where = f"the record on line {it.line + 1}"
    if it.value is None:
        return f"TensorFlow refuses, stoker reads: {where}: stoker read {got!r}"[:300]
    if got is None:
        return f"TensorFlow reads, stoker refuses: {where}: TensorFlow reads {it.value!r}"[:300]
    return f"other values: {where}: TensorFlow reads {it.value!r}, stoker read {got!r}"[:300]


def csv_verdict(disagree: list[str]) -> None:
    """A CSV record handed out that TensorFlow's rules refuse, or read to other values, is data
    changed without a word (stoker's CsvDataset follows tf.data's); one that stoker refuses and
    TensorFlow reads is only noted (an error or a counted skip is not silent)."""
    silent = [d for d in disagree if not d.startswith("TensorFlow reads, stoker refuses")]
    if silent:
        raise Verdict(
            "wrong",
            f"{len(silent)} records read where TensorFlow's CSV rules refuse them or read "
            f"other values; the first: {silent[0]}",
        )


def _csv_index(it: Item, meta: dict[str, Any]) -> int:
    """The row an untouched record is: the row whose id its bytes start with."""
    return int(meta["content"][it.start : it.end].split(b",", 1)[0])


# Images ----------------------------------------------------------------------------------------


def read_image(meta: dict[str, Any], mode: str) -> tuple[str, str, dict[str, Any]]:
    pipeline = mode.split("_skip")[0].split("_raise")[0]  # whole, crop_or_pad, rrc
    skip = "skip" in mode
    parallel = 2 if mode.endswith("par2") else None
    paths, damaged, expect = meta["paths"], meta["damaged_path"], meta["expect"][pipeline]
    ds = image_dataset(paths, pipeline, parallel, apart=False)
    if skip:
        ds = ds.ignore_errors()
    out, err = drain(ds)
    got = [np.asarray(e["f"]) for e in out]
    lost = loss(ds)
    info: dict[str, Any] = {"read": len(got), **{k: v for k, v in lost.items() if k != "reasons"}}

    def same(a: np.ndarray, b: np.ndarray) -> bool:
        return a.shape == b.shape and bool(np.array_equal(a, b))

    if err is not None:
        if skip:
            check_error(err, damaged, where=False)
            raise Verdict("bad_error", "an error escaped ignore_errors(): " + error_text(err))
        if len(got) != 1 or not same(got[0], expect[0]):
            raise Verdict("wrong", f"{len(got)} images before the error; expected the first good one")
        check_error(err, damaged, where=False)
        return "located", error_text(err), info
    goods = [0, 2, 3, 4]
    if len(got) == 4:
        pairs = list(zip(got, [expect[i] for i in goods]))
        dam = None
    elif len(got) == 5:
        pairs = [(got[i], expect[i]) for i in goods]
        dam = got[1]
    else:
        raise Verdict("wrong", f"{len(got)} images of 5")
    for k, (g, e) in enumerate(pairs):
        if not same(g, e):
            raise Verdict(
                "wrong",
                f"good image {goods[k]} differs from its decode alone (max diff "
                f"{np.abs(g.astype(int) - e.astype(int)).max() if g.shape == e.shape else g.shape})",
            )
    if dam is None:
        if lost["skipped"] != 1:
            raise Verdict("wrong", f"the damaged image missing, {lost['skipped']} skipped")
        check_reasons(lost, damaged)
        outcome, detail = "counted_skip", lost["reasons"][0][:200]
    elif same(dam, expect[1]):
        outcome, detail = "clean", ""
    else:
        # Other pixels: only where the format has no check for the damage (JPEG data, a PNG
        # header changed with a valid CRC), and then as the damaged header says.
        if meta["kind"] == "png" and meta["damage"] != "header_fixcrc":
            raise Verdict("wrong", f"a PNG damaged ({meta['damage']}) decoded to other pixels without an error")
        claimed = meta["claimed_dims"]
        if pipeline == "whole" and claimed is not None and dam.shape[:2] != tuple(claimed):
            raise Verdict("wrong", f"decoded {dam.shape}, the header says {claimed}")
        outcome, detail = "as_damaged", f"warnings {lost['warnings']}"
    if pipeline != "whole":
        # The same ops kept apart: the fused path must agree with them, pixel for pixel but
        # where the fused JPEG crop decodes at a DCT scale (documented: other pixels by design;
        # its damaged image is judged against its own reading of the undamaged file above).
        scaled = meta["kind"] == "jpeg" and pipeline == "rrc"
        apart_ds = image_dataset(paths, pipeline, parallel, apart=True).ignore_errors()
        apart, aerr = drain(apart_ds)
        if aerr is not None:
            raise Verdict("bad_error", "the ops apart failed: " + error_text(aerr))
        ref = np.asarray(apart[1]["f"]) if len(apart) == 5 else None
        info["apart"] = "skipped" if ref is None else "read"
        if dam is not None and ref is None:
            if not same(dam, expect[1]):
                raise Verdict("wrong", "the fused path read the damaged image (other pixels) where decode alone fails")
            outcome, detail = "clean", "damage outside the crop"
        elif dam is not None and ref is not None and not same(dam, ref) and not scaled:
            diff = np.abs(dam.astype(int) - ref.astype(int)).max() if dam.shape == ref.shape else dam.shape
            raise Verdict("wrong", f"the fused path differs from the ops apart (max diff {diff})")
        elif dam is None and ref is not None:
            info["disagree"] = ["the fused path refuses what the ops apart read"]
    return outcome, detail, info


# The child --------------------------------------------------------------------------------------


def peak_rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def run_read(folder: str, mode: str) -> dict[str, Any]:
    with open(os.path.join(folder, "meta.pkl"), "rb") as f:
        meta = pickle.load(f)
    t = time.perf_counter()
    try:
        if meta["family"] == "tfrecord":
            outcome, detail, info = read_tfrecord(meta, mode)
        elif meta["family"] in ("png", "jpeg"):
            outcome, detail, info = read_image(meta, mode)
        else:
            outcome, detail, info = read_stream(meta, mode)
    except Verdict as v:
        outcome, detail, info = v.outcome, v.detail, {}
    except Exception:
        outcome, detail, info = "harness", traceback.format_exc()[-2000:], {}
    return {"outcome": outcome, "detail": detail, "info": info, "seconds": time.perf_counter() - t}


def child_main(folder: str, mode: str) -> None:
    result = run_read(folder, mode)
    result["rss_mb"] = peak_rss_mb()
    sys.stdout.write("\n" + json.dumps(result, default=str) + "\n")
    sys.stdout.flush()


# The runner --------------------------------------------------------------------------------------


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def bound_mb(meta: dict[str, Any]) -> float:
    return 150 + 2 * max(meta["file_bytes"], meta["content_bytes"]) / (1 << 20)


def run_matrix(names: list[str], seed: int, jobs: int, timeout: float, workdir: str, progress: bool) -> list[dict]:
    """Makes each file once, then runs each read in its own process, `jobs` at a time."""
    metas: dict[str, tuple[str, dict[str, Any]]] = {}
    for name in names:
        key = name.rsplit("/", 1)[0]
        if key not in metas:
            folder = os.path.join(workdir, key.replace("/", "_"))
            os.makedirs(folder)
            metas[key] = (folder, make_case(name, seed, folder))
    pending = list(names)
    running: dict[str, tuple[subprocess.Popen, float, Any, Any, float]] = {}
    results = []
    ceiling = 2048.0
    while pending or running:
        while pending and len(running) < jobs:
            name = pending.pop(0)
            folder, meta = metas[name.rsplit("/", 1)[0]]
            out = tempfile.TemporaryFile()
            err = tempfile.TemporaryFile()
            cmd = [sys.executable, os.path.abspath(__file__), "--child", folder, name.rsplit("/", 1)[1]]
            p = subprocess.Popen(cmd, stdout=out, stderr=err)
            running[name] = (p, time.monotonic(), out, err, 0.0)
        time.sleep(0.01)
        for name in list(running):
            p, started, out, err, peak = running[name]
            folder, meta = metas[name.rsplit("/", 1)[0]]
            rc = p.poll()
            if rc is None:
                now = rss_mb(p.pid)
                peak = max(peak, now)
                running[name] = (p, started, out, err, peak)
                killed = None
                if time.monotonic() - started > timeout:
                    killed = ("hang", f"no result within {timeout} s")
                elif now > max(ceiling, 4 * bound_mb(meta)):
                    killed = ("memory", f"killed at {now:.0f} MB")
                if killed is None:
                    continue
                p.kill()
                p.wait()
                res = {"outcome": killed[0], "detail": killed[1], "info": {}, "rss_mb": peak}
            else:
                out.seek(0)
                err.seek(0)
                stdout = out.read().decode(errors="replace")
                stderr = err.read().decode(errors="replace")
                lines = [ln for ln in stdout.splitlines() if ln.startswith('{"outcome"')]
                if rc != 0 or not lines:
                    why = f"signal {-rc}" if rc < 0 else f"exit {rc}"
                    res = {"outcome": "crash", "detail": f"{why}: {stderr[-1500:]}", "info": {}, "rss_mb": peak}
                else:
                    res = json.loads(lines[-1])
                    bound = bound_mb(meta)
                    if res["outcome"] not in BAD and res["rss_mb"] > bound:
                        res["detail"] = f"peak RSS {res['rss_mb']:.0f} MB over {bound:.0f} MB; " + res["detail"]
                        res["outcome"] = "memory"
            out.close()
            err.close()
            res["case"] = name
            res["wall_s"] = round(time.monotonic() - started, 3)
            res["bound_mb"] = round(bound_mb(meta), 1)
            results.append(res)
            del running[name]
            if progress and res["outcome"] in BAD + ("harness",):
                print(f"  {res['outcome']:<10} {name}: {str(res['detail'])[:300]}", flush=True)
    order = {n: i for i, n in enumerate(names)}
    results.sort(key=lambda r: order[r["case"]])
    return results


def tally(results: list[dict]) -> dict[str, dict[str, int]]:
    rows: dict[str, dict[str, int]] = {}
    for r in results:
        family, variant = r["case"].split("/")[:2]
        for key in (family, f"{family}/{variant}", "all"):
            row = rows.setdefault(key, {"reads": 0, **{o: 0 for o in OUTCOMES}, "harness": 0, "disagree": 0})
            row["reads"] += 1
            row[r["outcome"]] += 1
            row["disagree"] += bool(r.get("info", {}).get("disagree"))
    return rows


def brief(r: dict[str, Any]) -> dict[str, Any]:
    """A read as the JSON keeps it: its outcome, peak RSS and time, the loss counters, and the
    detail where it failed or disagreed."""
    info = r.get("info") or {}
    out = {"case": r["case"], "outcome": r["outcome"], "rss_mb": round(r["rss_mb"], 1), "wall_s": r["wall_s"]}
    out["bound_mb"] = r["bound_mb"]
    keys = ("read", "skipped", "skipped_bytes", "rest_lost", "warnings", "altered")
    out.update({k: info[k] for k in keys if info.get(k)})
    if "skips_over_resume" in info:
        out["skips_over_resume"] = info["skips_over_resume"]
    if info.get("disagree"):
        out["disagree"] = info["disagree"]
    if r["outcome"] not in GOOD:
        out["detail"] = r["detail"]
    return out


def notes(results: list[dict]) -> dict[str, Any]:
    """What the outcomes do not show: disagreements with TensorFlow's CSV rules and between the
    fused and apart image paths, by kind, and skips counted again over a resume."""
    kinds: Counter = Counter()
    for r in results:
        for d in r.get("info", {}).get("disagree") or []:
            kinds[r["case"].split("/")[0] + ": " + d.split(":")[0]] += 1
    resumed = [r for r in results if "skips_over_resume" in r.get("info", {})]
    recounted = [r["case"] for r in resumed if any(c > r["info"]["skipped"] for c in r["info"]["skips_over_resume"])]
    # Deflate checks its data only at the end of the stream: what it inflated before that may
    # already be changed (the reads of damaged compressed bytes that then ended in a located
    # error or a counted rest).
    before = [
        r
        for r in results
        if r["case"].split("/")[1] in ("GZIP", "ZLIB")
        and r["case"].split("/")[2] in ("flip", "cut", "zero_page")
        and r["outcome"] in ("located", "counted_skip")
        and (r.get("info") or {}).get("altered")
    ]
    return {
        "compressed_reads_with_changed_elements_before_the_error": len(before),
        "disagreements": dict(kinds),
        "resumed_reads": len(resumed),
        "resumed_reads_counting_a_skip_again": len(recounted),
        "recounted_examples": recounted[:10],
    }


def table(rows: dict[str, dict[str, int]]) -> str:
    cols = ("reads",) + OUTCOMES + ("disagree",)
    keys = [k for f in FAMILIES for k in rows if k == f or k.startswith(f + "/")] + ["all"]
    if any(rows[k]["harness"] for k in rows):
        cols += ("harness",)
    head = "| family | " + " | ".join(c.replace("_", " ") for c in cols) + " |"
    lines = [head, "|" + "---|" * (len(cols) + 1)]
    for k in keys:
        if k not in rows:
            continue
        name = f"**{k}**" if "/" not in k else k
        lines.append(f"| {name} | " + " | ".join(f"{rows[k][c]:,}" for c in cols) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a few dozen reads per family")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="reads run at once")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds a read may take (else: hang)")
    ap.add_argument("--out", help="JSON results (default bench/results/damage_matrix[_quick].json)")
    ap.add_argument("--only", default="", help="only the reads whose names contain this")
    ap.add_argument("--case", help="make one read's file and run the read here, verbose")
    ap.add_argument("--keep", help="folder for the files (kept); default: a temporary one, removed")
    ap.add_argument("--list", action="store_true", help="print the reads' names")
    ap.add_argument("--child", nargs=2, metavar=("FOLDER", "MODE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child_main(*args.child)
        return 0
    if args.case:
        folder = args.keep or tempfile.mkdtemp(prefix="damage-")
        os.makedirs(folder, exist_ok=True)
        meta = make_case(args.case, args.seed, folder)
        res = run_read(folder, args.case.rsplit("/", 1)[1])
        res["rss_mb"] = peak_rss_mb()
        print(json.dumps({"case": args.case, "files": folder, "how": meta.get("how"), **res}, indent=1, default=str))
        return 0
    names = [n for n in case_names(args.quick) if args.only in n]
    if args.list:
        print("\n".join(names))
        return 0
    t0 = time.time()
    workdir = args.keep or tempfile.mkdtemp(prefix="damage-matrix-")
    try:
        results = run_matrix(names, args.seed, args.jobs, args.timeout, workdir, progress=True)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    rows = tally(results)
    print(table(rows))
    failures = [r for r in results if r["outcome"] in BAD + ("harness",)]
    cmd = "bench/damage_matrix.py" + (" --quick" if args.quick else "") + (f" --seed {args.seed}" if args.seed else "")
    doc = {
        "command": cmd,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": {"cores": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "seed": args.seed,
        "quick": args.quick,
        "seconds": round(time.time() - t0, 1),
        "counts": rows,
        "failures": [{k: r[k] for k in ("case", "outcome", "detail")} for r in failures],
        "notes": notes(results),
        "reads": [brief(r) for r in results],
    }
    out = args.out or os.path.join(RESULTS, "damage_matrix_quick.json" if args.quick else "damage_matrix.json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        # One line per read: the file stays readable and diffable at ~1,600 reads.
        head = json.dumps({k: v for k, v in doc.items() if k != "reads"}, indent=1, default=str)
        lines = ",\n".join("  " + json.dumps(r, default=str) for r in doc["reads"])
        f.write(head[:-2] + ',\n "reads": [\n' + lines + "\n ]\n}\n")
    print(f"{len(results)} reads in {doc['seconds']} s; {len(failures)} failures; {out}")
    for r in failures:
        print(f"  {r['outcome']}: {r['case']}: {str(r['detail'])[:400]}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
