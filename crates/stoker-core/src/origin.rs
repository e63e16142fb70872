//! Where a value came from: a file, a record in it and the record's byte offset. Its own
//! module because both tensors (which carry it) and errors (which name it) need it.

use std::fmt;
use std::sync::Arc;

/// Where a value was read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    pub file: Arc<str>,
    /// Index of the record in its file, from 0.
    pub record: u64,
    /// Byte offset of the record's header in the (decompressed) file.
    pub offset: u64,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}, record {} (byte offset {})",
            self.file, self.record, self.offset
        )
    }
}
