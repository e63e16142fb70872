#!/usr/bin/env python3
"""Regenerates the CMYK JPEG, BMP and GIF fixtures and what TensorFlow decodes them to.

Run from the repository root, with TensorFlow and Pillow importable:

    python tests/golden/make_image_formats_golden.py

It runs itself twice, ``images`` (Pillow) then ``expected`` (TensorFlow): the two load their
own libjpeg, and in one process the second crashes.

Pillow writes the images (from ``np.random.default_rng(2026)`` data) into ``images/``; the
variants Pillow does not write are made from its files here (a CMYK JPEG without its Adobe
marker, a top-down BMP, a GIF whose first frame is smaller than the screen and has a
transparent colour). TensorFlow's ``tf.io.decode_image(data, channels=c,
expand_animations=False)`` of each is written to ``image_formats_expected.npz`` as
``"<file>/channels=<c>"`` (and ``"<file>/uint16/channels=0"`` with ``dtype=tf.uint16``); the
cases TensorFlow refuses are listed under ``"errors"``. The CMYK JPEGs' RGB decodes are also
written as ``images/<name>.expected.npy`` for the Rust tests. Deterministic for the same
TensorFlow, Pillow and numpy versions.
"""

from __future__ import annotations

import io
import os
import struct
import subprocess
import sys
import zipfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import numpy as np  # noqa: E402

NAMES = [
    "cmyk.jpg",
    "cmyk_noadobe.jpg",
    "rgb24.bmp",
    "rgba32.bmp",
    "grey8.bmp",
    "pal8.bmp",
    "topdown.bmp",
    "still.gif",
    "anim.gif",
    "transparent.gif",
]

HERE = os.path.dirname(os.path.abspath(__file__))
IMAGES = os.path.join(HERE, "images")


def save_npz(path: str, **arrays: np.ndarray) -> None:
    """Like np.savez_compressed, but byte-deterministic (fixed zip timestamps, sorted names)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for key in sorted(arrays):
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.asarray(arrays[key]), allow_pickle=False)
            info = zipfile.ZipInfo(key + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, buf.getvalue())


def photo(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """A smooth colour image with some noise (JPEG-friendly, not flat)."""
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx * 255 / w, yy * 255 / h, (xx + yy) * 127 / (w + h) + 60], -1)
    return np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)


def strip_app14(jpeg: bytes) -> bytes:
    """The JPEG without its Adobe APP14 segment (libjpeg then reads the inks as not inverted)."""
    out, at = bytearray(jpeg[:2]), 2
    while at < len(jpeg):
        marker, length = jpeg[at + 1], struct.unpack(">H", jpeg[at + 2 : at + 4])[0]
        if marker == 0xDA:
            out += jpeg[at:]
            break
        if marker != 0xEE:
            out += jpeg[at : at + 2 + length]
        at += 2 + length
    return bytes(out)


def top_down(bmp: bytes) -> bytes:
    """A bottom-up BMP as top-down: the height negated, the rows reversed."""
    offset = struct.unpack("<I", bmp[10:14])[0]
    width, height, bpp = struct.unpack("<iiH", bmp[18:26] + bmp[28:30])
    row = (width * bpp // 8 + 3) // 4 * 4
    rows = [bmp[offset + i * row : offset + (i + 1) * row] for i in range(height)]
    head = bytearray(bmp[:offset])
    head[22:26] = struct.pack("<i", -height)
    return bytes(head) + b"".join(reversed(rows))


def small_transparent_gif(rgb: np.ndarray) -> bytes:
    """A GIF whose logical screen is larger than its first frame (placed at an offset), with a
    transparent colour index used in the frame."""
    from PIL import Image

    frame = Image.fromarray(rgb).convert("P", palette=Image.ADAPTIVE, colors=16)
    buf = io.BytesIO()
    frame.save(buf, "GIF", transparency=3)
    data = bytearray(buf.getvalue())
    # Logical screen: 4 columns and 3 rows more than the frame; the frame at (left 3, top 2).
    w, h = struct.unpack("<HH", data[6:10])
    data[6:10] = struct.pack("<HH", w + 4, h + 3)
    at = data.index(b"\x2c", 13 + 3 * 2 ** ((data[10] & 7) + 1))  # the image descriptor
    data[at + 1 : at + 5] = struct.pack("<HH", 3, 2)
    return bytes(data)


def make_images() -> None:
    from PIL import Image

    rng = np.random.default_rng(2026)
    files: dict[str, bytes] = {}

    rgb = photo(rng, 24, 30)
    buf = io.BytesIO()
    Image.fromarray(rgb).convert("CMYK").save(buf, "JPEG", quality=90)
    files["cmyk.jpg"] = buf.getvalue()
    files["cmyk_noadobe.jpg"] = strip_app14(files["cmyk.jpg"])

    for name, img in [
        ("rgb24.bmp", Image.fromarray(rgb)),
        ("rgba32.bmp", Image.fromarray(np.concatenate([rgb, rgb[..., :1] // 2 + 60], -1), "RGBA")),
        ("grey8.bmp", Image.fromarray(rgb).convert("L")),
        ("pal8.bmp", Image.fromarray(rgb).convert("P", palette=Image.ADAPTIVE, colors=16)),
    ]:
        buf = io.BytesIO()
        img.save(buf, "BMP")
        files[name] = buf.getvalue()
    files["topdown.bmp"] = top_down(files["rgb24.bmp"])

    frames = [Image.fromarray(rgb).convert("P", palette=Image.ADAPTIVE, colors=32)]
    frames.append(Image.fromarray(rgb[::-1].copy()).convert("P", palette=Image.ADAPTIVE, colors=32))
    buf = io.BytesIO()
    frames[0].save(buf, "GIF")
    files["still.gif"] = buf.getvalue()
    buf = io.BytesIO()
    frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    files["anim.gif"] = buf.getvalue()
    files["transparent.gif"] = small_transparent_gif(photo(rng, 10, 12))
    assert sorted(files) == sorted(NAMES)
    for name, data in files.items():
        with open(os.path.join(IMAGES, name), "wb") as f:
            f.write(data)


def make_expected() -> None:
    import tensorflow as tf

    expected: dict[str, np.ndarray] = {}
    errors: list[str] = []
    for name in sorted(NAMES):
        with open(os.path.join(IMAGES, name), "rb") as f:
            data = f.read()
        for c in (0, 1, 3, 4):
            key = f"{name}/channels={c}"
            try:
                expected[key] = tf.io.decode_image(data, channels=c, expand_animations=False).numpy()
            except tf.errors.InvalidArgumentError:
                errors.append(key)
        # (TensorFlow crashes on a top-down BMP's uint16 decode: it sizes a buffer by the
        # negative height.)
        if not name.endswith(".jpg") and name != "topdown.bmp":
            expected[f"{name}/uint16/channels=0"] = tf.io.decode_image(
                data, dtype=tf.uint16, expand_animations=False
            ).numpy()
    expected["errors"] = np.array(errors)
    save_npz(os.path.join(HERE, "image_formats_expected.npz"), **expected)
    for name in ("cmyk.jpg", "cmyk_noadobe.jpg"):
        np.save(os.path.join(IMAGES, name.replace(".jpg", ".expected.npy")), expected[f"{name}/channels=3"])
    print(f"{len(NAMES)} images, {len(expected) - 1} decodes, {len(errors)} refused:", ", ".join(errors))


if __name__ == "__main__":
    if sys.argv[1:] == ["images"]:
        make_images()
    elif sys.argv[1:] == ["expected"]:
        make_expected()
    else:
        for phase in ("images", "expected"):
            subprocess.run([sys.executable, __file__, phase], check=True)
