//! The timeline's switches for Python (`stoker.trace`, `STOKER_TRACE`), and the analyzer of
//! foreign traces (`stoker.analyze`).

use crate::errors::{analyze_error, file_error_at};
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
        .map_err(|e| file_error_at(&path.to_string_lossy(), &e))
}

/// Analyses a profiler trace (Kineto, TensorFlow timeline, Chrome JSON): the analysis as a
/// dict, with its text under `text`; writes the HTML report to `html` when given.
#[pyfunction]
#[pyo3(signature = (path, html=None))]
pub fn analyze_trace<'py>(
    py: Python<'py>,
    path: std::path::PathBuf,
    html: Option<std::path::PathBuf>,
) -> PyResult<Bound<'py, pyo3::PyAny>> {
    let analysis = py.detach(|| -> PyResult<_> {
        let trace = stoker_analyze::load(&path).map_err(analyze_error)?;
        let analysis = stoker_analyze::analysis::analyze(&trace);
        if let Some(out) = &html {
            std::fs::write(out, stoker_analyze::report::render(&trace, &analysis))
                .map_err(|e| file_error_at(&out.to_string_lossy(), &e))?;
        }
        Ok(analysis)
    })?;
    let mut v =
        serde_json::to_value(&analysis).map_err(|e| crate::errors::internal(e.to_string()))?;
    v["text"] = serde_json::Value::String(analysis.to_text());
    crate::plan::json_to_py(py, &v)
}

/// Two traces side by side (`stoker analyze --compare`): the comparison as a dict, with its
/// text; with `html`, its report written there.
#[pyfunction]
#[pyo3(signature = (before, after, html=None))]
pub fn compare_traces<'py>(
    py: Python<'py>,
    before: std::path::PathBuf,
    after: std::path::PathBuf,
    html: Option<std::path::PathBuf>,
) -> PyResult<Bound<'py, pyo3::PyAny>> {
    let c = py.detach(|| -> PyResult<_> {
        let load = |p: &std::path::Path| -> PyResult<_> {
            let trace = stoker_analyze::load(p).map_err(analyze_error)?;
            Ok(stoker_analyze::analysis::analyze(&trace))
        };
        let c = stoker_analyze::compare::Comparison::new(&load(&before)?, &load(&after)?);
        if let Some(out) = &html {
            std::fs::write(out, c.to_html())
                .map_err(|e| file_error_at(&out.to_string_lossy(), &e))?;
        }
        Ok(c)
    })?;
    let mut v = serde_json::to_value(&c).map_err(|e| crate::errors::internal(e.to_string()))?;
    v["text"] = serde_json::Value::String(c.to_text());
    crate::plan::json_to_py(py, &v)
}
