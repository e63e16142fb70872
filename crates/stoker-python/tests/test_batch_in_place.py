"""Batches built in place: where the schema fixes a batch's rows, the op making a field writes it
straight into the element's batch row, and the batch has nothing left to copy (counted in the
batch stage's ``in_place_bytes`` / ``copied_bytes``). The batches must equal the same elements
made one by one and stacked."""

from __future__ import annotations

import numpy as np
import stoker as sk
from stoker import workloads


def _batch_stage(ds: sk.Dataset) -> dict:
    (stage,) = [s for s in ds.stats() if s["name"].startswith("batch(")]
    return stage


def _stacked(elements: list[dict], field: str) -> np.ndarray:
    return np.stack([e[field] for e in elements])


def test_w3_float32_images_are_written_into_their_batch_rows(tmp_path):
    root = str(tmp_path / "w3")
    sk.datasets.write_image_folder(root, n=10, num_classes=3, seed=2)
    ops = workloads.imagenet_ops(size=48, seed=7)
    # One by one, no batch: no row to write into.
    elements = list(sk.Dataset.image_folder(root).map(ops))
    image_bytes = 10 * 48 * 48 * 3 * 4
    for threads in (1, 2):
        ds = (sk.Dataset.image_folder(root).with_options(threads=threads)
              .map(ops, num_parallel_calls=sk.AUTOTUNE).batch(4))
        batches = list(ds)
        np.testing.assert_array_equal(np.concatenate([b["image"] for b in batches]), _stacked(elements, "image"))
        np.testing.assert_array_equal(np.concatenate([b["label"] for b in batches]), _stacked(elements, "label"))
        stage = _batch_stage(ds)
        # pixel_chain wrote every float32 image in its row; only the int64 labels were copied.
        assert stage["in_place_bytes"] == image_bytes, (threads, stage)
        assert stage["copied_bytes"] == 10 * 8, (threads, stage)
        # A full batch's buffer is its own: NumPy gets it writable.
        assert batches[0]["image"].flags.writeable


def test_w2_float32_rows_and_uint8_crops_are_written_into_their_batch_rows(golden):
    # W2: the float32 image and the one-hot are large, and both ops write their rows
    # themselves, so the planner keeps them per element (not after the batch): every byte of
    # the batch is written in place, on one thread and on two, and the batch is still
    # TensorFlow's (the golden test_w2_matches_tf_data).
    d = golden / "w2"
    _, colors = sk.ops.read_class_colors(str(d / "class_dict.csv"))
    images = [str(d / f"image{i}.png") for i in range(3)]
    labels = [str(d / f"label{i}.png") for i in range(3)]
    want = np.load(golden / "w2_expected.npz")
    k = len(colors)
    for threads in (1, 2):
        ds = workloads.segmentation_pipeline(images, labels, colors, size=(48, 64), threads=threads)
        (batch,) = list(ds)
        assert batch["image"].tobytes() == want["image"].tobytes()
        assert batch["label"].tobytes() == want["label"].tobytes()
        stage = _batch_stage(ds)
        assert stage["in_place_bytes"] == 3 * 48 * 64 * (3 + k) * 4, (threads, stage)
        assert stage["copied_bytes"] == 0, (threads, stage)

    # The fused decode + crop writes its uint8 crops into the rows when they are the output.
    chain = [sk.ops.read_file("label"), sk.ops.decode_image("label", channels=3),
             sk.ops.resize_with_crop_or_pad("label", 48, 64)]
    crops = list(sk.Dataset.from_tensor_slices({"label": np.array(labels, dtype=object)}).map(chain))
    for threads in (1, 2):
        ds = (sk.Dataset.from_tensor_slices({"label": np.array(labels, dtype=object)})
              .with_options(threads=threads).map(chain, num_parallel_calls=2).batch(3))
        (batch,) = list(ds)
        np.testing.assert_array_equal(batch["label"], _stacked(crops, "label"))
        assert _batch_stage(ds)["in_place_bytes"] == 3 * 48 * 64 * 3, threads

    # Under the skip policy the one-hot stays per element too (the planner moves nothing after
    # the batch: a skipped row would change it); one thread then writes its float32 rows in
    # place, and they are still TensorFlow's.
    chain = chain + [sk.ops.one_hot_colors("label", colors)]
    ds = (sk.Dataset.from_tensor_slices({"label": np.array(labels, dtype=object)})
          .with_options(on_bad_record="skip", threads=1).map(chain).batch(3))
    (batch,) = list(ds)
    assert batch["label"].tobytes() == want["label"].tobytes()
    assert _batch_stage(ds)["in_place_bytes"] == 3 * 48 * 64 * k * 4

    # A random resized crop as the last op: its uint8 output goes into the row too.
    rng = np.random.default_rng(3)
    blobs = np.array([sk.io.encode_jpeg(sk.datasets.natural_photo(rng, 90, 120), 90) for _ in range(6)], dtype=object)
    crop = [sk.ops.decode_image("value", 3), sk.ops.random_resized_crop("value", 32, seed=5)]
    one_by_one = list(sk.Dataset.from_tensor_slices(blobs).map(crop))
    for threads in (1, 2):
        ds = sk.Dataset.from_tensor_slices(blobs).with_options(threads=threads).map(crop, num_parallel_calls=2).batch(3)
        got = np.concatenate(list(ds))
        np.testing.assert_array_equal(got, np.stack(one_by_one))
        assert _batch_stage(ds)["in_place_bytes"] == 6 * 32 * 32 * 3, threads


def test_rows_of_unknown_shape_are_copied_as_before():
    # decode_image's output shape is unknown until it runs: the first element lays the batch
    # out, and decode_image does not write into rows (it decodes into a pooled buffer), so
    # every row is copied, as before.
    rng = np.random.default_rng(1)
    blobs = np.array([sk.io.encode_png(sk.datasets.natural_photo(rng, 20, 30)) for _ in range(5)], dtype=object)
    one_by_one = list(sk.Dataset.from_tensor_slices(blobs).map(sk.ops.decode_image("value", 3)))
    ds = sk.Dataset.from_tensor_slices(blobs).map(sk.ops.decode_image("value", 3)).batch(5)
    (batch,) = list(ds)
    np.testing.assert_array_equal(batch, np.stack(one_by_one))
    stage = _batch_stage(ds)
    assert (stage["copied_bytes"], stage["in_place_bytes"]) == (5 * 20 * 30 * 3, 0)
