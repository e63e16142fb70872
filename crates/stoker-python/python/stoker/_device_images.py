"""The device half of an image chain (``decode_on=`` of :func:`stoker.torch.loader`).

The engine's half (the ``device_image`` op, see ``explain()``) reads, shuffles and shards as
always, reads each JPEG's header and draws the crop box, the flips and the affine map of the
pixel ops from the same seed streams as the CPU chain; a batch then holds the compressed files
and those draws. Here, per batch: the JPEGs are decoded together by torchvision's
``decode_jpeg`` on the device (nvJPEG on CUDA, libjpeg-turbo on the CPU), each box is cropped
and resized with antialiased bilinear filtering and rounded to uint8 (as the CPU path's
resize), then flipped and mapped by ``y = a * x + b0 + bm * mean(x)`` (brightness, contrast,
``convert_image_dtype``, ``normalize`` composed), and laid out as the chain asked. Images the
engine decoded itself (another format than JPEG, or its ``cpu_share``) arrive as uint8 pixels
and only get the flips and the affine map.

``cpu_share="auto"``: :class:`ShareTuner` moves the engine's share after each batch, towards
where the engine and the device take as long per batch.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from . import _stoker
from .errors import InvalidArgumentError, InvalidRecordError

try:
    import torch
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("decoding on a device needs PyTorch: pip install torch") from e


def _decode_jpeg() -> Any:
    try:
        from torchvision.io import ImageReadMode, decode_jpeg
    except ImportError as e:
        raise InvalidArgumentError("decode_on needs torchvision (its decode_jpeg): pip install torchvision") from e
    return decode_jpeg, ImageReadMode


class _Chain:
    """One image field's device half, from the ``device_image`` op's spec."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.field: str = spec["decode"]["field"]
        self.channels: int = int(spec["decode"]["channels"])
        self.height: int = int(spec["crop"]["height"])
        self.width: int = int(spec["crop"]["width"])
        self.chw = bool(spec.get("chw", False))
        self.float_out = any(s["op"] != "random_flip" for s in spec.get("stages", []))

    def aux(self, suffix: str) -> str:
        return f"{self.field}_{suffix}"

    def names(self) -> list[str]:
        return [self.aux(s) for s in ("box", "flip", "affine", "decoded", "origin")]


class ShareTuner:
    """The engine's share of the JPEGs (``cpu_share="auto"``), tuned by hill climbing on the
    loader's batch period (the wait for the engine plus the batch's device work): after each
    move by ``step``, the batches made before it took effect are let pass (``lag``: the
    engine works ahead), the next ``window`` are measured, and the share moves on in the same
    direction while the period shrinks, back when it grew. Batches made while the training
    step is the limit (the batches ready wait for it) are not measured."""

    def __init__(self, step: float = 0.05, window: int = 4, lag: int = 3) -> None:
        self.step, self.window, self.lag = step, window, lag
        self.share = 0.0
        self.direction = 1.0
        self.last: float | None = None
        self.periods: list[float] = []
        self.skip = lag
        self.shares: list[float] = []
        _stoker.set_device_cpu_share(0.0)

    def update(self, waited_s: float, device_s: float, consumer_bound: bool) -> None:
        self.shares.append(self.share)
        if self.skip:
            self.skip -= 1
            return
        if consumer_bound:
            return
        self.periods.append(waited_s + device_s)
        if len(self.periods) < self.window:
            return
        period = sorted(self.periods)[len(self.periods) // 2]
        self.periods.clear()
        if self.last is not None and period > self.last:
            self.direction = -self.direction
        self.last = period
        moved = min(max(self.share + self.direction * self.step, 0.0), 1.0)
        if moved == self.share:  # at a bound: turn around
            self.direction = -self.direction
            moved = min(max(self.share + self.direction * self.step, 0.0), 1.0)
        self.share = moved
        _stoker.set_device_cpu_share(moved)
        self.skip = self.lag


class DeviceImages:
    """Makes the pixels of every image chain the engine left to ``device``."""

    def __init__(self, specs: list[str], device: torch.device) -> None:
        self.chains = [_Chain(json.loads(s)) for s in specs]
        self.device = device
        self.decode_jpeg, self.read_mode = _decode_jpeg()

    def aux_names(self) -> set[str]:
        return {n for c in self.chains for n in c.names()}

    def __call__(self, by_name: dict[str, Any]) -> dict[str, Any]:
        """``by_name``'s image fields made on the device (host arrays in, its aux fields
        removed); the other fields are left as they are."""
        for chain in self.chains:
            if chain.field in by_name:
                by_name[chain.field] = self._make(chain, by_name)
            for n in chain.names():
                by_name.pop(n, None)
        return by_name

    def _decode(self, chain: _Chain, files: list[Any], origins: list[Any]) -> list[torch.Tensor]:
        mode = self.read_mode.RGB if chain.channels == 3 else self.read_mode.GRAY
        if not files:
            return []
        # One copy of the whole batch into writable memory, viewed per file.
        joined = torch.frombuffer(bytearray().join(files), dtype=torch.uint8)
        ends = np.cumsum([len(f) for f in files]).tolist()
        data = [joined[end - len(f) : end] for f, end in zip(files, ends)]
        try:
            out = self.decode_jpeg(data, mode=mode, device=self.device)
            return list(out) if isinstance(out, (list, tuple)) else [out]
        except RuntimeError:
            # One bad file fails the batched call: find it, and name it.
            for d, origin in zip(data, origins):
                try:
                    self.decode_jpeg(d, mode=mode, device=self.device)
                except RuntimeError as e:
                    where = origin.decode(errors="replace") if isinstance(origin, bytes) else str(origin)
                    raise InvalidRecordError(f"decode_on={self.device}: {where}: JPEG: {e}") from e
            raise

    def _make(self, chain: _Chain, by_name: dict[str, Any]) -> torch.Tensor:
        files = list(np.asarray(by_name[chain.field], dtype=object).reshape(-1))
        boxes = np.asarray(by_name[chain.aux("box")]).reshape(-1, 4).astype(np.int64)
        flips = np.asarray(by_name[chain.aux("flip")]).reshape(-1, 2).astype(bool)
        affine = np.asarray(by_name[chain.aux("affine")], dtype=np.float32).reshape(-1, 3, chain.channels)
        decoded = np.asarray(by_name[chain.aux("decoded")]).reshape(-1).astype(bool)
        origins = list(np.asarray(by_name[chain.aux("origin")], dtype=object).reshape(-1))
        n, c, h, w = len(files), chain.channels, chain.height, chain.width
        on_device, done = np.flatnonzero(~decoded), np.flatnonzero(decoded)
        # Everything the device needs from the host goes first, in few copies: a copy from
        # pageable memory waits for the work already queued, so none comes between the kernels.
        parts = [on_device, done, np.flatnonzero(flips[:, 0]), np.flatnonzero(flips[:, 1])]
        parts.append(boxes[on_device, 2:].reshape(-1))
        ints = torch.from_numpy(np.concatenate(parts).astype(np.int64)).to(self.device)
        rows, done_rows, flip_h, flip_v, lengths = ints.split([len(p) for p in parts])
        coeff = torch.from_numpy(affine).to(self.device) if chain.float_out else None
        pixels = None
        if len(done):
            joined = torch.frombuffer(bytearray().join(files[i] for i in done), dtype=torch.uint8)
            pixels = joined.view(len(done), h, w, c).to(self.device)
        x = torch.empty((n, c, h, w), dtype=torch.float32, device=self.device)
        images = self._decode(chain, [files[i] for i in on_device], [origins[i] for i in on_device])
        lengths = lengths.view(-1, 2)
        for start in range(0, len(on_device), _CHUNK):
            end = min(start + _CHUNK, len(on_device))
            resized = _resized_crops(images[start:end], boxes[on_device[start:end]], lengths[start:end], h, w)
            x.index_copy_(0, rows[start:end], resized)
        if pixels is not None:
            x.index_copy_(0, done_rows, pixels.permute(0, 3, 1, 2).float())
        for idx, dim in ((flip_h, -1), (flip_v, -2)):
            if len(idx):
                x[idx] = x[idx].flip(dim)
        if coeff is not None:
            a, b0, bm = coeff[:, 0], coeff[:, 1], coeff[:, 2]
            b = b0 + bm * x.mean(dim=(2, 3)) if bool(np.any(affine[:, 2])) else b0
            x = torch.addcmul(b[:, :, None, None], x, a[:, :, None, None])
        else:
            x = x.to(torch.uint8)
        return x if chain.chw else x.permute(0, 2, 3, 1).contiguous()


# Images resized together: bounds the padded batch's memory (float32, the largest crop's size).
_CHUNK = 64
# Padded sizes are rounded up to this, so that the allocator sees few sizes and reuses blocks.
_PAD = 128


def _filter_weights(lengths: torch.Tensor, out: int, padded: int) -> torch.Tensor:
    """``[n, out, padded]``: each row the antialiased bilinear (triangle) filter's weights over
    an input of ``lengths[i]`` samples (zero past it), as PIL and torch's ``antialias=True``
    compute them: centre ``(o + 0.5) * scale``, support ``max(scale, 1)``, normalised."""
    scale = lengths.double() / out
    support = scale.clamp(min=1.0)
    centre = (torch.arange(out, device=lengths.device, dtype=torch.float64) + 0.5)[None, :] * scale[:, None]
    j = torch.arange(padded, device=lengths.device, dtype=torch.float64) + 0.5
    weights = (1 - ((j[None, None, :] - centre[:, :, None]) / support[:, None, None]).abs()).clamp(min=0)
    weights = weights * (j[None, None, :] < lengths[:, None, None])
    return (weights / weights.sum(-1, keepdim=True)).float()


def _resized_crops(
    images: list[torch.Tensor], boxes: np.ndarray, lengths: torch.Tensor, h: int, w: int
) -> torch.Tensor:
    """The boxes ``[top, left, height, width]`` of ``images`` (``[C, H, W]`` uint8) resized to
    ``h x w`` (antialiased bilinear, rounded to uint8 values), ``[n, C, h, w]`` float32: the
    crops padded into one tensor and resized by two batched products with the filters' weight
    matrices (columns, then rows), instead of a resize call per image. ``lengths``: the boxes'
    heights and widths, on the device."""
    device = images[0].device
    n, c = len(images), images[0].shape[0]
    hc, wc = (-(-int(boxes[:, k].max()) // _PAD) * _PAD for k in (2, 3))
    padded = torch.zeros((n, c, hc, wc), dtype=torch.uint8, device=device)
    for i, (img, (top, left, bh, bw)) in enumerate(zip(images, boxes.tolist())):
        padded[i, :, :bh, :bw] = img[:, top : top + bh, left : left + bw]
    rows, cols = _filter_weights(lengths[:, 0], h, hc), _filter_weights(lengths[:, 1], w, wc)
    across = torch.bmm(padded.float().view(n, c * hc, wc), cols.transpose(1, 2))  # [n, c*hc, w]
    across = across.view(n, c, hc, w).permute(0, 2, 1, 3).reshape(n, hc, c * w)
    resized = torch.bmm(rows, across).view(n, h, c, w).permute(0, 2, 1, 3)  # [n, c, h, w]
    return resized.round_().clamp_(0, 255)
