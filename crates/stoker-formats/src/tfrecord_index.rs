//! Record indexes: where each record of an (uncompressed) TFRecord file starts, for random
//! access.
//!
//! The index file sits beside the data file, named `<file>.idx`, in the text format of
//! NVIDIA DALI's `tfrecord2idx`: one line per record, `<offset> <size>`, both decimal, where
//! `offset` is the byte at which the record's 12-byte header starts and `size` the whole
//! framed record (header, data and the 4-byte data CRC). `stoker index FILE...` writes them;
//! without one, [`RecordIndex::of_file`] builds the index by a scan of the record headers
//! (reading 12 bytes per record and seeking past the data).

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::sync::Mutex;

use bytes::Bytes;
use stoker_core::{Error, Result};

use crate::masked_crc32c;

const HEADER: u64 = 12;
const FOOTER: u64 = 4;

/// The records of one file: offsets of their headers and their framed sizes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordIndex {
    pub offsets: Vec<u64>,
    pub sizes: Vec<u64>,
}

impl RecordIndex {
    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// The index file's name for data file `path`.
    pub fn path_for(path: &str) -> String {
        format!("{path}.idx")
    }

    /// The index of `path`: read from `<path>.idx` when that exists and is not older than the
    /// file (and agrees with it: see [`IndexReader::of_file`]), else built by scanning the
    /// file's record headers.
    pub fn of_file(path: &str) -> Result<RecordIndex> {
        IndexReader::of_file(path)?.into_index()
    }

    /// Builds the index by reading each record's header (its length and the length's CRC,
    /// checked) and seeking past its data.
    pub fn scan(path: &str) -> Result<RecordIndex> {
        IndexReader::scan(path)?.into_index()
    }

    /// The intact records of `path`, found by reading the file through as the sequential
    /// reader does under the skip policy (every CRC checked; where a record is damaged it
    /// resyncs at the next intact header), and what each damaged span cost (the records known
    /// lost there, the bytes passed over, and why).
    pub fn scan_skipping(
        path: &str,
    ) -> Result<(RecordIndex, Vec<crate::tfrecord_reader::Recovery>)> {
        let mut reader = crate::RecordReader::open(path, crate::Compression::None, true)?;
        let mut index = RecordIndex::default();
        let mut lost = Vec::new();
        loop {
            match reader.next_record() {
                Ok(Some((data, origin))) => {
                    index.offsets.push(origin.offset);
                    index.sizes.push(data.len() as u64 + 16);
                }
                Ok(None) => return Ok((index, lost)),
                Err(Error::CorruptRecord { .. }) => lost.push(reader.recover()?),
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads an index file (`<offset> <size>` per line) of data file `data`.
    pub fn read(idx: &str, data: &str) -> Result<RecordIndex> {
        IndexReader::text(idx, data)?.into_index()
    }

    /// Writes the index as `<offset> <size>` lines. A file already at `idx` is replaced only
    /// if it is a record index too (empty, or `<offset> <size>` lines): anything else is not
    /// stoker's to overwrite, and is an error naming it.
    pub fn write(&self, idx: &str) -> Result<()> {
        let io = |e| Error::io(idx, e);
        match std::fs::read(idx) {
            Ok(old) if !looks_like_an_index(&old) => {
                return Err(Error::invalid(
                    "index",
                    format!(
                        "{idx} exists and is not a record index (lines `<offset> <size>`): \
                         not overwritten; move it away to write the index there"
                    ),
                ))
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(e)),
        }
        let tmp = format!("{idx}.tmp-{}", std::process::id());
        let mut w = BufWriter::new(File::create(&tmp).map_err(io)?);
        for (o, s) in self.offsets.iter().zip(&self.sizes) {
            writeln!(w, "{o} {s}").map_err(io)?;
        }
        w.flush().map_err(io)?;
        drop(w);
        std::fs::rename(&tmp, idx).map_err(io)
    }
}

/// A file's index, read only as far as the records asked for: a restore reaches into the
/// part of each file read so far, not to its end.
pub struct IndexReader {
    /// The records read so far.
    index: RecordIndex,
    /// The number of records, once counted.
    count: Option<usize>,
    source: Source,
}

enum Source {
    /// An index file, parsed in blocks of whole lines.
    Text {
        idx: String,
        data: String,
        data_len: u64,
        text: Mapped,
        /// Bytes and lines parsed so far.
        at: usize,
        line: usize,
        /// Once counted: where some lines start (byte, line number), one per block of text,
        /// so that a line is found without parsing the lines before it.
        marks: Vec<(usize, usize)>,
    },
    /// The data file's record headers, read one by one.
    Scan {
        path: String,
        reader: BufReader<File>,
        at: u64,
        len: u64,
    },
    Done,
}

/// Bytes of index text parsed at once (then on to the end of the line).
const CHUNK: usize = 64 << 10;

/// Bytes of index text between two line marks (then on to the end of the line): a record
/// is found by parsing about half as many bytes, and the marks take about 1/64 of the text.
const MARK: usize = 1 << 10;

/// An index file mapped into memory (an empty one is not mapped).
struct Mapped(Option<memmap2::Mmap>);

impl Mapped {
    fn open(path: &str) -> Result<Mapped> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        if file.metadata().map_err(|e| Error::io(path, e))?.len() == 0 {
            return Ok(Mapped(None));
        }
        // SAFETY: the map is read-only and private to this reader. Its bytes change only if
        // another program rewrites the index file in place while it is mapped (`stoker index`
        // writes a new file and renames it); then parsing sees other digits (checked against
        // the data file like any index line) or, if the file is cut short, the process gets
        // SIGBUS, as with any memory-mapped reader.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
        Ok(Mapped(Some(map)))
    }

    fn bytes(&self) -> &[u8] {
        self.0.as_deref().unwrap_or_default()
    }
}

/// The end of the block of `text` starting at `from`: the end of the line holding byte
/// `from + size`, or of the text.
fn block_end(text: &[u8], from: usize, size: usize) -> usize {
    let at = from.saturating_add(size).min(text.len());
    text[at..]
        .iter()
        .position(|&b| b == b'\n')
        .map_or(text.len(), |p| at + p + 1)
}

impl IndexReader {
    /// From `<path>.idx` when that exists and is not older than the file, else by a scan.
    /// An index file that disagrees with the file where that is cheap to see is an error
    /// (see [`check_against_data`](Self::check_against_data)).
    pub fn of_file(path: &str) -> Result<IndexReader> {
        let idx = RecordIndex::path_for(path);
        let fresh = |p: &str| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        match (fresh(&idx), fresh(path)) {
            (Some(i), Some(d)) if i >= d => {
                let mut index = IndexReader::text(&idx, path)?;
                index.check_against_data()?;
                Ok(index)
            }
            _ => IndexReader::scan(path),
        }
    }

    /// Checks that an index file agrees with its data file, as far as a look at its ends
    /// shows: its records end where the file ends, the file can hold as many, and the first
    /// and last records' headers in the file say the sizes the index says. (The lines between
    /// are checked as they are parsed, each record starting where the one before ends, and
    /// each record read is checked against its header.) A disagreeing index is an error that
    /// names it and says how to rebuild it; it is not used, nor touched. A scan's index
    /// agrees by making.
    pub fn check_against_data(&mut self) -> Result<()> {
        let Source::Text {
            idx,
            data,
            data_len,
            ..
        } = &self.source
        else {
            return Ok(());
        };
        let (idx, data, data_len) = (idx.clone(), data.clone(), *data_len);
        let stale = |why: String| {
            Error::invalid(
                "index",
                format!(
                    "{idx} does not match {data}: {why} (stale or cut short? rebuild it with \
                     `stoker index {data}`, or delete it)"
                ),
            )
        };
        let n = self.count()?;
        if n == 0 || data_len == 0 {
            if n == 0 && data_len == 0 {
                return Ok(());
            }
            return Err(stale(format!(
                "it lists {n} records, the file has {data_len} bytes"
            )));
        }
        if n as u64 > data_len / (HEADER + FOOTER) {
            return Err(stale(format!(
                "it lists {n} records, more than the file's {data_len} bytes can hold"
            )));
        }
        let ends = self
            .locate(&[0, n - 1])?
            .ok_or_else(|| stale("its last line cannot be read".into()))?;
        let (first, last) = (ends[0], ends[1]);
        if first.0 != 0 || last.0 + last.1 != data_len {
            return Err(stale(format!(
                "its {n} records end at byte {}, the file has {data_len} bytes",
                last.0 + last.1
            )));
        }
        let file = File::open(&data).map_err(|e| Error::io(&*data, e))?;
        for (i, (offset, size)) in [(0, first), (n - 1, last)] {
            let mut h = [0u8; HEADER as usize];
            read_exact_at(&file, &mut h, offset).map_err(|e| Error::io(&*data, e))?;
            let (len8, crc4) = h.split_at(8);
            let len = u64::from_le_bytes(len8.try_into().unwrap_or([0xff; 8]));
            if masked_crc32c(len8).to_le_bytes() != crc4
                || len.checked_add(HEADER + FOOTER) != Some(size)
            {
                return Err(stale(format!(
                    "record {i}'s header at byte {offset} does not say the {size} bytes it lists"
                )));
            }
        }
        Ok(())
    }

    /// From index file `idx` of data file `data`.
    pub fn text(idx: &str, data: &str) -> Result<IndexReader> {
        let text = Mapped::open(idx)?;
        let data_len = std::fs::metadata(data)
            .map_err(|e| Error::io(data, e))?
            .len();
        Ok(IndexReader {
            index: RecordIndex::default(),
            count: None,
            source: Source::Text {
                idx: idx.to_string(),
                data: data.to_string(),
                data_len,
                text,
                at: 0,
                line: 0,
                marks: Vec::new(),
            },
        })
    }

    /// By a scan of data file `path`'s record headers.
    pub fn scan(path: &str) -> Result<IndexReader> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        Ok(IndexReader {
            index: RecordIndex::default(),
            count: None,
            source: Source::Scan {
                path: path.to_string(),
                reader: BufReader::with_capacity(1 << 16, file),
                at: 0,
                len,
            },
        })
    }

    /// The records read so far.
    pub fn index(&self) -> &RecordIndex {
        &self.index
    }

    /// Reads on until record `i` is known or the index ends: whether record `i` exists.
    pub fn reach(&mut self, i: usize) -> Result<bool> {
        while self.index.len() <= i {
            if !self.more()? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The number of records. An index file's lines are counted, not parsed: where the
    /// records lie is read only when asked for.
    pub fn count(&mut self) -> Result<usize> {
        if let Some(n) = self.count {
            return Ok(n);
        }
        let n = match &mut self.source {
            Source::Done => self.index.len(),
            Source::Scan { .. } => self.read_all()?.len(),
            Source::Text { text, marks, .. } => {
                let text = text.bytes();
                let (mut from, mut n) = (0, 0);
                while from < text.len() {
                    let end = block_end(text, from, MARK);
                    let block = &text[from..end];
                    marks.push((from, n));
                    n += line_breaks(block);
                    // A last line without its line break.
                    n += usize::from(block.last().is_some_and(|&b| b != b'\n'));
                    from = end;
                }
                n
            }
        };
        self.count = Some(n);
        Ok(n)
    }

    /// Reads the whole index.
    pub fn read_all(&mut self) -> Result<&RecordIndex> {
        while self.more()? {}
        Ok(&self.index)
    }

    pub fn into_index(mut self) -> Result<RecordIndex> {
        self.read_all()?;
        Ok(self.index)
    }

    /// Reads at least one more record, or finds the end: false at the end.
    fn more(&mut self) -> Result<bool> {
        let before = self.index.len();
        match &mut self.source {
            Source::Done => return Ok(false),
            Source::Text { .. } => self.more_text()?,
            Source::Scan { .. } => self.more_scan()?,
        }
        Ok(self.index.len() > before)
    }

    /// Parses the next block of index text.
    fn more_text(&mut self) -> Result<()> {
        let Source::Text {
            idx,
            data,
            data_len,
            text,
            at,
            line,
            ..
        } = &mut self.source
        else {
            return Ok(());
        };
        let bytes = text.bytes();
        if *at >= bytes.len() {
            self.source = Source::Done;
            return Ok(());
        }
        let end = block_end(bytes, *at, CHUNK);
        *line += parse_lines(&bytes[*at..end], &mut self.index, Some(0), *data_len)
            .map_err(|(before, why)| bad_line(idx, data, *line + before, why))?;
        *at = end;
        Ok(())
    }

    /// Where records `records` (sorted) lie: (offset, framed size) each; `None` when the last
    /// is past the end. A counted index file is parsed from the line mark before the first
    /// record to the last one, and nothing of it is kept; otherwise it is read as far as the
    /// last record and kept.
    pub fn locate(&mut self, records: &[usize]) -> Result<Option<Vec<(u64, u64)>>> {
        let Some(&last) = records.last() else {
            return Ok(Some(Vec::new()));
        };
        let parsed = self.index.len();
        if let Source::Text {
            idx,
            data,
            data_len,
            text,
            marks,
            ..
        } = &self.source
        {
            if last >= parsed && !marks.is_empty() {
                return stream(idx, data, *data_len, text.bytes(), marks, records);
            }
        }
        if !self.reach(last)? {
            return Ok(None);
        }
        let index = &self.index;
        Ok(Some(
            records
                .iter()
                .map(|&r| (index.offsets[r], index.sizes[r]))
                .collect(),
        ))
    }

    /// Reads the next record's header (its length and the length's CRC, checked) and seeks
    /// past its data.
    fn more_scan(&mut self) -> Result<()> {
        let Source::Scan {
            path,
            reader,
            at,
            len,
        } = &mut self.source
        else {
            return Ok(());
        };
        if *at >= *len {
            self.source = Source::Done;
            return Ok(());
        }
        let record = self.index.len() as u64;
        let bad = |reason: String| Error::CorruptRecord {
            file: path.clone(),
            record,
            offset: *at,
            reason,
        };
        if *len - *at < HEADER {
            return Err(bad(format!(
                "{} bytes at the end are not a record",
                *len - *at
            )));
        }
        let mut header = [0u8; HEADER as usize];
        reader
            .read_exact(&mut header)
            .map_err(|e| Error::io(&**path, e))?;
        let (len8, crc4) = header.split_at(8);
        if masked_crc32c(len8) != u32::from_le_bytes([crc4[0], crc4[1], crc4[2], crc4[3]]) {
            let hint = if *at == 0 {
                crate::Compression::hint(&header)
            } else {
                ""
            };
            return Err(bad(format!(
                "length CRC mismatch: not a TFRecord file, or damaged{hint}"
            )));
        }
        let n = u64::from_le_bytes([
            len8[0], len8[1], len8[2], len8[3], len8[4], len8[5], len8[6], len8[7],
        ]);
        let size = n
            .checked_add(HEADER + FOOTER)
            .filter(|s| *s <= *len - *at)
            .ok_or_else(|| bad(format!("a record of {n} bytes does not fit in the file")))?;
        let skip = i64::try_from(size - HEADER).map_err(|_| bad("record too large".into()))?;
        reader
            .seek_relative(skip)
            .map_err(|e| Error::io(&**path, e))?;
        self.index.offsets.push(*at);
        self.index.sizes.push(size);
        *at += size;
        Ok(())
    }
}

/// Records `records` (sorted, at least one) of index `text`, parsed from the line mark before
/// the first (see `Source::Text`) through the last, keeping only theirs; `None` when the last
/// is past the end.
fn stream(
    idx: &str,
    data: &str,
    data_len: u64,
    text: &[u8],
    marks: &[(usize, usize)],
    records: &[usize],
) -> Result<Option<Vec<(u64, u64)>>> {
    let mark_of = |r: usize| marks[marks.partition_point(|&(_, l)| l <= r).max(1) - 1];
    let (mut from, mut line) = mark_of(records[0]);
    let mut out = Vec::with_capacity(records.len());
    let mut block_index = RecordIndex::default();
    let mut wanted = records.iter().peekable();
    while let Some(&&next) = wanted.peek() {
        // Blocks holding no record wanted are skipped.
        let (mark, mark_line) = mark_of(next);
        if mark_line > line {
            (from, line) = (mark, mark_line);
            block_index = RecordIndex::default();
        }
        if from >= text.len() {
            return Ok(None);
        }
        let end = block_end(text, from, MARK);
        // Each record is checked against the one before it: keep the last of a block.
        let keep = block_index.len().saturating_sub(1);
        block_index.offsets.drain(..keep);
        block_index.sizes.drain(..keep);
        let base = line - block_index.len();
        // The first line starts the file; a block entered at a later mark has no record
        // before it to follow.
        let start = (line == 0).then_some(0);
        line += parse_lines(&text[from..end], &mut block_index, start, data_len)
            .map_err(|(before, why)| bad_line(idx, data, line + before, why))?;
        from = end;
        while let Some(&&r) = wanted.peek().filter(|&&&r| r < line) {
            out.push((block_index.offsets[r - base], block_index.sizes[r - base]));
            wanted.next();
        }
    }
    Ok(Some(out))
}

/// Line `line` (from 0) of index `idx` of data file `data` is bad.
fn bad_line(idx: &str, data: &str, line: usize, why: &str) -> Error {
    Error::invalid(
        "index",
        format!(
            "{idx}, line {}: {why} (rebuild it with `stoker index {data}`)",
            line + 1
        ),
    )
}

/// Whether `text` is a record index: empty, or lines of two whole numbers.
fn looks_like_an_index(text: &[u8]) -> bool {
    text.split(|&b| b == b'\n')
        .filter(|line| !line.is_empty())
        .all(|line| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let mut fields = line
                .split(|b| matches!(b, b' ' | b'\t'))
                .filter(|f| !f.is_empty());
            let number = |f: Option<&[u8]>| f.is_some_and(|f| f.iter().all(u8::is_ascii_digit));
            number(fields.next()) && number(fields.next()) && fields.next().is_none()
        })
}

/// The number of `\n` in `text`, counted in blocks small enough for a byte to hold each
/// block's count, so that the compiler makes vector code of it.
fn line_breaks(text: &[u8]) -> usize {
    text.chunks(255)
        .map(|block| {
            let n = block
                .iter()
                .fold(0u8, |n, &b| n.wrapping_add(u8::from(b == b'\n')));
            usize::from(n)
        })
        .sum()
}

/// Parses `text`, whole lines `<offset> <size>` (decimal, separated by spaces or tabs; the
/// last may lack its line break) into `index`, checking that each record starts where the one
/// before ends (at `start` for the first, when `index` is empty and that is known; records
/// lie end to end in a TFRecord file) and lies inside the data file of `data_len` bytes: the
/// number of lines. A bad line: how many lines came before it, and what is wrong.
fn parse_lines(
    text: &[u8],
    index: &mut RecordIndex,
    start: Option<u64>,
    data_len: u64,
) -> std::result::Result<usize, (usize, &'static str)> {
    const SYNTAX: &str = "expected `<offset> <size>`, whole numbers";
    let mut end = index
        .offsets
        .last()
        .zip(index.sizes.last())
        .map(|(o, s)| o + s)
        .or(start);
    let blank = |b: &u8| matches!(b, b' ' | b'\t');
    let mut at = 0;
    let mut lines = 0;
    while at < text.len() {
        let (offset, n) = decimal(text, at);
        at += n;
        let gap = text[at..].iter().take_while(|b| blank(b)).count();
        at += gap;
        let (size, m) = decimal(text, at);
        at += m;
        at += text[at..]
            .iter()
            .take_while(|b| blank(b) || **b == b'\r')
            .count();
        if n == 0 || m == 0 || gap == 0 || n > 19 || m > 19 {
            return Err((lines, SYNTAX));
        }
        match text.get(at) {
            Some(b'\n') => at += 1,
            None => {}
            Some(_) => return Err((lines, SYNTAX)),
        }
        if size < HEADER + FOOTER || offset.saturating_add(size) > data_len {
            return Err((lines, "the record does not fit the data file"));
        }
        if end.is_some_and(|e| offset != e) {
            return Err((
                lines,
                "the record does not start where the one before it ends",
            ));
        }
        end = Some(offset + size);
        index.offsets.push(offset);
        index.sizes.push(size);
        lines += 1;
    }
    Ok(lines)
}

/// The decimal number at `text[at..]` and its number of digits (0 when there is none; more
/// than 19, when there are, the value is wrong and the caller refuses it). Eight digits at a
/// time (SWAR: one 64-bit word holds eight characters), as an index has a line per record.
fn decimal(text: &[u8], mut at: usize) -> (u64, usize) {
    const POW10: [u64; 9] = [
        1,
        10,
        100,
        1_000,
        10_000,
        100_000,
        1_000_000,
        10_000_000,
        100_000_000,
    ];
    let start = at;
    let mut value = 0u64;
    while let Some(word) = text
        .get(at..at + 8)
        .and_then(|w| <[u8; 8]>::try_from(w).ok())
    {
        let w = u64::from_le_bytes(word);
        let n = leading_digits(w);
        if at - start + n > 19 {
            return (0, 20);
        }
        if n > 0 {
            value = value * POW10[n] + eight_digits(w, n);
            at += n;
        }
        if n < 8 {
            return (value, at - start);
        }
    }
    // Fewer than eight characters left.
    while let Some(d) = text
        .get(at)
        .map(|b| b.wrapping_sub(b'0'))
        .filter(|d| *d < 10)
    {
        if at - start == 19 {
            return (0, 20);
        }
        value = value * 10 + u64::from(d);
        at += 1;
    }
    (value, at - start)
}

/// How many of the eight characters in `w` (the first in its lowest byte) are digits before
/// the first that is not.
fn leading_digits(w: u64) -> usize {
    const HIGH: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    // A byte is a digit when its high nibble is 3 and so is the high nibble of it plus 6
    // (0x30..=0x39). A carry out of a byte of 0xFA or more reaches only later bytes, and that
    // byte is not a digit: the count up to it is right.
    let high = w & HIGH;
    let shifted = (w.wrapping_add(0x0606_0606_0606_0606) & HIGH) >> 4;
    let not_digit = (high | shifted) ^ 0x3333_3333_3333_3333;
    (not_digit.trailing_zeros() / 8) as usize
}

/// The value of the first `n` (1 to 8) characters of `w`, all digits.
fn eight_digits(w: u64, n: usize) -> u64 {
    // Digits to values, moved to the top bytes: the bytes below are leading zeros.
    let v = w.wrapping_sub(0x3030_3030_3030_3030) << (8 * (8 - n));
    // Pairs, then quads, then all eight (each step combines neighbours by multiplying).
    let v = v.wrapping_mul(10).wrapping_add(v >> 8);
    let pairs = 0x0000_00FF_0000_00FF;
    ((v & pairs)
        .wrapping_mul(0x000F_4240_0000_0064)
        .wrapping_add(((v >> 16) & pairs).wrapping_mul(0x0000_2710_0000_0001)))
        >> 32
}

/// Reads records of one file by index, checking their framing and (optionally) data CRCs.
/// The index is read as far as the records asked for.
pub struct RecordFile {
    path: String,
    file: File,
    index: Mutex<IndexReader>,
    verify_crc: bool,
}

impl RecordFile {
    /// The file at `path` with its index (see [`IndexReader::of_file`]).
    pub fn open(path: &str, verify_crc: bool) -> Result<RecordFile> {
        RecordFile::with_index(path, IndexReader::of_file(path)?, verify_crc)
    }

    /// Like [`open`](RecordFile::open), for the skip policy: where the index cannot be read
    /// (a record header damaged), the records whose framing is intact, found as the
    /// sequential reader finds them, and what the damage cost (see
    /// [`RecordIndex::scan_skipping`]).
    pub fn open_skipping(
        path: &str,
        verify_crc: bool,
    ) -> Result<(RecordFile, Vec<crate::tfrecord_reader::Recovery>)> {
        let mut index = IndexReader::of_file(path)?;
        match index.count() {
            Ok(_) => Ok((RecordFile::with_index(path, index, verify_crc)?, Vec::new())),
            Err(Error::CorruptRecord { .. }) => {
                let (index, lost) = RecordIndex::scan_skipping(path)?;
                let reader = IndexReader {
                    count: Some(index.len()),
                    index,
                    source: Source::Done,
                };
                Ok((RecordFile::with_index(path, reader, verify_crc)?, lost))
            }
            Err(e) => Err(e),
        }
    }

    pub fn with_index(path: &str, index: IndexReader, verify_crc: bool) -> Result<RecordFile> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        Ok(RecordFile {
            path: path.to_string(),
            file,
            index: Mutex::new(index),
            verify_crc,
        })
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    fn index(&self) -> std::sync::MutexGuard<'_, IndexReader> {
        // A panic while reading the index leaves a shorter index, still a correct one.
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The number of records (see [`IndexReader::count`]).
    pub fn count(&self) -> Result<usize> {
        self.index().count()
    }

    /// Reads the whole index and keeps it, for reads all over the file.
    pub fn load_index(&self) -> Result<()> {
        self.index().read_all().map(drop)
    }

    /// Where record `i` starts; for the record after the last one, where the last one ends.
    pub fn offset(&self, i: usize) -> Result<u64> {
        let mut index = self.index();
        let count = index.count()?;
        if i > count {
            return Err(self.past_end(count, i));
        }
        if i == 0 && count == 0 {
            return Ok(0);
        }
        let r = i.min(count - 1);
        match index.locate(&[r])?.as_deref() {
            Some(&[(o, _)]) if r == i => Ok(o),
            Some(&[(o, s)]) => Ok(o + s),
            _ => Err(self.past_end(count, i)),
        }
    }

    fn past_end(&self, len: usize, i: usize) -> Error {
        Error::invalid(
            "index",
            format!("{} has {len} records, not {}", self.path, i + 1),
        )
    }

    /// Where records `records` (sorted) lie: (offset, framed size) each.
    fn locate(&self, records: &[usize]) -> Result<Vec<(u64, u64)>> {
        let mut index = self.index();
        match index.locate(records)? {
            Some(at) => Ok(at),
            None => {
                let count = index.count()?;
                Err(self.past_end(count, records.last().copied().unwrap_or(0)))
            }
        }
    }

    /// The data of `records` (sorted by record) and the offsets they lie at, reading records
    /// that lie close together in one read each. The records' data is copied into one buffer
    /// that they share, so that what lies between them is not kept.
    pub fn read_many(&self, records: &[usize]) -> Result<Vec<(Bytes, u64)>> {
        thread_local! {
            /// What a read brings in, records and what lies between them: kept for the
            /// thread's next read, so that each read does not take fresh memory.
            static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        let at = self.locate(records)?;
        let total: u64 = at.iter().map(|&(_, s)| s - HEADER - FOOTER).sum();
        let mut data: Vec<u8> = Vec::with_capacity(total as usize);
        SCRATCH.with_borrow_mut(|scratch| self.read_spans(records, &at, scratch, &mut data))?;
        let data = Bytes::from(data);
        let mut from = 0;
        Ok(at
            .iter()
            .map(|&(o, s)| {
                let n = (s - HEADER - FOOTER) as usize;
                from += n;
                (data.slice(from - n..from), o)
            })
            .collect())
    }

    /// Reads records `records` (sorted), lying at `at`, appending their data to `data`: those
    /// close together in one read each, through `scratch`.
    fn read_spans(
        &self,
        records: &[usize],
        at: &[(u64, u64)],
        scratch: &mut Vec<u8>,
        data: &mut Vec<u8>,
    ) -> Result<()> {
        // Only records nearly adjacent are read together: scattered ones (a global shuffle's)
        // would make a read carry far more than the records.
        const GAP: u64 = 4 << 10;
        const SPAN: u64 = 256 << 10;
        let mut k = 0;
        while k < records.len() {
            let start = at[k].0;
            let mut end = start + at[k].1;
            let mut j = k + 1;
            while let Some(&(o, s)) = at.get(j) {
                if o < end || o - end > GAP || o + s - start > SPAN {
                    break;
                }
                end = o + s;
                j += 1;
            }
            scratch.resize((end - start) as usize, 0);
            read_exact_at(&self.file, scratch, start).map_err(|e| Error::io(&*self.path, e))?;
            for (&r, &(o, s)) in records[k..j].iter().zip(&at[k..j]) {
                let from = (o - start) as usize;
                let framed = &scratch[from..from + s as usize];
                data.extend_from_slice(self.check(r, o, framed)?);
            }
            k = j;
        }
        Ok(())
    }

    /// The data of record `i`'s framed bytes (at `offset`), its framing and CRCs checked.
    fn check<'a>(&self, i: usize, offset: u64, framed: &'a [u8]) -> Result<&'a [u8]> {
        let size = framed.len() as u64;
        let bad = |reason: &str| Error::CorruptRecord {
            file: self.path.clone(),
            record: i as u64,
            offset,
            reason: format!(
                "{reason} (is the index {} stale?)",
                RecordIndex::path_for(&self.path)
            ),
        };
        let n = u64::from_le_bytes(framed[..8].try_into().unwrap_or([0; 8]));
        if n + HEADER + FOOTER != size || masked_crc32c(&framed[..8]).to_le_bytes() != framed[8..12]
        {
            return Err(bad("the record's header does not match the index"));
        }
        let (data, crc) = framed[HEADER as usize..].split_at((size - HEADER - FOOTER) as usize);
        if self.verify_crc && masked_crc32c(data).to_le_bytes() != crc {
            return Err(bad("data CRC mismatch: the record's content is damaged"));
        }
        Ok(data)
    }

    /// Record `i`'s data.
    pub fn read(&self, i: usize) -> Result<Bytes> {
        let [(offset, size)] = self.locate(&[i])?[..] else {
            return Err(self.past_end(0, i));
        };
        let mut framed = vec![0u8; size as usize];
        read_exact_at(&self.file, &mut framed, offset).map_err(|e| Error::io(&*self.path, e))?;
        let n = self.check(i, offset, &framed)?.len();
        Ok(Bytes::from(framed).slice(HEADER as usize..HEADER as usize + n))
    }
}

#[cfg(unix)]
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

#[cfg(not(unix))]
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    use std::io::{Seek, SeekFrom};
    let mut f = file.try_clone()?;
    f.seek(SeekFrom::Start(offset))?;
    f.read_exact(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tfrecord_writer::RecordWriter;
    use crate::Compression;
    use std::path::Path;

    fn write(dir: &Path, records: &[&[u8]]) -> String {
        let path = dir.join("r.tfrecord");
        let mut w = RecordWriter::new(Vec::new(), Compression::None);
        for r in records {
            w.write(r).unwrap();
        }
        std::fs::write(&path, w.finish().unwrap()).unwrap();
        path.to_string_lossy().into_owned()
    }

    #[test]
    fn scan_write_read_and_random_access_agree() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), &[b"", b"abc", b"hello world"]);
        let index = RecordIndex::scan(&path).unwrap();
        assert_eq!(index.offsets, vec![0, 16, 35]);
        assert_eq!(index.sizes, vec![16, 19, 27]);
        let idx = RecordIndex::path_for(&path);
        index.write(&idx).unwrap();
        assert_eq!(
            std::fs::read_to_string(&idx).unwrap(),
            "0 16\n16 19\n35 27\n"
        );
        assert_eq!(RecordIndex::of_file(&path).unwrap(), index);
        let f = RecordFile::open(&path, true).unwrap();
        assert_eq!(f.count().unwrap(), 3);
        assert_eq!(f.offset(3).unwrap(), 62);
        assert!(f.offset(4).is_err());
        assert_eq!(&f.read(2).unwrap()[..], b"hello world");
        assert_eq!(&f.read(0).unwrap()[..], b"");
        assert!(f.read(3).is_err());
        // Several at once (read together where they lie close): the same data.
        let many = f.read_many(&[0, 2]).unwrap();
        assert_eq!(
            (&many[0].0[..], many[0].1, &many[1].0[..], many[1].1),
            (&b""[..], 0, &b"hello world"[..], 35)
        );
        assert!(f.read_many(&[1, 3]).is_err());
    }

    #[test]
    fn bad_files_and_indexes_are_located_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), &[b"abc", b"defg"]);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.truncate(bytes.len() - 2);
        std::fs::write(&path, &bytes).unwrap();
        let e = RecordIndex::scan(&path).unwrap_err().to_string();
        assert!(e.contains("record 1") && e.contains("does not fit"), "{e}");
        let idx = RecordIndex::path_for(&path);
        std::fs::write(&idx, "0 19\nnope\n").unwrap();
        let e = RecordIndex::read(&idx, &path).unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("stoker index"), "{e}");
        std::fs::write(&idx, "0 19\n19 900\n").unwrap();
        let e = RecordIndex::read(&idx, &path).unwrap_err().to_string();
        assert!(e.contains("does not fit"), "{e}");
        // Not an index at all: one endless line is refused.
        std::fs::write(&idx, vec![b'7'; 1 << 20]).unwrap();
        let e = RecordIndex::read(&idx, &path).unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("whole numbers"), "{e}");
        // An empty index of an empty file: no records.
        std::fs::write(&path, b"").unwrap();
        std::fs::write(&idx, b"").unwrap();
        let mut r = IndexReader::text(&idx, &path).unwrap();
        assert_eq!(r.count().unwrap(), 0);
        assert_eq!(r.locate(&[0]).unwrap(), None);
        assert!(RecordIndex::read(&idx, &path).unwrap().is_empty());
    }

    #[test]
    fn decimals_eight_digits_at_a_time() {
        for v in [
            0u64,
            7,
            10,
            99,
            12_345_678,
            123_456_789,
            u64::from(u32::MAX),
            9_999_999_999_999_999_999,
        ] {
            for tail in ["", " ", "\n", " 16\n", "x", "\u{ff}123"] {
                let text = format!("{v}{tail}");
                assert_eq!(
                    decimal(text.as_bytes(), 0),
                    (v, v.to_string().len()),
                    "{text:?}"
                );
                let padded = format!("ab{text}");
                assert_eq!(decimal(padded.as_bytes(), 2).0, v, "{padded:?}");
            }
        }
        assert_eq!(decimal(b"x1", 0), (0, 0));
        assert_eq!(decimal(b"", 0), (0, 0));
        assert!(decimal(b"12345678901234567890", 0).1 > 19);
        assert!(decimal(b"1234567890123456789012345 1", 0).1 > 19);
        // Every byte value after a digit: only the ten digits continue a number.
        for b in 0..=255u8 {
            let text = [b'5', b, b'1', b'2', b'3', b'4', b'5', b'6', b'7', b'8'];
            let n = decimal(&text, 0).1;
            assert_eq!(n > 1, b.is_ascii_digit(), "byte {b}");
        }
    }

    #[test]
    fn an_index_is_read_as_far_as_asked_across_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("d.tfrecord");
        let n = 20_000u64;
        std::fs::write(&data, vec![0u8; (n * 16 + 5) as usize]).unwrap();
        let data = data.to_string_lossy().into_owned();
        let idx = RecordIndex::path_for(&data);
        // Lines of different lengths, CRLF and tabs, no line break at the end.
        let mut text = String::new();
        for i in 0..n {
            let sep = if i % 3 == 0 { "\t" } else { " " };
            let end = if i % 5 == 0 { "\r\n" } else { "\n" };
            text.push_str(&format!(
                "{}{sep}{}{end}",
                i * 16,
                16 + 5 * u64::from(i == n - 1)
            ));
        }
        std::fs::write(&idx, text.trim_end()).unwrap();
        assert!(std::fs::metadata(&idx).unwrap().len() > 2 * CHUNK as u64);
        let mut r = IndexReader::text(&idx, &data).unwrap();
        assert!(r.reach(10).unwrap());
        assert!(r.index().len() < n as usize, "read further than needed");
        // Counted, not parsed; then records found from the nearest line mark, not kept.
        assert_eq!(r.count().unwrap(), n as usize);
        let parsed = r.index().len();
        assert!(parsed < n as usize);
        let want = [3, parsed + 1, 9_000, 15_000, 15_001, n as usize - 1];
        let at = r.locate(&want).unwrap().unwrap();
        let expect: Vec<(u64, u64)> = want
            .iter()
            .map(|&i| (i as u64 * 16, 16 + 5 * u64::from(i as u64 == n - 1)))
            .collect();
        assert_eq!(at, expect);
        // From a later line mark.
        let at = r.locate(&want[3..]).unwrap().unwrap();
        assert_eq!(at, expect[3..]);
        assert_eq!(r.index().len(), parsed);
        assert_eq!(r.locate(&[17, n as usize]).unwrap(), None);
        assert!(r.reach(n as usize - 1).unwrap());
        assert!(!r.reach(n as usize).unwrap());
        let all = r.into_index().unwrap();
        assert_eq!(all.len(), n as usize);
        assert!(all
            .offsets
            .iter()
            .enumerate()
            .all(|(i, &o)| o == i as u64 * 16));
        assert_eq!(all.sizes[n as usize - 1], 21);
        assert_eq!(all.sizes[0], 16);
    }

    #[test]
    fn a_locate_parses_only_the_blocks_holding_records_wanted() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("d.tfrecord");
        let n = 20_000usize;
        std::fs::write(&data, vec![0u8; n * 16]).unwrap();
        let data = data.to_string_lossy().into_owned();
        let idx = RecordIndex::path_for(&data);
        let text: String = (0..n)
            .map(|i| {
                if i == 10_000 {
                    "damaged\n".to_string()
                } else {
                    format!("{} 16\n", i * 16)
                }
            })
            .collect();
        std::fs::write(&idx, text).unwrap();
        let mut r = IndexReader::text(&idx, &data).unwrap();
        assert_eq!(r.count().unwrap(), n);
        // The damaged line lies in a block between the records wanted.
        let at = r.locate(&[5, 6, 19_000]).unwrap().unwrap();
        assert_eq!(at, [(80, 16), (96, 16), (19_000 * 16, 16)]);
        let err = r.locate(&[10_000]).unwrap_err().to_string();
        assert!(err.contains("line 10001"), "{err}");
    }

    /// Sets `path`'s modification time `secs` seconds from now.
    fn touch(path: &str, secs: i64) {
        let t = std::time::SystemTime::now();
        let t = if secs >= 0 {
            t + std::time::Duration::from_secs(secs as u64)
        } else {
            t - std::time::Duration::from_secs(secs.unsigned_abs())
        };
        File::options()
            .append(true)
            .open(path)
            .unwrap()
            .set_modified(t)
            .unwrap();
    }

    #[test]
    fn a_short_or_empty_index_newer_than_its_file_is_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let records: Vec<Vec<u8>> = (0..1000).map(|i| format!("r{i}").into_bytes()).collect();
        let path = write(
            dir.path(),
            &records.iter().map(Vec::as_slice).collect::<Vec<_>>(),
        );
        let full = RecordIndex::scan(&path).unwrap();
        let idx = RecordIndex::path_for(&path);
        let lines: Vec<String> = full
            .offsets
            .iter()
            .zip(&full.sizes)
            .map(|(o, s)| format!("{o} {s}\n"))
            .collect();
        // Half the lines, none, the last cut short, a size wrong at the end: each is an error
        // naming the index and saying how to rebuild it, and the index file is not touched.
        let last = lines.len() - 1;
        let wrong_last = format!("{} {}\n", full.offsets[last], full.sizes[last] + 1);
        let cut = lines.concat();
        let cut = &cut[..cut.len() - 4];
        for (text, why) in [
            (lines[..500].concat(), "its 500 records end at byte"),
            (String::new(), "it lists 0 records"),
            (cut.to_string(), "line 1000"),
            (
                lines[..last].concat() + &wrong_last,
                "line 1000: the record does not fit",
            ),
        ] {
            std::fs::write(&idx, &text).unwrap();
            touch(&idx, 10);
            let e = RecordFile::open(&path, true).err().unwrap().to_string();
            assert!(
                e.contains(&idx) && e.contains(why) && e.contains("stoker index"),
                "{e}"
            );
            assert_eq!(std::fs::read_to_string(&idx).unwrap(), text);
        }
        // Lines that agree at the ends but whose last header in the file says another size.
        let mut other = lines.clone();
        let (o, s) = (
            full.offsets[last - 1],
            full.sizes[last - 1] + full.sizes[last],
        );
        other.truncate(last - 1);
        other.push(format!("{o} {s}\n"));
        std::fs::write(&idx, other.concat()).unwrap();
        touch(&idx, 10);
        let e = RecordFile::open(&path, true).err().unwrap().to_string();
        assert!(e.contains("record 998's header"), "{e}");
        // Older than the file: scanned, as before.
        touch(&idx, -100);
        let f = RecordFile::open(&path, true).unwrap();
        assert_eq!(f.count().unwrap(), 1000);
        let many = f.read_many(&[0, 499, 500, 999]).unwrap();
        let got: Vec<&[u8]> = many.iter().map(|(d, _)| &d[..]).collect();
        assert_eq!(got, [&b"r0"[..], b"r499", b"r500", b"r999"]);
        // A line left out in the middle: the ends agree, and the line that does not follow
        // the one before it is a located error when the index is read.
        let mut gap = lines.clone();
        gap.remove(500);
        std::fs::write(&idx, gap.concat()).unwrap();
        touch(&idx, 10);
        let f = RecordFile::open(&path, true).unwrap();
        let e = f.load_index().unwrap_err().to_string();
        assert!(
            e.contains("line 501") && e.contains("does not start where the one before it ends"),
            "{e}"
        );
        // The whole index, as `stoker index` writes it, is used as it is.
        std::fs::write(&idx, lines.concat()).unwrap();
        touch(&idx, 10);
        let mut r = IndexReader::of_file(&path).unwrap();
        assert!(matches!(r.source, Source::Text { .. }));
        assert_eq!(r.count().unwrap(), 1000);
    }

    #[test]
    fn writing_an_index_never_replaces_a_file_that_is_not_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), &[b"abc", b"defg"]);
        let idx = RecordIndex::path_for(&path);
        let index = RecordIndex::scan(&path).unwrap();
        for theirs in [
            &b"my notes\n"[..],
            b"0 19 extra\n",
            b"\x00\x01binary",
            b"12\n",
        ] {
            std::fs::write(&idx, theirs).unwrap();
            let e = index.write(&idx).unwrap_err().to_string();
            assert!(e.contains(&idx) && e.contains("not a record index"), "{e}");
            assert_eq!(std::fs::read(&idx).unwrap(), theirs);
        }
        // An index (stoker's, DALI's: the same lines; stale or empty) is replaced.
        for old in [&b"0 19\n19 20\n"[..], b"0\t16\r\n", b""] {
            std::fs::write(&idx, old).unwrap();
            index.write(&idx).unwrap();
            assert_eq!(std::fs::read_to_string(&idx).unwrap(), "0 19\n19 20\n");
        }
    }
}
