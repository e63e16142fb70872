"""Preprocess once, offline: ``Dataset.convert`` runs the offline part of a pipeline (from its
source up to the first random op, shuffle, batch or Python function) once and stores its
elements as TFRecord shards of ``tf.train.Example``s, each with its record index, plus a
``manifest.json``; ``Dataset.from_converted`` reads them back with the schema from the
manifest. Locally the shards are written several at a time on all cores; with ``ray=`` each
shard is one Ray task on a cluster (``pip install stoker[ray]``). Either way the bytes are the
same.
With ``epochs=K`` the augmented part (the random maps and shuffles too, up to the first batch)
is run K times instead, each epoch with its own seeds, one job per epoch.

Command line (what ``stoker convert --ray`` runs)::

    python -m stoker.convert SPEC OUT_DIR --shards 16 --ray [ADDRESS]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from typing import Any, TextIO

from . import _stoker
from ._check import path as _path
from .errors import InvalidArgumentError

__all__ = ["convert", "read_manifest", "verify", "tf_parse_code"]


def convert(
    dataset: Any,
    out_dir: str | os.PathLike[str],
    num_shards: int = 8,
    compression: str | None = None,
    images: str | None = None,
    jpeg_quality: int = 90,
    resize: int | None = None,
    epochs: int | None = None,
    threads: int | None = None,
    ray: bool | str | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """See :meth:`stoker.Dataset.convert`."""
    if epochs is not None and (isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1):
        raise InvalidArgumentError(f"convert: epochs must be a positive int, got {epochs!r}")
    if resize is not None and (isinstance(resize, bool) or not isinstance(resize, int) or resize < 1):
        raise InvalidArgumentError(f"convert: resize must be a positive int, got {resize!r}")
    if isinstance(num_shards, bool) or not isinstance(num_shards, int) or num_shards < 1:
        raise InvalidArgumentError(f"convert: num_shards must be a positive int, got {num_shards!r}")
    if isinstance(jpeg_quality, bool) or not isinstance(jpeg_quality, int) or not 1 <= jpeg_quality <= 100:
        raise InvalidArgumentError(f"convert: jpeg_quality must be an int in 1..100, got {jpeg_quality!r}")
    known = ("", "NONE", "GZIP", "ZLIB")
    if compression is not None and (not isinstance(compression, str) or compression.upper() not in known):
        raise InvalidArgumentError(f"convert: compression must be None, 'GZIP' or 'ZLIB', got {compression!r}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise InvalidArgumentError(f"convert: threads must be a positive int, got {threads!r}")
    comp = "" if compression is None or compression.upper() == "NONE" else compression.upper()
    out = _path(out_dir)
    conv = _stoker.Conversion(dataset._plan, num_shards, comp, "raw" if images is None else str(images), jpeg_quality,
                              resize, epochs)
    note = conv.raw_images_note if images is None else None
    if note is not None:
        # Decoded images stored raw can take many times the disk of their files: said before
        # the conversion starts (images="raw" says it is meant).
        warnings.warn(f"stoker convert: {note}", stacklevel=3)
    bar = _Bar(conv.source_elements * (epochs or 1), num_shards * (epochs or 1), enabled=progress)
    if ray not in (None, False):
        manifest = _run_ray(conv, out, ray, bar)
    else:
        manifest = _run_local(conv, out, threads or _cores(), bar)
    bar.close(manifest)
    return manifest


def _cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _run_local(conv: Any, out: str, workers: int, bar: _Bar) -> dict[str, Any]:
    conv.start_local(out, workers)
    try:
        while True:
            done = conv.wait(0.2)
            elements, written, shards = conv.progress()
            bar.update(elements, written, shards)
            if done is not None:
                return dict(json.loads(done))
    except KeyboardInterrupt:
        conv.cancel()
        while True:
            try:
                if conv.wait(1.0) is not None:
                    break
            except Exception:  # the run's "cancelled": Ctrl-C is what the caller sees
                break
        raise


def _ray_job(job: str, out: str, index: int) -> str:
    """One job (a shard, or an epoch's shards), on a Ray worker: their manifest entries, JSON."""
    from . import _stoker as native

    return str(native.convert_job(job, out, index, 1))


def _run_ray(conv: Any, out: str, ray_arg: bool | str, bar: _Bar) -> dict[str, Any]:
    try:
        import ray
    except ImportError:
        raise InvalidArgumentError("convert: ray= needs Ray: pip install 'stoker[ray]'") from None
    job = conv.job()
    if not ray.is_initialized():
        address = ray_arg if isinstance(ray_arg, str) and ray_arg else None
        ray.init(address=address, log_to_driver=False)
    todo = conv.begin(out)
    # System failures (a worker lost) are retried by Ray; a transient I/O error too. A located
    # data error is not: it would fail again.
    options: dict[str, Any] = {"num_cpus": 1, "max_retries": 3, "retry_exceptions": [OSError]}
    task = ray.remote(**options)(_ray_job)
    pending = [task.remote(job, out, k) for k in todo]
    manifest = json.loads(_stoker.read_manifest(out))
    elements = int(manifest["elements"])
    written = sum(int(s["bytes"]) for s in manifest["shards"] if s["complete"])
    shards = sum(1 for s in manifest["shards"] if s["complete"])
    try:
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=0.2)
            for ref in ready:
                try:
                    entry = ray.get(ref)
                except ray.exceptions.RayTaskError as e:
                    for r in pending:
                        ray.cancel(r)
                    # The worker's own error (its class and its located message).
                    raise e.as_instanceof_cause() from None
                conv.record(out, entry)
                got = json.loads(entry)
                elements += sum(int(g["elements"]) for g in got)
                written += sum(int(g["bytes"]) for g in got)
                shards += len(got)
            bar.update(elements, written, shards)
    except KeyboardInterrupt:
        for r in pending:
            ray.cancel(r)
        raise
    return dict(json.loads(_stoker.read_manifest(out)))


class _Bar:
    """A progress line on stderr: elements, MB/s, shards, ETA. Redrawn in place on a
    terminal; elsewhere (logs) a line every 10 s."""

    def __init__(self, total: int, shards: int, enabled: bool, stream: TextIO | None = None) -> None:
        self.total, self.shards, self.enabled = total, shards, enabled
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.t0 = self.last = time.perf_counter()
        self.state = (0, 0, 0)

    def text(self) -> str:
        elements, written, shards = self.state
        secs = max(time.perf_counter() - self.t0, 1e-9)
        rate = elements / secs
        pct = f" ({100 * elements / self.total:.0f}%)" if self.total else ""
        if rate > 0 and self.total > elements:
            left = int((self.total - elements) / rate)
            eta = f"{left // 60}:{left % 60:02d}"
        else:
            eta = "-"
        return (f"convert: {elements:,}/{self.total:,} elements{pct} · {written / 1e6 / secs:.1f} MB/s · "
                f"{shards}/{self.shards} shards · ETA {eta}")

    def update(self, elements: int, written: int, shards: int) -> None:
        self.state = (elements, written, shards)
        if not self.enabled:
            return
        now = time.perf_counter()
        if self.tty:
            self.stream.write("\r" + self.text() + "\x1b[K")
            self.stream.flush()
        elif now - self.last >= 10:
            self.stream.write(self.text() + "\n")
            self.stream.flush()
            self.last = now

    def close(self, manifest: dict[str, Any]) -> None:
        if not self.enabled:
            return
        secs = time.perf_counter() - self.t0
        written = sum(int(s["bytes"]) for s in manifest["shards"])
        skipped = sum(int(s.get("skipped", 0)) for s in manifest["shards"])
        end = "\r\x1b[K" if self.tty else ""
        note = f"; {skipped} bad input skipped (see the manifest)" if skipped else ""
        self.stream.write(f"{end}convert: {manifest['elements']:,} elements in {len(manifest['shards'])} shards "
                          f"({written / 1e6:.1f} MB) in {secs:.1f} s{note}\n")
        self.stream.flush()


def read_manifest(out_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of the conversion in ``out_dir``."""
    return dict(json.loads(_stoker.read_manifest(_path(out_dir))))


def verify(out_dir: str | os.PathLike[str], hash: bool = True) -> None:
    """Checks every shard in ``out_dir`` against the manifest (size, and sha256 with
    ``hash``); raises ``InvalidArgumentError`` naming the first that does not match, or if
    the conversion is not complete."""
    _stoker.verify_converted(_path(out_dir), bool(hash))


def tf_parse_code(out_dir: str | os.PathLike[str]) -> str:
    """Python code that reads the shards in ``out_dir`` with TensorFlow (``FEATURES`` for
    ``tf.io.parse_single_example``, ``parse(record)``, ``dataset``), as
    ``stoker convert --print-tf-spec`` prints it."""
    return str(_stoker.tf_parse_code(_path(out_dir)))


def main(argv: list[str] | None = None) -> int:
    from .dataset import Dataset

    p = argparse.ArgumentParser(prog="python -m stoker.convert", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("spec")
    p.add_argument("out_dir")
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--compression", default="none")
    p.add_argument("--images", default=None)
    p.add_argument("--jpeg-quality", type=int, default=90)
    p.add_argument("--resize", type=int)
    p.add_argument("--epochs", type=int)
    p.add_argument("--threads", type=int)
    p.add_argument("--ray", nargs="?", const="", default=None,
                   help="run on a Ray cluster (ADDRESS, or a local one when empty)")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    ds = Dataset.load_spec(args.spec)
    ray_arg: bool | str | None = None if args.ray is None else (args.ray or True)
    try:
        convert(ds, args.out_dir, num_shards=args.shards, compression=args.compression, images=args.images,
                jpeg_quality=args.jpeg_quality, resize=args.resize, epochs=args.epochs, threads=args.threads,
                ray=ray_arg,
                progress=not args.quiet)
    except Exception as e:  # a clean message, as the Rust CLI gives
        print(f"stoker convert: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
