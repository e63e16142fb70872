//! Errors of the trace analyzer: each names the file, and a parse error its line and column.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum AnalyzeError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a readable trace at line {line}, column {column}: {message}")]
    Parse {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{path}: not a readable XSpace (.xplane.pb) at byte {offset}: {message}")]
    Decode {
        path: PathBuf,
        offset: usize,
        message: String,
    },
}

impl AnalyzeError {
    pub fn io(path: &Path, source: std::io::Error) -> AnalyzeError {
        AnalyzeError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    pub fn parse(path: &Path, e: &serde_json::Error) -> AnalyzeError {
        AnalyzeError::Parse {
            path: path.to_path_buf(),
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        }
    }
}

pub type Result<T> = std::result::Result<T, AnalyzeError>;
