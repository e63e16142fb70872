"""Every ```python block of README.md runs as written, each in a process
of its own, in a folder holding small generated versions of the files the blocks read
(``data/*.tfrecord``, ``train/<class>/*.jpg``, the traces). A block that cannot run here (a
GPU or a cluster it needs) is marked in the README by the line
``<!-- readme-test: skip: <why> -->`` right before it; there are at most two."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import stoker as sk

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"
TRACES = ROOT / "tests" / "traces"
SKIP = re.compile(r"<!--\s*readme-test:\s*skip:\s*(.+?)\s*-->")


def _blocks() -> list[tuple[int, str, str | None]]:
    """``(line, code, why skipped)`` of each ```python block."""
    lines = README.read_text().splitlines()
    out = []
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            start = i + 1
            end = next(j for j in range(start, len(lines)) if lines[j].strip() == "```")
            before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
            marked = SKIP.search(before)
            out.append((start + 1, "\n".join(lines[start:end]) + "\n", marked.group(1) if marked else None))
            i = end
        i += 1
    return out


BLOCKS = _blocks()


def test_the_readme_has_its_blocks_and_few_exceptions():
    assert len(BLOCKS) >= 9
    skipped = [(line, why) for line, _, why in BLOCKS if why is not None]
    assert len(skipped) <= 2, skipped


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("readme")
    rng = np.random.default_rng(0)
    # The opening example's TFRecords: "d" (packed bits) and "s" (a score).
    (root / "data").mkdir()
    for f in range(2):
        with sk.io.TFRecordWriter(str(root / "data" / f"part-{f}.tfrecord")) as w:
            for _ in range(512):
                w.write(sk.io.serialize_example({"d": rng.bytes(194), "s": int(rng.integers(-500, 500))}))
    # An ImageFolder of JPEGs, two classes.
    for c in ("cats", "dogs"):
        (root / "train" / c).mkdir(parents=True)
        for i in range(8):
            pixels = rng.integers(0, 256, size=(60, 80, 3), dtype=np.uint8)
            (root / "train" / c / f"{i}.jpg").write_bytes(sk.io.encode_jpeg(pixels))
    # The profiler examples' traces: the ResNet-50 pair of tests/traces, a TensorFlow XSpace.
    kineto = TRACES / "pytorch" / "kineto_tb_samples"
    w0 = next(kineto.glob("resnet50_num_workers_0.*"))
    w4 = next(kineto.glob("resnet50_num_workers_4.*"))
    shutil.copy(w0, root / "resnet50.pt.trace.json.gz")
    shutil.copy(w0, root / "before.pt.trace.json.gz")
    shutil.copy(w4, root / "after.pt.trace.json.gz")
    profile = root / "logdir" / "plugins" / "profile" / "2026_11_23"
    profile.mkdir(parents=True)
    shutil.copy(TRACES / "tensorflow" / "xspace" / "tf_keras_fit.xplane.pb", profile / "host.xplane.pb")
    return root


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("line, code, skipped", BLOCKS, ids=[f"README.md:{line}" for line, _, _ in BLOCKS])
def test_readme_block_runs(folder: Path, line: int, code: str, skipped: str | None) -> None:
    if skipped is not None:
        pytest.skip(f"marked in the README: {skipped}")
    env = {
        **os.environ,
        # What `torchrun --nproc-per-node=1` sets, for the blocks written for it.
        "RANK": "0",
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "KERAS_BACKEND": "tensorflow",
        "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"),
    }
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=folder, capture_output=True, text=True, timeout=600, env=env
    )
    assert r.returncode == 0, f"README.md:{line}\n{code}\n{r.stderr[-4000:]}"
