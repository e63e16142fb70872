#!/usr/bin/env python3
"""Regenerates stoker's golden fixtures with TensorFlow itself.

Run from the repository root:

    /opt/venvs/tf/bin/python tests/golden/make_golden.py

Everything is written next to this script. The output is deterministic: data comes from
``np.random.default_rng(2026)``, .npz archives are written with fixed zip timestamps and JSON
with sorted keys, so re-running reproduces the files byte for byte (same TF/numpy versions).

At the end, if ``import stoker`` works, it also checks that TensorFlow reads files written by
``stoker.io.TFRecordWriter`` / ``stoker.io.serialize_example`` (plain, GZIP and ZLIB) and exits
non-zero if it does not.
"""

from __future__ import annotations

import io
import json
import os
import sys
import tempfile
import zipfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 2026


def out(name: str) -> str:
    return os.path.join(HERE, name)


def save_npz(path: str, **arrays: np.ndarray) -> None:
    """Like np.savez_compressed, but byte-deterministic (fixed zip timestamps, sorted names)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for key in sorted(arrays):
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.asarray(arrays[key]), allow_pickle=False)
            info = zipfile.ZipInfo(key + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, buf.getvalue())


def bytes_feature(values):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=list(values)))


def int64_feature(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def float_feature(values):
    return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))


def make_example(features: dict) -> bytes:
    # deterministic=True: map entries sorted by key (otherwise the order can vary run to run).
    ex = tf.train.Example(features=tf.train.Features(feature=features))
    return ex.SerializeToString(deterministic=True)


# --------------------------------------------------------------------------------------------
# W1: "chess" records
# --------------------------------------------------------------------------------------------

W1_N = 70
W1_BATCH = 16
W1_D_LEN = 194
W1_A, W1_K, W1_B = 0.75, 600.0, 30.0
# Gather order on the last (channel) axis; the second and fourth groups are negated.
W1_CHANNELS = [0, 4, 8, 12, 16, 20, 1, 5, 9, 13, 17, 21, 2, 6, 10, 14, 18, 22, 3, 7, 11, 15, 19, 23]
W1_SIGNS = [1] * 6 + [-1] * 6 + [1] * 6 + [-1] * 6


def w1_data(rng: np.random.Generator):
    d = rng.integers(0, 256, size=(W1_N, W1_D_LEN), dtype=np.uint8)
    big = rng.integers(-3000, 3001, size=W1_N)
    small = rng.integers(-40, 41, size=W1_N)
    s = np.where(rng.random(W1_N) < 0.5, big, small).astype(np.int64)
    # Pin edge values of the score formula: sign(0) = 0, |s| = B, |s| > B, extremes.
    s[:10] = [0, 30, -30, 31, -31, 1, -1, 40, 3000, -3000]
    return d, s


def w1_map(serialized):
    parsed = tf.io.parse_example(
        serialized,
        {
            "d": tf.io.FixedLenFeature([], tf.string),
            "s": tf.io.FixedLenFeature([], tf.int64),
        },
    )
    x = tf.io.decode_raw(parsed["d"], tf.uint8)  # (16, 194)
    pw = tf.constant([128, 64, 32, 16, 8, 4, 2, 1], dtype=tf.int32)
    bits = (tf.cast(x, tf.int32)[:, :, None] // pw) % 2  # (16, 194, 8), MSB first
    bits = tf.reshape(bits, (W1_BATCH, W1_D_LEN * 8))  # (16, 1552)
    board = tf.reshape(bits[:, :1536], (W1_BATCH, 8, 8, 24))
    # Gather + negate in int32, then cast: negated zeros stay +0.0 (no -0.0 in the output).
    board = tf.gather(board, W1_CHANNELS, axis=-1) * tf.constant(W1_SIGNS, dtype=tf.int32)
    board = tf.cast(board, tf.float32)
    flags = tf.cast(bits[:, 1536:1546], tf.float32)
    is_mate = tf.cast(bits[:, 1546], tf.float32)

    s = tf.cast(parsed["s"], tf.float32)
    one = tf.constant(1.0, tf.float32)
    zero = tf.constant(0.0, tf.float32)
    A = tf.constant(W1_A, tf.float32)
    K = tf.constant(W1_K, tf.float32)
    B = tf.constant(W1_B, tf.float32)
    slope = (one - A) / (B - one)  # float32 op: 0.25f / 29.0f
    not_mate_score = (one - is_mate) * A * tf.math.tanh(s / K)
    mate_score = is_mate * tf.math.sign(s) * (A + slope * tf.math.maximum(zero, B - tf.math.abs(s)))
    score = not_mate_score + mate_score
    return {"board": board, "flags": flags, "score": score, "s": parsed["s"], "d_bytes": x}


def eigen_tanh_f32(x: np.ndarray) -> np.ndarray:
    """Bit-exact numpy model of tf.math.tanh on float32 (CPU, TF 2.21 x86-64 wheel).

    TF does not use a correctly rounded tanh: it uses Eigen's fast 9/8 rational approximation
    (ptanh_float, EIGEN_FAST_MATH, no FMA), which is off by up to a couple of ULPs. Every step
    below is one float32 operation (multiply, then add; no fused multiply-add).
    """
    f = np.float32
    c = f(7.90738964080810547)
    x = np.clip(np.asarray(x, f), -c, c).astype(f)
    alpha = [f(1.394553628e-8), f(2.102733560e-5), f(3.520756727e-3), f(1.340216100e-1)]
    beta = [f(8.015776984e-7), f(3.326951409e-4), f(2.597254514e-2), f(4.673548340e-1), f(1.0)]
    x2 = x * x
    x3 = x2 * x
    p = np.full_like(x, alpha[0])
    for a in alpha[1:]:
        p = p * x2 + a
    q = np.full_like(x, beta[0])
    for b in beta[1:]:
        q = q * x2 + b
    return ((x3 * p + x) / q).astype(f)


def w1_numpy_reference(d: np.ndarray, s: np.ndarray) -> dict:
    """Independent numpy recomputation of w1_map (must agree bit for bit)."""
    f = np.float32
    bits = np.unpackbits(d, axis=1).astype(np.int32)  # MSB first
    board = bits[:, :1536].reshape(-1, 8, 8, 24)[..., W1_CHANNELS] * np.array(W1_SIGNS, np.int32)
    m = bits[:, 1546].astype(f)
    sf = s.astype(f)
    A, K, B = f(W1_A), f(W1_K), f(W1_B)
    slope = (f(1) - A) / (B - f(1))
    score = (f(1) - m) * A * eigen_tanh_f32(sf / K) + m * np.sign(sf) * (A + slope * np.maximum(f(0), B - np.abs(sf)))
    return {"board": board.astype(f), "flags": bits[:, 1536:1546].astype(f), "score": score}


def make_w1(rng: np.random.Generator) -> None:
    d, s = w1_data(rng)
    records = [
        make_example({"d": bytes_feature([d[i].tobytes()]), "s": int64_feature([int(s[i])])}) for i in range(W1_N)
    ]
    files = {
        None: out("w1_chess_plain.tfrecord"),
        "GZIP": out("w1_chess_gzip.tfrecord"),
        "ZLIB": out("w1_chess_zlib.tfrecord"),
    }
    for ctype, path in files.items():
        with tf.io.TFRecordWriter(path, options=tf.io.TFRecordOptions(compression_type=ctype)) as w:
            for r in records:
                w.write(r)
    # Sanity: all three files decode to the same records.
    for ctype, path in files.items():
        got = [t.numpy() for t in tf.data.TFRecordDataset(path, compression_type=ctype or "")]
        assert got == records, f"{path}: read-back mismatch"

    ds = tf.data.TFRecordDataset(files[None]).batch(W1_BATCH, drop_remainder=True).map(w1_map)
    batches = list(ds.as_numpy_iterator())
    assert len(batches) == W1_N // W1_BATCH == 4
    res = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
    n = len(batches) * W1_BATCH
    assert res["board"].shape == (n, 8, 8, 24) and res["board"].dtype == np.float32
    assert res["flags"].shape == (n, 10) and res["flags"].dtype == np.float32
    assert res["score"].shape == (n,) and res["score"].dtype == np.float32
    assert res["s"].dtype == np.int64 and np.array_equal(res["s"], s[:n])
    assert res["d_bytes"].dtype == np.uint8 and np.array_equal(res["d_bytes"], d[:n])
    assert not np.signbit(res["board"][res["board"] == 0]).any()
    ref = w1_numpy_reference(d[:n], s[:n])
    for k in ("board", "flags", "score"):
        assert ref[k].dtype == res[k].dtype and np.array_equal(ref[k], res[k]), f"w1 {k}: numpy model differs"
    # tf.math.tanh != correctly rounded tanh: record how far (for the README / stoker tolerances).
    sf = s[:n].astype(np.float32) / np.float32(W1_K)
    n_diff = int((eigen_tanh_f32(sf) != np.tanh(sf)).sum())
    print(f"  w1: TF tanh differs from np.tanh (float32) in {n_diff}/{n} scores' inputs")
    save_npz(out("w1_expected.npz"), **res)


# --------------------------------------------------------------------------------------------
# W4: "mnist-small" (map -> batch -> cache, second epoch)
# --------------------------------------------------------------------------------------------

W4_N = 300


def make_w4(rng: np.random.Generator) -> None:
    # MNIST-like: ~80% zero pixels, the rest uniform in 1..255 (keeps the fixtures small).
    x = rng.integers(1, 256, size=(W4_N, 28, 28), dtype=np.uint8)
    x[rng.random((W4_N, 28, 28)) < 0.8] = 0
    x[0, 0, :8] = [0, 1, 2, 127, 128, 253, 254, 255]  # a few pinned values
    y = rng.integers(0, 10, size=W4_N).astype(np.int64)
    save_npz(out("w4_input.npz"), x=x, y=y)

    ds = (
        tf.data.Dataset.from_tensor_slices((x, y))
        .map(lambda x, y: (tf.cast(x, tf.float32) / 255.0, y))
        .batch(128)
        .cache()
    )
    for _ in ds:  # epoch 1: fills the cache
        pass
    xs, ys, sizes = [], [], []
    for bx, by in ds.as_numpy_iterator():  # epoch 2: served from the cache
        xs.append(bx)
        ys.append(by)
        sizes.append(len(bx))
    ex, ey = np.concatenate(xs), np.concatenate(ys)
    assert sizes == [128, 128, 44]
    assert ex.dtype == np.float32 and ex.shape == (W4_N, 28, 28)
    assert ey.dtype == np.int64 and np.array_equal(ey, y)
    # `/ 255.0` is a true (IEEE, correctly rounded) float32 division, not x * (1/255).
    assert np.array_equal(ex, x.astype(np.float32) / np.float32(255.0))
    save_npz(out("w4_expected.npz"), x=ex, y=ey, batch_sizes=np.array(sizes, dtype=np.int64))


# --------------------------------------------------------------------------------------------
# Feature-parsing coverage
# --------------------------------------------------------------------------------------------

FEATURE_SPEC = {
    "name": {"kind": "fixed", "dtype": "string", "shape": [], "default": None},
    "ids": {"kind": "fixed", "dtype": "int64", "shape": [3], "default": None},
    "mat": {"kind": "fixed", "dtype": "float32", "shape": [2, 2], "default": None},
    "weight": {"kind": "fixed", "dtype": "float32", "shape": [], "default": -1.0},
    "tags": {"kind": "varlen", "dtype": "int64", "default": None},
    "vals": {"kind": "varlen", "dtype": "float32", "default": None},
    "words": {"kind": "varlen", "dtype": "string", "default": None},
}

_TF_DTYPES = {"string": tf.string, "int64": tf.int64, "float32": tf.float32}


def tf_spec(spec: dict) -> dict:
    res = {}
    for k, v in spec.items():
        dt = _TF_DTYPES[v["dtype"]]
        if v["kind"] == "fixed":
            res[k] = tf.io.FixedLenFeature(v["shape"], dt, default_value=v["default"])
        else:
            res[k] = tf.io.VarLenFeature(dt)
    return res


def feature_examples() -> list:
    """Six examples; None = the feature is absent from that example."""
    I64_MAX, I64_MIN = 2**63 - 1, -(2**63)
    rows = [
        dict(
            name=b"alpha",
            ids=[1, 2, 3],
            mat=[0.1, 0.2, 0.3, 0.4],
            weight=0.5,
            tags=[7, 8, 9],
            vals=[1.5, -2.25],
            words=[b"hello", b"world"],
        ),
        dict(
            name=b"",
            ids=[-1, 0, 2**40],
            mat=[1.0, -1.0, 0.0, -0.0],
            weight=None,
            tags=[],
            vals=[0.1],
            words=[b"\x00\xff", b""],
        ),
        dict(
            name=b"\xde\xad\xbe\xef",
            ids=[I64_MAX, I64_MIN, 42],
            mat=[3.4028234663852886e38, 1e-45, -1e-38, 1.0 / 3.0],
            weight=0.1,
            tags=[100],
            vals=None,
            words=[b"a"],
        ),
        dict(
            name="café".encode(),
            ids=[5, 5, 5],
            mat=[2.5, 2.5, -2.5, 1e10],
            weight=None,
            tags=[1, 2, 3, 4, 5],
            vals=[3.0, 4.0, 5.0, 6.0],
            words=[],
        ),
        dict(
            name=b"epsilon",
            ids=[0, 0, 0],
            mat=[1e-7, 7.0, 8.0, 9.0],
            weight=2.0,
            tags=[-5, 0],
            vals=[-0.0, 1e-20, 123456.789],
            words=[b"x y z", b"\n"],
        ),
        dict(
            name=b"zeta",
            ids=[-7, -8, -9],
            mat=[0.5, 0.25, 0.125, 0.0625],
            weight=1e-3,
            tags=[0, 0],
            vals=[2.0],
            words=[b"last"],
        ),
    ]
    kinds = {
        "name": bytes_feature,
        "ids": int64_feature,
        "mat": float_feature,
        "weight": float_feature,
        "tags": int64_feature,
        "vals": float_feature,
        "words": bytes_feature,
    }
    serialized = []
    for r in rows:
        feats = {}
        for k, v in r.items():
            if v is None:
                continue
            if k in ("name", "weight"):
                v = [v]
            feats[k] = kinds[k](v)
        serialized.append(make_example(feats))
    return serialized


def to_json_value(arr, dtype: str):
    """A numpy value -> nested lists; bytes as hex strings, float32 as exact Python floats."""
    a = np.asarray(arr)
    if dtype == "string":
        return np.vectorize(lambda b: bytes(b).hex(), otypes=[object])(a).tolist() if a.ndim else bytes(a.item()).hex()
    if dtype == "float32":
        assert a.dtype == np.float32, a.dtype
        return a.astype(np.float64).tolist()  # float32 -> float64 is exact
    assert a.dtype == np.int64, a.dtype
    return a.tolist()


def make_features() -> None:
    serialized = feature_examples()
    with tf.io.TFRecordWriter(out("features.tfrecord")) as w:
        for r in serialized:
            w.write(r)
    spec = tf_spec(FEATURE_SPEC)
    recs = [t.numpy() for t in tf.data.TFRecordDataset(out("features.tfrecord"))]
    assert recs == serialized

    single = []
    for r in recs:
        p = tf.io.parse_single_example(r, spec)
        row = {}
        for k, v in FEATURE_SPEC.items():
            t = p[k].values if v["kind"] == "varlen" else p[k]
            row[k] = to_json_value(t.numpy(), v["dtype"])
        single.append(row)

    p = tf.io.parse_example(tf.constant(recs), spec)
    batched = {}
    for k, v in FEATURE_SPEC.items():
        t = tf.sparse.to_dense(p[k]) if v["kind"] == "varlen" else p[k]
        batched[k] = to_json_value(t.numpy(), v["dtype"])

    doc = {"spec": FEATURE_SPEC, "single": single, "batched": batched}
    with open(out("features_expected.json"), "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")


# --------------------------------------------------------------------------------------------
# Read-back check: does TensorFlow read files that stoker wrote?
# --------------------------------------------------------------------------------------------


def check_stoker_written() -> bool:
    try:
        import stoker  # noqa: F401
        import stoker.io as sio
    except Exception as e:  # not built / not installed yet
        print(f"stoker not importable: skipped read-back check ({type(e).__name__}: {e})")
        return True

    rng = np.random.default_rng(SEED + 1)
    n = 20
    examples = []
    for i in range(n):
        k = i % 4 + 1
        examples.append(
            {
                "b": bytes(rng.integers(0, 256, size=i, dtype=np.uint8)),  # bytes
                "bl": [b"w%d" % j for j in range(k)] + [b"\x00\xff"],  # list of bytes
                "i": int(rng.integers(-(2**62), 2**62)),  # int
                "il": [int(v) for v in rng.integers(-1000, 1000, size=k)] + [2**63 - 1, -(2**63)],
                "ia": rng.integers(-(2**40), 2**40, size=k + 2, dtype=np.int64),  # np int array
                "f": float(rng.standard_normal()),  # float (f64)
                "fl": [float(v) for v in rng.standard_normal(k)] + [0.1, -0.0],  # list of floats
                "fa": rng.standard_normal(k + 1).astype(np.float32),  # np f32 array
            }
        )
    kinds = {
        "b": "bytes",
        "bl": "bytes",
        "i": "int64",
        "il": "int64",
        "ia": "int64",
        "f": "float",
        "fl": "float",
        "fa": "float",
    }
    tf_dt = {"bytes": tf.string, "int64": tf.int64, "float": tf.float32}
    spec = {k: tf.io.VarLenFeature(tf_dt[v]) for k, v in kinds.items()}

    def expected(kind, v):
        vals = v if isinstance(v, (list, np.ndarray)) else [v]
        if kind == "bytes":
            return [bytes(x) for x in vals]
        if kind == "int64":
            return np.asarray(vals, dtype=np.int64)
        return np.asarray(vals, dtype=np.float64).astype(np.float32)

    ok_all = True
    with tempfile.TemporaryDirectory(prefix="stoker_golden_") as tmp:
        for ctype in (None, "GZIP", "ZLIB"):
            label = ctype or "NONE"
            path = os.path.join(tmp, f"stoker_{label}.tfrecord")
            problems = []
            try:
                written = []
                with sio.TFRecordWriter(path, compression_type=ctype) as w:
                    for ex in examples:
                        rec = sio.serialize_example(ex)
                        written.append(bytes(rec))
                        w.write(rec)
                read = [t.numpy() for t in tf.data.TFRecordDataset(path, compression_type=ctype or "")]
                if read != written:
                    problems.append(f"records differ (wrote {len(written)}, TF read {len(read)})")
                for idx, (ex, rec) in enumerate(zip(examples, read)):
                    p = tf.io.parse_single_example(rec, spec)
                    for k, kind in kinds.items():
                        got = p[k].values.numpy()
                        want = expected(kind, ex[k])
                        if kind == "bytes":
                            good = list(got) == want
                        else:
                            good = (
                                got.dtype == want.dtype
                                and np.array_equal(got, want)
                                and np.array_equal(np.signbit(got), np.signbit(want))
                            )
                        if not good:
                            problems.append(f"example {idx} feature {k!r}: TF got {got!r}, expected {want!r}")
            except Exception as e:
                problems.append(f"{type(e).__name__}: {e}")
            if problems:
                ok_all = False
                print(f"stoker read-back [{label}]: FAIL")
                for msg in problems[:10]:
                    print("   ", msg)
            else:
                print(f"stoker read-back [{label}]: OK ({n} examples, bytes/int64/float lists)")
    return ok_all


def make_interleave() -> None:
    """interleave order: Dataset.range(4).interleave(lambda i: range(10i, 10i+i+1), c, b)."""
    orders = []
    for cycle, block in [(1, 1), (2, 1), (2, 2), (3, 1), (3, 2)]:
        ds = tf.data.Dataset.range(4).interleave(
            lambda i: tf.data.Dataset.range(10 * i, 10 * i + i + 1), cycle_length=cycle, block_length=block
        )
        orders.append({"cycle_length": cycle, "block_length": block, "order": [int(v) for v in ds]})
    with open(out("interleave_expected.json"), "w") as f:
        json.dump(orders, f, sort_keys=True, indent=1)


def natural_image(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """A smooth, photo-like RGB image (gradients, soft discs, mild noise): compresses like a
    photo, unlike noise or flat colour."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack([xx / w * 200 + 20, yy / h * 180 + 40, (xx + yy) / (h + w) * 150 + 50], axis=-1)
    for _ in range(5):
        cy, cx, r = rng.uniform(0, h), rng.uniform(0, w), rng.uniform(4, min(h, w) / 2)
        color = rng.uniform(0, 255, 3).astype(np.float32)
        mask = np.clip(1.5 - np.hypot(yy - cy, xx - cx) / r, 0, 1)[..., None]
        img = img * (1 - mask) + color * mask
    img += rng.normal(0, 3, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def make_images(rng: np.random.Generator) -> None:
    """Encoded images and what tf.io.decode_* returns for them (images_expected.npz)."""
    os.makedirs(out("images"), exist_ok=True)
    rgb = natural_image(rng, 48, 64)
    grey = rgb.mean(axis=-1, keepdims=True).astype(np.uint8)
    rgba = np.concatenate([rgb, rng.integers(0, 256, (48, 64, 1), dtype=np.uint8)], axis=-1)
    grey16 = grey.astype(np.uint16) * 257 + rng.integers(0, 200, grey.shape).astype(np.uint16)
    files = {
        "rgb.png": tf.io.encode_png(rgb).numpy(),
        "grey.png": tf.io.encode_png(grey).numpy(),
        "rgba.png": tf.io.encode_png(rgba).numpy(),
        "grey16.png": tf.io.encode_png(tf.constant(grey16, tf.uint16)).numpy(),
        "rgb.jpg": tf.io.encode_jpeg(rgb, quality=90).numpy(),
        "grey.jpg": tf.io.encode_jpeg(grey, quality=90).numpy(),
    }
    expected = {}
    for name, data in files.items():
        with open(out(os.path.join("images", name)), "wb") as f:
            f.write(data)
        for channels in (0, 1, 3, 4):
            if name.endswith(".jpg") and channels == 4:
                continue  # decode_jpeg has no RGBA output
            img = tf.io.decode_image(data, channels=channels, dtype=tf.uint8, expand_animations=False)
            expected[f"{name}/channels={channels}"] = img.numpy()
            if name.endswith(".jpg"):
                # TF's default is the fast integer IDCT; libjpeg's own default is the accurate one.
                img = tf.io.decode_jpeg(data, channels=channels, dct_method="INTEGER_ACCURATE")
                expected[f"{name}/islow/channels={channels}"] = img.numpy()
    # 16-bit output (tf.io.decode_image(dtype=tf.uint16)), and a 16-bit RGB PNG (own generator,
    # so the draws above are unchanged).
    rgb16 = natural_image(np.random.default_rng(SEED + 10), 48, 64).astype(np.uint16) * 257 + 99
    files["rgb16.png"] = tf.io.encode_png(tf.constant(rgb16, tf.uint16)).numpy()
    with open(out(os.path.join("images", "rgb16.png")), "wb") as f:
        f.write(files["rgb16.png"])
    for name, data in files.items():
        for channels in (0, 1, 3, 4):
            if name.endswith(".jpg") and channels == 4:
                continue
            img = tf.io.decode_image(data, channels=channels, dtype=tf.uint16, expand_animations=False)
            expected[f"{name}/uint16/channels={channels}"] = img.numpy()
            if name == "rgb16.png":
                img8 = tf.io.decode_image(data, channels=channels, dtype=tf.uint8, expand_animations=False)
                expected[f"{name}/channels={channels}"] = img8.numpy()
    save_npz(out("images_expected.npz"), **expected)


def make_image_ops(rng: np.random.Generator) -> None:
    """tf.image.resize_with_crop_or_pad and a colour-table one-hot (image_ops_expected.npz)."""
    img = rng.integers(0, 256, (7, 9, 3), dtype=np.uint8)
    batch = rng.integers(0, 256, (2, 7, 9, 3), dtype=np.uint8)
    arrays = {"img": img, "batch": batch}
    for th, tw in [(4, 4), (10, 12), (7, 9), (5, 13), (10, 3), (1, 1)]:
        arrays[f"crop_pad/{th}x{tw}"] = tf.image.resize_with_crop_or_pad(img, th, tw).numpy()
        arrays[f"crop_pad_f32/{th}x{tw}"] = tf.image.resize_with_crop_or_pad(
            img.astype(np.float32) / 255, th, tw
        ).numpy()
    arrays["crop_pad_batch/4x12"] = tf.image.resize_with_crop_or_pad(batch, 4, 12).numpy()
    colors = rng.choice(256, size=(32, 3), replace=True).astype(np.uint8)
    colors[:, 0] = np.arange(32) * 8  # distinct
    classes = np.repeat(rng.integers(0, 32, (20, 6)), 5, axis=1)  # runs of one colour
    label = colors[classes]
    onehot = tf.cast(tf.stack([tf.reduce_all(tf.equal(label, c), axis=-1) for c in colors], axis=-1), tf.float32)
    arrays.update({"colors": colors, "label": label, "onehot": onehot.numpy()})
    photo = tf.image.convert_image_dtype(natural_image(rng, 12, 16), tf.float32)
    arrays["photo"] = photo.numpy()
    arrays["adjust_brightness"] = tf.image.adjust_brightness(photo, 0.15).numpy()
    arrays["adjust_contrast"] = tf.image.adjust_contrast(photo, 1.7).numpy()
    arrays["adjust_saturation"] = tf.image.adjust_saturation(photo, 0.4).numpy()
    arrays["adjust_hue"] = tf.image.adjust_hue(photo, -0.3).numpy()
    chained = tf.image.adjust_contrast(tf.image.adjust_brightness(photo, -0.1), 0.6)
    arrays["adjust_all"] = tf.image.adjust_hue(tf.image.adjust_saturation(chained, 1.8), 0.2).numpy()
    arrays["convert_image_dtype"] = tf.image.convert_image_dtype(np.arange(256, dtype=np.uint8), tf.float32).numpy()
    save_npz(out("image_ops_expected.npz"), **arrays)


def make_w2(rng: np.random.Generator) -> None:
    """W2 in tf.data on 3 small PNG pairs (w2/, w2_expected.npz): read, decode_png, /255,
    resize_with_crop_or_pad (crop in both dims), one-hot by colour equality, batch(3)."""
    os.makedirs(out("w2"), exist_ok=True)
    colors = np.array([[128, 128, 128], [128, 0, 0], [192, 192, 128], [0, 0, 192], [64, 64, 0]], np.uint8)
    with open(out("w2/class_dict.csv"), "w") as f:
        f.write("name,r,g,b\n" + "".join(f"c{i},{r},{g},{b}\n" for i, (r, g, b) in enumerate(colors)))
    images, labels = [], []
    for i in range(3):
        photo = natural_image(rng, 60, 80)
        yy, xx = np.mgrid[0:60, 0:80]
        region = ((yy // 20) * 3 + xx // 27 + i) % len(colors)
        for name, arr, paths in (("image", photo, images), ("label", colors[region], labels)):
            path = out(f"w2/{name}{i}.png")
            with open(path, "wb") as f:
                f.write(tf.io.encode_png(arr).numpy())
            paths.append(path)

    def load(image_path, label_path):
        img = tf.cast(tf.io.decode_png(tf.io.read_file(image_path), channels=3), tf.float32) / 255.0
        img = tf.image.resize_with_crop_or_pad(img, 48, 64)
        lab = tf.image.resize_with_crop_or_pad(tf.io.decode_png(tf.io.read_file(label_path), channels=3), 48, 64)
        onehot = tf.cast(tf.stack([tf.reduce_all(tf.equal(lab, c), axis=-1) for c in colors], -1), tf.float32)
        return img, onehot

    ds = tf.data.Dataset.from_tensor_slices((images, labels)).map(load).batch(3)
    ((img, onehot),) = list(ds)
    save_npz(out("w2_expected.npz"), image=img.numpy(), label=onehot.numpy())


def main() -> int:
    print(f"TensorFlow {tf.__version__}, numpy {np.__version__}")
    rng = np.random.default_rng(SEED)
    make_w1(rng)
    make_w4(rng)
    make_features()
    make_interleave()
    make_images(np.random.default_rng(SEED + 1))
    make_image_ops(np.random.default_rng(SEED + 2))
    make_w2(np.random.default_rng(SEED + 3))
    for name in sorted(os.listdir(HERE)):
        if name.endswith((".tfrecord", ".npz", ".json")):
            print(f"  {name:28s} {os.path.getsize(out(name)):8d} bytes")
    return 0 if check_stoker_written() else 1


if __name__ == "__main__":
    sys.exit(main())
