"""The wheel's `stoker` console script: the same command as the `stoker` binary, run by the
extension module (the engine is built once, in the extension)."""

from __future__ import annotations

import os
import signal
import sys


def main() -> int:
    # As the binary behaves: Ctrl-C ends the command at once (Python would only set a flag,
    # looked at when the command returns), and output into a closed pipe (`| head`) ends it
    # quietly.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    # `stoker convert --ray` runs `$STOKER_PYTHON -m stoker.convert`: this Python, which has stoker.
    os.environ.setdefault("STOKER_PYTHON", sys.executable)
    from ._stoker import cli

    return cli(["stoker", *sys.argv[1:]])


if __name__ == "__main__":
    raise SystemExit(main())
