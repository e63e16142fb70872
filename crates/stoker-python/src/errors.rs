//! Each engine error kind becomes its own Python exception class (defined in
//! `stoker/errors.py`), carrying the error's location as attributes.

use pyo3::exceptions::{PyOSError, PyRuntimeError};
use pyo3::prelude::*;
use stoker_core::Error;

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

fn make(py: Python<'_>, class: &str, message: String, attrs: &[(&str, Py<PyAny>)]) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let cls = py.import("stoker.errors")?.getattr(class)?;
        let inst = cls.call1((message.clone(),))?;
        for (k, v) in attrs {
            inst.setattr(*k, v.bind(py))?;
        }
        Ok(PyErr::from_value(inst))
    };
    build().unwrap_or_else(|e| e)
}

/// The Python exception for an engine error.
pub fn to_pyerr(py: Python<'_>, e: Error) -> PyErr {
    let msg = e.to_string();
    let obj = |v: Option<String>| {
        v.into_pyobject(py)
            .map(|b| b.unbind())
            .unwrap_or_else(|_| py.None())
    };
    let num = |v: Option<u64>| {
        v.into_pyobject(py)
            .map(|b| b.unbind())
            .unwrap_or_else(|_| py.None())
    };
    match e {
        Error::External(boxed) => match boxed.downcast::<PyErr>() {
            Ok(err) => *err,
            Err(other) => PyRuntimeError::new_err(other.to_string()),
        },
        Error::Io { path, source } => {
            PyOSError::new_err((errno_of(&source), source.to_string(), path))
        }
        Error::CorruptRecord {
            file,
            record,
            offset,
            ..
        } => make(
            py,
            "CorruptRecordError",
            msg,
            &[
                ("file", obj(Some(file))),
                ("record", num(Some(record))),
                ("offset", num(Some(offset))),
            ],
        ),
        Error::InvalidRecord(p) => make(
            py,
            "InvalidRecordError",
            msg,
            &[
                ("op", obj(Some(p.op))),
                ("file", obj(p.file)),
                ("record", num(p.record)),
                ("offset", num(p.offset)),
            ],
        ),
        Error::Schema { step, .. } => make(py, "SchemaError", msg, &[("step", obj(Some(step)))]),
        Error::InvalidArgument { op, .. } => {
            make(py, "InvalidArgumentError", msg, &[("op", obj(Some(op)))])
        }
        Error::WorkerPanic { step, .. } => {
            make(py, "WorkerPanicError", msg, &[("step", obj(Some(step)))])
        }
        Error::Spec(_) => make(py, "SpecError", msg, &[]),
        Error::Internal(_) => make(py, "InternalError", msg, &[]),
    }
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
