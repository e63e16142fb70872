"""`stoker.torch.loader(decode_on=...)`: the image chain's pixels made by the loader's device
half (torchvision's decoder, torch's crop, resize and arithmetic), here with its CPU stand-in
(`decode_on="cpu"`), against the engine's CPU chain. A CUDA run of the same checks is at the end
(skipped without a GPU)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import stoker as sk
import stoker.workloads  # noqa: F401

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
import stoker.torch as skt  # noqa: E402

STD = np.array(sk.workloads.IMAGENET_STD, np.float32)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("w3")
    sk.datasets.write_image_folder(str(root / "jpeg"), n=40, num_classes=4, seed=5)
    return str(root / "jpeg")


def chain(dct_method: str = "", chw: bool = False, seed: int = 0) -> list[sk.ops.NativeOp]:
    ops = sk.workloads.imagenet_ops(224, seed=seed, chw=chw)
    ops[1] = sk.ops.decode_image("image", channels=3, dct_method=dct_method)
    return ops


def pipeline(root: str, ops: list[sk.ops.NativeOp], fused: bool = True, batch: int = 8) -> sk.Dataset:
    ds = sk.Dataset.image_folder(root).with_options(threads=2).shuffle(100, seed=1).map(ops).batch(batch)
    if not fused:
        ds = ds.with_options(optimizations={"fuse_decode_crop": False})
    return ds


def images(loader: skt.Loader) -> tuple[np.ndarray, np.ndarray]:
    batches = list(loader)
    return (
        np.concatenate([b["image"].cpu().numpy() for b in batches]),
        np.concatenate([b["label"].cpu().numpy() for b in batches]),
    )


def levels(a: np.ndarray, b: np.ndarray, chw: bool = False) -> np.ndarray:
    """|a - b| of normalised images in uint8 levels (times std * 255 per channel)."""
    std = STD[:, None, None] if chw else STD
    return np.abs(a - b) * std * 255


def test_same_decoder_gives_the_cpu_chain_within_rounding(folder: str) -> None:
    # With the decoder torchvision uses (libjpeg-turbo's accurate IDCT) and no DCT scaling on
    # the CPU side, the two differ by the resize's rounding: boxes, flips and jitter are the
    # same draws, else whole images would differ.
    ops = chain("INTEGER_ACCURATE")
    cpu, labels = images(skt.loader(pipeline(folder, ops, fused=False)))
    dev, dev_labels = images(skt.loader(pipeline(folder, ops), decode_on="cpu"))
    assert dev.shape == cpu.shape == (40, 224, 224, 3) and dev.dtype == np.float32
    np.testing.assert_array_equal(dev_labels, labels)
    d = levels(cpu, dev)
    assert d.mean() < 0.4, d.mean()
    assert np.percentile(d, 99) < 2.0
    per_image = d.reshape(len(d), -1).mean(axis=1)
    assert per_image.max() < 0.6, per_image  # a mirrored or shifted image would be far off


def test_default_chain_within_the_stated_tolerance(folder: str) -> None:
    # The default CPU chain: TensorFlow's fast IDCT, and the fused decode's DCT scaling. The
    # tolerance README states: mean under 1.5 levels, 99th percentile under 5.
    ops = chain(chw=True)
    cpu, _ = images(skt.loader(pipeline(folder, ops)))
    dev, _ = images(skt.loader(pipeline(folder, ops), decode_on="cpu"))
    assert dev.shape == (40, 3, 224, 224)
    d = levels(cpu, dev, chw=True)
    assert d.mean() < 1.5 and np.percentile(d, 99) < 5.0, (d.mean(), np.percentile(d, 99))


def test_boxes_are_the_cpu_chains_draws(folder: str) -> None:
    ops = chain()
    ops[2] = sk.ops.random_resized_crop("image", 224, seed=0, box_output="box")
    boxes = np.concatenate([b["box"] for b in pipeline(folder, ops[:-1] + [sk.ops.select(["box"])])])
    loader = skt.loader(pipeline(folder, chain()), decode_on="cpu")
    device_boxes = np.concatenate([b["image_box"] for b in loader._sharded])
    np.testing.assert_array_equal(device_boxes, boxes)
    assert "device_image" in loader._sharded.explain()


def test_mixed_mode_decodes_a_share_on_the_cpu(folder: str) -> None:
    ops = chain()
    cpu, _ = images(skt.loader(pipeline(folder, ops)))
    loader = skt.loader(pipeline(folder, ops), decode_on="cpu", cpu_share=0.5)
    decoded = np.concatenate([b["image_decoded"] for b in loader._sharded])
    assert 15 <= decoded.sum() <= 25, decoded
    # A fresh loader: iterating `_sharded` above was an epoch of its own.
    dev, _ = images(skt.loader(pipeline(folder, ops), decode_on="cpu", cpu_share=0.5))
    d = levels(cpu, dev)
    per_image = d.reshape(len(d), -1).mean(axis=1)
    # The share decoded by the engine is the CPU chain's own pixels, up to float rounding.
    assert per_image[decoded == 1].max() < 1e-3
    assert per_image[decoded == 0].max() < 1.5


def test_auto_share_is_the_live_value_the_tuner_moves(folder: str) -> None:
    from stoker import _stoker
    from stoker._device_images import ShareTuner

    loader = skt.loader(pipeline(folder, chain()), decode_on="cpu", cpu_share="auto")
    assert loader.cpu_share == 0.0
    _stoker.set_device_cpu_share(1.0)
    assert np.concatenate([b["image_decoded"] for b in loader._sharded]).all()
    _stoker.set_device_cpu_share(0.0)
    assert not np.concatenate([b["image_decoded"] for b in loader._sharded]).any()
    tuner = ShareTuner(step=0.1, window=2, lag=1)
    # The period shrinks while the share grows (the device is the limit), grows past 0.3, and
    # grows again on the way back: the share turns around each time.
    for period in (9, 8, 8, 9, 7, 7, 9, 6, 6, 9, 8, 8, 9, 9, 9):
        tuner.update(waited_s=0.0, device_s=period / 100, consumer_bound=False)
    tuner.update(waited_s=0.0, device_s=1.0, consumer_bound=True)  # lag, then not measured
    assert tuner.shares == pytest.approx([0, 0, 0, 0.1, 0.1, 0.1, 0.2, 0.2, 0.2, 0.3, 0.3, 0.3, 0.2, 0.2, 0.2, 0.3])
    _stoker.set_device_cpu_share(0.1)
    assert np.concatenate([b["image_decoded"] for b in loader._sharded]).mean() == pytest.approx(0.1, abs=0.05)
    _stoker.set_device_cpu_share(0.0)


def test_png_files_are_decoded_by_the_engine(tmp_path: Path, folder: str) -> None:
    rng = np.random.default_rng(0)
    (tmp_path / "a").mkdir()
    for i in range(3):
        img = rng.integers(0, 256, (60 + i, 80, 3), dtype=np.uint8)
        (tmp_path / "a" / f"{i}.png").write_bytes(sk.io.encode_png(img))
    ops = chain()
    cpu, _ = images(skt.loader(pipeline(str(tmp_path), ops)))
    loader = skt.loader(pipeline(str(tmp_path), ops), decode_on="cpu")
    assert np.concatenate([b["image_decoded"] for b in loader._sharded]).tolist() == [1, 1, 1]
    dev, _ = images(skt.loader(pipeline(str(tmp_path), ops), decode_on="cpu"))
    assert np.abs(cpu - dev).max() < 1e-4


def test_damaged_jpeg_names_its_file(tmp_path: Path, folder: str) -> None:
    good = sorted(Path(folder).rglob("*.jpg"))[0].read_bytes()
    rng = np.random.default_rng(1)
    bad = bytearray(good)
    bad[700:] = rng.integers(0, 256, len(good) - 700, dtype=np.uint8).tobytes()
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "good.jpg").write_bytes(good)
    (tmp_path / "c" / "bad.jpg").write_bytes(bytes(bad))
    loader = skt.loader(pipeline(str(tmp_path), chain()), decode_on="cpu")
    with pytest.raises(sk.errors.InvalidRecordError, match="bad.jpg"):
        list(loader)


def test_refusals_say_why(folder: str) -> None:
    plain = sk.Dataset.image_folder(folder).map([sk.ops.read_file("filename", output="image")]).batch(4)
    with pytest.raises(sk.errors.InvalidArgumentError, match="no decode_image"):
        skt.loader(plain, decode_on="cpu")
    skipping = pipeline(folder, chain()).with_options(on_bad_record="skip")
    with pytest.raises(sk.errors.InvalidArgumentError, match="skip"):
        skt.loader(skipping, decode_on="cpu")
    used_after = chain()[:3] + [sk.ops.cast("image", sk.float32)]
    with pytest.raises(sk.errors.InvalidArgumentError, match="cast after the chain uses 'image'"):
        skt.loader(pipeline(folder, used_after), decode_on="cpu")
    with pytest.raises(sk.errors.InvalidArgumentError, match="cpu_share"):
        skt.loader(pipeline(folder, chain()), decode_on="cpu", cpu_share=1.5)
    with pytest.raises(sk.errors.InvalidArgumentError, match="decode_on"):
        skt.loader(pipeline(folder, chain()), decode_on="tpu")


def test_resume_in_another_process(tmp_path: Path, folder: str) -> None:
    # A state saved by a decode_on loader after two batches, restored in a new process: the
    # batches that follow are those an uninterrupted run gives.
    ops = chain()
    whole, _ = images(skt.loader(pipeline(folder, ops), decode_on="cpu"))
    loader = skt.loader(pipeline(folder, ops), decode_on="cpu")
    it = iter(loader)
    next(it), next(it)
    state = tmp_path / "state.pt"
    torch.save(loader.state_dict(), state)
    out = tmp_path / "rest.npy"
    code = textwrap.dedent(
        f"""
        import numpy as np, torch, stoker as sk, stoker.torch as skt, stoker.workloads
        ops = sk.workloads.imagenet_ops(224, seed=0)
        ops[1] = sk.ops.decode_image("image", channels=3)
        ds = sk.Dataset.image_folder({folder!r}).with_options(threads=2).shuffle(100, seed=1).map(ops).batch(8)
        loader = skt.loader(ds, decode_on="cpu")
        loader.load_state_dict(torch.load({str(state)!r}))
        np.save({str(out)!r}, np.concatenate([b["image"].numpy() for b in loader]))
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    np.testing.assert_array_equal(np.load(out), whole[16:])


def test_a_cpu_path_state_is_refused_not_misread(folder: str) -> None:
    # The two plans' steps differ (the map's ops and the fields after it): a state from one is
    # an error in the other, never a silent wrong position.
    cpu = skt.loader(pipeline(folder, chain()))
    it = iter(cpu)
    next(it)
    dev = skt.loader(pipeline(folder, chain()), decode_on="cpu")
    dev.load_state_dict(cpu.state_dict())
    with pytest.raises(sk.errors.InvalidArgumentError, match="saved from another pipeline"):
        next(iter(dev))


def test_ranks_get_the_cpu_paths_shares(folder: str) -> None:
    ops = chain()
    for rank in (0, 1):
        cpu, labels = images(skt.loader(pipeline(folder, ops), shard=(rank, 2)))
        dev, dev_labels = images(skt.loader(pipeline(folder, ops), shard=(rank, 2), decode_on="cpu"))
        np.testing.assert_array_equal(dev_labels, labels)
        assert levels(cpu, dev).mean() < 1.5


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (nvJPEG)")
def test_cuda_decoding_matches_the_cpu_chain(folder: str) -> None:
    ops = chain(chw=True)
    cpu, labels = images(skt.loader(pipeline(folder, ops)))
    loader = skt.loader(pipeline(folder, ops), device="cuda", decode_on="cuda")
    batches = list(loader)
    assert all(b["image"].is_cuda for b in batches)
    dev = np.concatenate([b["image"].cpu().numpy() for b in batches])
    np.testing.assert_array_equal(np.concatenate([b["label"].cpu().numpy() for b in batches]), labels)
    # nvJPEG's chroma upsampling differs from libjpeg-turbo's more than the CPU decoders do:
    # README states this tolerance.
    d = levels(cpu, dev, chw=True)
    assert d.mean() < 2.0 and np.percentile(d, 99) < 12.0, (d.mean(), np.percentile(d, 99))
    for share in (0.5, "auto"):
        mixed_loader = skt.loader(pipeline(folder, ops), device="cuda", decode_on="cuda", cpu_share=share)
        mixed = np.concatenate([b["image"].cpu().numpy() for b in mixed_loader])
        assert levels(cpu, mixed, chw=True).mean() < 1.5
