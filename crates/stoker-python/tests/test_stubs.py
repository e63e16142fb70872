"""The extension's type stubs (``_stoker.pyi``, written by hand) agree with the extension as
built: mypy's stubtest compares every name, signature and class in them with the module."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ALLOWLIST = Path(__file__).resolve().parents[1] / "stubtest-allowlist.txt"


def test_stubs_match_the_extension() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "stoker._stoker", "--allowlist", str(ALLOWLIST)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
