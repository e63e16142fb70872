//! Reading TFRecord files: framing, CRC checks, located errors, and recovery after damage.
//!
//! Records are handed out as [`Bytes`] slices of large read buffers: no per-record copy.
//!
//! What damage costs (the skip policy calls [`RecordReader::recover`] after each error):
//! - a record whose data fails its CRC: that record; reading goes on after it;
//! - a damaged record header (length CRC, a length past the end of the file, a torn header):
//!   that record; with CRC checks on, the reader resynchronises on the next header whose length
//!   CRC checks out, so the records after it are read (with checks off, nothing can be trusted
//!   after a bad header: the rest of the file is lost);
//! - a damaged GZIP/ZLIB stream (a bad deflate block, a wrong trailer checksum, a truncated
//!   stream, bytes after its end): the rest of the file from the last whole record on, since
//!   deflate cannot restart mid-stream. How many records that was cannot be known.
//!
//! Memory follows the bytes that actually arrive: a header's length is checked against what
//! is left of a plain file before anything is allocated, and a compressed stream's buffer grows
//! only as decompressed data comes in.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use flate2::{Decompress, FlushDecompress, Status};
use stoker_core::element::{names, Element, Names};
use stoker_core::exec::{ElementIter, State};
use stoker_core::{Error, ErrorPolicy, Origin, Result, StageStats, Tensor};

use crate::compression::Compression;
use crate::masked_crc32c;

/// Bytes read (and inflated) at a time. Under the fuzzer, small: records then span reads, a
/// path that megabyte reads take only in large files.
const CHUNK: usize = if cfg!(fuzzing) { 256 } else { 1 << 20 };
/// Larger lengths are taken as corruption (with CRC checks off, a damaged header could
/// otherwise ask for any amount of memory).
const MAX_RECORD_LEN: u64 = 1 << 31;
const HEADER: usize = 12;

type Raw = Box<dyn Read + Send>;

/// Why a read of the record stream failed.
enum Fault {
    /// Reading the file itself failed.
    Io(io::Error),
    /// The compressed data is damaged: nothing after it can be read.
    Damaged(String),
}

/// A GZIP or ZLIB stream, inflated as records are read. Unlike flate2's `Read` decoders, it
/// hands out what it inflated before finding damage (and reports the damage on the next
/// read), so that every whole record before the damage comes through, and it tells the
/// file's own I/O errors from damage in the data.
struct Inflater {
    file: BufReader<Raw>,
    z: Decompress,
    gzip: bool,
    /// Compressed bytes consumed.
    consumed: u64,
    /// The current stream (a GZIP member) has ended, its checksum verified.
    ended: bool,
    pending: Option<Fault>,
}

impl Inflater {
    fn new(raw: Raw, gzip: bool) -> Inflater {
        Inflater {
            file: BufReader::with_capacity(CHUNK, raw),
            z: Inflater::decompress(gzip),
            gzip,
            consumed: 0,
            ended: false,
            pending: None,
        }
    }

    fn decompress(gzip: bool) -> Decompress {
        if gzip {
            Decompress::new_gzip(15)
        } else {
            Decompress::new(true)
        }
    }

    fn name(&self) -> &'static str {
        if self.gzip {
            "GZIP"
        } else {
            "ZLIB"
        }
    }

    fn read(&mut self, out: &mut [u8]) -> std::result::Result<usize, Fault> {
        if let Some(f) = self.pending.take() {
            return Err(f);
        }
        loop {
            let input = match self.file.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Fault::Io(e)),
            };
            if self.ended || self.consumed == 0 && input.is_empty() {
                // The end of a stream, or an empty file (no records, as a plain empty file).
                // GZIP files may hold several members; ZLIB files one stream.
                if input.is_empty() {
                    return Ok(0);
                }
                if self.gzip && input.starts_with(&[0x1f, 0x8b]) {
                    self.z = Inflater::decompress(true);
                    self.ended = false;
                } else {
                    return Err(Fault::Damaged(format!(
                        "{} or more bytes follow the end of the {} stream",
                        input.len(),
                        self.name()
                    )));
                }
            }
            if input.is_empty() {
                return Err(Fault::Damaged(format!(
                    "the file ends inside the {} stream (truncated)",
                    self.name()
                )));
            }
            let (in0, out0) = (self.z.total_in(), self.z.total_out());
            let r = self.z.decompress(input, out, FlushDecompress::None);
            let used = usize::try_from(self.z.total_in() - in0).unwrap_or(usize::MAX);
            let made = usize::try_from(self.z.total_out() - out0).unwrap_or(usize::MAX);
            self.file.consume(used);
            self.consumed += used as u64;
            match r {
                Err(e) => {
                    let fault = Fault::Damaged(e.to_string());
                    if made == 0 {
                        return Err(fault);
                    }
                    self.pending = Some(fault);
                    return Ok(made);
                }
                Ok(Status::StreamEnd) => self.ended = true,
                Ok(_) if made == 0 && used == 0 => {
                    return Err(Fault::Damaged("the decoder makes no progress".into()));
                }
                Ok(_) => {}
            }
            if made > 0 {
                return Ok(made);
            }
        }
    }
}

/// The record stream: the file, or its decompressed content.
enum Source {
    Plain(Raw),
    Compressed(Box<Inflater>),
}

impl Source {
    fn read(&mut self, buf: &mut [u8]) -> std::result::Result<usize, Fault> {
        match self {
            Source::Plain(r) => loop {
                match r.read(buf) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    r => return r.map_err(Fault::Io),
                }
            },
            Source::Compressed(z) => z.read(buf),
        }
    }
}

/// A file's bytes, decompressed as they are read: the stream under the line and
/// fixed-length readers. Damage in a compressed stream comes out as an `InvalidData` error
/// saying what is wrong, after every byte before it.
pub struct ByteStream(Source);

impl ByteStream {
    pub fn open(path: &str, compression: Compression) -> Result<ByteStream> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let raw: Raw = Box::new(file);
        Ok(ByteStream(match compression {
            Compression::None => Source::Plain(raw),
            Compression::Gzip => Source::Compressed(Box::new(Inflater::new(raw, true))),
            Compression::Zlib => Source::Compressed(Box::new(Inflater::new(raw, false))),
        }))
    }
}

impl ByteStream {
    /// Opened with its next byte at `offset` of the (decompressed) stream: a plain file is
    /// read from there; a compressed one is decompressed from the start, the bytes before
    /// it passed over.
    pub fn open_at(path: &str, compression: Compression, offset: u64) -> Result<ByteStream> {
        let short = || {
            Error::invalid(
                "state",
                format!("{path} holds fewer than the {offset} bytes the state was saved after (changed since?)"),
            )
        };
        if compression == Compression::None {
            use std::io::Seek;
            let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
            let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
            if offset > len {
                return Err(short());
            }
            file.seek(io::SeekFrom::Start(offset))
                .map_err(|e| Error::io(path, e))?;
            return Ok(ByteStream(Source::Plain(Box::new(file))));
        }
        let mut s = ByteStream::open(path, compression)?;
        let passed = io::copy(&mut (&mut s).take(offset), &mut io::sink())
            .map_err(|e| Error::io(path, e))?;
        if passed != offset {
            return Err(short());
        }
        Ok(s)
    }
}

impl Read for ByteStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf).map_err(|f| match f {
            Fault::Io(e) => e,
            Fault::Damaged(why) => io::Error::new(io::ErrorKind::InvalidData, why),
        })
    }
}

/// What an error cost, once the reader has recovered from it (see [`RecordReader::recover`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovery {
    /// Records known to be lost: the damaged one (0 when the damage was in a compressed
    /// stream, whose lost records cannot be counted).
    pub records: u64,
    /// The rest of the file could not be read.
    pub rest_lost: bool,
    /// What was passed over, for the skip reason (empty when nothing more than the record).
    pub note: String,
}

/// The error last returned, and what reading on after it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Damage {
    /// A record's data was bad; the reader is already past it.
    Record,
    /// A record header was bad; the buffer starts at it.
    Header,
    /// The stream ended inside the record (its header checked out): nothing follows it.
    Truncated,
    /// The stream itself failed: nothing more can be read.
    Stream,
}

/// Reads records one by one from a (possibly compressed) stream.
pub struct RecordReader {
    src: Source,
    buf: BytesMut,
    file: Arc<str>,
    record: u64,
    /// Offset (in the decompressed stream) of `buf[0]`, which is the next record's header.
    offset: u64,
    /// A plain file's size, to check record lengths against before allocating.
    file_len: Option<u64>,
    eof: bool,
    verify_crc: bool,
    damage: Option<Damage>,
}

impl RecordReader {
    pub fn open(path: &str, compression: Compression, verify_crc: bool) -> Result<RecordReader> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let mut r = RecordReader::new(path, file, compression, verify_crc);
        r.file_len = (compression == Compression::None).then_some(len);
        Ok(r)
    }

    /// Opens `path` with its next record at `(record, offset)`, a position this reader
    /// reported (see [`position`](RecordReader::position)): a plain file is read from that
    /// offset; a compressed one is decompressed from the start and the records before it
    /// are passed over.
    pub fn open_at(
        path: &str,
        compression: Compression,
        verify_crc: bool,
        record: u64,
        offset: u64,
    ) -> Result<RecordReader> {
        if compression != Compression::None {
            let mut r = RecordReader::open(path, compression, false)?;
            while r.record < record {
                if r.next_record()?.is_none() {
                    break;
                }
            }
            if (r.record, r.offset) != (record, offset) {
                return Err(Error::invalid(
                    "state",
                    format!(
                        "{path} has no record {record} at decompressed byte {offset} (changed since the state was saved?)"
                    ),
                ));
            }
            r.verify_crc = verify_crc;
            return Ok(r);
        }
        use std::io::Seek;
        let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        if offset > len {
            return Err(Error::invalid(
                "state",
                format!("{path} is {len} bytes, shorter than the saved position {offset}"),
            ));
        }
        file.seek(io::SeekFrom::Start(offset))
            .map_err(|e| Error::io(path, e))?;
        let mut r = RecordReader::new(path, file, compression, verify_crc);
        r.file_len = Some(len);
        r.record = record;
        r.offset = offset;
        Ok(r)
    }

    /// The next record's index and offset (in the decompressed stream).
    pub fn position(&self) -> (u64, u64) {
        (self.record, self.offset)
    }

    pub fn new(
        name: &str,
        src: impl Read + Send + 'static,
        compression: Compression,
        verify_crc: bool,
    ) -> RecordReader {
        let raw: Raw = Box::new(src);
        let src = match compression {
            Compression::None => Source::Plain(raw),
            Compression::Gzip => Source::Compressed(Box::new(Inflater::new(raw, true))),
            Compression::Zlib => Source::Compressed(Box::new(Inflater::new(raw, false))),
        };
        RecordReader {
            src,
            buf: BytesMut::new(),
            file: Arc::from(name),
            record: 0,
            offset: 0,
            file_len: None,
            eof: false,
            verify_crc,
            damage: None,
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

    /// Where in the file the decoder is, for messages about compressed streams.
    fn compressed_at(&self) -> String {
        match &self.src {
            Source::Plain(_) => String::new(),
            Source::Compressed(z) => {
                format!(" ({} stream, at compressed byte {})", z.name(), z.consumed)
            }
        }
    }

    /// Reads until `need` bytes are buffered or the stream ends; true if they are there. The
    /// buffer grows with the data that arrives (at most doubling), never to `need` at once.
    fn fill(&mut self, need: usize) -> Result<bool> {
        while self.buf.len() < need && !self.eof {
            let old = self.buf.len();
            let step = if need - old <= CHUNK {
                CHUNK
            } else {
                (need - old).min(old.max(CHUNK))
            };
            self.buf.resize(old + step, 0);
            let n = match self.src.read(&mut self.buf[old..]) {
                Ok(n) => n,
                Err(fault) => {
                    self.buf.truncate(old);
                    return Err(match fault {
                        Fault::Io(e) => Error::io(self.file.to_string(), e),
                        Fault::Damaged(why) => self.stream_damaged(why),
                    });
                }
            };
            self.buf.truncate(old + n);
            self.eof = n == 0;
        }
        Ok(self.buf.len() >= need)
    }

    fn stream_damaged(&mut self, why: String) -> Error {
        let err = self.corrupt(format!(
            "the compressed stream is damaged{}: {why}",
            self.compressed_at()
        ));
        self.eof = true;
        self.damage = Some(Damage::Stream);
        err
    }

    /// The next record and where it came from; `None` at the end of the file.
    ///
    /// After an error about the framing or the stream, the reader reports the end of the file
    /// unless [`recover`](RecordReader::recover) is called first.
    pub fn next_record(&mut self) -> Result<Option<(Bytes, Origin)>> {
        match self.damage.take() {
            None | Some(Damage::Record) => {}
            Some(d) => {
                self.damage = Some(d);
                return Ok(None);
            }
        }
        if !self.fill(HEADER)? {
            if self.buf.is_empty() {
                return Ok(None);
            }
            let got = self.buf.len();
            self.damage = Some(Damage::Truncated);
            return Err(self.corrupt(format!(
                "truncated record header: {got} of 12 bytes before the end of the file"
            )));
        }
        let mut len8 = [0u8; 8];
        len8.copy_from_slice(&self.buf[..8]);
        let len = u64::from_le_bytes(len8);
        let mut crc4 = [0u8; 4];
        crc4.copy_from_slice(&self.buf[8..HEADER]);
        if self.verify_crc && masked_crc32c(&len8) != u32::from_le_bytes(crc4) {
            self.damage = Some(Damage::Header);
            let hint = match self.src {
                Source::Plain(_) if self.offset == 0 => Compression::hint(&self.buf),
                _ => "",
            };
            return Err(self.corrupt(format!(
                "length CRC mismatch: the record header is damaged{hint}"
            )));
        }
        if len > MAX_RECORD_LEN {
            self.damage = Some(Damage::Header);
            return Err(self.corrupt(format!("record length {len} is not plausible")));
        }
        // A checked header whose record does not fit in the file means the file was cut;
        // an unchecked one may just be damaged.
        let cut = if self.verify_crc {
            Damage::Truncated
        } else {
            Damage::Header
        };
        if let Some(file_len) = self.file_len {
            let left = file_len.saturating_sub(self.offset + HEADER as u64);
            if len + 4 > left {
                self.damage = Some(cut);
                return Err(self.corrupt(format!(
                    "truncated record: the header says {len} bytes of data and a 4-byte CRC, \
                     the file ends {left} bytes after the header"
                )));
            }
        }
        let len = len as usize;
        let total = HEADER + len + 4;
        if !self.fill(total)? {
            let got = self.buf.len() - HEADER;
            self.damage = Some(cut);
            return Err(self.corrupt(format!(
                "truncated record: the header says {len} bytes of data and a 4-byte CRC, \
                 the stream ends {got} bytes after the header"
            )));
        }
        let framed = self.buf.split_to(total).freeze();
        let data = framed.slice(HEADER..HEADER + len);
        let origin = Origin {
            file: Arc::clone(&self.file),
            record: self.record,
            offset: self.offset,
        };
        let mut crc4 = [0u8; 4];
        crc4.copy_from_slice(&framed[HEADER + len..]);
        let result = if self.verify_crc && masked_crc32c(&data) != u32::from_le_bytes(crc4) {
            self.damage = Some(Damage::Record);
            Err(self.corrupt("data CRC mismatch: the record's content is damaged"))
        } else {
            Ok(Some((data, origin)))
        };
        self.record += 1;
        self.offset += total as u64;
        result
    }

    /// After an error from [`next_record`](RecordReader::next_record), gets ready to read on
    /// and says what the damage cost (see the module docs). I/O errors of the file itself are
    /// still errors.
    pub fn recover(&mut self) -> Result<Recovery> {
        let lost = |records, rest_lost, note: String| Recovery {
            records,
            rest_lost,
            note,
        };
        let Some(damage) = self.damage.take() else {
            return Ok(lost(0, false, String::new()));
        };
        match damage {
            Damage::Record => Ok(lost(1, false, String::new())),
            Damage::Truncated => {
                self.end();
                Ok(lost(1, false, String::new()))
            }
            Damage::Stream => {
                let at = self.offset;
                self.end();
                Ok(lost(
                    0,
                    true,
                    format!("the rest of the file after byte {at} (decompressed) is lost"),
                ))
            }
            Damage::Header if !self.verify_crc => {
                let at = self.offset;
                self.end();
                Ok(lost(
                    1,
                    true,
                    format!(
                        "with CRC checks off the next record cannot be found: the rest of the \
                         file after byte {at} is lost"
                    ),
                ))
            }
            Damage::Header => {
                let at = self.offset;
                let resynced = self.resync();
                self.record += 1;
                match resynced {
                    Ok((skipped, true)) => {
                        self.offset = at + skipped;
                        Ok(lost(
                            1,
                            false,
                            format!(
                                "skipped {skipped} bytes to the next intact record header, at \
                                 byte {}",
                                self.offset
                            ),
                        ))
                    }
                    Ok((skipped, false)) => {
                        self.end();
                        Ok(lost(
                            1,
                            false,
                            format!("no intact record header in the last {skipped} bytes"),
                        ))
                    }
                    Err(e) if self.damage == Some(Damage::Stream) => {
                        self.end();
                        Ok(lost(
                            1,
                            true,
                            format!("looking for the next record: {e}; the rest is lost"),
                        ))
                    }
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// Reads nothing more.
    fn end(&mut self) {
        self.buf.clear();
        self.eof = true;
        self.damage = None;
    }

    /// Passes over the damaged header at the buffer's start to the next position where a
    /// header's length CRC checks out (and its record fits in the file). Returns the bytes
    /// passed over and whether such a header was found.
    fn resync(&mut self) -> Result<(u64, bool)> {
        let mut skipped = 1u64;
        self.buf.advance(1);
        loop {
            if !self.fill(HEADER)? {
                skipped += self.buf.len() as u64;
                self.buf.clear();
                return Ok((skipped, false));
            }
            let at = self.offset + skipped;
            let last = self.buf.len() - HEADER;
            if let Some(p) = (0..=last).find(|&p| self.intact_header(p, at + p as u64)) {
                self.buf.advance(p);
                return Ok((skipped + p as u64, true));
            }
            self.buf.advance(last + 1);
            skipped += (last + 1) as u64;
        }
    }

    fn intact_header(&self, p: usize, at: u64) -> bool {
        let h = &self.buf[p..p + HEADER];
        let mut len8 = [0u8; 8];
        len8.copy_from_slice(&h[..8]);
        let mut crc4 = [0u8; 4];
        crc4.copy_from_slice(&h[8..]);
        let len = u64::from_le_bytes(len8);
        // The cheap bounds first: at most positions of damaged bytes they fail, and the CRC
        // is not computed.
        len <= MAX_RECORD_LEN
            && self
                .file_len
                .is_none_or(|f| at + HEADER as u64 + len + 4 <= f)
            && masked_crc32c(&len8) == u32::from_le_bytes(crc4)
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

impl TfRecordIter {
    /// Opens `path` at a position from [`ElementIter::state`].
    pub fn open_at(
        path: &str,
        compression: Compression,
        verify_crc: bool,
        policy: ErrorPolicy,
        stats: Arc<StageStats>,
        state: &State,
    ) -> Result<TfRecordIter> {
        let (record, offset) = (state.int("tfrecord", 0)?, state.int("tfrecord", 1)?);
        Ok(TfRecordIter {
            reader: RecordReader::open_at(path, compression, verify_crc, record, offset)?,
            names: names(&[Self::FIELD]),
            policy,
            stats,
        })
    }
}

impl ElementIter for TfRecordIter {
    fn state(&self) -> Result<State> {
        let (record, offset) = self.reader.position();
        Ok(State::leaf(vec![record, offset]))
    }

    fn next(&mut self) -> Result<Option<Element>> {
        loop {
            match self.reader.next_record() {
                Ok(Some((data, origin))) => {
                    let t = Tensor::scalar_bytes(data, Some(origin));
                    return Ok(Some(Element::new(self.names.clone(), vec![t])));
                }
                Ok(None) => return Ok(None),
                Err(e) if e.is_bad_record() && self.policy == ErrorPolicy::Skip => {
                    let r = self.reader.recover()?;
                    let reason = if r.note.is_empty() {
                        e.to_string()
                    } else {
                        format!("{e}; {}", r.note)
                    };
                    self.stats.add_loss(r.records, r.rest_lost, reason);
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
    fn a_compressed_file_read_as_plain_says_so() {
        for (c, name) in [(Compression::Gzip, "GZIP"), (Compression::Zlib, "ZLIB")] {
            let (record, offset, reason) = corrupt_error(encoded(&[b"first"], c));
            assert_eq!((record, offset), (0, 0));
            assert!(
                reason.contains(&format!("compression_type=\"{name}\"")),
                "{reason}"
            );
        }
        // A plain file damaged at its start is not said to be compressed.
        let mut plain = encoded(&[b"first"], Compression::None);
        plain[8] ^= 1;
        let (_, _, reason) = corrupt_error(plain);
        assert!(!reason.contains("compression_type"), "{reason}");
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
        assert!(matches!(err, Error::CorruptRecord { .. }), "{err:?}");
    }

    /// Reads everything as the skip policy does: the records, and each recovery.
    fn read_skipping(bytes: Vec<u8>, c: Compression) -> (Vec<Vec<u8>>, Vec<Recovery>) {
        let mut r = RecordReader::new("mem", io::Cursor::new(bytes), c, true);
        let (mut out, mut losses) = (Vec::new(), Vec::new());
        for _ in 0..10_000 {
            match r.next_record() {
                Ok(Some((rec, _))) => out.push(rec.to_vec()),
                Ok(None) => return (out, losses),
                Err(e) => {
                    assert!(e.is_bad_record(), "{e}");
                    losses.push(r.recover().unwrap());
                }
            }
        }
        panic!(
            "the reader did not end: {} records, {} losses",
            out.len(),
            losses.len()
        );
    }

    fn numbered(n: usize) -> Vec<Vec<u8>> {
        (0..n).map(|i| format!("record {i}").into_bytes()).collect()
    }

    fn encoded_vec(records: &[Vec<u8>], c: Compression) -> Vec<u8> {
        encoded(&records.iter().map(Vec::as_slice).collect::<Vec<_>>(), c)
    }

    #[test]
    fn garbage_after_a_compressed_stream_ends_the_file_once() {
        for c in [Compression::Gzip, Compression::Zlib] {
            let mut bytes = encoded(&[b"r0", b"r1", b"r2"], c);
            bytes.extend_from_slice(&b"garbage!".repeat(8));
            let (got, losses) = read_skipping(bytes.clone(), c);
            assert_eq!(
                got,
                vec![b"r0".to_vec(), b"r1".to_vec(), b"r2".to_vec()],
                "{c:?}"
            );
            assert_eq!(losses.len(), 1, "{c:?}");
            assert!(
                losses[0].rest_lost && losses[0].records == 0,
                "{c:?} {losses:?}"
            );
            let err = read_all(bytes, c).unwrap_err();
            assert!(
                matches!(&err, Error::CorruptRecord { record: 3, .. }),
                "{c:?}: {err}"
            );
        }
    }

    #[test]
    fn damage_inside_a_compressed_stream_ends_the_file() {
        let recs = numbered(1000);
        for c in [Compression::Gzip, Compression::Zlib] {
            let mut bytes = encoded_vec(&recs, c);
            let mid = bytes.len() / 2;
            bytes[mid] ^= 0xff;
            let (got, losses) = read_skipping(bytes, c);
            // What came through is the records as written, in order, up to the damage.
            assert!(got.len() < recs.len(), "{c:?}");
            assert_eq!(got[..], recs[..got.len()], "{c:?}");
            assert!(losses.iter().any(|l| l.rest_lost), "{c:?} {losses:?}");
        }
    }

    #[test]
    fn truncated_and_empty_compressed_files() {
        for c in [Compression::Gzip, Compression::Zlib] {
            let bytes = encoded_vec(&numbered(100), c);
            let cut = bytes[..bytes.len() / 2].to_vec();
            match read_all(cut.clone(), c) {
                Err(Error::CorruptRecord {
                    file,
                    record,
                    reason,
                    ..
                }) => {
                    assert_eq!(file, "mem");
                    assert!(record > 0 && record < 100, "{record}");
                    assert!(reason.contains("compressed byte"), "{reason}");
                }
                other => panic!("{c:?}: {other:?}"),
            }
            let (got, losses) = read_skipping(cut, c);
            assert!(
                !got.is_empty() && losses.len() == 1 && losses[0].rest_lost,
                "{c:?}"
            );
            // An empty file holds no records, as a plain empty file.
            assert!(read_all(Vec::new(), c).unwrap().is_empty(), "{c:?}");
        }
        assert!(read_all(Vec::new(), Compression::None).unwrap().is_empty());
    }

    #[test]
    fn a_claimed_length_allocates_only_what_arrives() {
        // A header claiming 2^31 bytes with a valid length CRC, in a 112-byte stream.
        let len8 = (1u64 << 31).to_le_bytes();
        let mut bytes = len8.to_vec();
        bytes.extend_from_slice(&masked_crc32c(&len8).to_le_bytes());
        bytes.resize(112, 7);
        for c in [Compression::None, Compression::Gzip] {
            let mut data = Vec::new();
            match c {
                Compression::None => data.clone_from(&bytes),
                _ => {
                    let mut w =
                        flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                    io::Write::write_all(&mut w, &bytes).unwrap();
                    data = w.finish().unwrap();
                }
            }
            let mut r = RecordReader::new("mem", io::Cursor::new(data), c, true);
            let err = r.next_record().unwrap_err();
            assert!(err.to_string().contains("truncated record"), "{err}");
            assert!(r.buf.capacity() <= 2 * CHUNK, "{}", r.buf.capacity());
        }
        // A plain file: checked against the file's size before reading on.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.tfrecord");
        std::fs::write(&path, &bytes).unwrap();
        let mut r = RecordReader::open(path.to_str().unwrap(), Compression::None, true).unwrap();
        let err = r.next_record().unwrap_err();
        assert!(
            err.to_string()
                .contains("the file ends 100 bytes after the header"),
            "{err}"
        );
        assert!(r.buf.capacity() <= 2 * CHUNK);
    }

    #[test]
    fn a_damaged_header_costs_one_record_in_a_plain_file() {
        let recs = numbered(50);
        let bytes = encoded_vec(&recs, Compression::None);
        // Damage each byte of the 10th record's header in turn.
        let at: usize = recs[..10].iter().map(|r| r.len() + 16).sum();
        for i in 0..12 {
            let mut bad = bytes.clone();
            bad[at + i] ^= 0xff;
            let (got, losses) = read_skipping(bad, Compression::None);
            let mut want = recs.clone();
            want.remove(10);
            assert_eq!(got, want, "byte {i}");
            assert_eq!(losses.len(), 1);
            assert_eq!((losses[0].records, losses[0].rest_lost), (1, false));
            assert!(
                losses[0].note.contains("next intact record header"),
                "{:?}",
                losses[0]
            );
        }
        // With CRC checks off, nothing after a bad length can be trusted.
        let mut bad = bytes.clone();
        bad[at + 7] ^= 0xff;
        let mut r = RecordReader::new("mem", io::Cursor::new(bad), Compression::None, false);
        let mut n = 0;
        loop {
            match r.next_record() {
                Ok(Some(_)) => n += 1,
                Ok(None) => break,
                Err(_) => {
                    let l = r.recover().unwrap();
                    assert!(l.rest_lost, "{l:?}");
                }
            }
        }
        assert_eq!(n, 10);
    }
}
