//! `stoker._stoker.Iterator`: hands elements to Python.
//!
//! The pipeline runs on a driver thread; `__next__` waits for it with the GIL released, in
//! short slices, so that Ctrl-C (or any signal handler) interrupts a blocked `next()`.

use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyTuple;
use stoker_core::element::Names;
use stoker_core::exec::prefetch::{Poll, Prefetch};

use crate::errors::to_pyerr;
use crate::py_ops::element_to_py;

#[pyclass(name = "Iterator", module = "stoker._stoker")]
pub struct PyIter {
    driver: Option<Prefetch>,
    names: Option<(Names, Py<PyTuple>)>,
}

impl PyIter {
    pub fn new(driver: Prefetch) -> PyIter {
        PyIter {
            driver: Some(driver),
            names: None,
        }
    }
}

#[pymethods]
impl PyIter {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// `(names, arrays)` of the next element; `None` at the end.
    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        loop {
            let Some(driver) = self.driver.as_mut() else {
                return Ok(None);
            };
            match py.detach(|| driver.poll(Duration::from_millis(50))) {
                Poll::Pending => py.check_signals()?,
                Poll::Ready(Ok(Some(e))) => {
                    return element_to_py(py, &e, &mut self.names).map(Some)
                }
                Poll::Ready(Ok(None)) => {
                    self.close(py);
                    return Ok(None);
                }
                Poll::Ready(Err(e)) => {
                    self.close(py);
                    return Err(to_pyerr(py, e));
                }
            }
        }
    }

    /// Stops the pipeline now and joins its threads.
    fn close(&mut self, py: Python<'_>) {
        if let Some(d) = self.driver.take() {
            py.detach(move || drop(d));
        }
    }
}

impl Drop for PyIter {
    fn drop(&mut self) {
        if let Some(d) = self.driver.take() {
            // Joining the pipeline's threads must not hold the GIL: a worker may be waiting
            // for it to run a Python function.
            Python::attach(|py| py.detach(move || drop(d)));
        }
    }
}
