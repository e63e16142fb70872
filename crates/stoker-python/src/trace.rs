//! The timeline's switches for Python (`stoker.trace`, `STOKER_TRACE`).

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;

/// Starts recording spans (dropping an earlier trace's).
#[pyfunction]
pub fn trace_start() {
    stoker_core::trace::start();
}

/// Stops recording.
#[pyfunction]
pub fn trace_stop() {
    stoker_core::trace::stop();
}

/// Writes what was recorded as Chrome Trace Event JSON.
#[pyfunction]
pub fn trace_write(py: Python<'_>, path: std::path::PathBuf) -> PyResult<()> {
    py.detach(|| stoker_core::trace::write(&path))
        .map_err(|e| PyOSError::new_err(format!("writing the trace {}: {e}", path.display())))
}
