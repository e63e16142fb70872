//! The one error type of the engine. Every kind maps to its own Python exception class.

use std::io;

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
    #[error("{op}: {location}: {reason}")]
    InvalidRecord {
        op: String,
        /// File, record and byte offset when known, otherwise the element's index in its batch.
        location: String,
        reason: String,
        file: Option<String>,
        record: Option<u64>,
        offset: Option<u64>,
    },

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

    pub fn internal(message: impl Into<String>) -> Error {
        Error::Internal(message.into())
    }

    /// True for errors about one bad record, which the `skip` policy may skip and count.
    pub fn is_bad_record(&self) -> bool {
        matches!(
            self,
            Error::CorruptRecord { .. } | Error::InvalidRecord { .. }
        )
    }
}
