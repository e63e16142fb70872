"""TextLineDataset and FixedLengthRecordDataset against tf.data (tests/golden/text/ and
text_expected.json, made by make_text_golden.py)."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
import stoker as sk


@pytest.fixture(scope="module")
def want(golden):
    return json.loads((golden / "text_expected.json").read_text())


def hexes(ds: sk.Dataset) -> list[str]:
    return [bytes(v).hex() for v in ds]


def test_text_lines_equal_tf(golden, want):
    text = golden / "text"
    a, b = str(text / "a.txt"), str(text / "b.txt")
    assert hexes(sk.TextLineDataset(a)) == want["lines/a"]
    assert hexes(sk.TextLineDataset(str(text / "a.txt.gz"), compression_type="GZIP")) == want["lines/a.gz"]
    assert hexes(sk.TextLineDataset(str(text / "a.txt.zz"), compression_type="ZLIB")) == want["lines/a.zz"]
    assert hexes(sk.TextLineDataset(str(text / "empty.txt"))) == want["lines/empty"] == []
    assert hexes(sk.TextLineDataset([a, b])) == want["lines/a+b"]
    for threads in (1, 2):
        ds = sk.TextLineDataset([a, b], num_parallel_reads=2).with_options(threads=threads)
        assert hexes(ds) == want["lines/a+b parallel 2"]
    # A dataset of file names, as tf.data takes.
    names = sk.Dataset.from_tensor_slices(np.array([a, b]))
    assert hexes(sk.TextLineDataset(names)) == want["lines/a+b"]
    assert sk.TextLineDataset(a).element_spec.dtype == "string"


def test_fixed_length_records_equal_tf(golden, want):
    text = golden / "text"
    ds = sk.FixedLengthRecordDataset(str(text / "records.bin"), 8, header_bytes=3, footer_bytes=2)
    assert hexes(ds) == want["records"]
    gz = sk.FixedLengthRecordDataset(str(text / "records.bin.gz"), 8, 3, 2, compression_type="GZIP")
    assert hexes(gz) == want["records.gz"]
    # Numbers from the records, as with tf.io.decode_raw.
    first = next(iter(ds.map(sk.ops.decode_raw("record", sk.uint8))))
    np.testing.assert_array_equal(first, np.arange(8))
    assert want["ragged_error"] == "InvalidArgumentError"
    with pytest.raises(sk.InvalidArgumentError, match=r"ragged.bin.*not a whole number of 8-byte records"):
        list(sk.FixedLengthRecordDataset(str(text / "ragged.bin"), 8, 3, 2))


def test_restores_mid_file_plain_and_compressed(tmp_path):
    lines = [f"line {i}" * (i % 5) for i in range(300)]
    plain = tmp_path / "x.txt"
    plain.write_text("\n".join(lines))
    packed = tmp_path / "x.txt.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    for ds in (
        sk.TextLineDataset([str(plain), str(plain)], num_parallel_reads=2),
        sk.TextLineDataset(str(packed), compression_type="GZIP"),
        sk.FixedLengthRecordDataset(str(plain), 7, header_bytes=3, footer_bytes=(plain.stat().st_size - 3) % 7),
    ):
        full = hexes(ds)
        it = ds.iterator()
        head = [bytes(next(it)).hex() for _ in range(123)]
        rest = hexes_of(ds.iterator(state=it.state()))
        assert head + rest == full


def hexes_of(it) -> list[str]:
    return [bytes(v).hex() for v in it]


def test_errors_name_the_file_and_argument(tmp_path):
    with pytest.raises(FileNotFoundError):
        sk.TextLineDataset(str(tmp_path / "missing.txt"))
    damaged = tmp_path / "d.txt.gz"
    data = gzip.compress(b"a\nb\n" * 10_000)
    damaged.write_bytes(data[: len(data) // 2])
    # A compressed stream cut short: a located CorruptRecordError, as for TFRecord files.
    truncated = (
        r"d.txt.gz, record \d+ at byte offset \d+: line \d+: "
        r"the compressed stream is damaged: the file ends inside the GZIP stream"
    )
    with pytest.raises(sk.CorruptRecordError, match=truncated) as e:
        list(sk.TextLineDataset(str(damaged), compression_type="GZIP"))
    assert e.value.file == str(damaged) and e.value.offset == 2 * e.value.record
    with pytest.raises(sk.InvalidArgumentError, match="compression_type"):
        sk.TextLineDataset(str(damaged), compression_type="BZ2")
    with pytest.raises(sk.InvalidArgumentError, match="record_bytes"):
        sk.FixedLengthRecordDataset(str(damaged), 0)
    with pytest.raises(sk.InvalidArgumentError, match="header_bytes"):
        sk.FixedLengthRecordDataset(str(damaged), 4, header_bytes=-1)


def test_text_sources_save_and_load(tmp_path, golden):
    ds = sk.TextLineDataset(str(golden / "text" / "a.txt"))
    ds.save_spec(tmp_path / "t.json")
    assert hexes(sk.Dataset.load_spec(tmp_path / "t.json")) == hexes(ds)
    fx = sk.FixedLengthRecordDataset(str(golden / "text" / "records.bin"), 8, 3, 2)
    fx.save_spec(tmp_path / "f.toml")
    assert hexes(sk.Dataset.load_spec(tmp_path / "f.toml")) == hexes(fx)


def test_file_names_may_come_as_a_string_tensor_as_in_tf_data(tmp_path):
    tf = pytest.importorskip("tensorflow")
    files = [tmp_path / "a.txt", tmp_path / "b.txt"]
    files[0].write_text("x\ny\n")
    files[1].write_text("z\n")
    names = tf.constant([str(f) for f in files])
    want = list(tf.data.TextLineDataset(names).as_numpy_iterator())
    assert list(sk.data.TextLineDataset(names)) == want == [b"x", b"y", b"z"]
    assert list(sk.data.TextLineDataset(names[1])) == [b"z"]
