"""One error hierarchy: every error stoker raises is a ``stoker.errors.StokerError`` (the
analyzer's too), made by the extension so that raising one needs no Python module, with the
stage and op it came from."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import stoker as sk
import stoker._stoker as native
from stoker import errors

from .conftest import write_examples

PARSE = sk.ops.parse_example({"s": sk.FixedLenFeature([], sk.int64)})


def damaged(tmp_path):
    f = write_examples(tmp_path / "x.tfrecord", [1, 2, 3, 4, 5])
    data = bytearray(open(f, "rb").read())
    data[2 * (len(data) // 5) + 13] ^= 0xFF
    open(f, "wb").write(bytes(data))
    return f


def test_every_class_is_a_stoker_error_made_by_the_extension():
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, errors.StokerError), name
        assert cls is getattr(native, name), name
        assert cls.__module__ == "stoker.errors" and cls.__doc__, name
        assert getattr(sk, name) is cls, name
    # The built-in class each also is, for code that catches those.
    assert issubclass(errors.CorruptRecordError, ValueError)
    assert issubclass(errors.ArgumentTypeError, TypeError)
    assert issubclass(errors.ArgumentTypeError, errors.InvalidArgumentError)
    assert issubclass(errors.MissingFileError, FileNotFoundError)
    assert issubclass(errors.FilePermissionError, PermissionError)
    assert issubclass(errors.ResourceError, RuntimeError)
    assert not issubclass(errors.ResourceError, OSError)
    assert issubclass(errors.TraceError, ValueError)


def test_engine_errors_carry_their_stage(tmp_path):
    f = damaged(tmp_path)
    with pytest.raises(errors.CorruptRecordError) as e:
        list(sk.TFRecordDataset(f).map(PARSE).batch(2))
    # Made by the reader: its stage, not the map or the batch after it.
    assert e.value.stage is not None and e.value.stage.startswith("tfrecord"), e.value.stage
    assert (e.value.file, e.value.record) == (f, 2)
    assert e.value.op is None

    bad = write_examples(tmp_path / "y.tfrecord", [1, 2])
    with pytest.raises(errors.InvalidRecordError) as e:
        list(sk.TFRecordDataset(bad).map(sk.ops.parse_example({"s": sk.FixedLenFeature([], sk.float32)})))
    assert e.value.op == "parse_example"
    assert e.value.stage is not None and e.value.stage.startswith("map"), e.value.stage


def test_user_exceptions_come_back_unchanged_with_a_note_of_their_stage():
    def boom(x):
        raise KeyError("mine")

    with pytest.raises(KeyError) as e:
        list(sk.Dataset.range(3).map(boom))
    assert not isinstance(e.value, errors.StokerError)
    assert any("in stoker stage 'map" in n for n in e.value.__notes__), e.value.__notes__


def test_files_that_are_not_there(tmp_path):
    with pytest.raises(errors.MissingFileError) as e:
        list(sk.TFRecordDataset(str(tmp_path / "none.tfrecord")))
    assert isinstance(e.value, FileNotFoundError)
    assert e.value.errno == 2 and e.value.filename == str(tmp_path / "none.tfrecord")
    assert e.value.strerror == "No such file or directory"
    with pytest.raises(errors.MissingFileError) as e:
        sk.analyze(tmp_path / "none.pt.trace.json")
    assert e.value.filename == str(tmp_path / "none.pt.trace.json")


def test_unreadable_traces_are_trace_errors(tmp_path):
    j = tmp_path / "bad.json"
    j.write_text('{"traceEvents": [\n{"ph": "X", "ts": }]}')
    with pytest.raises(errors.TraceError) as e:
        sk.analyze(j)
    assert (e.value.file, e.value.line, e.value.column) == (str(j), 2, 19)  # the "}" where a number should be
    x = tmp_path / "bad.xplane.pb"
    x.write_bytes(b"\x0a\x05\x12\x09abc")  # a plane whose name runs past the end
    with pytest.raises(errors.TraceError) as e:
        sk.analyze(x)
    assert e.value.file == str(x) and e.value.offset is not None and e.value.line is None


def test_wrong_argument_types_are_argument_type_errors():
    with pytest.raises(errors.ArgumentTypeError):
        sk.Dataset.range(3).map(42)
    with pytest.raises(TypeError):
        sk.Dataset.range("three")


def test_raising_needs_no_python_module(tmp_path):
    """With stoker.errors gone from the interpreter and unimportable, an engine error is still
    raised as its own class (the extension holds the classes), not as an ImportError."""
    f = damaged(tmp_path)
    code = textwrap.dedent(f"""
        import sys
        import stoker as sk
        import stoker._stoker as native
        PARSE = sk.ops.parse_example({{"s": sk.FixedLenFeature([], sk.int64)}})
        ds = sk.TFRecordDataset({str(f)!r}).map(PARSE)
        del sys.modules["stoker.errors"]
        sys.modules["stoker.errors"] = None  # importing it now fails
        try:
            list(ds)
        except native.CorruptRecordError as e:
            print("ok", e.record)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "ok 2", out.stderr
