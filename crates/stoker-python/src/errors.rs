//! stoker's exception classes, made here when the extension is imported (so raising one never
//! depends on importing Python code), re-exported by `stoker/errors.py`. Each engine and
//! analyzer error kind has its class under `StokerError`, and carries where it came from as
//! attributes: `stage` (the pipeline stage) and `op` on every one, the file, record and offset
//! where they are known.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};
use stoker_core::Error;

/// A class: its name, the names of its bases (stoker's, else builtins), its attributes that
/// default to `None`, its docstring.
struct ClassSpec {
    name: &'static str,
    bases: &'static [&'static str],
    attrs: &'static [&'static str],
    doc: &'static str,
}

/// Every class, bases before the classes that derive from them.
const CLASSES: &[ClassSpec] = &[
    ClassSpec {
        name: "StokerError",
        bases: &["Exception"],
        attrs: &["stage", "op"],
        doc: "Base class of every error stoker raises. ``stage`` names the pipeline stage it \
              came from and ``op`` the op, where they are known (else None).",
    },
    ClassSpec {
        name: "CorruptRecordError",
        bases: &["StokerError", "ValueError"],
        attrs: &["file", "record", "offset"],
        doc: "A TFRecord's framing is damaged: bad CRC, truncated record, impossible length. \
              ``file``, ``record`` (index in the file, from 0) and ``offset`` (byte offset of \
              the record's header in the decompressed file) say where.",
    },
    ClassSpec {
        name: "InvalidRecordError",
        bases: &["StokerError", "ValueError"],
        attrs: &["file", "record", "offset"],
        doc: "A record's content is not what an op expected (not an Example, wrong feature \
              type, missing required feature, wrong length). ``op``, ``file``, ``record`` and \
              ``offset`` say where, when the record came from a file.",
    },
    ClassSpec {
        name: "SchemaError",
        bases: &["StokerError", "ValueError"],
        attrs: &["step"],
        doc: "The pipeline cannot work; raised when it is built. ``step`` names the step.",
    },
    ClassSpec {
        name: "InvalidArgumentError",
        bases: &["StokerError", "ValueError"],
        attrs: &[],
        doc: "A wrong argument, or data an op cannot handle at run time. The message names the \
              argument; ``op`` names the op where one is concerned.",
    },
    ClassSpec {
        name: "ArgumentTypeError",
        bases: &["InvalidArgumentError", "TypeError"],
        attrs: &[],
        doc: "An argument of the wrong type (also a ``TypeError``).",
    },
    ClassSpec {
        name: "WorkerPanicError",
        bases: &["StokerError", "RuntimeError"],
        attrs: &["step"],
        doc: "A worker thread panicked (a bug in stoker). ``step`` names the stage.",
    },
    ClassSpec {
        name: "SpecError",
        bases: &["StokerError", "ValueError"],
        attrs: &[],
        doc: "A pipeline spec file could not be read, or a pipeline cannot be saved as one.",
    },
    ClassSpec {
        name: "InternalError",
        bases: &["StokerError", "RuntimeError"],
        attrs: &[],
        doc: "An internal invariant does not hold (a bug in stoker).",
    },
    ClassSpec {
        name: "ResourceError",
        bases: &["StokerError", "RuntimeError"],
        attrs: &[],
        doc: "The system refused a resource stoker needs (a worker thread could not be \
              started). ``errno`` is the system's error number when it gave one.",
    },
    ClassSpec {
        name: "FileError",
        bases: &["StokerError", "OSError"],
        attrs: &[],
        doc: "A file could not be opened, read or written (an ``OSError``: ``errno``, \
              ``strerror`` and ``filename`` are set).",
    },
    ClassSpec {
        name: "MissingFileError",
        bases: &["FileError", "FileNotFoundError"],
        attrs: &[],
        doc: "A file or folder that does not exist (also a ``FileNotFoundError``).",
    },
    ClassSpec {
        name: "FilePermissionError",
        bases: &["FileError", "PermissionError"],
        attrs: &[],
        doc: "A file that may not be read or written (also a ``PermissionError``).",
    },
    ClassSpec {
        name: "TraceError",
        bases: &["StokerError", "ValueError"],
        attrs: &["file", "line", "column", "offset"],
        doc: "A profiler trace that cannot be read: ``file``, and ``line`` and ``column`` (JSON) \
              or ``offset`` (an XSpace's byte) say where.",
    },
];

static TYPES: PyOnceLock<Vec<Py<PyType>>> = PyOnceLock::new();

fn make_types(py: Python<'_>) -> PyResult<Vec<Py<PyType>>> {
    let builtins = py.import("builtins")?;
    let type_ = py.get_type::<PyType>();
    let mut made: Vec<Py<PyType>> = Vec::with_capacity(CLASSES.len());
    for spec in CLASSES {
        let mut bases = Vec::with_capacity(spec.bases.len());
        for base in spec.bases {
            match CLASSES.iter().position(|c| c.name == *base) {
                Some(i) => bases.push(made[i].clone_ref(py).into_any()),
                None => bases.push(builtins.getattr(*base)?.unbind()),
            }
        }
        let dict = PyDict::new(py);
        dict.set_item("__module__", "stoker.errors")?;
        dict.set_item("__doc__", spec.doc)?;
        for attr in spec.attrs {
            dict.set_item(*attr, py.None())?;
        }
        let cls = type_.call1((spec.name, PyTuple::new(py, bases)?, dict))?;
        made.push(cls.cast_into::<PyType>()?.unbind());
    }
    Ok(made)
}

/// Makes the classes and adds them to the extension module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let types = TYPES.get_or_try_init(py, || make_types(py))?;
    for (spec, cls) in CLASSES.iter().zip(types) {
        m.add(spec.name, cls.bind(py))?;
    }
    Ok(())
}

/// The class named `name`; made on import, so it is there.
fn class<'py>(py: Python<'py>, name: &str) -> Option<Bound<'py, PyType>> {
    let types = TYPES.get_or_try_init(py, || make_types(py)).ok()?;
    let i = CLASSES.iter().position(|c| c.name == name)?;
    Some(types[i].bind(py).clone())
}

/// Whether `e` is stoker's `InvalidArgumentError` (a wrong argument, `ArgumentTypeError`
/// among them) or `SchemaError`: raised while a pipeline is put together, it says the code
/// is wrong.
pub fn is_building_error(py: Python<'_>, e: &PyErr) -> bool {
    ["InvalidArgumentError", "SchemaError"]
        .iter()
        .filter_map(|name| class(py, name))
        .any(|cls| e.is_instance(py, &cls))
}

/// An exception of class `name` with `args` and `attrs` set. Should setting an attribute fail
/// (out of memory), the exception is still of that class, without it.
fn make(
    py: Python<'_>,
    name: &str,
    args: Bound<'_, PyTuple>,
    attrs: &[(&str, Py<PyAny>)],
) -> PyErr {
    let Some(cls) = class(py, name) else {
        return PyRuntimeError::new_err(format!("stoker's {name} class is missing"));
    };
    let build = || -> PyResult<PyErr> {
        let inst = cls.call1(args.clone())?;
        for (k, v) in attrs {
            inst.setattr(*k, v.bind(py))?;
        }
        Ok(PyErr::from_value(inst))
    };
    build().unwrap_or_else(|_| PyErr::from_type(cls.clone(), args.unbind()))
}

fn message(py: Python<'_>, msg: String) -> Bound<'_, PyTuple> {
    PyTuple::new(py, [msg]).unwrap_or_else(|_| PyTuple::empty(py))
}

fn obj(py: Python<'_>, v: Option<String>) -> Py<PyAny> {
    (v.into_pyobject(py))
        .map(|b| b.unbind())
        .unwrap_or_else(|_| py.None())
}

fn num(py: Python<'_>, v: Option<u64>) -> Py<PyAny> {
    (v.into_pyobject(py))
        .map(|b| b.unbind())
        .unwrap_or_else(|_| py.None())
}

fn errno_of(e: &std::io::Error) -> i32 {
    use std::io::ErrorKind::*;
    e.raw_os_error().unwrap_or(match e.kind() {
        NotFound => 2,
        PermissionDenied => 13,
        AlreadyExists => 17,
        InvalidInput => 22,
        _ => 5,
    })
}

/// An I/O error on `path`: `MissingFileError`, `FilePermissionError` or `FileError`, with
/// `errno`, `strerror` and `filename` as `OSError` has them.
pub fn file_error(py: Python<'_>, path: &str, source: &std::io::Error) -> PyErr {
    let class = match source.kind() {
        std::io::ErrorKind::NotFound => "MissingFileError",
        std::io::ErrorKind::PermissionDenied => "FilePermissionError",
        _ => "FileError",
    };
    // Rust writes "No such file or directory (os error 2)"; Python's errno is said apart.
    let text = source.to_string();
    let strerror = match source.raw_os_error() {
        Some(n) => text
            .strip_suffix(&format!(" (os error {n})"))
            .unwrap_or(&text)
            .to_string(),
        None => text,
    };
    let args = (errno_of(source), strerror, path)
        .into_pyobject(py)
        .unwrap_or_else(|_| PyTuple::empty(py));
    make(py, class, args, &[])
}

/// [`file_error`], taking the GIL.
pub fn file_error_at(path: &str, source: &std::io::Error) -> PyErr {
    Python::attach(|py| file_error(py, path, source))
}

/// `ResourceError`: `what` (`starting the restore`) failed for want of a resource.
pub fn resource(what: &str, source: std::io::Error) -> PyErr {
    Python::attach(|py| to_pyerr(py, Error::spawn(what, source)))
}

/// An engine error raised from the bindings' own code.
pub fn core_error(e: Error) -> PyErr {
    Python::attach(|py| to_pyerr(py, e))
}

/// `StokerError(message)`: a call the object's state does not allow.
pub fn stoker_error(text: impl Into<String>) -> PyErr {
    Python::attach(|py| make(py, "StokerError", message(py, text.into()), &[]))
}

/// `InvalidArgumentError(message)`.
pub fn invalid_argument(text: impl Into<String>) -> PyErr {
    Python::attach(|py| make(py, "InvalidArgumentError", message(py, text.into()), &[]))
}

/// `ArgumentTypeError(message)`: an argument of the wrong type.
pub fn argument_type(text: impl Into<String>) -> PyErr {
    Python::attach(|py| make(py, "ArgumentTypeError", message(py, text.into()), &[]))
}

/// `InternalError(message)`.
pub fn internal(text: impl Into<String>) -> PyErr {
    Python::attach(|py| make(py, "InternalError", message(py, text.into()), &[]))
}

/// The Python exception for an engine error, with the stage it came from.
pub fn to_pyerr(py: Python<'_>, e: Error) -> PyErr {
    let stage = e.stage().map(str::to_string);
    let e = e.into_kind();
    let msg = e.to_string();
    let mut attrs: Vec<(&str, Py<PyAny>)> = vec![("stage", obj(py, stage.clone()))];
    let (class, args) = match e {
        Error::External(boxed) => {
            return match boxed.downcast::<PyErr>() {
                // The user's own exception, unchanged but for a note of the stage it came from.
                Ok(err) => {
                    if let Some(stage) = stage {
                        let _ = (err.value(py))
                            .call_method1("add_note", (format!("in stoker stage '{stage}'"),));
                    }
                    *err
                }
                Err(other) => make(py, "StokerError", message(py, other.to_string()), &attrs),
            };
        }
        Error::Io { path, source } => {
            let err = file_error(py, &path, &source);
            let _ = err.value(py).setattr("stage", obj(py, stage));
            return err;
        }
        Error::Resource { what, source } => {
            attrs.push((
                "errno",
                (errno_of(&source))
                    .into_pyobject(py)
                    .map_or_else(|_| py.None(), |b| b.into_any().unbind()),
            ));
            ("ResourceError", message(py, format!("{what}: {source}")))
        }
        Error::CorruptRecord {
            file,
            record,
            offset,
            ..
        } => {
            attrs.extend([
                ("file", obj(py, Some(file))),
                ("record", num(py, Some(record))),
                ("offset", num(py, Some(offset))),
            ]);
            ("CorruptRecordError", message(py, msg))
        }
        Error::InvalidRecord(p) => {
            attrs.extend([
                ("op", obj(py, Some(p.op))),
                ("file", obj(py, p.file)),
                ("record", num(py, p.record)),
                ("offset", num(py, p.offset)),
            ]);
            ("InvalidRecordError", message(py, msg))
        }
        Error::Schema { step, .. } => {
            attrs.push(("step", obj(py, Some(step))));
            ("SchemaError", message(py, msg))
        }
        Error::InvalidArgument { op, .. } => {
            attrs.push(("op", obj(py, Some(op))));
            ("InvalidArgumentError", message(py, msg))
        }
        Error::WorkerPanic { step, .. } => {
            if stage.is_none() {
                attrs[0] = ("stage", obj(py, Some(step.clone())));
            }
            attrs.push(("step", obj(py, Some(step))));
            ("WorkerPanicError", message(py, msg))
        }
        Error::Spec(_) => ("SpecError", message(py, msg)),
        Error::Internal(_) => ("InternalError", message(py, msg)),
        _ => ("StokerError", message(py, msg)),
    };
    make(py, class, args, &attrs)
}

/// The Python exception for an analyzer error: `MissingFileError` / `FileError` for I/O,
/// `TraceError` (with `file` and `line` and `column`, or `offset`) for a trace it cannot read.
pub fn analyze_error(e: stoker_analyze::AnalyzeError) -> PyErr {
    use stoker_analyze::AnalyzeError as A;
    Python::attach(|py| {
        let msg = e.to_string();
        match e {
            A::Io { path, source } => file_error(py, &path.to_string_lossy(), &source),
            A::Parse {
                path, line, column, ..
            } => make(
                py,
                "TraceError",
                message(py, msg),
                &[
                    ("file", obj(py, Some(path.to_string_lossy().into_owned()))),
                    ("line", num(py, Some(line as u64))),
                    ("column", num(py, Some(column as u64))),
                ],
            ),
            A::Decode { path, offset, .. } => make(
                py,
                "TraceError",
                message(py, msg),
                &[
                    ("file", obj(py, Some(path.to_string_lossy().into_owned()))),
                    ("offset", num(py, Some(offset as u64))),
                ],
            ),
        }
    })
}

/// Wraps a Python exception so that it travels through the engine unchanged.
pub fn from_pyerr(e: PyErr) -> Error {
    Error::External(Box::new(e))
}

pub trait IntoPyResult<T> {
    fn py(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for Result<T, Error> {
    fn py(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_pyerr(py, e))
    }
}
