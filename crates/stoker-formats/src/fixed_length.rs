//! Fixed-length records of binary files (tf.data's `FixedLengthRecordDataset`): after
//! `header_bytes`, records of `record_bytes` up to the `footer_bytes` at the end, each a
//! scalar string in field `record`. A body that is not a whole number of records is an error
//! naming the file, as in tf.data.

use std::io::Read;
use std::sync::Arc;

use stoker_core::element::{names, Element, Names};
use stoker_core::exec::{ElementIter, State};
use stoker_core::{Error, Origin, Result, Tensor};

use crate::compression::Compression;
use crate::tfrecord_reader::ByteStream;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Framing {
    pub record_bytes: usize,
    pub header_bytes: u64,
    pub footer_bytes: u64,
}

pub struct FixedLengthIter {
    stream: std::io::BufReader<ByteStream>,
    path: Arc<str>,
    framing: Framing,
    /// Records handed out.
    record: u64,
    /// The records the file holds, where its size is known before reading (a plain file).
    records: Option<u64>,
    /// Bytes read ahead: the footer candidate at the end of a compressed stream.
    ahead: Vec<u8>,
    names: Names,
}

impl FixedLengthIter {
    pub const FIELD: &'static str = "record";

    pub fn open(path: &str, compression: Compression, framing: Framing) -> Result<FixedLengthIter> {
        Self::open_after(path, compression, framing, 0)
    }

    /// Restored at a state this iterator reported.
    pub fn open_at(
        path: &str,
        compression: Compression,
        framing: Framing,
        state: &State,
    ) -> Result<FixedLengthIter> {
        Self::open_after(
            path,
            compression,
            framing,
            state.int("fixed_length_record", 0)?,
        )
    }

    fn open_after(
        path: &str,
        compression: Compression,
        framing: Framing,
        record: u64,
    ) -> Result<FixedLengthIter> {
        if framing.record_bytes == 0 {
            return Err(Error::invalid(
                "FixedLengthRecordDataset",
                "record_bytes must be at least 1",
            ));
        }
        let records = if compression == Compression::None {
            let len = std::fs::metadata(path)
                .map_err(|e| Error::io(path, e))?
                .len();
            let body = len.checked_sub(framing.header_bytes + framing.footer_bytes);
            let body = body
                .filter(|b| b % framing.record_bytes as u64 == 0)
                .ok_or_else(|| {
                    bad_body(
                        path,
                        &framing,
                        len.saturating_sub(framing.header_bytes + framing.footer_bytes),
                    )
                })?;
            Some(body / framing.record_bytes as u64)
        } else {
            None
        };
        let offset = framing.header_bytes + record * framing.record_bytes as u64;
        let stream = ByteStream::open_at(path, compression, offset)?;
        Ok(FixedLengthIter {
            stream: std::io::BufReader::with_capacity(256 << 10, stream),
            path: Arc::from(path),
            framing,
            record,
            records,
            ahead: Vec::new(),
            names: names(&[Self::FIELD]),
        })
    }

    /// Fills `ahead` to `want` bytes, or to the end of the stream.
    fn fill(&mut self, want: usize) -> Result<()> {
        let need = want.saturating_sub(self.ahead.len());
        if need > 0 {
            (&mut self.stream)
                .take(need as u64)
                .read_to_end(&mut self.ahead)
                .map_err(|e| {
                    Error::io(
                        self.path.to_string(),
                        std::io::Error::new(e.kind(), format!("record {}: {e}", self.record)),
                    )
                })?;
        }
        Ok(())
    }
}

fn bad_body(path: &str, f: &Framing, body: u64) -> Error {
    Error::invalid(
        "FixedLengthRecordDataset",
        format!(
            "{path}: excluding the header ({} bytes) and the footer ({} bytes), the file's body is {body} bytes, \
             not a whole number of {}-byte records",
            f.header_bytes, f.footer_bytes, f.record_bytes
        ),
    )
}

impl ElementIter for FixedLengthIter {
    fn next(&mut self) -> Result<Option<Element>> {
        let size = self.framing.record_bytes;
        let data = match self.records {
            Some(n) => {
                if self.record >= n {
                    return Ok(None);
                }
                self.fill(size)?;
                if self.ahead.len() < size {
                    return Err(Error::io(
                        self.path.to_string(),
                        std::io::Error::new(
                            std::io::ErrorKind::UnexpectedEof,
                            format!(
                                "record {}: the file ended early (changed while read?)",
                                self.record
                            ),
                        ),
                    ));
                }
                std::mem::take(&mut self.ahead)
            }
            None => {
                // A compressed stream's length is known only at its end: a record is one
                // when the footer still follows it.
                let footer = self.framing.footer_bytes as usize;
                self.fill(size + footer)?;
                if self.ahead.len() < size + footer {
                    if self.ahead.len() != footer {
                        let body = (self.record * size as u64)
                            + (self.ahead.len() - footer.min(self.ahead.len())) as u64;
                        return Err(bad_body(&self.path, &self.framing, body));
                    }
                    return Ok(None);
                }
                let rest = self.ahead.split_off(size);
                std::mem::replace(&mut self.ahead, rest)
            }
        };
        let origin = Origin {
            file: Arc::clone(&self.path),
            record: self.record,
            offset: self.framing.header_bytes + self.record * size as u64,
        };
        self.record += 1;
        let t = Tensor::scalar_bytes(bytes::Bytes::from(data), Some(origin));
        Ok(Some(Element::new(self.names.clone(), vec![t])))
    }

    fn state(&self) -> Result<State> {
        Ok(State::leaf(vec![self.record]))
    }
}
