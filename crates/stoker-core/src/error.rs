//! The one error type of the engine. Every kind maps to its own Python exception class.

use std::io;

use crate::tensor::Origin;

/// What went wrong, and where.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },

    /// A record's framing is broken: bad CRC, truncated, impossible length.
    #[error("corrupt record in {file}, record {record} at byte offset {offset}: {reason}")]
    CorruptRecord {
        file: String,
        record: u64,
        offset: u64,
        reason: String,
    },

    /// A record's content does not parse as expected (bad protobuf, wrong feature type, ...).
    #[error("{}: {}: {}", .0.op, .0.location, .0.reason)]
    InvalidRecord(Box<RecordProblem>),

    /// A pipeline that cannot work, found when it is built.
    #[error("pipeline step '{step}': {message}")]
    Schema { step: String, message: String },

    /// An op got data it cannot handle at run time.
    #[error("{op}: {message}")]
    InvalidArgument { op: String, message: String },

    /// A worker thread panicked; the panic message and the stage are kept.
    #[error("worker thread of '{step}' panicked: {message}")]
    WorkerPanic { step: String, message: String },

    /// A spec file could not be read or written.
    #[error("spec: {0}")]
    Spec(String),

    /// An error raised by user code (e.g. a Python function), carried through unchanged.
    #[error("{0}")]
    External(Box<dyn std::error::Error + Send + Sync>),

    /// A bug in stoker: an internal invariant does not hold.
    #[error("internal error: {0}")]
    Internal(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What is wrong with one record's content, and where the record came from.
#[derive(Debug)]
pub struct RecordProblem {
    pub op: String,
    /// File, record and byte offset when known, otherwise the element's place in its input.
    pub location: String,
    pub reason: String,
    pub file: Option<String>,
    pub record: Option<u64>,
    pub offset: Option<u64>,
}

impl Error {
    pub fn io(path: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    pub fn schema(step: impl Into<String>, message: impl Into<String>) -> Error {
        Error::Schema {
            step: step.into(),
            message: message.into(),
        }
    }

    pub fn invalid(op: impl Into<String>, message: impl Into<String>) -> Error {
        Error::InvalidArgument {
            op: op.into(),
            message: message.into(),
        }
    }

    /// Op `op` cannot use value `index` of its input, which came from `origin` if known.
    pub fn invalid_record(
        op: &str,
        origin: Option<&Origin>,
        index: usize,
        reason: String,
    ) -> Error {
        Error::InvalidRecord(Box::new(RecordProblem {
            op: op.to_string(),
            location: origin
                .map_or_else(|| format!("value {index} of the input"), |o| o.to_string()),
            reason,
            file: origin.map(|o| o.file.to_string()),
            record: origin.map(|o| o.record),
            offset: origin.map(|o| o.offset),
        }))
    }

    pub fn internal(message: impl Into<String>) -> Error {
        Error::Internal(message.into())
    }

    /// True for errors about one bad record, which the `skip` policy may skip and count.
    pub fn is_bad_record(&self) -> bool {
        matches!(self, Error::CorruptRecord { .. } | Error::InvalidRecord(_))
    }
}
