//! The timeline's switches for Python (`stoker.trace`, `STOKER_TRACE`), and the analyzer of
//! foreign traces (`stoker.analyze`).

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

/// Analyses a profiler trace (Kineto, TensorFlow timeline, Chrome JSON): the analysis as a
/// dict, with its text under `text`.
#[pyfunction]
pub fn analyze_trace<'py>(
    py: Python<'py>,
    path: std::path::PathBuf,
) -> PyResult<Bound<'py, pyo3::PyAny>> {
    let analysis = py
        .detach(|| stoker_analyze::analyze_path(&path))
        .map_err(|e| match e {
            stoker_analyze::AnalyzeError::Io { ref source, .. }
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                pyo3::exceptions::PyFileNotFoundError::new_err(e.to_string())
            }
            stoker_analyze::AnalyzeError::Io { .. } => PyOSError::new_err(e.to_string()),
            stoker_analyze::AnalyzeError::Parse { .. } => {
                pyo3::exceptions::PyValueError::new_err(e.to_string())
            }
        })?;
    let mut v = serde_json::to_value(&analysis)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
    v["text"] = serde_json::Value::String(analysis.to_text());
    crate::plan::json_to_py(py, &v)
}
