"""Record a TensorFlow 1.x-style multi-run timeline on the CPU: `session.run` through
`tf.compat.v1` with `FULL_TRACE`, fed with `feed_dict` from Python that takes a while to make
each batch (a sleep standing in for reading and decoding), as a TF1 input pipeline of that era
did. Each run's step stats become a Chrome trace with `timeline.Timeline`; the runs' events go
into one file, as a user collecting several runs does.

Usage:
  python make_tf1_timeline.py <out.json> [--runs 8] [--feed-ms 30]
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python.client import timeline  # noqa: E402

tf1 = tf.compat.v1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--feed-ms", type=float, default=30.0)
    args = ap.parse_args()
    tf1.disable_eager_execution()
    graph = tf1.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [64, 256], name="x")
        y = tf1.placeholder(tf.int32, [64], name="y")
        w1 = tf1.get_variable("w1", [256, 512], initializer=tf1.glorot_uniform_initializer(seed=0))
        w2 = tf1.get_variable("w2", [512, 10], initializer=tf1.glorot_uniform_initializer(seed=1))
        logits = tf.matmul(tf.nn.relu(tf.matmul(x, w1)), w2)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        train = tf1.train.GradientDescentOptimizer(0.01).minimize(loss)
        init = tf1.global_variables_initializer()
    rng = np.random.default_rng(0)
    events: list[dict] = []
    seen_meta: set[str] = set()
    with tf1.Session(graph=graph) as sess:
        sess.run(init)
        options = tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE)
        for _ in range(args.runs):
            time.sleep(args.feed_ms / 1000)  # making the batch in Python: the feed_dict's cost
            feed = {x: rng.standard_normal((64, 256)).astype(np.float32), y: rng.integers(0, 10, 64)}
            meta = tf1.RunMetadata()
            sess.run(train, feed_dict=feed, options=options, run_metadata=meta)
            trace = json.loads(timeline.Timeline(meta.step_stats).generate_chrome_trace_format())
            for e in trace["traceEvents"]:
                if e.get("ph") == "M":
                    key = json.dumps(e, sort_keys=True)
                    if key in seen_meta:
                        continue
                    seen_meta.add(key)
                events.append(e)
    with open(args.out, "w") as f:
        json.dump({"traceEvents": events}, f)
    print(f"wrote {args.out}: {args.runs} runs, {len(events)} events (TensorFlow {tf.__version__})")


if __name__ == "__main__":
    main()
