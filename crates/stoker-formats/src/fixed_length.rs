//! Fixed-length records of binary files (tf.data's `FixedLengthRecordDataset`): after
//! `header_bytes`, records of `record_bytes` up to the `footer_bytes` at the end, each a
//! scalar string in field `record`. A body that is not a whole number of records is an error
//! naming the file, as in tf.data. Damage in a compressed stream is a `CorruptRecordError`
//! after every whole record before it; under the skip policy the rest of the file is counted
//! lost (`rest_lost`), as for TFRecord files.

use std::io::Read;
use std::sync::Arc;

use stoker_core::element::{names, Element, Names};
use stoker_core::exec::{ElementIter, State};
use stoker_core::{Error, ErrorPolicy, Origin, Result, StageStats, Tensor};

use crate::compression::Compression;
use crate::tfrecord_reader::{ByteStream, StreamDamage};

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
    policy: ErrorPolicy,
    stats: Arc<StageStats>,
    /// Nothing more is read (the rest of the file was lost to damage).
    ended: bool,
}

/// How a fixed-length reader meets damage: under which policy, counted where.
pub type OnDamage = (ErrorPolicy, Arc<StageStats>);

impl FixedLengthIter {
    pub const FIELD: &'static str = "record";

    pub fn open(
        path: &str,
        compression: Compression,
        framing: Framing,
        on_damage: OnDamage,
    ) -> Result<FixedLengthIter> {
        Self::open_after(path, compression, framing, 0, on_damage)
    }

    /// Restored at a state this iterator reported.
    pub fn open_at(
        path: &str,
        compression: Compression,
        framing: Framing,
        on_damage: OnDamage,
        state: &State,
    ) -> Result<FixedLengthIter> {
        let mut it = Self::open_after(
            path,
            compression,
            framing,
            state.int("fixed_length_record", 0)?,
            on_damage,
        )?;
        // Saved after the rest of the file was lost: it stays lost, counted once (then).
        it.ended = state.ints.get(1) == Some(&1);
        Ok(it)
    }

    fn open_after(
        path: &str,
        compression: Compression,
        framing: Framing,
        record: u64,
        (policy, stats): OnDamage,
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
        let stream = match compression {
            Compression::None => ByteStream::open_at(path, compression, offset)?,
            _ => ByteStream::open(path, compression)?,
        };
        let mut it = FixedLengthIter {
            stream: std::io::BufReader::with_capacity(256 << 10, stream),
            path: Arc::from(path),
            framing,
            record,
            records,
            ahead: Vec::new(),
            names: names(&[Self::FIELD]),
            policy,
            stats,
            ended: false,
        };
        if compression != Compression::None && offset > 0 {
            it.pass_over(offset)?;
        }
        Ok(it)
    }

    /// Reads past the first `offset` bytes of a compressed stream (the header, and the
    /// records before a restored position): damage there is met as reading records meets it.
    fn pass_over(&mut self, offset: u64) -> Result<()> {
        let n = offset as usize;
        let mut passed = 0;
        while passed < n && !self.ended {
            let chunk = (n - passed).min(1 << 20);
            self.ahead.clear();
            if !self.fill(chunk)? {
                break;
            }
            if self.ahead.len() < chunk {
                let what = if self.record == 0 {
                    format!(
                        "the data ends within its {}-byte header",
                        self.framing.header_bytes
                    )
                } else {
                    format!("it holds fewer than the {offset} bytes the state was saved after")
                };
                return Err(Error::invalid(
                    "FixedLengthRecordDataset",
                    format!("{}: {what}", self.path),
                ));
            }
            passed += chunk;
        }
        self.ahead.clear();
        Ok(())
    }

    /// Fills `ahead` to `want` bytes, or to the end of the stream; false when the stream is
    /// damaged and the skip policy counted the rest of the file lost.
    fn fill(&mut self, want: usize) -> Result<bool> {
        let need = want.saturating_sub(self.ahead.len());
        if need > 0 {
            let read = (&mut self.stream)
                .take(need as u64)
                .read_to_end(&mut self.ahead);
            if let Err(e) = read {
                let offset =
                    self.framing.header_bytes + self.record * self.framing.record_bytes as u64;
                let what = format!("record {}", self.record);
                if let Some(why) = StreamDamage::of(&e) {
                    let at = (self.record, offset);
                    StreamDamage::lose_rest(why, &self.path, at, &what, self.policy, &self.stats)?;
                    self.ended = true;
                    return Ok(false);
                }
                return Err(Error::io(
                    self.path.to_string(),
                    std::io::Error::new(e.kind(), format!("{what}: {e}")),
                ));
            }
        }
        Ok(true)
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
        if self.ended {
            return Ok(None);
        }
        let data = match self.records {
            Some(n) => {
                if self.record >= n || !self.fill(size)? {
                    return Ok(None);
                }
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
                if !self.fill(size + footer)? {
                    return Ok(None);
                }
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
        let mut ints = vec![self.record];
        if self.ended {
            ints.push(1);
        }
        Ok(State::leaf(ints))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_cut_compressed_stream_is_a_located_error_or_a_counted_rest_lost() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.gz");
        let mut w = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        for i in 0..20_000u32 {
            w.write_all(&i.to_le_bytes()).unwrap();
        }
        let gz = w.finish().unwrap();
        std::fs::write(&path, &gz[..gz.len() / 2]).unwrap();
        let path = path.to_str().unwrap();
        let framing = Framing {
            record_bytes: 4,
            header_bytes: 0,
            footer_bytes: 0,
        };
        for policy in [ErrorPolicy::Raise, ErrorPolicy::Skip] {
            let stats = Arc::new(StageStats::new("fixed_length_record", "source"));
            let mut it =
                FixedLengthIter::open(path, Compression::Gzip, framing, (policy, stats.clone()))
                    .unwrap();
            let mut got = 0u32;
            let end = loop {
                match it.next() {
                    Ok(Some(e)) => {
                        let v = &e.tensors[0].bytes_data().unwrap().values[0];
                        assert_eq!(&v[..], &got.to_le_bytes());
                        got += 1;
                    }
                    Ok(None) => break Ok(()),
                    Err(e) => break Err(e),
                }
            };
            assert!(got > 0 && got < 20_000);
            let s = stats.snapshot();
            match policy {
                ErrorPolicy::Raise => {
                    let e = end.unwrap_err();
                    assert!(
                        matches!(&e, Error::CorruptRecord { record, offset, .. }
                            if *record == u64::from(got) && *offset == 4 * u64::from(got)),
                        "{e}"
                    );
                    assert!(e.to_string().contains("truncated"), "{e}");
                }
                ErrorPolicy::Skip => {
                    assert!(end.is_ok(), "{end:?}");
                    assert_eq!((s.skipped, s.rest_lost), (0, 1));
                    assert!(it.next().unwrap().is_none());
                }
            }
        }
    }
}
