#!/usr/bin/env python3
"""Regenerates ``resize_expected.npz``: the references that stoker's ``resize`` and
``center_crop`` are tested against — PIL (``Image.resize``: BILINEAR, BICUBIC, BOX, NEAREST),
TensorFlow (``tf.image.resize``: bilinear without antialias, area) and torchvision
(``CenterCrop``).

Run from the repository root with an interpreter that has pillow, tensorflow-cpu and
torchvision (e.g. the benchmark venv):

    /opt/venvs/bench/bin/python tests/golden/make_resize_golden.py

Deterministic: the source images come from ``np.random.default_rng(2030)`` and the .npz is
written with fixed zip timestamps (``make_golden.save_npz``).
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import PIL  # noqa: E402
import torch  # noqa: E402
import torchvision  # noqa: E402
from PIL import Image  # noqa: E402
from torchvision.transforms import functional as TF  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import natural_image, out, save_npz  # noqa: E402

PIL_FILTERS = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC, "area": Image.BOX, "nearest": Image.NEAREST}
SIZES = [(17, 23), (74, 106), (9, 12), (37, 53), (50, 20)]


def main() -> int:
    # Imported after torch: the other order aborts (LLVM option registered twice).
    import tensorflow as tf

    print(f"pillow {PIL.__version__}, tensorflow {tf.__version__}, torchvision {torchvision.__version__}")
    rng = np.random.default_rng(2030)
    src = natural_image(rng, 37, 53)
    grey = natural_image(rng, 37, 53)[..., :1]
    src36 = natural_image(rng, 36, 52)
    arrays = {"src": src, "grey": grey, "src36": src36}
    for method, f in PIL_FILTERS.items():
        for h, w in SIZES:
            arrays[f"pil/{method}/{h}x{w}"] = np.asarray(Image.fromarray(src).resize((w, h), f))
            grey_out = np.asarray(Image.fromarray(grey[..., 0]).resize((w, h), f))
            arrays[f"pil_grey/{method}/{h}x{w}"] = grey_out[..., None]
    for h, w in SIZES:
        arrays[f"tf/bilinear/{h}x{w}"] = tf.image.resize(src, (h, w), "bilinear", antialias=False).numpy()
    arrays["tf/area/12x13"] = tf.image.resize(src36, (12, 13), "area").numpy()  # whole factors 3 and 4
    chw = torch.from_numpy(src).permute(2, 0, 1)
    for h, w in [(20, 30), (34, 50), (36, 52), (40, 60), (31, 49)]:
        arrays[f"tv/center_crop/{h}x{w}"] = TF.center_crop(chw, [h, w]).permute(1, 2, 0).numpy()
    save_npz(out("resize_expected.npz"), **arrays)
    print(f"  resize_expected.npz {os.path.getsize(out('resize_expected.npz'))} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
