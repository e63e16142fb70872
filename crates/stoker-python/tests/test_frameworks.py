"""The JAX, TensorFlow and Keras adapters. Each runs in a process of its own: JAX's host
devices and Keras' backend are fixed when they are first imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import stoker as sk
from stoker.errors import InvalidArgumentError


def run(script: str, **env: str) -> dict:
    """Runs `script` in a new Python process; it prints its findings as a JSON line."""
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **env},
    )
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


# A linear regression the tiny models below can learn: y = x @ w + 0.5.
REGRESSION = """
import numpy as np
import stoker as sk

rng = np.random.default_rng(0)
x = rng.normal(size=(512, 4)).astype(np.float32)
y = (x @ np.array([[1.5], [-2.0], [0.5], [3.0]], np.float32) + 0.5).astype(np.float32)
ds = sk.Dataset.from_tensor_slices((x, y)).shuffle(512, seed=1).batch(32, drop_remainder=True)
"""


def test_jax_places_batches_on_two_host_devices_with_the_sharding_asked():
    found = run(
        """
        import json
        import jax
        import numpy as np
        import stoker as sk
        import stoker.jax
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

        x = np.arange(64 * 3, dtype=np.float32).reshape(64, 3)
        ds = sk.Dataset.from_tensor_slices({"x": x, "i": np.arange(64)}).shuffle(64, seed=3).batch(8)
        out = {"devices": len(jax.devices())}
        it = stoker.jax.iterator(ds)
        out["len"] = len(it)
        it.set_epoch(1)
        got = list(it)
        want = list(ds.iterator(epoch=1))
        out["batches"] = len(got)
        out["equal"] = all(
            np.array_equal(np.asarray(g[k]), w[k]) for g, w in zip(got, want) for k in ("x", "i")
        )
        mesh = Mesh(np.array(jax.devices()), ("data",))
        b = got[0]["x"]
        out["is_jax"] = all(isinstance(v, jax.Array) for g in got for v in g.values())
        out["split"] = b.sharding.is_equivalent_to(NamedSharding(mesh, P("data")), b.ndim)
        out["shards"] = sorted(
            (s.device.id, s.index[0].start, s.index[0].stop) for s in b.addressable_shards
        )
        # Another sharding: every array whole on every device.
        rep = NamedSharding(mesh, P())
        b = next(iter(stoker.jax.iterator(ds, sharding=rep)))["x"]
        out["replicated"] = b.is_fully_replicated and b.sharding.is_equivalent_to(rep, b.ndim)
        # The position after three batches resumes there, in another iterator.
        it = stoker.jax.iterator(ds, prefetch=3)
        it.set_epoch(2)
        seq = iter(it)
        first = [next(seq) for _ in range(3)]
        state = it.state_dict()
        rest = list(seq)
        again = stoker.jax.iterator(ds)
        again.load_state_dict(state)
        resumed = list(again)
        out["resumed"] = len(resumed) == len(rest) == 5 and all(
            np.array_equal(np.asarray(a["i"]), np.asarray(b["i"])) for a, b in zip(resumed, rest)
        )
        # Two processes' shares (as with jax.process_count() == 2): each batch once, as many each.
        shares = [[np.asarray(b["i"]).tolist() for b in stoker.jax.iterator(ds, shard=(r, 2))] for r in (0, 1)]
        out["shares"] = [len(s) for s in shares]
        out["all_once"] = sorted(i for s in shares for b in s for i in b) == list(range(64))
        # A batch the devices cannot split evenly.
        try:
            list(stoker.jax.iterator(sk.Dataset.from_tensor_slices(x).batch(5)))
            out["odd"] = "no error"
        except sk.InvalidArgumentError as e:
            out["odd"] = str(e)
        print(json.dumps(out))
        """,
        XLA_FLAGS="--xla_force_host_platform_device_count=2",
        JAX_PLATFORMS="cpu",
    )
    assert found["devices"] == 2
    assert found["len"] == 8 and found["batches"] == 8
    assert found["equal"] and found["is_jax"]
    assert found["split"]
    assert found["shards"] == [[0, 0, 4], [1, 4, 8]]
    assert found["replicated"]
    assert found["resumed"]
    assert found["shares"] == [4, 4] and found["all_once"]
    assert "multiple of the number of local devices" in found["odd"]


def test_to_tf_hands_tensorflow_the_same_batches_and_keras_fits_them():
    found = run(
        REGRESSION
        + """
import json
import tensorflow as tf
import keras

out = {"backend": keras.backend.backend()}
tds = ds.to_tf()
out["spec"] = [str(s) for s in tds.element_spec]
out["cardinality"] = int(tds.cardinality())
reference = sk.Dataset.from_tensor_slices((x, y)).shuffle(512, seed=1).batch(32, drop_remainder=True)
got = [(a.numpy(), b.numpy()) for a, b in tds]
want = list(reference.iterator(epoch=0))
out["equal"] = len(got) == 16 and all(
    np.array_equal(g[0], w[0]) and np.array_equal(g[1], w[1]) for g, w in zip(got, want)
)
# Each pass over the tf.data dataset is the pipeline's next epoch: another order.
again = [a.numpy() for a, _ in tds]
out["reshuffled"] = not all(np.array_equal(a, g[0]) for a, g in zip(again, got))
# Strings, dicts, unknown dimensions.
words = sk.Dataset.from_tensor_slices({"w": np.array([b"a", b"bb", b"ccc", b"dd"], dtype=object),
                                       "n": np.arange(4, dtype=np.int32)}).batch(3)
w = words.to_tf()
out["words_spec"] = {k: [v.dtype.name, v.shape.as_list()] for k, v in w.element_spec.items()}
out["words"] = [[bytes(s).decode() for s in b["w"].numpy()] for b in w]

keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
history = model.fit(ds.to_tf(), epochs=6, verbose=0)
out["loss"] = history.history["loss"]
# The PyDataset adapter on this backend too (Keras reads a few batches first for their specs).
import stoker.keras
model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
out["py_dataset_loss"] = model.fit(stoker.keras.PyDataset(ds), epochs=6, verbose=0).history["loss"]
print(json.dumps(out))
""",
        KERAS_BACKEND="tensorflow",
    )
    assert found["backend"] == "tensorflow"
    assert found["cardinality"] == 16
    assert found["spec"] == [
        "TensorSpec(shape=(32, 4), dtype=tf.float32, name=None)",
        "TensorSpec(shape=(32, 1), dtype=tf.float32, name=None)",
    ]
    assert found["equal"] and found["reshuffled"]
    assert found["words_spec"] == {"w": ["string", [None]], "n": ["int32", [None]]}
    assert found["words"] == [["a", "bb", "ccc"], ["dd"]]
    for loss in (found["loss"], found["py_dataset_loss"]):
        assert loss[-1] < 0.1 * loss[0], loss


FIT_PY_DATASET = (
    REGRESSION
    + """
import json
import keras
import stoker.keras

keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
data = stoker.keras.PyDataset(ds)
seen = []
record = keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: seen.append(epoch))
history = model.fit(data, epochs=6, verbose=0, callbacks=[record])
print(json.dumps({"backend": keras.backend.backend(), "loss": history.history["loss"],
                  "epochs": seen, "batches": data.num_batches}))
"""
)


def test_keras_fits_a_py_dataset_on_the_torch_backend():
    found = run(FIT_PY_DATASET, KERAS_BACKEND="torch")
    assert found["backend"] == "torch"
    assert found["batches"] == 16 and found["epochs"] == list(range(6))
    assert found["loss"][-1] < 0.1 * found["loss"][0], found["loss"]


def test_keras_fits_a_py_dataset_on_the_jax_backend():
    found = run(FIT_PY_DATASET, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    assert found["backend"] == "jax"
    assert found["loss"][-1] < 0.1 * found["loss"][0], found["loss"]


def test_py_dataset_hands_out_each_epoch_of_the_pipeline_in_order():
    # Keras' calls, made by hand: the batches are the pipeline's epochs, whatever the index.
    import stoker.keras

    ds = sk.Dataset.range(12).shuffle(12, seed=5).batch(4)
    data = stoker.keras.PyDataset(ds)
    assert data.num_batches == len(data) == 3
    for epoch in range(3):
        data.on_epoch_begin()
        got = [data[i] for i in (2, 0, 1)]
        data.on_epoch_end()
        want = list(ds.iterator(epoch=epoch))
        assert all(np.array_equal(g, w) for g, w in zip(got, want))
    unknown = stoker.keras.PyDataset(sk.Dataset.range(12).filter(lambda v: v % 2 == 0).batch(2))
    assert unknown.num_batches is None
    # Without a length, the batches go on across the pipeline's epochs.
    assert [unknown[i].tolist() for i in range(4)] == [[0, 2], [4, 6], [8, 10], [0, 2]]
    try:
        stoker.keras.PyDataset([1, 2])  # type: ignore[arg-type]
    except InvalidArgumentError as e:
        assert "stoker.Dataset" in str(e)
    else:
        raise AssertionError("a list is not a dataset")


def test_jax_processes_without_seeds_share_process_zeros_seeds(tmp_path):
    # Two JAX processes (CPU, gloo collectives), a shuffle without a seed: process 0's seed
    # root is sent, so the processes split one order.
    script = tmp_path / "jax_mp.py"
    script.write_text(
        textwrap.dedent(
            """
            import json, sys
            import jax
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
            pid, port, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
            jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=pid)
            import numpy as np
            import stoker as sk
            import stoker.jax

            ds = sk.Dataset.from_tensor_slices({"y": np.arange(96)}).shuffle(40).batch(4, drop_remainder=True)
            local = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
            it = stoker.jax.iterator(ds, sharding=local)
            res = {"seeds": it._sharded._plan.seed_values(), "epochs": []}
            for epoch in (0, 1):
                it.set_epoch(epoch)
                res["epochs"].append([np.asarray(b["y"]).tolist() for b in it])
            json.dump(res, open(f"{out}.{pid}", "w"))
            """
        )
    )
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(pid), "29617", str(tmp_path / "out")],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for pid in range(2)
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
    results = [json.loads((tmp_path / f"out.{pid}").read_text()) for pid in range(2)]
    assert results[0]["seeds"] == results[1]["seeds"]
    for epoch in (0, 1):
        seen = [y for r in results for b in r["epochs"][epoch] for y in b]
        assert sorted(seen) == list(range(96)), "an element twice, or never"
        assert len(results[0]["epochs"][epoch]) == len(results[1]["epochs"][epoch]) == 12
    assert results[0]["epochs"][0] != results[0]["epochs"][1]
