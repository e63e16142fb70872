//! The trace formats stoker reads ("dialects"), each read into the one model
//! ([`crate::model::Trace`]) that the analysis works on:
//! - [`chrome_json`]: Chrome trace JSON, as Kineto, TensorFlow's timeline and the trace viewer
//!   export of the TensorFlow and JAX profilers write it;
//! - [`xspace`]: the XSpace protobuf of the TensorFlow and JAX profilers;
//! - `xprof`: xprof's model of planes and lines, which the XSpace and the trace viewer JSON
//!   share.

pub mod chrome_json;
mod registry;
mod xprof;
pub mod xspace;

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use crate::error::{AnalyzeError, Result};
use crate::model::Trace;

pub use registry::{load, DIALECTS};

/// A trace format: how to tell a file is in it, and how to read such a file into the model.
///
/// A new dialect (such as the Nsight Systems SQLite export, `nsys_sqlite.rs`) is a module
/// beside these that implements:
/// - [`Dialect::by_name`]: whether a file's name says it is in this format (`.xplane.pb`);
/// - [`Dialect::by_content`]: whether a file's first bytes say so, for a file whose name says
///   nothing (a magic number, such as SQLite's `SQLite format 3`);
/// - [`Dialect::read`]: the file read into a [`Trace`], through `crate::build::Builder`
///   (which derives the steps, names the threads and sorts what the dialect hands it);
///
/// and registers with one line in [`DIALECTS`] (`registry.rs`), whose order is the order the
/// dialects are asked in.
pub trait Dialect: Sync {
    /// Whether the file's name says it is in this format.
    fn by_name(&self, name: &str) -> bool;
    /// Whether the file's first bytes (gunzipped; fewer where the file is shorter) say it is
    /// in this format, when no dialect's name matched.
    fn by_content(&self, head: &[u8]) -> bool;
    /// Reads the file at `path` into the model.
    fn read(&self, path: &Path) -> Result<Trace>;
}

/// Opens `path`, gunzipping when it is gzip (by magic bytes, whatever its name).
pub(crate) fn open(path: &Path) -> Result<Box<dyn Read>> {
    let file = File::open(path).map_err(|e| AnalyzeError::io(path, e))?;
    let mut buf = BufReader::with_capacity(1 << 20, file);
    let head = buf.fill_buf().map_err(|e| AnalyzeError::io(path, e))?;
    if head.starts_with(&[0x1f, 0x8b]) {
        Ok(Box::new(BufReader::with_capacity(
            1 << 20,
            flate2::bufread::MultiGzDecoder::new(buf),
        )))
    } else {
        Ok(Box::new(buf))
    }
}
