"""Bad input: errors name the file, record and offset, or are skipped and counted."""

from __future__ import annotations

import numpy as np
import pytest
import stoker as sk

from .conftest import write_examples

PARSE = sk.ops.parse_example({"s": sk.FixedLenFeature([], sk.int64)})


def record_size(path):
    data = open(path, "rb").read()
    return data, len(data) // 5


def test_bad_crc(tmp_path):
    f = write_examples(tmp_path / "x.tfrecord", [1, 2, 3, 4, 5])
    data, per = record_size(f)
    bad = bytearray(data)
    bad[3 * per + 13] ^= 0xFF
    open(f, "wb").write(bytes(bad))
    with pytest.raises(sk.CorruptRecordError) as e:
        list(sk.TFRecordDataset(f).map(PARSE))
    assert (e.value.file, e.value.record, e.value.offset) == (f, 3, 3 * per)
    assert isinstance(e.value, ValueError) and "data CRC" in str(e.value)
    ds = sk.TFRecordDataset(f).map(PARSE).with_options(on_bad_record="skip")
    assert [int(x["s"]) for x in ds] == [1, 2, 3, 5]
    assert sum(s["skipped"] for s in ds.stats()) == 1
    assert any("record 3" in (s["last_skip_reason"] or "") for s in ds.stats())
    # With CRC checks off the damaged record is handed on as it is.
    unchecked = list(sk.TFRecordDataset(f, verify_crc=False))
    assert len(unchecked) == 5 and unchecked[3] != sk.io.serialize_example({"s": 4, "d": (4).to_bytes(4, "little")})


def test_truncated_and_bad_length(tmp_path):
    f = write_examples(tmp_path / "x.tfrecord", [1, 2, 3, 4, 5])
    data, per = record_size(f)
    open(f, "wb").write(data[:-5])
    with pytest.raises(sk.CorruptRecordError, match="truncated") as e:
        list(sk.TFRecordDataset(f))
    assert e.value.record == 4
    bad = bytearray(data)
    bad[per * 2] ^= 0x08
    open(f, "wb").write(bytes(bad))
    with pytest.raises(sk.CorruptRecordError, match="length CRC") as e:
        list(sk.TFRecordDataset(f))
    assert (e.value.record, e.value.offset) == (2, 2 * per)
    # Skip: the damaged record is lost and counted; the reader finds the next intact header.
    ds = sk.TFRecordDataset(f).ignore_errors()
    assert len(list(ds)) == 4 and sum(s["skipped"] for s in ds.stats()) == 1


def test_bad_protobuf_and_wrong_type(tmp_path):
    f = str(tmp_path / "p.tfrecord")
    good = sk.io.serialize_example({"s": 1})
    with sk.io.TFRecordWriter(f) as w:
        w.write(good)
        w.write(b"\x0a\xff\xff\xff\xff\x0f")
        w.write(sk.io.serialize_example({"s": 2.5}))
        w.write(sk.io.serialize_example({"t": 3}))
    with pytest.raises(sk.InvalidRecordError, match="not a valid tf.train.Example") as e:
        list(sk.TFRecordDataset(f).map(PARSE))
    assert (e.value.file, e.value.record, e.value.offset) == (f, 1, 12 + len(good) + 4)
    with pytest.raises(sk.InvalidRecordError, match="float_list, expected a int64_list") as e:
        list(sk.TFRecordDataset(f).skip(2).map(PARSE))
    assert e.value.record == 2
    with pytest.raises(sk.InvalidRecordError, match="required feature 's' is missing") as e:
        list(sk.TFRecordDataset(f).skip(3).batch(1).map(PARSE))
    assert e.value.record == 3
    ds = sk.TFRecordDataset(f).map(PARSE).ignore_errors()
    assert [int(x["s"]) for x in ds] == [1]
    assert sum(s["skipped"] for s in ds.stats()) == 3


def test_missing_file_is_file_not_found():
    with pytest.raises(FileNotFoundError) as e:
        sk.TFRecordDataset("/no/such/file.tfrecord")
    assert e.value.filename == "/no/such/file.tfrecord"


def test_file_deleted_after_build(tmp_path):
    f = write_examples(tmp_path / "gone.tfrecord", [1])
    ds = sk.TFRecordDataset(f)
    (tmp_path / "gone.tfrecord").unlink()
    with pytest.raises(FileNotFoundError):
        list(ds)


def test_python_exceptions_come_back_unchanged():
    class Boom(Exception):
        pass

    def f(v):
        if int(v) == 3:
            raise Boom("three")
        return v

    for npc in (None, 2):
        with pytest.raises(Boom, match="three"):
            list(sk.Dataset.range(10).map(f, num_parallel_calls=npc))


def test_decode_raw_length_mismatch_is_located(tmp_path):
    f = str(tmp_path / "r.tfrecord")
    with sk.io.TFRecordWriter(f) as w:
        w.write(sk.io.serialize_example({"d": b"abcd"}))
        w.write(sk.io.serialize_example({"d": b"abcdef"}))
    ds = (
        sk.TFRecordDataset(f)
        .batch(2)
        .map([sk.ops.parse_example({"d": sk.FixedLenFeature([], sk.string)}), sk.ops.decode_raw("d", sk.int32)])
    )
    with pytest.raises(sk.InvalidRecordError, match="record 1") as e:
        list(ds)
    assert e.value.op == "decode_raw"


def test_unequal_shapes_in_batch():
    ds = sk.Dataset.range(4).map(lambda v: np.zeros(int(v) + 1)).batch(2)
    with pytest.raises(sk.InvalidArgumentError, match="equal shapes"):
        list(ds)
