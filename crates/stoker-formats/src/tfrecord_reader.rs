//! Reading TFRecord files: framing, CRC checks, and located errors.
//!
//! Records are handed out as [`Bytes`] slices of large read buffers: no per-record copy.

use std::fs::File;
use std::io::{self, Read};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use flate2::read::{MultiGzDecoder, ZlibDecoder};
use stoker_core::element::{names, Element, Names};
use stoker_core::exec::ElementIter;
use stoker_core::{Error, ErrorPolicy, Origin, Result, StageStats, Tensor};

use crate::compression::Compression;
use crate::masked_crc32c;

const CHUNK: usize = 1 << 20;
/// Larger lengths are taken as corruption (with CRC checks off, a damaged header could
/// otherwise ask for any amount of memory).
const MAX_RECORD_LEN: u64 = 1 << 31;

/// Reads records one by one from a (possibly compressed) stream.
pub struct RecordReader {
    src: Box<dyn Read + Send>,
    buf: BytesMut,
    file: Arc<str>,
    record: u64,
    offset: u64,
    eof: bool,
    verify_crc: bool,
}

impl RecordReader {
    pub fn open(path: &str, compression: Compression, verify_crc: bool) -> Result<RecordReader> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        Ok(RecordReader::new(path, file, compression, verify_crc))
    }

    pub fn new(
        name: &str,
        src: impl Read + Send + 'static,
        compression: Compression,
        verify_crc: bool,
    ) -> RecordReader {
        let src: Box<dyn Read + Send> = match compression {
            Compression::None => Box::new(src),
            Compression::Gzip => Box::new(MultiGzDecoder::new(io::BufReader::with_capacity(
                CHUNK, src,
            ))),
            Compression::Zlib => {
                Box::new(ZlibDecoder::new(io::BufReader::with_capacity(CHUNK, src)))
            }
        };
        RecordReader {
            src,
            buf: BytesMut::new(),
            file: Arc::from(name),
            record: 0,
            offset: 0,
            eof: false,
            verify_crc,
        }
    }

    fn corrupt(&self, reason: impl Into<String>) -> Error {
        Error::CorruptRecord {
            file: self.file.to_string(),
            record: self.record,
            offset: self.offset,
            reason: reason.into(),
        }
    }

    /// Reads until `need` bytes are buffered or the stream ends; true if they are there.
    fn fill(&mut self, need: usize) -> Result<bool> {
        while self.buf.len() < need && !self.eof {
            let old = self.buf.len();
            self.buf.resize(old + CHUNK.max(need - old), 0);
            let n = loop {
                match self.src.read(&mut self.buf[old..]) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e)
                        if e.kind() == io::ErrorKind::InvalidInput
                            || e.kind() == io::ErrorKind::InvalidData =>
                    {
                        self.buf.truncate(old);
                        return Err(self.corrupt(format!("compressed stream is damaged: {e}")));
                    }
                    Err(e) => {
                        self.buf.truncate(old);
                        return Err(Error::io(self.file.to_string(), e));
                    }
                }
            };
            self.buf.truncate(old + n);
            if n == 0 {
                self.eof = true;
            }
        }
        Ok(self.buf.len() >= need)
    }

    /// The next record and where it came from; `None` at the end of the file.
    ///
    /// After an error about the framing (length CRC, truncation), the reader cannot find the
    /// next record: it reports the end of the file from then on.
    pub fn next_record(&mut self) -> Result<Option<(Bytes, Origin)>> {
        if !self.fill(12)? {
            if self.buf.is_empty() {
                return Ok(None);
            }
            let got = self.buf.len();
            self.buf.clear();
            return Err(self.corrupt(format!(
                "truncated record header: {got} of 12 bytes before the end of the file"
            )));
        }
        let mut len8 = [0u8; 8];
        len8.copy_from_slice(&self.buf[..8]);
        let len = u64::from_le_bytes(len8);
        let mut crc4 = [0u8; 4];
        crc4.copy_from_slice(&self.buf[8..12]);
        if self.verify_crc && masked_crc32c(&len8) != u32::from_le_bytes(crc4) {
            self.give_up();
            return Err(self.corrupt("length CRC mismatch: the record header is damaged"));
        }
        if len > MAX_RECORD_LEN {
            self.give_up();
            return Err(self.corrupt(format!("record length {len} is not plausible")));
        }
        let len = len as usize;
        let total = 12 + len + 4;
        if !self.fill(total)? {
            let got = self.buf.len().saturating_sub(12);
            self.give_up();
            return Err(self.corrupt(format!(
                "truncated record: the header says {len} bytes of data, the file ends after {got}"
            )));
        }
        let framed = self.buf.split_to(total).freeze();
        let data = framed.slice(12..12 + len);
        let origin = Origin {
            file: Arc::clone(&self.file),
            record: self.record,
            offset: self.offset,
        };
        let mut crc4 = [0u8; 4];
        crc4.copy_from_slice(&framed[12 + len..]);
        let result = if self.verify_crc && masked_crc32c(&data) != u32::from_le_bytes(crc4) {
            Err(self.corrupt("data CRC mismatch: the record's content is damaged"))
        } else {
            Ok(Some((data, origin)))
        };
        self.record += 1;
        self.offset += total as u64;
        result
    }

    /// Stops reading this stream (its framing can no longer be trusted).
    fn give_up(&mut self) {
        self.buf.clear();
        self.eof = true;
    }
}

/// A source stage: the records of one file as elements `{"record": bytes}`.
pub struct TfRecordIter {
    reader: RecordReader,
    names: Names,
    policy: ErrorPolicy,
    stats: Arc<StageStats>,
}

impl TfRecordIter {
    pub const FIELD: &'static str = "record";

    pub fn open(
        path: &str,
        compression: Compression,
        verify_crc: bool,
        policy: ErrorPolicy,
        stats: Arc<StageStats>,
    ) -> Result<TfRecordIter> {
        Ok(TfRecordIter {
            reader: RecordReader::open(path, compression, verify_crc)?,
            names: names(&[Self::FIELD]),
            policy,
            stats,
        })
    }
}

impl ElementIter for TfRecordIter {
    fn next(&mut self) -> Result<Option<Element>> {
        loop {
            match self.reader.next_record() {
                Ok(Some((data, origin))) => {
                    let t = Tensor::scalar_bytes(data, Some(origin));
                    return Ok(Some(Element::new(self.names.clone(), vec![t])));
                }
                Ok(None) => return Ok(None),
                Err(e) if e.is_bad_record() && self.policy == ErrorPolicy::Skip => {
                    // A damaged record is skipped; damaged framing ends this file (the reader
                    // then reports the end), and that is counted once.
                    self.stats.add_skip(e.to_string());
                }
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tfrecord_writer::RecordWriter;

    fn encoded(records: &[&[u8]], c: Compression) -> Vec<u8> {
        let mut w = RecordWriter::new(Vec::new(), c);
        for r in records {
            w.write(r).unwrap();
        }
        w.finish().unwrap()
    }

    fn read_all(bytes: Vec<u8>, c: Compression) -> Result<Vec<Vec<u8>>> {
        let mut r = RecordReader::new("mem", io::Cursor::new(bytes), c, true);
        let mut out = Vec::new();
        while let Some((rec, _)) = r.next_record()? {
            out.push(rec.to_vec());
        }
        Ok(out)
    }

    #[test]
    fn round_trip_all_compressions() {
        let big = vec![7u8; 3 * CHUNK + 5];
        let recs: Vec<&[u8]> = vec![b"", b"a", b"hello world", &big];
        for c in [Compression::None, Compression::Gzip, Compression::Zlib] {
            let got = read_all(encoded(&recs, c), c).unwrap();
            assert_eq!(got.len(), 4);
            assert_eq!(got[2], b"hello world");
            assert_eq!(got[3].len(), big.len());
        }
    }

    #[test]
    fn origins_count_records_and_offsets() {
        let bytes = encoded(&[b"abc", b"defgh"], Compression::None);
        let mut r = RecordReader::new(
            "f.tfrecord",
            io::Cursor::new(bytes),
            Compression::None,
            true,
        );
        let (_, o0) = r.next_record().unwrap().unwrap();
        let (_, o1) = r.next_record().unwrap().unwrap();
        assert_eq!((o0.record, o0.offset), (0, 0));
        assert_eq!((o1.record, o1.offset), (1, 12 + 3 + 4));
        assert_eq!(&*o1.file, "f.tfrecord");
    }

    fn corrupt_error(bytes: Vec<u8>) -> (u64, u64, String) {
        match read_all(bytes, Compression::None) {
            Err(Error::CorruptRecord {
                record,
                offset,
                reason,
                ..
            }) => (record, offset, reason),
            other => panic!("expected a corrupt record error, got {other:?}"),
        }
    }

    #[test]
    fn damaged_files_give_located_errors() {
        let good = encoded(&[b"first", b"second", b"third"], Compression::None);
        let second_at = 12 + 5 + 4;

        let mut bad_data = good.clone();
        bad_data[second_at + 12 + 1] ^= 0xff;
        let (rec, off, why) = corrupt_error(bad_data);
        assert_eq!((rec, off), (1, second_at as u64));
        assert!(why.contains("data CRC"), "{why}");

        let mut bad_len = good.clone();
        bad_len[second_at] ^= 0x01;
        let (rec, off, why) = corrupt_error(bad_len);
        assert_eq!((rec, off), (1, second_at as u64));
        assert!(why.contains("length CRC"), "{why}");

        let truncated = good[..good.len() - 3].to_vec();
        let (rec, _, why) = corrupt_error(truncated);
        assert_eq!(rec, 2);
        assert!(why.contains("truncated"), "{why}");

        let torn_header = good[..second_at + 5].to_vec();
        let (rec, _, why) = corrupt_error(torn_header);
        assert_eq!(rec, 1);
        assert!(why.contains("header"), "{why}");
    }

    #[test]
    fn skip_policy_counts_and_goes_on() {
        let mut bytes = encoded(&[b"first", b"second", b"third"], Compression::None);
        bytes[12 + 5 + 4 + 12] ^= 0xff; // second record's data
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.tfrecord");
        std::fs::write(&path, bytes).unwrap();
        let stats = Arc::new(StageStats::new("tfrecord", "source"));
        let mut it = TfRecordIter::open(
            path.to_str().unwrap(),
            Compression::None,
            true,
            ErrorPolicy::Skip,
            stats.clone(),
        )
        .unwrap();
        let mut got = Vec::new();
        while let Some(e) = it.next().unwrap() {
            got.push(e.tensors[0].bytes_data().unwrap().values[0].to_vec());
        }
        assert_eq!(got, vec![b"first".to_vec(), b"third".to_vec()]);
        assert_eq!(stats.skipped(), 1);
    }

    #[test]
    fn missing_file_names_the_path() {
        let err = RecordReader::open("/nonexistent/x.tfrecord", Compression::None, true)
            .err()
            .unwrap();
        assert!(matches!(&err, Error::Io { path, .. } if path == "/nonexistent/x.tfrecord"));
    }

    #[test]
    fn damaged_gzip_stream_is_a_corrupt_record() {
        let mut bytes = encoded(&[b"first", b"second"], Compression::Gzip);
        let n = bytes.len();
        for b in &mut bytes[10..n - 8] {
            *b ^= 0x5a;
        }
        let err = read_all(bytes, Compression::Gzip).unwrap_err();
        assert!(
            matches!(err, Error::CorruptRecord { .. } | Error::Io { .. }),
            "{err:?}"
        );
    }
}
