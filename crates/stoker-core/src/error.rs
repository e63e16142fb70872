//! The one error type of the engine. Every kind maps to its own Python exception class.

use std::io;

use crate::origin::Origin;

/// What went wrong, and where. New kinds may be added: match with a wildcard arm, and on
/// [`Error::kind`] to see through [`Error::InStage`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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

    /// The system refused a resource stoker needs: a worker thread could not be started.
    #[error("{what}: {source}")]
    Resource {
        what: String,
        #[source]
        source: io::Error,
    },

    /// An error of a pipeline stage, with the stage's name: the first stage it passed through,
    /// the one that made it. It reads as the error itself.
    #[error("{source}")]
    InStage {
        stage: String,
        #[source]
        source: Box<Error>,
    },
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

    /// A thread named by `what` (`spawning a prefetch thread`) could not be started.
    pub fn spawn(what: impl Into<String>, source: io::Error) -> Error {
        Error::Resource {
            what: what.into(),
            source,
        }
    }

    /// The error with the pipeline stage it came from; one that has its stage keeps it.
    pub fn in_stage(self, stage: &str) -> Error {
        match self {
            Error::InStage { .. } => self,
            other => Error::InStage {
                stage: stage.to_string(),
                source: Box::new(other),
            },
        }
    }

    /// What went wrong, seen through the stage it came from.
    pub fn kind(&self) -> &Error {
        match self {
            Error::InStage { source, .. } => source.kind(),
            other => other,
        }
    }

    /// The error itself, without the stage it came from.
    pub fn into_kind(self) -> Error {
        match self {
            Error::InStage { source, .. } => source.into_kind(),
            other => other,
        }
    }

    /// The pipeline stage it came from, when it passed through one.
    pub fn stage(&self) -> Option<&str> {
        match self {
            Error::InStage { stage, .. } => Some(stage),
            _ => None,
        }
    }

    /// True for errors about one bad record, which the `skip` policy may skip and count.
    pub fn is_bad_record(&self) -> bool {
        matches!(
            self.kind(),
            Error::CorruptRecord { .. } | Error::InvalidRecord(_)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_is_kept_once_and_seen_through() {
        let e = Error::invalid("decode_image", "3 channels wanted").in_stage("map[decode]");
        assert_eq!(e.stage(), Some("map[decode]"));
        // The first stage an error passes through made it: outer stages keep it.
        let e = e.in_stage("batch");
        assert_eq!(e.stage(), Some("map[decode]"));
        assert_eq!(e.to_string(), "decode_image: 3 channels wanted");
        assert!(matches!(e.kind(), Error::InvalidArgument { op, .. } if op == "decode_image"));
        assert!(!e.is_bad_record());
        let bad = Error::CorruptRecord {
            file: "x.tfrecord".into(),
            record: 2,
            offset: 60,
            reason: "data CRC mismatch".into(),
        }
        .in_stage("tfrecord");
        assert!(bad.is_bad_record());
        assert!(matches!(
            bad.into_kind(),
            Error::CorruptRecord { record: 2, .. }
        ));
    }

    #[test]
    fn a_thread_that_cannot_start_is_a_resource_error_not_a_file_error() {
        let e = Error::spawn(
            "spawning a prefetch thread",
            io::Error::from_raw_os_error(11),
        );
        assert!(matches!(e, Error::Resource { .. }));
        assert!(e.to_string().starts_with("spawning a prefetch thread: "));
    }
}
