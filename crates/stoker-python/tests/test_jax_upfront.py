"""``stoker.jax.iterator`` refuses batches its sharding cannot split before the first batch,
not at the batch that fails at the end of an epoch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("jax")

SCRIPT = """
import json
import time
import numpy as np
import jax
import stoker as sk
import stoker.jax

out = {"devices": len(jax.devices())}
x = np.arange(65 * 3, dtype=np.float32).reshape(65, 3)

def made(ds, **kw):
    # Where the error comes: when the iterator is made, or at which batch.
    try:
        it = stoker.jax.iterator(ds, **kw)
    except sk.InvalidArgumentError as e:
        return ["made", str(e)]
    n = 0
    try:
        for _ in it:
            n += 1
    except sk.InvalidArgumentError as e:
        return [f"batch {n}", str(e)]
    return ["ok", n]

slow = sk.Dataset.from_tensor_slices(x).map(lambda v: (time.sleep(0.01), v)[1])
out["last_partial"] = made(sk.Dataset.from_tensor_slices(x).shuffle(65, seed=0).batch(4).prefetch(2))
out["python_map_last_partial"] = made(slow.batch(8))
out["odd_full"] = made(sk.Dataset.from_tensor_slices(x).batch(5, drop_remainder=True))
out["dropped"] = made(sk.Dataset.from_tensor_slices(x).batch(4, drop_remainder=True))
out["even_last"] = made(sk.Dataset.from_tensor_slices(x[:62]).batch(4))
out["replicated"] = made(sk.Dataset.from_tensor_slices(x).batch(4), sharding=jax.sharding.NamedSharding(
    jax.sharding.Mesh(np.array(jax.devices()), ("data",)), jax.sharding.PartitionSpec()))
# Two processes' shares: the batch left over is dropped, so every share is whole batches.
out["shares"] = [made(sk.Dataset.from_tensor_slices(x[:66]).batch(4), shard=(r, 2)) for r in (0, 1)]
print(json.dumps(out))
"""


def test_a_last_batch_the_devices_cannot_split_is_refused_up_front():
    # The error comes when the iterator is made, not after an epoch of training.
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"},
    )
    assert r.returncode == 0, r.stderr[-4000:]
    found = json.loads(r.stdout.strip().splitlines()[-1])
    assert found["devices"] == 2
    where, why = found["last_partial"]
    assert where == "made" and "last batch of each pass has 1 rows" in why and "drop_remainder=True" in why
    where, why = found["python_map_last_partial"]
    assert where == "made" and "1 rows" in why
    where, why = found["odd_full"]
    assert where == "made" and "batches have 5 rows" in why
    assert found["dropped"] == ["ok", 16]
    assert found["even_last"] == ["ok", 16]  # 15 batches of 4 and one of 2: all split in two
    assert found["replicated"] == ["ok", 17]
    assert found["shares"] == [["ok", 8], ["ok", 8]]
