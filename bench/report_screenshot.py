#!/usr/bin/env python3
"""Writes an example HTML report and screenshots it in headless Chromium, to check by eye that
it renders (plots visible, nothing fetched):

    .venv/bin/python bench/report_screenshot.py   # -> bench/results/report_example.{html,png}

The pipeline is W2 on generated pairs in a deliberately bad configuration (a serial map, no
prefetch), fed to a simulated 3 ms training step timed with ``stoker.timed``. Needs a
``chromium`` (Debian: ``apt-get install chromium``) or ``google-chrome`` on the PATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import stoker as sk

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> int:
    browser = shutil.which("chromium") or shutil.which("google-chrome") or shutil.which("chromium-browser")
    if browser is None:
        print("no chromium or google-chrome on the PATH", file=sys.stderr)
        return 1
    data = tempfile.mkdtemp()
    images, labels, _ = sk.datasets.write_segmentation_pairs(data, n=12, height=360, width=480, num_classes=8)
    colors = sk.datasets.class_colors(8, 0)
    files = {"image": np.array(images, dtype=object), "label": np.array(labels, dtype=object)}
    ds = (
        sk.Dataset.from_tensor_slices(files)
        .with_options(threads=2)
        .repeat()
        .map(
            [
                sk.ops.read_file("image"),
                sk.ops.decode_image("image", channels=3),
                sk.ops.resize_with_crop_or_pad("image", 256, 256),
                sk.ops.rescale("image", divisor=255.0),
                sk.ops.read_file("label"),
                sk.ops.decode_image("label", channels=3),
                sk.ops.resize_with_crop_or_pad("label", 256, 256),
                sk.ops.one_hot_colors("label", colors),
            ]
        )
        .batch(3)
    )
    timer = sk.timed(ds.take(80), warmup=5)
    for _ in timer:
        time.sleep(0.003)  # the training step
    html = os.path.join(HERE, "results", "report_example.html")
    png = os.path.join(HERE, "results", "report_example.png")
    ds.report(html, seconds=3, steps=timer.report(), title="W2, serial map, no prefetch")
    subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--screenshot={png}", "--window-size=1000,2150", "file://" + html],
        check=True, capture_output=True, timeout=120,
    )
    print(f"wrote {os.path.relpath(html)} and {os.path.relpath(png)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
