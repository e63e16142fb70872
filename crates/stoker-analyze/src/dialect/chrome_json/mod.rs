//! Chrome trace JSON, as the PyTorch profiler (Kineto), TensorFlow's timeline and the trace
//! viewer export of the TensorFlow and JAX profilers write it.

mod event;
pub(crate) mod raw;
pub mod read;
mod reader;
pub mod split;
mod tf_timeline;
mod trace_viewer;

use std::path::Path;

use crate::error::Result;
use crate::model::Trace;

/// Chrome trace JSON (`.json`, `.json.gz`).
pub struct ChromeJson;

impl super::Dialect for ChromeJson {
    fn by_name(&self, name: &str) -> bool {
        name.ends_with(".json") || name.ends_with(".json.gz")
    }

    /// JSON starts with an object or an array, after white space.
    fn by_content(&self, head: &[u8]) -> bool {
        (head.iter())
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|b| matches!(b, b'{' | b'['))
    }

    fn read(&self, path: &Path) -> Result<Trace> {
        let mut r = reader::JsonReader::default();
        // Room for the host spans the file may hold, so that millions of them are not copied
        // as the table grows (room not written to costs no memory): a JSON event takes
        // hundreds of bytes.
        let size = std::fs::metadata(path).map_or(0, |m| m.len());
        r.b.trace
            .host_held
            .reserve(((size / 400) as usize).min(1 << 28));
        let header = read::read_events(path, |e| r.event(e))?;
        let mut trace = r.finish();
        trace.header = header;
        trace.path = path.display().to_string();
        Ok(trace)
    }
}
