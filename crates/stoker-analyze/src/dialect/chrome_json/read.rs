//! Reader of Chrome-trace-style JSON (Kineto, TensorFlow timeline, the JSON that the TensorFlow
//! and JAX profilers export): the events are handed to a callback one at a time (found in the
//! byte stream by [`super::split`]), so memory does not grow with the file. Plain or gzipped
//! (sniffed), object form (`{"traceEvents": [...], ...}`) or bare array.

use std::path::Path;

use crate::error::{AnalyzeError, Result};

pub use super::raw::{as_f64, as_string, Args, Header, Id, Num, Raw, RawEvent};

/// Reads the trace at `path`, calling `on_event` for each event in file order.
pub fn read_events(path: &Path, mut on_event: impl FnMut(RawEvent<'_>)) -> Result<Header> {
    let reader = crate::dialect::open(path)?;
    let mut header = Header::default();
    super::split::split(reader, &mut header, &mut on_event).map_err(|e| AnalyzeError::Parse {
        path: path.to_path_buf(),
        line: e.line,
        column: e.column,
        message: e.message,
    })?;
    Ok(header)
}
