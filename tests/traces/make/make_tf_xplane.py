"""Generate small, real TensorFlow profiler XPlane traces on CPU.

Usage:
  python make_tf_xplane.py keras_fit   <logdir>   # model.fit under profiler start/stop
  python make_tf_xplane.py keras_tb    <logdir>   # model.fit + callback using Keras' TensorBoard batch-trace helpers
  python make_tf_xplane.py custom_loop <logdir>   # custom loop w/ Trace('train', step_num=, _r=1)

Output: <logdir>/plugins/profile/<run>/<host>.xplane.pb
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
import numpy as np
import tensorflow as tf

N_STEPS = 6
BATCH = 8
IN_DIM = 16


def make_dataset():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N_STEPS * BATCH, IN_DIM)).astype("float32")
    y = rng.integers(0, 4, size=(N_STEPS * BATCH,)).astype("int32")
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    # small graph-only transform (no py_function)
    ds = ds.map(lambda a, b: (tf.clip_by_value(a * 0.5 + 0.1, -3.0, 3.0), b))
    ds = ds.batch(BATCH, drop_remainder=True)
    ds = ds.prefetch(1)
    return ds


def make_model():
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential(
        [
            tf.keras.Input(shape=(IN_DIM,)),
            tf.keras.layers.Dense(16, activation="relu"),
            tf.keras.layers.Dense(4),
        ]
    )
    return model


def keras_fit(logdir):
    model = make_model()
    model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    ds = make_dataset()
    # warm-up (tracing/compiling the train function) outside the profile
    model.fit(ds.take(1), epochs=1, verbose=0)
    tf.profiler.experimental.start(logdir)
    model.fit(ds, epochs=1, verbose=0)
    tf.profiler.experimental.stop()


def keras_tb(logdir):
    # Keras 3 only emits per-batch step markers through the TensorBoard callback,
    # via keras.src.backend.tensorflow.tensorboard.start_batch_trace(batch), i.e.
    # tf.profiler.experimental.Trace("Profiled batch", step_num=batch).
    # The real TensorBoard callback needs the `tensorboard` package (not installed),
    # so this minimal callback calls the same Keras backend helpers directly.
    from keras.src.backend.tensorflow import tensorboard as ktb

    class BatchTrace(tf.keras.callbacks.Callback):
        ctx = None

        def on_train_batch_begin(self, batch, logs=None):
            self.ctx = ktb.start_batch_trace(batch)

        def on_train_batch_end(self, batch, logs=None):
            ktb.stop_batch_trace(self.ctx)

    model = make_model()
    model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    ds = make_dataset()
    model.fit(ds.take(1), epochs=1, verbose=0)
    ktb.start_trace(logdir)
    model.fit(ds, epochs=1, verbose=0, callbacks=[BatchTrace()])
    ktb.stop_trace(save=True)


def custom_loop(logdir):
    model = make_model()
    opt = tf.keras.optimizers.SGD(0.01)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    ds = make_dataset()
    # warm-up trace of train_step outside the profile
    for x, y in ds.take(1):
        train_step(x, y)
    iterator = iter(ds)
    tf.profiler.experimental.start(logdir)
    for step in range(N_STEPS):
        with tf.profiler.experimental.Trace("train", step_num=step, _r=1):
            x, y = next(iterator)
            loss = train_step(x, y)
            loss.numpy()
    tf.profiler.experimental.stop()


if __name__ == "__main__":
    mode, logdir = sys.argv[1], sys.argv[2]
    {"keras_fit": keras_fit, "keras_tb": keras_tb, "custom_loop": custom_loop}[mode](logdir)
    for root, _, files in os.walk(logdir):
        for f in files:
            p = os.path.join(root, f)
            print(p, os.path.getsize(p))
