//! Reading TFRecord files: framing, CRC checks, located errors, and recovery after damage.
//!
//! Records are handed out as [`Bytes`] slices of large read buffers: no per-record copy.
//!
//! What damage costs (the skip policy calls [`RecordReader::recover`] after each error):
//! - a record whose data fails its CRC: that record, when an intact header (or the end of the
//!   file) follows where its length says it ends; otherwise its length is what is wrong (or the
//!   damage runs on into the next header), and the reader resynchronises as after a bad header;
//! - a damaged record header (length CRC, a length past the end of the file or above
//!   `max_record_bytes`, a torn header): with CRC checks on, the reader resynchronises on the
//!   next header whose length CRC checks out (and whose record fits), so the records after it
//!   are read (with checks off, nothing can be trusted after a bad header: the rest of the file
//!   is lost). The records lost in the bytes passed over are counted as far as they can be
//!   known: the damaged one, one more where the damage runs past the end its length gave, and
//!   each header inside whose length CRC checks out but whose record cannot be read; records
//!   whose headers were destroyed cannot be counted, so the bytes passed over are reported too
//!   ([`Recovery::bytes`]);
//! - a damaged GZIP/ZLIB stream (a bad deflate block, a wrong trailer checksum, a truncated
//!   stream, bytes after its end): the rest of the file from the last whole record on, since
//!   deflate cannot restart mid-stream. How many records that was cannot be known.
//!
//! Memory follows the bytes that actually arrive: a header's length is checked against
//! `max_record_bytes` and against what is left of a plain file before anything is allocated,
//! and a compressed stream's buffer grows only as decompressed data comes in, a chunk at a time.

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
/// The default of the largest record read ([`RecordReader::set_max_record_bytes`]): a larger
/// length is a damaged header, or a record too large to hold (a compressed stream can inflate
/// to any length a damaged header claims, so its buffer is bounded by this too).
pub const DEFAULT_MAX_RECORD_BYTES: u64 = 1 << 30;
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
            Fault::Damaged(why) => io::Error::new(io::ErrorKind::InvalidData, StreamDamage(why)),
        })
    }
}

/// Damage in a compressed stream, as a [`ByteStream`]'s read reports it (an `InvalidData`
/// error holding this): nothing after it can be read. Readers built on the stream make it a
/// `CorruptRecordError`, or under the skip policy a file whose rest was lost (`rest_lost`).
#[derive(Debug)]
pub struct StreamDamage(pub String);

impl std::fmt::Display for StreamDamage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StreamDamage {}

impl StreamDamage {
    /// What is wrong, if `e` is a damaged compressed stream (not an error of the file).
    pub fn of(e: &io::Error) -> Option<&str> {
        e.get_ref()
            .and_then(|inner| inner.downcast_ref::<StreamDamage>())
            .map(|d| d.0.as_str())
    }

    /// The damage met reading `what` (e.g. "line 7"), record `record` at decompressed byte
    /// `offset` of `file`: under the skip policy the rest of the file is counted lost in
    /// `stats` (`rest_lost`, as for TFRecord files) and `Ok` says to end the file; otherwise
    /// the `CorruptRecordError`.
    pub fn lose_rest(
        why: &str,
        file: &str,
        (record, offset): (u64, u64),
        what: &str,
        policy: ErrorPolicy,
        stats: &StageStats,
    ) -> Result<()> {
        let err = Error::CorruptRecord {
            file: file.to_string(),
            record,
            offset,
            reason: format!("{what}: the compressed stream is damaged: {why}"),
        };
        if policy != ErrorPolicy::Skip {
            return Err(err);
        }
        stats.add_loss(
            0,
            true,
            format!("{err}; the rest of the file after byte {offset} (decompressed) is lost"),
        );
        Ok(())
    }
}

/// What an error cost, once the reader has recovered from it (see [`RecordReader::recover`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovery {
    /// Records known to be lost: the damaged one, and those the bytes passed over are known to
    /// have held (0 when the damage was in a compressed stream, whose lost records cannot be
    /// counted).
    pub records: u64,
    /// Bytes of the record stream passed over: the damaged records' and whatever lay between
    /// them and the next record read (0 where the rest of the file was lost). Records whose
    /// headers lay there destroyed are lost too, and cannot be counted.
    pub bytes: u64,
    /// The rest of the file could not be read.
    pub rest_lost: bool,
    /// What was passed over, for the skip reason (empty when nothing more than the record).
    pub note: String,
}

/// The error last returned, and what reading on after it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Damage {
    /// A record's data failed its CRC; the buffer starts at its header and holds its framed
    /// bytes (this many).
    Record(usize),
    /// A record header was bad; the buffer starts at it.
    Header,
    /// The stream ended inside the record (its header checked out; the buffer starts at it):
    /// the file was cut, or the length is wrong and records follow.
    Truncated,
    /// The stream itself failed: nothing more can be read.
    Stream,
}

/// Reads records one by one from a (possibly compressed) stream.
pub struct RecordReader {
    src: Source,
    buf: BytesMut,
    /// Bytes read after `buf`'s, set aside while a long record arrives (see `gather`), and
    /// how many.
    spill: std::collections::VecDeque<Vec<u8>>,
    spilled: usize,
    file: Arc<str>,
    record: u64,
    /// Offset (in the decompressed stream) of `buf[0]`, which is the next record's header.
    offset: u64,
    /// A plain file's size, to check record lengths against before allocating.
    file_len: Option<u64>,
    eof: bool,
    verify_crc: bool,
    max_record_bytes: u64,
    damage: Option<Damage>,
}

/// What a header at a position in the buffer is, to a reader looking for the next record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HeaderAt {
    /// Its length CRC checks out and its record fits: reading goes on from it.
    Intact,
    /// Its length CRC checks out, but its record cannot be read (it runs past the end of the
    /// file, or above `max_record_bytes`): a record lost.
    Unreadable,
    /// Not a header.
    Bad,
}

/// What a resync passed over.
struct Resync {
    /// Bytes passed over, from the position the scan started at.
    skipped: u64,
    /// Whether an intact header was found (else the stream ended).
    found: bool,
    /// Headers passed over whose length CRC checks out but whose record cannot be read.
    unreadable: u64,
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
    /// are passed over. Records are read up to `max_record_bytes` (see
    /// [`set_max_record_bytes`](RecordReader::set_max_record_bytes)).
    pub fn open_at(
        path: &str,
        compression: Compression,
        verify_crc: bool,
        record: u64,
        offset: u64,
        max_record_bytes: u64,
    ) -> Result<RecordReader> {
        if compression != Compression::None {
            // Read as the run that reported the position read it (CRCs checked, damage passed
            // over as the skip policy passes over it), so that the records are counted alike;
            // what the damage cost was counted by that run.
            let mut r = RecordReader::open(path, compression, verify_crc)?;
            r.max_record_bytes = max_record_bytes;
            while r.record < record {
                match r.next_record() {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(Error::CorruptRecord { .. }) => {
                        r.recover()?;
                    }
                    Err(e) => return Err(e),
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
        r.max_record_bytes = max_record_bytes;
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
            spill: std::collections::VecDeque::new(),
            spilled: 0,
            file: Arc::from(name),
            record: 0,
            offset: 0,
            file_len: None,
            eof: false,
            verify_crc,
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
            damage: None,
        }
    }

    /// Sets the largest record read: a header claiming more is an error (a damaged header, or
    /// a record too large to hold), and a compressed stream's buffer grows at most this far.
    pub fn set_max_record_bytes(&mut self, max: u64) {
        self.max_record_bytes = max;
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

    /// Reads until `need` bytes are buffered or the stream ends; true if they are there.
    /// Memory follows what arrives, never `need` itself: a plain file's record (its length
    /// checked against the file's size) is read into a buffer of its size, a chunk at a time;
    /// a longer record from a stream of unknown length is gathered in chunks set aside (see
    /// [`gather`](Self::gather)).
    fn fill(&mut self, need: usize) -> Result<bool> {
        if need.saturating_sub(self.buf.len()) > CHUNK {
            if self.file_len.is_none() {
                return self.gather(need);
            }
            self.buf.reserve(need - self.buf.len());
        }
        while self.buf.len() < need {
            if let Some(piece) = self.spill.pop_front() {
                self.spilled -= piece.len();
                self.buf.extend_from_slice(&piece);
                continue;
            }
            if self.eof {
                break;
            }
            let old = self.buf.len();
            // Only the chunk about to be read into is zeroed: a chunk of inflated zeros can be
            // a thousand times its compressed size.
            self.buf.resize(old + CHUNK, 0);
            let n = match self.src.read(&mut self.buf[old..]) {
                Ok(n) => n,
                Err(fault) => {
                    self.buf.truncate(old);
                    return Err(self.fault(fault));
                }
            };
            self.buf.truncate(old + n);
            self.eof = n == 0;
        }
        Ok(self.buf.len() >= need)
    }

    /// [`fill`](Self::fill) for a record longer than a chunk, from a stream whose length is
    /// not known (a compressed one, which a damaged length can make inflate far past its
    /// file's size): what arrives is set aside in whole chunks, and put together in one buffer
    /// of its size only once the record has all arrived. A length claiming more than the
    /// stream holds costs what arrived, once, and the bytes set aside are read from there on
    /// (by a resync) as from the stream.
    fn gather(&mut self, need: usize) -> Result<bool> {
        let mut have = self.buf.len() + self.spilled;
        while have < need && !self.eof {
            let mut piece = vec![0u8; CHUNK];
            let mut filled = 0;
            while filled < CHUNK && !self.eof {
                match self.src.read(&mut piece[filled..]) {
                    Ok(n) => {
                        filled += n;
                        self.eof = n == 0;
                    }
                    Err(fault) => {
                        piece.truncate(filled);
                        self.spilled += filled;
                        self.spill.push_back(piece);
                        return Err(self.fault(fault));
                    }
                }
            }
            piece.truncate(filled);
            if filled > 0 {
                have += filled;
                self.spilled += filled;
                self.spill.push_back(piece);
            }
        }
        if have < need {
            return Ok(false);
        }
        let mut whole = BytesMut::with_capacity(have);
        whole.extend_from_slice(&self.buf);
        while let Some(piece) = self.spill.pop_front() {
            whole.extend_from_slice(&piece);
        }
        self.spilled = 0;
        self.buf = whole;
        Ok(true)
    }

    /// The error of a failed read of the stream.
    fn fault(&mut self, fault: Fault) -> Error {
        match fault {
            Fault::Io(e) => Error::io(self.file.to_string(), e),
            Fault::Damaged(why) => self.stream_damaged(why),
        }
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
            None => {}
            // Not recovered: on past the record as its length says.
            Some(Damage::Record(total)) => self.pass(total),
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
        if len > self.max_record_bytes {
            self.damage = Some(Damage::Header);
            return Err(self.corrupt(format!(
                "the header says the record holds {len} bytes, more than max_record_bytes \
                 ({}): the header is damaged, or the record is larger than allowed (raise \
                 max_record_bytes to read it)",
                self.max_record_bytes
            )));
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
            let got = self.buf.len() + self.spilled - HEADER;
            self.damage = Some(cut);
            return Err(self.corrupt(format!(
                "truncated record: the header says {len} bytes of data and a 4-byte CRC, \
                 the stream ends {got} bytes after the header"
            )));
        }
        let mut crc4 = [0u8; 4];
        crc4.copy_from_slice(&self.buf[HEADER + len..total]);
        if self.verify_crc
            && masked_crc32c(&self.buf[HEADER..HEADER + len]) != u32::from_le_bytes(crc4)
        {
            // Left in the buffer: if what follows is no header, the length is in doubt, and
            // the next record is looked for inside it.
            self.damage = Some(Damage::Record(total));
            return Err(self.corrupt("data CRC mismatch: the record's content is damaged"));
        }
        let framed = self.buf.split_to(total).freeze();
        let data = framed.slice(HEADER..HEADER + len);
        let origin = Origin {
            file: Arc::clone(&self.file),
            record: self.record,
            offset: self.offset,
        };
        self.record += 1;
        self.offset += total as u64;
        Ok(Some((data, origin)))
    }

    /// Passes over the record at the buffer's start, `total` framed bytes.
    fn pass(&mut self, total: usize) {
        self.buf.advance(total);
        self.record += 1;
        self.offset += total as u64;
    }

    /// After an error from [`next_record`](RecordReader::next_record), gets ready to read on
    /// and says what the damage cost (see the module docs). I/O errors of the file itself are
    /// still errors.
    pub fn recover(&mut self) -> Result<Recovery> {
        let lost = |records, bytes, rest_lost, note: String| Recovery {
            records,
            bytes,
            rest_lost,
            note,
        };
        let Some(damage) = self.damage.take() else {
            return Ok(lost(0, 0, false, String::new()));
        };
        let at = self.offset;
        match damage {
            Damage::Stream => {
                self.end();
                Ok(lost(
                    0,
                    0,
                    true,
                    format!("the rest of the file after byte {at} (decompressed) is lost"),
                ))
            }
            // A header cut short by the end of the file: nothing follows it.
            Damage::Truncated if self.buf.len() < HEADER => {
                let bytes = self.buf.len() as u64;
                self.end();
                Ok(lost(1, bytes, false, String::new()))
            }
            Damage::Header | Damage::Truncated if !self.verify_crc => {
                self.end();
                Ok(lost(
                    1,
                    0,
                    true,
                    format!(
                        "with CRC checks off the next record cannot be found: the rest of the \
                         file after byte {at} is lost"
                    ),
                ))
            }
            Damage::Record(total) => {
                match self.length_confirmed(total) {
                    Ok(true) => {
                        self.pass(total);
                        Ok(lost(1, total as u64, false, String::new()))
                    }
                    // The next record is looked for from the end of this one's header on: a wrong
                    // length may have pointed past it, or short of it.
                    Ok(false) => self.resync_from(HEADER, Some(total)),
                    Err(e) if self.damage == Some(Damage::Stream) => {
                        self.pass(total);
                        let after = self.offset;
                        self.end();
                        Ok(lost(
                        1,
                        total as u64,
                        true,
                        format!("{e}; the rest of the file after byte {after} (decompressed) is lost"),
                    ))
                    }
                    Err(e) => Err(e),
                }
            }
            // The header checked out but its record runs past the end: the file was cut, or
            // the length is wrong and records follow (a write cut short, then appended to).
            Damage::Truncated => self.resync_from(HEADER, None),
            Damage::Header => self.resync_from(1, None),
        }
    }

    /// Whether what follows the record at the buffer's start, of `total` framed bytes by its
    /// length, bears the length out: an intact header, or the end of the stream (or a header
    /// cut short by it, which the next read reports).
    fn length_confirmed(&mut self, total: usize) -> Result<bool> {
        if !self.fill(total + HEADER)? {
            return Ok(true);
        }
        Ok(self.header_at(total, self.offset + total as u64) != HeaderAt::Bad)
    }

    /// Resynchronises after damage at the buffer's start (see [`resync`](Self::resync)), the
    /// scan starting `from` bytes in, and says what was lost. `claimed` is the damaged
    /// record's framed size where its header checked out and its data did not.
    fn resync_from(&mut self, from: usize, claimed: Option<usize>) -> Result<Recovery> {
        let at = self.offset;
        match self.resync(from) {
            Ok(r) => {
                // The damage runs on past where the record's length says it ends, and no
                // header follows there: the bytes from there held at least one more record.
                let past_end = claimed.is_some_and(|total| (total as u64) < r.skipped);
                let records = 1 + r.unreadable + u64::from(past_end);
                self.record += records;
                let span = format!("bytes {at} to {}", at + r.skipped);
                let known = format!(
                    "{records} record{} lost there, more if the headers of others lay in them \
                     destroyed",
                    if records == 1 { "" } else { "s" }
                );
                let note = if r.found {
                    self.offset = at + r.skipped;
                    format!(
                        "skipped {} bytes ({span}) to the next intact record header, at byte \
                         {}: {known}",
                        r.skipped, self.offset
                    )
                } else {
                    self.end();
                    format!(
                        "no intact record header in the last {} bytes ({span}): {known}",
                        r.skipped
                    )
                };
                Ok(Recovery {
                    records,
                    bytes: r.skipped,
                    rest_lost: false,
                    note,
                })
            }
            Err(e) if self.damage == Some(Damage::Stream) => {
                self.record += 1;
                self.end();
                Ok(Recovery {
                    records: 1,
                    bytes: 0,
                    rest_lost: true,
                    note: format!("looking for the next record: {e}; the rest is lost"),
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Reads nothing more.
    fn end(&mut self) {
        self.buf.clear();
        self.spill.clear();
        self.spilled = 0;
        self.eof = true;
        self.damage = None;
    }

    /// Passes over the damage at the buffer's start, looking from `from` bytes in for the
    /// next position where a header's length CRC checks out and its record fits in the file.
    /// Says how far that is (or how far the stream went on without one) and how many
    /// headers on the way checked out but could not be read.
    fn resync(&mut self, from: usize) -> Result<Resync> {
        let from = from.min(self.buf.len());
        let mut r = Resync {
            skipped: from as u64,
            found: false,
            unreadable: 0,
        };
        self.buf.advance(from);
        loop {
            if !self.fill(HEADER)? {
                r.skipped += self.buf.len() as u64;
                self.buf.clear();
                return Ok(r);
            }
            let at = self.offset + r.skipped;
            let last = self.buf.len() - HEADER;
            for p in 0..=last {
                match self.header_at(p, at + p as u64) {
                    HeaderAt::Intact => {
                        self.buf.advance(p);
                        r.skipped += p as u64;
                        r.found = true;
                        return Ok(r);
                    }
                    HeaderAt::Unreadable => r.unreadable += 1,
                    HeaderAt::Bad => {}
                }
            }
            self.buf.advance(last + 1);
            r.skipped += (last + 1) as u64;
        }
    }

    /// What the 12 bytes at `buf[p..]`, at byte `at` of the stream, are.
    fn header_at(&self, p: usize, at: u64) -> HeaderAt {
        let h = &self.buf[p..p + HEADER];
        let mut len8 = [0u8; 8];
        len8.copy_from_slice(&h[..8]);
        let mut crc4 = [0u8; 4];
        crc4.copy_from_slice(&h[8..]);
        let len = u64::from_le_bytes(len8);
        // The cheap bound first: most positions of damaged bytes fail it, and the CRC is not
        // computed. A length above any record's (stoker's or TensorFlow's, 2^31 - 1 bytes of
        // a protocol buffer) is no header. A zero length (every position of a zeroed page)
        // has one CRC, computed once.
        static ZERO_LENGTH_CRC: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
        let crc = u32::from_le_bytes(crc4);
        let intact = if len == 0 {
            crc == *ZERO_LENGTH_CRC.get_or_init(|| masked_crc32c(&[0; 8]))
        } else {
            len <= self.max_record_bytes.max(1 << 31) && masked_crc32c(&len8) == crc
        };
        if !intact {
            return HeaderAt::Bad;
        }
        let fits = len <= self.max_record_bytes
            && self
                .file_len
                .is_none_or(|f| at + HEADER as u64 + len + 4 <= f);
        if fits {
            HeaderAt::Intact
        } else {
            HeaderAt::Unreadable
        }
    }
}

/// A source stage: the records of one file as elements `{"record": bytes}`.
pub struct TfRecordIter {
    reader: RecordReader,
    names: Names,
    policy: ErrorPolicy,
    stats: Arc<StageStats>,
    /// Damaged records passed over before where it stands (see [`State::skipped`]).
    skipped: u64,
}

impl TfRecordIter {
    pub const FIELD: &'static str = "record";

    /// Opens `path`; its records are read up to `max_record_bytes` (see
    /// [`RecordReader::set_max_record_bytes`]).
    pub fn open(
        path: &str,
        compression: Compression,
        verify_crc: bool,
        max_record_bytes: u64,
        policy: ErrorPolicy,
        stats: Arc<StageStats>,
    ) -> Result<TfRecordIter> {
        let mut reader = RecordReader::open(path, compression, verify_crc)?;
        reader.set_max_record_bytes(max_record_bytes);
        Ok(TfRecordIter {
            reader,
            names: names(&[Self::FIELD]),
            policy,
            stats,
            skipped: 0,
        })
    }
}

impl TfRecordIter {
    /// Opens `path` at a position from [`ElementIter::state`].
    pub fn open_at(
        path: &str,
        compression: Compression,
        verify_crc: bool,
        max_record_bytes: u64,
        policy: ErrorPolicy,
        stats: Arc<StageStats>,
        state: &State,
    ) -> Result<TfRecordIter> {
        let (record, offset) = (state.int("tfrecord", 0)?, state.int("tfrecord", 1)?);
        Ok(TfRecordIter {
            reader: RecordReader::open_at(
                path,
                compression,
                verify_crc,
                record,
                offset,
                max_record_bytes,
            )?,
            names: names(&[Self::FIELD]),
            policy,
            stats,
            skipped: state.skipped,
        })
    }
}

impl ElementIter for TfRecordIter {
    fn state(&self) -> Result<State> {
        let (record, offset) = self.reader.position();
        Ok(State::leaf(vec![record, offset]).with_skipped(self.skipped))
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
                    self.skipped += r.records;
                    self.stats.add_skipped_bytes(r.bytes);
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
            DEFAULT_MAX_RECORD_BYTES,
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
        // A header claiming 2^30 bytes (max_record_bytes) with a valid length CRC, in a
        // 112-byte stream.
        let len8 = DEFAULT_MAX_RECORD_BYTES.to_le_bytes();
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

    /// Framed bytes of `records`, and where each starts.
    fn framed(records: &[Vec<u8>]) -> (Vec<u8>, Vec<usize>) {
        let mut starts = Vec::new();
        let mut at = 0;
        for r in records {
            starts.push(at);
            at += r.len() + 16;
        }
        (encoded_vec(records, Compression::None), starts)
    }

    /// Records of seeded random lengths (`lo..hi` bytes, a different content each).
    fn seeded_records(seed: u64, n: usize, lo: usize, hi: usize) -> Vec<Vec<u8>> {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand::rngs::ChaCha12Rng::seed_from_u64(seed);
        (0..n)
            .map(|i| {
                let len = rng.random_range(lo..hi);
                let mut r = format!("record {i} ").into_bytes();
                r.resize(len.max(r.len()), b'a' + (i % 26) as u8);
                r
            })
            .collect()
    }

    /// What the skip policy made of damaged `bytes` (plain, CRCs checked): which of `written`
    /// came through (they must come through whole and in order), the recoveries, and the
    /// framed bytes of the records lost.
    fn account(written: &[Vec<u8>], bytes: Vec<u8>) -> (Vec<usize>, Vec<Recovery>, u64) {
        let (got, losses) = read_skipping(bytes, Compression::None);
        let mut kept = Vec::new();
        let mut i = 0;
        for g in &got {
            while i < written.len() && written[i] != *g {
                i += 1;
            }
            assert!(i < written.len(), "a record that was not written came out");
            kept.push(i);
            i += 1;
        }
        let lost_bytes = (0..written.len())
            .filter(|i| !kept.contains(i))
            .map(|i| written[i].len() as u64 + 16)
            .sum();
        (kept, losses, lost_bytes)
    }

    fn counted(losses: &[Recovery]) -> (u64, u64) {
        (
            losses.iter().map(|l| l.records).sum(),
            losses.iter().map(|l| l.bytes).sum(),
        )
    }

    #[test]
    fn a_zeroed_page_reports_every_byte_it_cost() {
        for seed in 0..20 {
            let recs = seeded_records(seed, 300, 150, 260);
            let (mut bytes, starts) = framed(&recs);
            // A 4 KiB page of the file, zeroed (as a torn write of a page leaves it).
            let page = 4096 * (1 + seed as usize % (bytes.len() / 4096 - 2));
            bytes[page..page + 4096].fill(0);
            // Starting in a record's data, it costs that record and the next, whose header
            // it holds; starting in a header, that record.
            let first = starts.partition_point(|&s| s <= page) - 1;
            let countable = if page >= starts[first] + 12 { 2 } else { 1 };
            let (kept, losses, lost_bytes) = account(&recs, bytes);
            let lost = (recs.len() - kept.len()) as u64;
            let (records, skipped_bytes) = counted(&losses);
            assert!(lost >= 16, "seed {seed}: {lost}");
            // Every byte of every record lost is in the bytes reported, and nothing else.
            assert_eq!(skipped_bytes, lost_bytes, "seed {seed}: {losses:?}");
            // Those inside, whose headers are zeros, cannot be counted.
            assert_eq!(records, countable, "seed {seed}: {records} of {lost}");
            assert!(losses.iter().all(|l| !l.rest_lost), "seed {seed}");
            assert!(
                losses
                    .iter()
                    .any(|l| l.note.contains("more if the headers")),
                "seed {seed}: {losses:?}"
            );
        }
    }

    #[test]
    fn a_write_cut_short_then_appended_to_costs_the_cut_record() {
        // Record 10 written in part (its header and some of its data), then more records
        // appended: its length runs past the end of the file, or (followed by enough records)
        // into them.
        for (after, cut_at) in [(20, 100), (400, 100), (20, 5), (400, 3000)] {
            let recs = seeded_records(7, 10 + 1 + after, 20, 40);
            let mut big = recs.clone();
            big[10] = vec![b'x'; 5000];
            let (bytes, starts) = framed(&big);
            let mut damaged = bytes[..starts[10] + 12 + cut_at].to_vec();
            damaged.extend_from_slice(&bytes[starts[11]..]);
            let (kept, losses, lost_bytes) = account(&big, damaged);
            let want: Vec<usize> = (0..big.len()).filter(|&i| i != 10).collect();
            assert_eq!(kept, want, "after {after}, cut at {cut_at}: {losses:?}");
            assert_eq!(counted(&losses), (1, 12 + cut_at as u64), "{lost_bytes}");
            assert!(losses.iter().all(|l| !l.rest_lost));
        }
        // Two records cut short in a row: the second's header checks out but its record
        // cannot be read, and is counted too.
        let recs = seeded_records(8, 40, 20, 40);
        let mut big = recs.clone();
        big[10] = vec![b'x'; 5000];
        big[11] = vec![b'y'; 5000];
        let (bytes, starts) = framed(&big);
        let mut damaged = bytes[..starts[10] + 12 + 50].to_vec();
        damaged.extend_from_slice(&bytes[starts[11]..starts[11] + 12 + 50]);
        damaged.extend_from_slice(&bytes[starts[12]..]);
        let (kept, losses, _) = account(&big, damaged);
        assert_eq!(
            kept,
            (0..40).filter(|&i| i != 10 && i != 11).collect::<Vec<_>>()
        );
        assert_eq!(counted(&losses), (2, 2 * (12 + 50)));
    }

    #[test]
    fn a_header_with_a_valid_crc_and_a_wrong_length_costs_its_record() {
        let recs = seeded_records(9, 60, 20, 40);
        let (bytes, starts) = framed(&recs);
        let at = starts[3];
        let true_len = recs[3].len() as u64;
        // Longer (into the next records, or past the end of the file) and shorter.
        for len in [true_len + 1, true_len + 500, 100_000, true_len - 5, 0] {
            let mut damaged = bytes.clone();
            let len8 = len.to_le_bytes();
            damaged[at..at + 8].copy_from_slice(&len8);
            damaged[at + 8..at + 12].copy_from_slice(&masked_crc32c(&len8).to_le_bytes());
            let (kept, losses, lost_bytes) = account(&recs, damaged);
            let want: Vec<usize> = (0..recs.len()).filter(|&i| i != 3).collect();
            assert_eq!(kept, want, "length {len}: {losses:?}");
            let (records, skipped_bytes) = counted(&losses);
            assert_eq!(skipped_bytes, lost_bytes, "length {len}");
            // A length short of the record's end cannot be told from damage running on
            // into the next header: then one more is counted.
            let most = if len < true_len { 2 } else { 1 };
            assert!((1..=most).contains(&records), "length {len}: {records}");
        }
    }

    #[test]
    fn seeded_damage_matrix_accounts_for_every_byte_lost() {
        use rand::{RngExt, SeedableRng};
        for seed in 0..200u64 {
            let mut rng = rand::rngs::ChaCha12Rng::seed_from_u64(seed);
            let recs = seeded_records(seed, 120, 1, 300);
            let (mut bytes, starts) = framed(&recs);
            let what = rng.random_range(0..4);
            match what {
                // Bytes flipped anywhere.
                0 => {
                    for _ in 0..rng.random_range(1..6) {
                        let i = rng.random_range(0..bytes.len());
                        bytes[i] ^= rng.random_range(1..=255u8);
                    }
                }
                // A run zeroed.
                1 => {
                    let n = rng.random_range(1..3000);
                    let i = rng.random_range(0..bytes.len() - n);
                    bytes[i..i + n].fill(0);
                }
                // A record's length rewritten with a valid CRC.
                2 => {
                    let r = rng.random_range(0..recs.len() - 1);
                    let len8 = rng.random_range(0..20_000u64).to_le_bytes();
                    bytes[starts[r]..starts[r] + 8].copy_from_slice(&len8);
                    bytes[starts[r] + 8..starts[r] + 12]
                        .copy_from_slice(&masked_crc32c(&len8).to_le_bytes());
                }
                // A run of bytes cut out of the middle.
                _ => {
                    let n = rng.random_range(1..2000);
                    let i = rng.random_range(0..bytes.len() - n);
                    bytes.drain(i..i + n);
                }
            }
            let (kept, losses, lost_bytes) = account(&recs, bytes);
            let lost = (recs.len() - kept.len()) as u64;
            let (records, skipped_bytes) = counted(&losses);
            assert!(losses.iter().all(|l| !l.rest_lost), "seed {seed}");
            assert_eq!(lost == 0, losses.is_empty(), "seed {seed}: {losses:?}");
            assert!(records >= u64::from(lost > 0), "seed {seed}");
            if what == 3 {
                // Bytes cut out are lost without being seen: what is reported is what
                // remained of the records they cut into.
                assert!(skipped_bytes <= lost_bytes, "seed {seed}");
            } else {
                assert_eq!(
                    skipped_bytes, lost_bytes,
                    "seed {seed} ({what}): {losses:?}"
                );
            }
        }
    }

    #[test]
    fn a_compressed_stream_holds_at_most_max_record_bytes_and_what_arrived() {
        // A header claiming 2^31 - 1 bytes (its length CRC valid) before 8 MiB of zeros,
        // which GZIP shrinks to a few KiB.
        let len8 = ((1u64 << 31) - 1).to_le_bytes();
        let mut w = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        io::Write::write_all(&mut w, &len8).unwrap();
        io::Write::write_all(&mut w, &masked_crc32c(&len8).to_le_bytes()).unwrap();
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..8 {
            io::Write::write_all(&mut w, &zeros).unwrap();
        }
        let gz = w.finish().unwrap();
        assert!(gz.len() < 1 << 20);
        // Over the limit: refused at the header, nothing read.
        let mut r = RecordReader::new(
            "big.gz",
            io::Cursor::new(gz.clone()),
            Compression::Gzip,
            true,
        );
        let err = r.next_record().unwrap_err().to_string();
        assert!(
            err.contains("big.gz") && err.contains("record 0") && err.contains("max_record_bytes"),
            "{err}"
        );
        assert!(r.buf.capacity() <= 2 * CHUNK, "{}", r.buf.capacity());
        // Under a larger limit: the buffer holds what arrived, no more than twice over.
        let mut r = RecordReader::new("big.gz", io::Cursor::new(gz), Compression::Gzip, true);
        r.set_max_record_bytes(1 << 32);
        let err = r.next_record().unwrap_err().to_string();
        assert!(err.contains("truncated record"), "{err}");
        let arrived = 12 + (8 << 20);
        assert_eq!(r.buf.len() + r.spilled, arrived);
        let held = r.buf.capacity() + r.spill.iter().map(Vec::capacity).sum::<usize>();
        assert!(held <= arrived + 2 * CHUNK, "{held}");
        // Under the skip policy: one record lost, the bytes that arrived passed over.
        let l = r.recover().unwrap();
        assert_eq!(
            (l.records, l.bytes, l.rest_lost),
            (1, arrived as u64, false)
        );
    }

    #[test]
    fn a_record_over_max_record_bytes_is_a_located_error_and_skipped_past() {
        let recs = numbered(20);
        let mut big = recs.clone();
        big[5] = vec![b'z'; 3000];
        let bytes = encoded_vec(&big, Compression::None);
        let mut r = RecordReader::new("f", io::Cursor::new(bytes), Compression::None, true);
        r.set_max_record_bytes(1000);
        let mut got = Vec::new();
        loop {
            match r.next_record() {
                Ok(Some((d, _))) => got.push(d.to_vec()),
                Ok(None) => break,
                Err(e) => {
                    let m = e.to_string();
                    assert!(
                        m.contains("record 5") && m.contains("max_record_bytes (1000)"),
                        "{m}"
                    );
                    let l = r.recover().unwrap();
                    assert_eq!((l.records, l.bytes), (1, 3016));
                }
            }
        }
        let mut want = recs.clone();
        want.remove(5);
        assert_eq!(got, want);
    }
}
