"""CsvDataset and ops.decode_csv against tf.data (tests/golden/text/*.csv and
csv_expected.json, made by make_csv_golden.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import stoker as sk


def plain(v):
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, np.ndarray):
        return v.item()
    return v


def rows(ds: sk.Dataset) -> list:
    return [[plain(x) for x in r] for r in ds]


def test_csv_dataset_equals_tf(golden):
    want = json.loads((golden / "csv_expected.json").read_text())
    data, pipes = str(golden / "text" / "data.csv"), str(golden / "text" / "pipes.csv.gz")
    all_cols = sk.CsvDataset(data, [np.int64, "", 0.0, np.float64(-1.0)], header=True, na_value="NA")
    assert rows(all_cols) == want["all"]
    assert [a.dtype for a in next(iter(all_cols))[::2]] == [np.int64, np.float32]
    assert rows(sk.CsvDataset(data, [0.0, 5], header=True, select_cols=[2, 3], na_value="NA")) == want["select"]
    assert rows(sk.CsvDataset(data, [np.int64(0), "?"], header=True, exclude_cols=[2, 3])) == want["exclude"]
    assert rows(sk.CsvDataset(pipes, ["", 0, "-"], compression_type="GZIP", field_delim="|")) == want["pipes"]
    literal = sk.CsvDataset(pipes, ["", 0, "-"], compression_type="GZIP", field_delim="|", use_quote_delim=False,
                            select_cols=[0, 1, 2])
    assert rows(literal) == want["literal_quotes"]
    # decode_csv on a batch of records, as tf.io.decode_csv.
    lines = sk.Dataset.from_tensor_slices(np.array([b"1,a", b",b", b"3,"], dtype=object)).batch(3)
    (batch,) = list(lines.map(sk.ops.decode_csv("value", [7, "z"], names=["n", "s"])))
    assert [batch["n"].tolist(), [plain(s) for s in batch["s"]]] == want["decode_csv_batch"]


def test_bad_fields_name_the_file_line_and_column(golden):
    want = json.loads((golden / "csv_expected.json").read_text())
    data = str(golden / "text" / "data.csv")
    assert want["required_error"] == "InvalidArgumentError"
    with pytest.raises(sk.InvalidRecordError, match=r"data.csv.*line 3: column 3 \('2'\): the field is empty"):
        list(sk.CsvDataset(data, [np.int64, "", np.float32, 0.0], header=True, na_value="NA"))
    with pytest.raises(sk.InvalidRecordError, match=r"line 1: column 1 \('0'\): \"id\" is not a valid int32") as e:
        list(sk.CsvDataset(data, [0, "", 0.0, 0.0]))
    assert e.value.file == data and e.value.record == 0
    with pytest.raises(sk.InvalidRecordError, match="expected 3 fields, the record has 4"):
        list(sk.CsvDataset(data, [0, "", 0.0], header=True))
    # Under the skip policy a bad record is counted and skipped: the header, "NA" (no
    # na_value here) and an id beyond int32.
    ok = sk.CsvDataset(data, [0, "", 0.0, 0.0]).ignore_errors()
    assert [r[0] for r in rows(ok)] == [1, 3]
    (stage,) = [s for s in ok.stats() if s["kind"] == "map"]
    assert stage["skipped"] == 3 and "line 5" in stage["last_skip_reason"]
    batched = sk.TextLineDataset(data).batch(2).map(sk.ops.decode_csv("line", [0, "", 0.0, 0.0])).ignore_errors()
    # Batches short of their bad records are refilled (as for parse_example).
    assert [b["0"].tolist() for b in batched] == [[1, 3]]
    for bad, match in (([True], "bool"), ([object()], "default value or a dtype"), ([np.uint8], "CSV columns")):
        with pytest.raises(sk.InvalidArgumentError, match=match):
            sk.ops.decode_csv("line", bad)
    with pytest.raises(sk.InvalidArgumentError, match="field_delim"):
        sk.ops.decode_csv("line", [0], field_delim="||")
    with pytest.raises(sk.InvalidArgumentError, match="not both"):
        sk.CsvDataset(data, [0], select_cols=[0], exclude_cols=[1])


def test_csv_pipeline_saves_and_loads(tmp_path, golden):
    ds = sk.TextLineDataset(str(golden / "text" / "data.csv")).skip(1).map(
        sk.ops.decode_csv("line", [np.int64(0), "", 0.0, 0.0], names=["id", "name", "score", "weight"], na_value="NA")
    )
    ds.save_spec(tmp_path / "csv.toml")
    loaded = list(sk.Dataset.load_spec(tmp_path / "csv.toml"))
    assert [int(e["id"]) for e in loaded] == [int(e["id"]) for e in ds] == [1, 2, 3, 40000000000]


def test_ops_with_other_delimiters_on_one_thread_each_parse_their_own():
    # A thread reuses its last CSV reader when the delimiter and quoting match. Two ops with
    # different delimiters take turns on the same thread, element by element, and the first
    # element leaves its reader inside a quote that never closes: each must parse as if alone.
    ds = sk.Dataset.from_tensor_slices({
        "a": np.array([b'"x,1', b"y,2", b'"z"",w",3'], dtype=object),
        "b": np.array([b"p;7", b"q;8", b"r;9"], dtype=object),
    })
    ds = ds.map(sk.ops.decode_csv("a", ["", 0], names=["a0", "a1"]))
    ds = ds.map(sk.ops.decode_csv("b", ["", 0], names=["b0", "b1"], field_delim=";")).ignore_errors()
    got = [tuple(plain(e[k]) for k in ("a0", "a1", "b0", "b1")) for e in ds]
    assert got == [("y", 2, "q", 8), ('z",w', 3, "r", 9)]


QUOTED = (
    b'id,text,n\r\n'
    b'1,"two\nlines",10\n'
    b'2,"crlf\r\ninside ""quoted""",20\r\n'
    b'3,plain,30\r'
    b'4,"a,b",40\n'
    b'5,"",50\n'
)


@pytest.mark.parametrize("compression", [None, "GZIP"])
@pytest.mark.parametrize("header", [False, True])
def test_a_line_break_inside_quotes_is_part_of_the_field_as_in_tf(tmp_path, compression, header):
    """tf.data's CsvDataset reads records, not lines: a quoted field may hold line breaks
    (`\\n`, `\\r\\n`, kept as they are), and `\\r\\n` or `\\r` alone ends a record."""
    tf = pytest.importorskip("tensorflow")
    import gzip

    data = QUOTED if header else QUOTED.split(b"\r\n", 1)[1]
    f = tmp_path / "q.csv"
    f.write_bytes(gzip.compress(data) if compression else data)
    tf_ds = tf.data.experimental.CsvDataset(str(f), [0, "", 0], header=header, compression_type=compression or "")
    want = [[plain(x.numpy()) for x in r] for r in tf_ds]
    assert len(want) == 5 and want[1][1] == 'crlf\r\ninside "quoted"'
    got = rows(sk.CsvDataset(str(f), [0, "", 0], header=header, compression_type=compression))
    assert got == want


def test_quoting_off_and_bad_quotes_as_in_tf(tmp_path):
    tf = pytest.importorskip("tensorflow")
    f = tmp_path / "q.csv"
    f.write_bytes(b'a,"x\ny",1\n')
    # Without quote handling a quote is a byte like another, and every line break ends a record.
    tf_rows = []
    for r in tf.data.experimental.CsvDataset(str(f), ["", "-"], use_quote_delim=False):
        tf_rows.append([plain(x.numpy()) for x in r])
    assert tf_rows == [["a", '"x'], ['y"', "1"]]
    assert rows(sk.CsvDataset(str(f), ["", "-"], use_quote_delim=False)) == tf_rows
    # A file that ends inside a quoted field: an error in both (skipped under ignore_errors).
    f.write_bytes(b'a,1\nb,"open\nc,3\n')
    with pytest.raises(tf.errors.InvalidArgumentError):
        list(tf.data.experimental.CsvDataset(str(f), ["", 0]))
    with pytest.raises(sk.InvalidRecordError, match=r"q\.csv.*line 2.*inside the quoted field"):
        list(sk.CsvDataset(str(f), ["", 0]))
    skipped = sk.CsvDataset(str(f), ["", 0]).ignore_errors()
    assert rows(skipped) == [["a", 1]]
    # Where the open record would end cannot be known: the rest of the file is counted lost.
    assert sum(s["rest_lost"] for s in skipped.stats()) == 1


def test_a_csv_error_names_the_line_its_record_starts_on(tmp_path):
    f = tmp_path / "l.csv"
    f.write_bytes(b'1,"a\nb"\n2,"c\nd\ne"\nx,"f"\n')
    with pytest.raises(sk.InvalidRecordError, match=r"line 6: column 1") as e:
        list(sk.CsvDataset(str(f), [0, ""]))
    assert e.value.record == 5


@pytest.mark.parametrize(
    "data",
    [
        b'1,y"6mo\n2,"ab"c\n5,"q"\n7,ok\n',
        b'1,y"6mo\n7,ok\n',
        b'2,"ab"c\nx\n5,"q"\n7,ok\n',
        b'3,"a""b"\n4,"c" \n5,d\n',
    ],
)
def test_quotes_tensorflow_refuses_are_errors_not_other_records(tmp_path, data):
    tf = pytest.importorskip("tensorflow")
    # A quote in an unquoted field, text after a closing quote: TensorFlow refuses the record;
    # the CSV reader underneath would take it (`"ab"c` as `abc`) and drop what follows a line
    # break it leaves open.
    f = tmp_path / "q.csv"
    f.write_bytes(data)
    want = [(int(a.numpy()), b.numpy()) for a, b in tf.data.experimental.CsvDataset(
        str(f), [tf.int64, tf.string]).ignore_errors()]
    ds = sk.CsvDataset(str(f), [sk.int64, sk.string]).ignore_errors()
    assert [(int(a), bytes(b)) for a, b in ds] == want
    lost = len(data.decode().strip().split("\n")) - len(want)
    assert sum(s["skipped"] + s["rest_lost"] for s in ds.stats()) >= (1 if lost else 0)


@pytest.mark.parametrize("delim", [",", "\t", ";"])
@pytest.mark.parametrize("quote", [True, False])
def test_decode_csv_refuses_what_tensorflow_refuses(delim, quote):
    tf = pytest.importorskip("tensorflow")
    records = [
        b'1,y"6mo', b'2,"ab"c', b'3,"a""b"', b'4,"x,y"', b"5,plain", b"6,two\nlines", b'7,"q\nr"',
        b"8,ends\r", b'9,""',
    ]
    records = [r.replace(b",", delim.encode()) for r in records]
    want = []
    for r in records:
        try:
            a, b = tf.io.decode_csv(r, [0, ""], field_delim=delim, use_quote_delim=quote)
            want.append((int(a.numpy()), b.numpy()))
        except tf.errors.InvalidArgumentError:
            want.append(None)
    got = []
    for r in records:
        ds = sk.Dataset.from_tensor_slices(np.array([r], dtype=object)).map(
            sk.ops.decode_csv("value", [0, ""], field_delim=delim, use_quote_delim=quote))
        try:
            (e,) = list(ds)
            got.append((int(e["0"]), bytes(e["1"])))
        except sk.InvalidRecordError:
            got.append(None)
    assert got == want


@pytest.mark.parametrize("compression", [None, "GZIP", "ZLIB"])
def test_an_empty_file_with_a_header_to_skip_is_an_error_as_in_tf(tmp_path, compression):
    """tf.data's CsvDataset(header=True) cannot read an empty file's header and raises; a
    file of only a header gives no records, in both."""
    import gzip
    import zlib

    tf = pytest.importorskip("tensorflow")
    pack = {None: lambda b: b, "GZIP": gzip.compress, "ZLIB": zlib.compress}[compression]
    empty, header_only = tmp_path / "empty.csv", tmp_path / "header.csv"
    empty.write_bytes(pack(b""))
    header_only.write_bytes(pack(b"a,b\n"))
    with pytest.raises(tf.errors.InvalidArgumentError, match="header"):
        list(tf.data.experimental.CsvDataset(str(empty), [0, 0], compression_type=compression, header=True))
    with pytest.raises(sk.InvalidArgumentError, match=r"empty\.csv is empty"):
        list(sk.data.experimental.CsvDataset(str(empty), [0, 0], compression_type=compression, header=True))
    for lib in (tf.data, sk.data):
        read = lib.experimental.CsvDataset(str(header_only), [0, 0], compression_type=compression, header=True)
        assert list(read) == []
        assert list(lib.experimental.CsvDataset(str(empty), [0, 0], compression_type=compression)) == []


def test_defaults_equal_to_a_dtype_s_enum_value_are_that_dtype_as_in_tf(tmp_path):
    """tf.data's CSV readers test each default with `in (tf.float32, ...)`, which takes 1
    (also 1.0 and True) for float32, 2 for float64, 3 for int32, 9 for int64, and the
    strings naming them ("int32", "float", "double"): required columns of those dtypes, not
    defaults."""
    tf = pytest.importorskip("tensorflow")
    full, gaps = tmp_path / "full.csv", tmp_path / "gaps.csv"
    full.write_text("5,6,7,8\n")
    gaps.write_text(",6,7,8\n")
    for defaults in ([1, 3, 2, 9], [1.0, True, 0, 5], [np.int64(3), 0.5, 4, 9.0], ["int32", "float", "x", "double"]):
        ours = [
            tuple((np.asarray(a).dtype.name, np.asarray(a).item()) for a in r)
            for r in sk.data.experimental.CsvDataset(str(full), defaults)
        ]
        theirs = [
            tuple((np.asarray(a).dtype.name, np.asarray(a).item()) for a in r)
            for r in tf.data.experimental.CsvDataset(str(full), defaults).as_numpy_iterator()
        ]
        assert ours == theirs, defaults
        if defaults[0] in (1, 2, 3, 9, "int32"):  # a required first column
            with pytest.raises(tf.errors.InvalidArgumentError, match="required"):
                list(tf.data.experimental.CsvDataset(str(gaps), defaults))
            with pytest.raises(sk.InvalidRecordError, match="no default"):
                list(sk.data.experimental.CsvDataset(str(gaps), defaults))
