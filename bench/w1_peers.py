"""W1 chess-tfrecord: the contenders (tf.data fast/slow form, PyTorch DataLoader, stoker).

Every contender returns a ``Contender``: ``epoch()`` gives a fresh iterator over one epoch of
batches, each batch a ``(board, flags, score)`` tuple of NumPy arrays
(board (512, 8, 8, 24) f32, flags (512, 10) f32, score (512,) f32).

Imports of TensorFlow / torch / stoker happen inside the builders, so a child process only
loads the library it benchmarks.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

BATCH = 512
SHUFFLE = 10_000
D_BYTES = 194
A, K, B = 0.75, 600.0, 30.0
# Board channel order; a negative entry -c means channel c negated ("-1" is channel 1, not the
# last one), as in the workloads doc and tests/golden/make_golden.py.
CHANNELS_SIGNED = [0, 4, 8, 12, 16, 20, -1, -5, -9, -13, -17, -21,
                   2, 6, 10, 14, 18, 22, -3, -7, -11, -15, -19, -23]
CHANNELS = [abs(c) for c in CHANNELS_SIGNED]
SIGNS = [1] * 6 + [-1] * 6 + [1] * 6 + [-1] * 6

Batch = tuple[np.ndarray, np.ndarray, np.ndarray]


class Contender(NamedTuple):
    epoch: Callable[[], Iterator[Batch]]
    versions: dict
    notes: str


# --------------------------------------------------------------------------------------------
# tf.data
# --------------------------------------------------------------------------------------------

def _tf_math(tf: Any, x: Any, s: Any, batched: bool) -> dict:
    """The W1 math in TF ops. ``x``: uint8 (..., 194), ``s``: int64 (...).

    Bit-exact with tests/golden/make_golden.py's formulation (checked by check_peers.py) but
    written for speed (about 3x faster than the literal one on this machine): the bits come from
    ``(x >> [7..0]) & 1`` on uint8 instead of ``(x // [128..1]) % 2`` on int32, and the channel
    order [0,4,..,20, 1,5,..,21, 2,6,..,22, 3,7,..,23] is a transpose of the channel axis seen as
    (6, 4) → (4, 6) instead of a tf.gather; the sign (+,-,+,-) per group of 6 is applied in
    int8 before the cast, so negated zeros stay +0.0.
    """
    lead = [-1] if batched else []
    shifts = tf.constant([7, 6, 5, 4, 3, 2, 1, 0], dtype=tf.uint8)
    bits = tf.bitwise.bitwise_and(tf.bitwise.right_shift(x[..., None], shifts), 1)  # (..., 194, 8)
    bits = tf.reshape(bits, lead + [D_BYTES * 8])  # (..., 1552), MSB first
    board = tf.bitcast(tf.reshape(bits[..., :1536], lead + [8, 8, 6, 4]), tf.int8)
    board = tf.transpose(board, [0, 1, 2, 4, 3] if batched else [0, 1, 3, 2])  # (..., 8, 8, 4, 6)
    board = board * tf.constant([[1], [-1], [1], [-1]], dtype=tf.int8)
    board = tf.cast(tf.reshape(board, lead + [8, 8, 24]), tf.float32)
    flags = tf.cast(bits[..., 1536:1546], tf.float32)
    is_mate = tf.cast(bits[..., 1546], tf.float32)
    sf = tf.cast(s, tf.float32)
    one, zero = tf.constant(1.0), tf.constant(0.0)
    a, k, b = tf.constant(A), tf.constant(K), tf.constant(B)
    slope = (one - a) / (b - one)
    score = (one - is_mate) * a * tf.math.tanh(sf / k) + \
        is_mate * tf.math.sign(sf) * (a + slope * tf.math.maximum(zero, b - tf.math.abs(sf)))
    return {"board": board, "flags": flags, "score": score}


def _tf_spec(tf: Any) -> dict:
    return {"d": tf.io.FixedLenFeature([], tf.string), "s": tf.io.FixedLenFeature([], tf.int64)}


def _tf_options(tf: Any, threads: int) -> Any:
    opts = tf.data.Options()
    opts.threading.private_threadpool_size = threads
    return opts


def _tf_contender(ds: Any, tf: Any, notes: str) -> Contender:
    def epoch() -> Iterator[Batch]:
        for b in ds.as_numpy_iterator():
            yield b["board"], b["flags"], b["score"]
    return Contender(epoch, {"tensorflow": tf.__version__}, notes)


def build_tf_fast(files: Sequence[str], threads: int, batch: int = BATCH, shuffle: int = SHUFFLE) -> Contender:
    import tensorflow as tf

    spec = _tf_spec(tf)

    def parse(serialized: Any) -> dict:
        p = tf.io.parse_example(serialized, spec)
        return _tf_math(tf, tf.io.decode_raw(p["d"], tf.uint8), p["s"], batched=True)

    ds = tf.data.TFRecordDataset(list(files), num_parallel_reads=tf.data.AUTOTUNE)
    if shuffle:
        ds = ds.shuffle(shuffle, seed=0)
    ds = ds.batch(batch, drop_remainder=True)
    ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.prefetch(tf.data.AUTOTUNE).with_options(_tf_options(tf, threads))
    return _tf_contender(ds, tf, "TFRecordDataset(num_parallel_reads=AUTOTUNE) → shuffle → batch → "
                         "map(parse_example + math, AUTOTUNE) → prefetch(AUTOTUNE)")


def build_tf_slow(files: Sequence[str], threads: int, batch: int = BATCH, shuffle: int = SHUFFLE) -> Contender:
    import tensorflow as tf

    spec = _tf_spec(tf)

    def parse_one(serialized: Any) -> dict:
        p = tf.io.parse_single_example(serialized, spec)
        return _tf_math(tf, tf.io.decode_raw(p["d"], tf.uint8), p["s"], batched=False)

    ds = tf.data.TFRecordDataset(list(files))
    if shuffle:
        ds = ds.shuffle(shuffle, seed=0)
    ds = ds.map(parse_one, num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.batch(batch, drop_remainder=True)
    ds = ds.prefetch(tf.data.AUTOTUNE).with_options(_tf_options(tf, threads))
    return _tf_contender(ds, tf, "TFRecordDataset (sequential reads) → shuffle → "
                         "map(parse_single_example + per-element math, AUTOTUNE) → batch → prefetch(AUTOTUNE)")


# --------------------------------------------------------------------------------------------
# PyTorch: pure-Python TFRecord reader + protobuf + numpy
# --------------------------------------------------------------------------------------------

def example_message_class() -> Any:
    """``tensorflow.Example`` as a protobuf message class, built at run time from a hand-written
    descriptor (same field numbers as tensorflow/core/example/{example,feature}.proto), so the
    torch contender needs only the ``protobuf`` package, not TensorFlow."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="stoker_bench_example.proto", package="tensorflow",
                                             syntax="proto3")

    def msg(name: str, fields: list[tuple[str, int, int, int, str]]) -> Any:
        m = fdp.message_type.add(name=name)
        for fname, num, ftype, label, tname in fields:
            f = m.field.add(name=fname, number=num, type=ftype, label=label)
            if tname:
                f.type_name = tname
        return m

    msg("BytesList", [("value", 1, F.TYPE_BYTES, F.LABEL_REPEATED, "")])
    msg("FloatList", [("value", 1, F.TYPE_FLOAT, F.LABEL_REPEATED, "")])
    msg("Int64List", [("value", 1, F.TYPE_INT64, F.LABEL_REPEATED, "")])
    feat = msg("Feature", [("bytes_list", 1, F.TYPE_MESSAGE, F.LABEL_OPTIONAL, ".tensorflow.BytesList"),
                           ("float_list", 2, F.TYPE_MESSAGE, F.LABEL_OPTIONAL, ".tensorflow.FloatList"),
                           ("int64_list", 3, F.TYPE_MESSAGE, F.LABEL_OPTIONAL, ".tensorflow.Int64List")])
    feat.oneof_decl.add(name="kind")
    for f in feat.field:
        f.oneof_index = 0
    feats = msg("Features", [("feature", 1, F.TYPE_MESSAGE, F.LABEL_REPEATED, ".tensorflow.Features.FeatureEntry")])
    entry = feats.nested_type.add(name="FeatureEntry")
    entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                    type_name=".tensorflow.Feature")
    entry.options.map_entry = True
    msg("Example", [("features", 1, F.TYPE_MESSAGE, F.LABEL_OPTIONAL, ".tensorflow.Features")])

    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.Example"))


def tfrecord_records(path: str) -> Iterator[bytes]:
    """TFRecord framing: u64 length, u32 masked crc32c(length), data, u32 masked crc32c(data).
    The CRCs are skipped (not verified), which favours this reader over tf.data/stoker."""
    unpack = struct.Struct("<Q").unpack
    with open(path, "rb", buffering=1 << 20) as f:
        read = f.read
        while True:
            head = read(12)
            if not head:
                return
            if len(head) != 12:
                raise OSError(f"{path}: truncated record header")
            (n,) = unpack(head[:8])
            data = read(n)
            if len(data) != n or len(read(4)) != 4:
                raise OSError(f"{path}: truncated record")
            yield data


_CH = np.array(CHANNELS, dtype=np.intp)
_SG = np.array(SIGNS, dtype=np.int8)


def numpy_math(d: np.ndarray, s: np.ndarray) -> Batch:
    """The W1 math on a batch, vectorised in NumPy. ``d``: uint8 (n, 194), ``s``: int64 (n,).
    np.unpackbits(axis=1) is exactly ``(x[:,:,None] // (128,...,1)) % 2`` reshaped, MSB first."""
    n = d.shape[0]
    bits = np.unpackbits(d, axis=1)  # (n, 1552) uint8
    board = bits[:, :1536].reshape(n, 8, 8, 24)[..., _CH].view(np.int8) * _SG
    board = board.astype(np.float32)
    flags = bits[:, 1536:1546].astype(np.float32)
    m = bits[:, 1546].astype(np.float32)
    f = np.float32
    sf = s.astype(f)
    a, k, b = f(A), f(K), f(B)
    slope = (f(1) - a) / (b - f(1))
    score = (f(1) - m) * a * np.tanh(sf / k) + m * np.sign(sf) * (a + slope * np.maximum(f(0), b - np.abs(sf)))
    return board, flags, score.astype(f)


def make_torch_dataset(files: Sequence[str], batch: int = BATCH, shuffle: int = SHUFFLE, seed: int = 0) -> Any:
    import torch
    from torch.utils.data import IterableDataset, get_worker_info

    Example = example_message_class()

    class ChessTFRecord(IterableDataset):
        """Each worker reads its own share of the files (files[id::num_workers]) in sequence,
        parses with protobuf, shuffles with its own buffer of ``shuffle`` examples (reshuffled
        each epoch), batches ``batch`` (drop remainder) and does the math in NumPy per batch."""

        def __init__(self) -> None:
            self.epoch = 0

        def __iter__(self) -> Iterator[dict]:
            info = get_worker_info()
            wid, nw = (0, 1) if info is None else (info.id, info.num_workers)
            mine = list(files)[wid::nw]
            rng = random.Random(seed * 1_000_003 + self.epoch * 1009 + wid)
            self.epoch += 1
            parse = Example.FromString
            buf: list[tuple[bytes, int]] = []
            ds: list[bytes] = []
            ss: list[int] = []

            def emit(item: tuple[bytes, int]) -> Any:
                ds.append(item[0])
                ss.append(item[1])
                if len(ds) == batch:
                    d = np.frombuffer(b"".join(ds), dtype=np.uint8).reshape(batch, D_BYTES)
                    board, flags, score = numpy_math(d, np.array(ss, dtype=np.int64))
                    ds.clear()
                    ss.clear()
                    return {"board": torch.from_numpy(board), "flags": torch.from_numpy(flags),
                            "score": torch.from_numpy(score)}
                return None

            for path in mine:
                for rec in tfrecord_records(path):
                    feat = parse(rec).features.feature
                    item = (feat["d"].bytes_list.value[0], feat["s"].int64_list.value[0])
                    if len(buf) < shuffle:
                        buf.append(item)
                        continue
                    i = rng.randrange(shuffle) if shuffle else 0
                    if shuffle:
                        item, buf[i] = buf[i], item
                    out = emit(item)
                    if out is not None:
                        yield out
            rng.shuffle(buf)
            for item in buf:
                out = emit(item)
                if out is not None:
                    yield out

    return ChessTFRecord()


def build_torch(files: Sequence[str], threads: int, batch: int = BATCH, shuffle: int = SHUFFLE,
                num_workers: int = -1) -> Contender:
    import google.protobuf
    import torch
    from torch.utils.data import DataLoader

    nw = threads if num_workers < 0 else num_workers
    loader = DataLoader(make_torch_dataset(files, batch, shuffle), batch_size=None, num_workers=nw,
                        persistent_workers=nw > 0)

    def epoch() -> Iterator[Batch]:
        for b in loader:
            yield b["board"].numpy(), b["flags"].numpy(), b["score"].numpy()

    return Contender(epoch, {"torch": torch.__version__, "protobuf": google.protobuf.__version__},
                     "DataLoader(IterableDataset, batch_size=None, num_workers=cores, persistent_workers="
                     "True); struct TFRecord reader (no CRC check), protobuf Example parse, "
                     "per-worker shuffle buffer 10000, batch 512, NumPy math per batch")


# --------------------------------------------------------------------------------------------
# stoker
# --------------------------------------------------------------------------------------------

def _stoker_fields(elem: Any) -> Batch:
    if isinstance(elem, dict):
        return elem["board"], elem["flags"], elem["score"]
    board, flags, score = elem[:3]
    return board, flags, score


def build_stoker(files: Sequence[str], threads: int) -> Contender:
    import stoker

    from examples.w1_chess import build_pipeline

    ds = build_pipeline(list(files), seed=0, threads=threads)

    def epoch() -> Iterator[Batch]:
        for b in ds.as_numpy_iterator():
            board, flags, score = _stoker_fields(b)
            yield np.asarray(board), np.asarray(flags), np.asarray(score)

    return Contender(epoch, {"stoker": getattr(stoker, "__version__", "?")},
                     "examples.w1_chess.build_pipeline(files, seed=0, threads=cores), as_numpy_iterator()")


CONTENDERS = {
    "stoker": build_stoker,
    "tf.data (fast form)": build_tf_fast,
    "tf.data (slow form)": build_tf_slow,
    "torch DataLoader (workers=cores)": build_torch,
}
