"""Batches built in place: where the schema fixes a batch's rows, the op making a field writes it
straight into the element's batch row, and the batch has nothing left to copy (counted in the
batch stage's ``in_place_bytes`` / ``copied_bytes``). The batches must equal the same elements
made one by one and stacked."""

from __future__ import annotations

import ctypes
import gc
import threading
from typing import Any

import numpy as np
import pytest
import stoker as sk
from stoker import _stoker, workloads


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


class _HostMemory:
    """A stand-in for the CUDA runtime's cudaSetDevice / cudaHostAlloc / cudaFreeHost (which
    stoker.torch hands the engine on a GPU machine): C callbacks over libc's aligned_alloc
    that record what they hand out."""

    SET = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)
    ALLOC = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_uint)
    FREE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)

    def __init__(self) -> None:
        libc = ctypes.CDLL(None)
        libc.aligned_alloc.restype = ctypes.c_void_p
        libc.aligned_alloc.argtypes = (ctypes.c_size_t, ctypes.c_size_t)
        libc.free.argtypes = (ctypes.c_void_p,)
        self.live: dict[int, int] = {}
        self.devices: set[int] = set()
        self.flags: set[int] = set()
        self.allocations = 0
        lock = threading.Lock()

        def set_device(device: int) -> int:
            self.devices.add(device)
            return 0

        def host_alloc(out: Any, size: int, flags: int) -> int:
            p = libc.aligned_alloc(4096, size)
            with lock:
                self.live[p] = size
                self.flags.add(flags)
                self.allocations += 1
            out[0] = p
            return 0

        def free_host(p: int) -> int:
            with lock:
                del self.live[p]
            libc.free(p)
            return 0

        # Kept: C holds the callbacks' addresses.
        self.callbacks = (self.SET(set_device), self.ALLOC(host_alloc), self.FREE(free_host))

    def addresses(self) -> tuple[int, int, int]:
        a, b, c = (ctypes.cast(f, ctypes.c_void_p).value for f in self.callbacks)
        assert a and b and c
        return a, b, c

    def holds(self, array: np.ndarray) -> bool:
        start = array.__array_interface__["data"][0]
        return any(p <= start and start + array.nbytes <= p + n for p, n in self.live.items())


def test_batches_are_written_into_the_host_memory_the_engine_is_given(tmp_path):
    root = str(tmp_path / "w3")
    sk.datasets.write_image_folder(root, n=12, num_classes=3, seed=2)
    ops = workloads.imagenet_ops(size=32, seed=7)

    def pipelines() -> list[sk.Dataset]:
        parallel = (sk.Dataset.image_folder(root).with_options(threads=2)
                    .map(ops, num_parallel_calls=2).batch(4))
        plain = sk.Dataset.from_tensor_slices({"x": np.arange(120, dtype=np.float32).reshape(30, 4)}).batch(8)
        return [parallel, plain]

    want = [list(ds) for ds in pipelines()]
    memory = _HostMemory()
    _stoker.set_batch_host_memory(memory.addresses(), 3)
    try:
        got = [list(ds) for ds in pipelines()]
        for batches, expected in zip(got, want):
            assert len(batches) == len(expected)
            for b, e in zip(batches, expected):
                for k in e:
                    np.testing.assert_array_equal(b[k], e[k])
                    # Every batch array lies in the memory given (the labels too).
                    assert memory.holds(b[k]), k
        assert memory.devices == {3}
        assert memory.flags == {1}, "cudaHostAllocPortable"
        # Buffers let go of are reused: four more epochs make 40 batch buffers (3 batches of
        # image and label, 4 of x), and allocate at most one epoch's worth (how many are in
        # flight at once depends on the threads' timing).
        before = memory.allocations
        buffers = 0
        for _ in range(4):
            for ds in pipelines():
                for b in ds:
                    assert all(memory.holds(v) for v in b.values())
                    buffers += len(b)
        assert buffers == 40
        assert memory.allocations - before <= 10, (before, memory.allocations)
        # Element buffers (no batch) stay on the heap.
        (element,) = sk.Dataset.image_folder(root).map(ops).take(1)
        assert not memory.holds(element["image"])
    finally:
        _stoker.set_batch_host_memory(None)
    # Back to the heap; everything allocated is freed once the batches are let go of.
    (again,) = pipelines()[1].take(1)
    assert not memory.holds(again["x"])
    assert memory.live
    del got, b, e, batches, expected
    gc.collect()
    assert memory.live == {}


def test_batch_host_memory_arguments_are_checked():
    with pytest.raises(sk.InvalidArgumentError, match="functions"):
        _stoker.set_batch_host_memory((0, 1, 2))
