"""Generate a small, real JAX profiler trace on CPU.

Usage: /tmp/jaxvenv/bin/python make_jax_trace.py <logdir> [--no-steps]
(`--no-steps`: the same loop without step markers, as most JAX programs are profiled)
Outputs: <logdir>/plugins/profile/<run>/<host>.xplane.pb and
         <logdir>/plugins/profile/<run>/perfetto_trace.json.gz
"""

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

N_STEPS = 6


def init(rng):
    # numpy init (instead of jax.random) so that no extra XLA programs get compiled:
    # every compiled program's HLO proto is embedded in the /host:metadata plane.
    f32 = np.float32
    return {
        "w1": jnp.asarray((rng.standard_normal((16, 32)) * 0.1).astype(f32)),
        "b1": jnp.asarray(np.zeros(32, f32)),
        "w2": jnp.asarray((rng.standard_normal((32, 4)) * 0.1).astype(f32)),
        "b2": jnp.asarray(np.zeros(4, f32)),
    }


def loss_fn(p, x, y):
    h = jax.nn.relu(x @ p["w1"] + p["b1"])
    logits = h @ p["w2"] + p["b2"]
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))


@jax.jit
def train_step(p, x, y):
    loss, g = jax.value_and_grad(loss_fn)(p, x, y)
    p = jax.tree_util.tree_map(lambda a, b: a - 0.01 * b, p, g)
    return p, loss


def main(logdir, steps=True):
    rng = np.random.default_rng(0)
    params = init(rng)
    x = jnp.asarray(rng.standard_normal((8, 16)).astype(np.float32))
    y = jnp.asarray(np.eye(4, dtype=np.float32)[rng.integers(0, 4, size=8)])
    # warm-up compile outside the trace
    params, loss = train_step(params, x, y)
    loss.block_until_ready()
    with jax.profiler.trace(logdir, create_perfetto_trace=True):
        for i in range(N_STEPS):
            if not steps:
                params, loss = train_step(params, x, y)
                loss.block_until_ready()
                continue
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                params, loss = train_step(params, x, y)
                loss.block_until_ready()
    print("final loss", float(loss))
    for root, _, files in os.walk(logdir):
        for f in files:
            p = os.path.join(root, f)
            print(p, os.path.getsize(p))


if __name__ == "__main__":
    print("jax", jax.__version__, "devices", jax.devices())
    main(sys.argv[1], steps="--no-steps" not in sys.argv[2:])
