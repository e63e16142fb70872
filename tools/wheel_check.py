#!/usr/bin/env python3
"""Checks a built wheel as a user without a compiler gets it (`make wheel-test`).

1. `auditwheel show` reports a manylinux tag for it, and its name says abi3 (one wheel for
   every CPython from 3.9 on).
2. A fresh virtual environment, with no Rust toolchain on `PATH`, installs it with pip (numpy
   comes from the package index); one for each `--python` given (`make wheel-test`: this venv's
   Python and CPython 3.9, the oldest the wheel is for, from tools/python39.sh).
3. There, outside the repository (so the source tree cannot be imported instead), a child
   process imports stoker from the venv and runs a small pipeline of each kind: TFRecord
   (parse_example), JPEG with the fused decode-and-crop (libjpeg-turbo, linked in statically:
   no libjpeg or libturbojpeg among the extension's shared libraries), CSV; and the `stoker`
   console script answers `--version` and inspects the TFRecord file written there.

Prints the wheel's size, the time `pip install` took, and the time from the start of
`pip install` to the first batch (`--json PATH` writes them, for BENCHMARKS.md's "The portable
wheel"). Exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Runs in the fresh venv, in an empty folder; prints one line "FIRST_BATCH <unix time>".
CHILD = r'''
import os, subprocess, sys, time
import numpy as np
import stoker as sk

assert os.path.realpath(sk.__file__).startswith(os.path.realpath(sys.prefix)), sk.__file__
assert sk.JPEG_BACKEND == "libjpeg-turbo", sk.JPEG_BACKEND

# TFRecord: Examples written with stoker's writer, read back batched and parsed natively.
n = 100
with sk.io.TFRecordWriter("data.tfrecord") as w:
    for i in range(n):
        w.write(sk.io.serialize_example({"x": sk.io.int64_feature([i, 2 * i]), "y": sk.io.float_feature([i / 4])}))
spec = {"x": sk.FixedLenFeature([2], sk.int64), "y": sk.FixedLenFeature([], sk.float32)}
ds = sk.TFRecordDataset("data.tfrecord").batch(32).map(sk.ops.parse_example(spec))
first = next(iter(ds))
print("FIRST_BATCH", time.time(), flush=True)
batches = list(ds)
x = np.concatenate([b["x"] for b in batches])
np.testing.assert_array_equal(x, np.stack([np.arange(n), 2 * np.arange(n)], axis=1))
np.testing.assert_array_equal(np.concatenate([b["y"] for b in batches]), np.arange(n, dtype=np.float32) / 4)
np.testing.assert_array_equal(first["x"], x[:32])

# JPEG: the decode and the random crop fused (only the crop's region decoded), the same boxes
# as the two ops run apart, the same picture.
rng = np.random.default_rng(4)
blobs = np.array([sk.io.encode_jpeg(sk.datasets.natural_photo(rng, 180, 240), 90) for _ in range(8)], dtype=object)
crop = sk.ops.random_resized_crop("value", 64, seed=9, box_output="box")
fused = sk.Dataset.from_tensor_slices(blobs).map([sk.ops.decode_image("value", 3), crop])
assert "decode_random_resized_crop" in fused.explain(), fused.explain()
apart = sk.Dataset.from_tensor_slices(blobs).map(sk.ops.decode_image("value", 3)).map(crop)
count = 0
for a, b in zip(fused, apart):
    assert a["value"].shape == (64, 64, 3) and a["value"].dtype == np.uint8
    np.testing.assert_array_equal(a["box"], b["box"])
    assert np.abs(a["value"].astype(int) - b["value"].astype(int)).mean() < 4
    count += 1
assert count == 8, count

# CSV: typed columns, a quoted field with the delimiter in it, batched.
with open("data.csv", "w") as f:
    f.write("id,name,score\n")
    for i in range(10):
        f.write(f'{i},"n,{i}",{i * 0.5}\n')
csv = sk.CsvDataset("data.csv", [sk.int32, sk.string, sk.float32], header=True).batch(4)
rows = list(csv)
ids = np.concatenate([r[0] for r in rows])
np.testing.assert_array_equal(ids, np.arange(10, dtype=np.int32))
assert [bytes(v) for v in np.concatenate([r[1] for r in rows])][:2] == [b"n,0", b"n,1"]
np.testing.assert_array_equal(np.concatenate([r[2] for r in rows]), np.arange(10, dtype=np.float32) * 0.5)

# No JPEG library loaded from the system: libjpeg-turbo is inside the extension.
ext = sk._stoker.__file__
assert ext.endswith(".abi3.so"), ext
libs = subprocess.run(["ldd", ext], capture_output=True, text=True).stdout
assert "jpeg" not in libs, libs

# The console script: the same command as the binary.
version = subprocess.run(["stoker", "--version"], capture_output=True, text=True, check=True).stdout.strip()
assert version == f"stoker {sk.__version__}", (version, sk.__version__)
inspected = subprocess.run(["stoker", "inspect", "data.tfrecord"], capture_output=True, text=True)
assert inspected.returncode == 0 and "100" in inspected.stdout, (inspected.stdout, inspected.stderr)
print("VERSION", version)
print("CHILD_OK")
'''


def auditwheel_tag(wheel: Path) -> str:
    exe = shutil.which("auditwheel", path=os.path.dirname(sys.executable)) or shutil.which("auditwheel")
    if exe is None:
        raise SystemExit("wheel_check: auditwheel is not installed (pip install auditwheel)")
    out = subprocess.run([exe, "show", str(wheel)], capture_output=True, text=True)
    text = out.stdout + out.stderr
    found = re.search(r'platform tag:\s*"?(manylinux_\d+_\d+_x86_64|manylinux\d+_x86_64)', text)
    if out.returncode != 0 or found is None:
        raise SystemExit(f"wheel_check: auditwheel found no manylinux tag for {wheel.name}:\n{text}")
    return found.group(1)


def clean_path(venv_bin: Path) -> str:
    """The venv first, then the system's directories (not ~/.cargo/bin, where rustup puts Rust)."""
    dirs = [str(venv_bin)]
    for d in ("/usr/local/bin", "/usr/bin", "/bin"):
        if os.path.isdir(d):
            dirs.append(d)
    return os.pathsep.join(dirs)


def fresh_venv(python: str, root: Path, env: dict[str, str]) -> tuple[Path, str]:
    """A venv of `python` under `root`, with pip (from PyPI, for that Python's version: Debian's
    interpreters come without ensurepip's wheels). Returns its interpreter and Python version."""
    version = subprocess.run([python, "-c", "import platform; print(platform.python_version())"],
                             env=env, capture_output=True, text=True, check=True).stdout.strip()
    env_dir = root / "venv"
    subprocess.run([python, "-m", "venv", "--without-pip", str(env_dir)], env=env, check=True)
    wheels = root / "pip"
    major_minor = ".".join(version.split(".")[:2])
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                    "--python-version", major_minor, "-d", str(wheels), "pip"], check=True)
    pip = next(wheels.glob("pip-*.whl"))
    py = env_dir / "bin" / "python"
    subprocess.run([str(py), str(pip / "pip"), "install", "--quiet", "--no-cache-dir", str(pip)], env=env, check=True)
    return py, version


def check(wheel: Path, python: str, root: Path) -> dict:
    """Installs `wheel` into a fresh venv of `python` and runs CHILD there; returns the figures."""
    work = root / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CARGO", "RUST", "VIRTUAL_ENV", "PYTHON"))}
    env["PATH"] = clean_path(root / "venv" / "bin")
    env["HOME"] = str(root)  # no ~/.cargo
    for tool in ("cargo", "rustc"):
        found = shutil.which(tool, path=env["PATH"])
        if found is not None:
            raise SystemExit(f"wheel_check: {tool} is on the clean PATH ({found})")
    py, version = fresh_venv(python, root, env)
    start = time.time()
    subprocess.run([str(py), "-m", "pip", "install", "--quiet", "--no-cache-dir", str(wheel)], env=env, check=True)
    installed = time.time()
    child = subprocess.run([str(py), "-c", CHILD], env=env, cwd=work, capture_output=True, text=True)
    sys.stdout.write(child.stdout)
    sys.stderr.write(child.stderr)
    if child.returncode != 0 or "CHILD_OK" not in child.stdout:
        raise SystemExit(f"wheel_check: the pipelines in a fresh venv of Python {version} failed "
                         f"(exit {child.returncode})")
    first = float(re.search(r"FIRST_BATCH (\S+)", child.stdout).group(1))  # type: ignore[union-attr]
    print(f"Python {version}: pip install {installed - start:.1f} s; "
          f"from pip install to the first batch {first - start:.1f} s")
    return {"python": version, "pip_install_s": installed - start, "first_batch_s": first - start}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("wheel", type=Path)
    ap.add_argument("--python", action="append", default=None,
                    help="an interpreter to make the fresh venv with (repeatable; default: this one)")
    ap.add_argument("--keep", action="store_true", help="keep the venvs and the folders they ran in")
    ap.add_argument("--json", type=Path, default=None, help="write the figures to this file")
    args = ap.parse_args()
    wheel: Path = args.wheel.resolve()
    if not wheel.is_file():
        raise SystemExit(f"wheel_check: no such wheel: {wheel}")
    if "-abi3-" not in wheel.name or "manylinux" not in wheel.name:
        raise SystemExit(f"wheel_check: {wheel.name} is not an abi3 manylinux wheel")
    tag = auditwheel_tag(wheel)
    if tag not in wheel.name:
        raise SystemExit(f"wheel_check: auditwheel says {tag}, the wheel's name says otherwise: {wheel.name}")
    started = time.time()
    runs = []
    for python in args.python or [sys.executable]:
        root = Path(tempfile.mkdtemp(prefix="stoker-wheel-"))
        try:
            runs.append(check(wheel, python, root))
        finally:
            if args.keep:
                print(f"kept {root}")
            else:
                shutil.rmtree(root, ignore_errors=True)
    size = wheel.stat().st_size
    print(f"wheel: {wheel.name}, {size / 1e6:.1f} MB; tag {tag}")
    if args.json is not None:
        figures = {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
            "command": "python " + " ".join(["tools/wheel_check.py", *sys.argv[1:]]),
            "wheel": wheel.name,
            "size_bytes": size,
            "tag": tag,
            "runs": runs,
            "cpus": len(os.sched_getaffinity(0)),
        }
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    print("wheel_check: OK")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
