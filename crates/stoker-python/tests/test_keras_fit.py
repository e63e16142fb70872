"""``stoker.keras.PyDataset`` and ``Dataset.to_tf()`` under Keras' real ``fit``: epochs of
unknown length, Keras reading from several threads, tuples for dict elements. Each fit runs in
a process of its own: Keras' backend is fixed when it is first imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
import stoker as sk

pytest.importorskip("keras")


def run(script: str, **env: str) -> dict:
    """Runs `script` in a new Python process; it prints its findings as a JSON line."""
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "", **env},
    )
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


# Pipelines whose number of batches is unknown (a filter, a flat_map), fitted with and
# without steps_per_epoch; the steps of each epoch are counted by a callback.
UNKNOWN_LENGTH = """
import json
import warnings
import keras
import numpy as np
import stoker as sk
import stoker.keras

rng = np.random.default_rng(0)
x = rng.normal(size=(400, 4)).astype(np.float32)
y = (x @ np.array([[1.5], [-2.0], [0.5], [3.0]], np.float32) + 0.5).astype(np.float32)
ids = np.arange(400)
base = sk.Dataset.from_tensor_slices((x, y, ids)).shuffle(400, seed=1)
# 300 elements kept: 10 batches of 30.
filtered = base.filter(lambda a, b, i: i % 4 != 0).map(lambda a, b, i: (a, b)).batch(30)
# Each element opens a dataset of 2: 200 elements, 10 batches of 20.
flat = base.take(100).flat_map(
    lambda a, b, i: sk.Dataset.from_tensor_slices((np.stack([a, a]), np.stack([b, b])))).batch(20)

out = {"backend": keras.backend.backend()}
for name, ds in (("filter", filtered), ("flat_map", flat), ("repeat", filtered.repeat())):
    for steps in ((4,) if name == "repeat" else (None, 4, 25)):
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
        seen = []
        count = keras.callbacks.LambdaCallback(
            on_epoch_begin=lambda epoch, logs: seen.append(0),
            on_train_batch_end=lambda batch, logs: seen.__setitem__(-1, seen[-1] + 1))
        data = stoker.keras.PyDataset(ds)
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            history = model.fit(data, epochs=3, steps_per_epoch=steps, verbose=0, callbacks=[count])
        out[f"{name}/{steps}"] = {"steps": seen, "loss": history.history["loss"]}
print(json.dumps(out))
"""


@pytest.mark.parametrize("backend", ["tensorflow", "jax", "torch"])
def test_fit_ends_epochs_of_unknown_length_and_takes_steps_per_epoch(backend):
    # Keras reads from several threads; an epoch of unknown length ends with the pipeline's
    # pass, with or without steps_per_epoch.
    found = run(UNKNOWN_LENGTH, KERAS_BACKEND=backend, JAX_PLATFORMS="cpu")
    assert found["backend"] == backend
    for name in ("filter", "flat_map"):
        # Without steps_per_epoch: each epoch is one pass of the pipeline, 10 batches.
        assert found[f"{name}/None"]["steps"] == [10, 10, 10], name
        # With steps_per_epoch, as for a tf.data dataset: that many per epoch, on through the
        # pass; where a pass ends first, so does the epoch (Keras warns that the input ran
        # out), and the next epoch is the pipeline's next pass.
        assert found[f"{name}/4"]["steps"] == [4, 4, 2], name
        assert found[f"{name}/25"]["steps"] == [10, 10, 10], name
        loss = found[f"{name}/None"]["loss"]
        assert loss[-1] < 0.5 * loss[0], (name, loss)
    # A repeated pipeline goes on across its passes.
    assert found["repeat/4"]["steps"] == [4, 4, 4]


IMAGE_FOLDER = """
import json
import os
import sys
import keras
import numpy as np
import stoker as sk
import stoker.keras
from stoker import ops

root = sys.argv[1]
ds = (sk.Dataset.image_folder(root)
        .shuffle(64, seed=0)
        .map([ops.read_file("filename", output="image"), ops.decode_image("image", channels=3),
              ops.convert_image_dtype("image"), ops.select(["image", "label"], as_tuple=True)])
        .batch(8))
out = {"backend": keras.backend.backend(), "spec": repr(ds.element_spec)}

def fitted(data):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input(shape=(8, 8, 3)), keras.layers.Flatten(), keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.Adam(0.05),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model.fit(data, epochs=8, verbose=0).history

out["py_dataset"] = fitted(stoker.keras.PyDataset(ds))
if keras.backend.backend() == "tensorflow":
    out["to_tf"] = fitted(ds.to_tf())
print(json.dumps(out))
"""


def _image_folder(root) -> None:
    # Two classes a linear model tells apart: dark and bright images.
    rng = np.random.default_rng(0)
    for c, (lo, hi) in enumerate(((0, 60), (200, 256))):
        folder = root / f"class{c}"
        folder.mkdir(parents=True)
        for i in range(16):
            pixels = rng.integers(lo, hi, size=(8, 8, 3), dtype=np.uint8)
            (folder / f"{i}.png").write_bytes(sk.io.encode_png(pixels))


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_keras_fits_image_folder_elements_as_image_label_tuples(tmp_path, backend):
    # image_folder's dict elements reach Keras as (inputs, targets) through select(as_tuple=True).
    _image_folder(tmp_path / "train")
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(IMAGE_FOLDER), str(tmp_path / "train")],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": backend, "JAX_PLATFORMS": "cpu"},
    )
    assert r.returncode == 0, r.stderr[-4000:]
    found = json.loads(r.stdout.strip().splitlines()[-1])
    assert found["backend"] == backend
    assert found["spec"].startswith("(TensorSpec(shape=(None, None, None, 3), dtype='float32', name='image')")
    runs = [found["py_dataset"]] + ([found["to_tf"]] if backend == "tensorflow" else [])
    for history in runs:
        assert history["accuracy"][-1] >= 0.9, history
        assert history["loss"][-1] < 0.5 * history["loss"][0], history


def test_select_as_tuple_hands_out_a_tuple_of_the_fields():
    ds = sk.Dataset.from_tensor_slices({"a": np.arange(4), "b": np.arange(4) * 2, "c": np.arange(4)})
    pairs = ds.map(sk.ops.select(["b", "a"], as_tuple=True)).batch(2)
    assert [(b.tolist(), a.tolist()) for b, a in pairs] == [([0, 2], [0, 1]), ([4, 6], [2, 3])]
    assert [s.name for s in pairs.element_spec] == ["b", "a"]
    # A function after it gets the components as arguments, as with any tuple element.
    assert [int(v) for v in ds.map(sk.ops.select(["b", "a"], as_tuple=True)).map(lambda b, a: b + a)] == [0, 3, 6, 9]
    with pytest.raises(sk.InvalidArgumentError, match="last op"):
        ds.map([sk.ops.select(["a"], as_tuple=True), sk.ops.cast("a", sk.float32)])


def test_keras_passes_are_the_pipelines_epochs_and_a_look_at_one_batch_uses_none():
    import stoker.keras

    ds = sk.Dataset.range(12).shuffle(12, seed=5).batch(4)
    data = stoker.keras.PyDataset(ds)
    epochs = [[b.tolist() for b in ds.iterator(epoch=e)] for e in range(3)]
    # Keras looks at the first batch of a pass to build the model, then leaves it.
    peek = iter(data.get_numpy_iterator())
    assert next(peek)[0].tolist() == epochs[0][0]
    del peek
    for e in range(3):
        assert [b[0].tolist() for b in data.get_numpy_iterator()] == epochs[e]


def test_py_dataset_getitem_is_safe_from_several_threads():
    # Keras without the adapter protocol reads a PyDataset by index, from its threads.
    import stoker.keras

    ds = sk.Dataset.range(4000).map(lambda v: v).batch(2)
    data = stoker.keras.PyDataset(ds)
    data.on_epoch_begin()
    got: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def read(k: int) -> None:
        try:
            for i in range(k, 2000, 4):
                batch = data[i]
                with lock:
                    got.extend(int(v) for v in batch)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=read, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    data.on_epoch_end()
    assert not errors, errors
    assert sorted(got) == list(range(4000))
