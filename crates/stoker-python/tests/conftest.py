from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import stoker as sk

REPO = Path(__file__).resolve().parents[3]
GOLDEN = REPO / "tests" / "golden"

# A shell that starts a job in the background without job control (`cmd &` in a script) starts
# it with SIGINT ignored, and a child process keeps an ignored signal: the tests that press
# Ctrl-C in a child would see it ignored. Python's own handler is reset to the default in a
# child, which then installs its KeyboardInterrupt again.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def golden() -> Path:
    assert GOLDEN.is_dir(), f"golden fixtures missing at {GOLDEN}"
    return GOLDEN


@pytest.fixture(scope="session")
def chess_files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Small W1 data written by stoker's own generator."""
    out = tmp_path_factory.mktemp("chess")
    return sk.datasets.write_chess_tfrecords(str(out), num_files=3, num_examples=3000, seed=5)


def write_examples(path: os.PathLike, values: list[int], compression: str | None = None) -> str:
    with sk.io.TFRecordWriter(str(path), compression) as w:
        for v in values:
            w.write(sk.io.serialize_example({"s": v, "d": int(v).to_bytes(4, "little")}))
    return str(path)
