//! Lines of text files (tf.data's `TextLineDataset`): each line without its `\n`, and without
//! any `\r` in it (as TensorFlow's line reader drops them), as a scalar string in field
//! `line`. A last line without a `\n` counts; an empty file has no lines.
//!
//! For `CsvDataset`, records split as tf.data's CSV reader splits them ([`Split::Csv`]): a
//! record ends at `\n`, `\r` or `\r\n` outside a quoted field, and a quoted field may hold
//! line breaks (kept as they are, `\r` too).
//!
//! Damage in a compressed stream (a bad deflate block, a file cut short) is a
//! `CorruptRecordError` after every whole line before it; under the skip policy the rest of
//! the file is counted lost (`rest_lost`), as for TFRecord files.

use std::io::{BufRead, BufReader};
use std::sync::Arc;

use stoker_core::element::{names, Element, Names};
use stoker_core::exec::{ElementIter, State};
use stoker_core::{Error, ErrorPolicy, Origin, Result, StageStats, Tensor};

use crate::compression::Compression;
use crate::tfrecord_reader::{ByteStream, StreamDamage};

const BUFFER: usize = 256 << 10;

/// How a file splits into elements.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Split {
    /// Lines, as tf.data's `TextLineDataset`.
    #[default]
    Lines,
    /// CSV records, as tf.data's `CsvDataset` reads them: fields separated by `delim`, and
    /// with `quote`, a field that starts with `"` runs to a `"` followed by the delimiter, a
    /// line break or the end of the file (`""` inside it is a quote), line breaks included.
    Csv { delim: u8, quote: bool },
}

/// Where a CSV record reader is inside a record.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Csv {
    FieldStart,
    Unquoted,
    Quoted,
    /// A `"` inside a quoted field: the field's end, or the first of `""`.
    QuoteInQuoted,
}

pub struct TextLineIter {
    reader: BufReader<ByteStream>,
    path: Arc<str>,
    /// Lines read (where the next element starts, counted from 0), and the (decompressed)
    /// offset of the next element.
    line: u64,
    offset: u64,
    names: Names,
    buf: Vec<u8>,
    split: Split,
    policy: ErrorPolicy,
    stats: Arc<StageStats>,
    /// Nothing more is read (the rest of the file was lost to damage).
    ended: bool,
    /// The longest CSV record read ([`MAX_CSV_RECORD_BYTES`]).
    max_record: usize,
}

impl TextLineIter {
    pub const FIELD: &'static str = "line";

    pub fn open(
        path: &str,
        compression: Compression,
        split: Split,
        policy: ErrorPolicy,
        stats: Arc<StageStats>,
    ) -> Result<TextLineIter> {
        let stream = ByteStream::open(path, compression)?;
        Ok(Self::with_stream(
            path,
            stream,
            (0, 0),
            split,
            policy,
            stats,
        ))
    }

    /// Restored at a state this iterator reported.
    pub fn open_at(
        path: &str,
        compression: Compression,
        split: Split,
        policy: ErrorPolicy,
        stats: Arc<StageStats>,
        state: &State,
    ) -> Result<TextLineIter> {
        let (line, offset) = (state.int("text_line", 0)?, state.int("text_line", 1)?);
        let stream = ByteStream::open_at(path, compression, offset)?;
        let mut it = Self::with_stream(path, stream, (line, offset), split, policy, stats);
        // Saved after the rest of the file was lost: it stays lost, counted once (then).
        it.ended = state.ints.get(2) == Some(&1);
        Ok(it)
    }

    fn with_stream(
        path: &str,
        stream: ByteStream,
        (line, offset): (u64, u64),
        split: Split,
        policy: ErrorPolicy,
        stats: Arc<StageStats>,
    ) -> TextLineIter {
        TextLineIter {
            reader: BufReader::with_capacity(BUFFER, stream),
            path: Arc::from(path),
            line,
            offset,
            names: names(&[Self::FIELD]),
            buf: Vec::new(),
            split,
            policy,
            stats,
            ended: false,
            max_record: MAX_CSV_RECORD_BYTES,
        }
    }

    /// Reads the next CSV record into `buf` (without the line break that ends it): the bytes
    /// read, the line breaks among them, and how it ended. A record that outgrows
    /// [`MAX_CSV_RECORD_BYTES`] ends the read (an unclosed quote would take in the rest of the
    /// file).
    fn read_csv_record(
        &mut self,
        delim: u8,
        quote: bool,
    ) -> std::io::Result<(usize, u64, RecordEnd)> {
        let (mut read, mut lines) = (0usize, 0u64);
        let mut state = Csv::FieldStart;
        // A `\r` just passed, inside a field: a line break unless a `\n` follows.
        let mut cr = false;
        loop {
            let chunk = self.reader.fill_buf()?;
            if chunk.is_empty() {
                lines += u64::from(cr);
                let end = if state == Csv::Quoted {
                    RecordEnd::FileEndsInQuote
                } else {
                    RecordEnd::Whole
                };
                return Ok((read, lines, end));
            }
            let mut end = None;
            for (i, &b) in chunk.iter().enumerate() {
                if cr && b != b'\n' {
                    lines += 1;
                }
                cr = b == b'\r';
                if b == b'\n' {
                    lines += 1;
                }
                state = match state {
                    Csv::FieldStart if quote && b == b'"' => Csv::Quoted,
                    Csv::Quoted if b == b'"' => Csv::QuoteInQuoted,
                    Csv::Quoted => Csv::Quoted,
                    // `""`, or (an error decode_csv reports) a quote followed by anything
                    // else: the quoted field goes on, as in TensorFlow.
                    Csv::QuoteInQuoted if b != delim && b != b'\n' && b != b'\r' => Csv::Quoted,
                    _ if b == delim => Csv::FieldStart,
                    _ if b == b'\n' || b == b'\r' => {
                        end = Some(i);
                        break;
                    }
                    _ => Csv::Unquoted,
                };
            }
            match end {
                None => {
                    let n = chunk.len();
                    self.buf.extend_from_slice(chunk);
                    self.reader.consume(n);
                    read += n;
                    if self.buf.len() > self.max_record {
                        return Ok((read, lines, RecordEnd::TooLong));
                    }
                }
                Some(i) => {
                    self.buf.extend_from_slice(&chunk[..i]);
                    self.reader.consume(i + 1);
                    read += i + 1;
                    if cr {
                        // `\r\n` is one line break.
                        if self.reader.fill_buf()?.first() == Some(&b'\n') {
                            self.reader.consume(1);
                            read += 1;
                        }
                        lines += 1;
                    }
                    return Ok((read, lines, RecordEnd::Whole));
                }
            }
        }
    }
}

/// The longest CSV record read (quoted line breaks included): past it a record is an error, or
/// under the skip policy the rest of its file is counted lost.
pub const MAX_CSV_RECORD_BYTES: usize = 64 << 20;

/// How a CSV record's read ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RecordEnd {
    Whole,
    /// The file ended inside a quoted field.
    FileEndsInQuote,
    /// The record grew past [`MAX_CSV_RECORD_BYTES`].
    TooLong,
}

impl ElementIter for TextLineIter {
    fn next(&mut self) -> Result<Option<Element>> {
        if self.ended {
            return Ok(None);
        }
        self.buf.clear();
        let read = match self.split {
            Split::Lines => self
                .reader
                .read_until(b'\n', &mut self.buf)
                .map(|n| (n, 1, RecordEnd::Whole)),
            Split::Csv { delim, quote } => self.read_csv_record(delim, quote),
        };
        let (n, lines, end) = match read {
            Ok(r) => r,
            Err(e) => {
                let at = (self.line, self.offset);
                let what = format!("line {}", self.line + 1);
                if let Some(why) = StreamDamage::of(&e) {
                    StreamDamage::lose_rest(why, &self.path, at, &what, self.policy, &self.stats)?;
                    self.ended = true;
                    return Ok(None);
                }
                return Err(Error::io(
                    self.path.to_string(),
                    std::io::Error::new(
                        e.kind(),
                        format!("{what} (byte {} of the data): {e}", self.offset),
                    ),
                ));
            }
        };
        if n == 0 {
            return Ok(None);
        }
        // Where it came from, so that a later op's error names the file and the line (from 0).
        let origin = Origin {
            file: Arc::clone(&self.path),
            record: self.line,
            offset: self.offset,
        };
        self.offset += n as u64;
        self.line += lines;
        let unreadable = match end {
            RecordEnd::Whole => None,
            RecordEnd::FileEndsInQuote => {
                Some("the file ends inside the quoted field this record opens".to_string())
            }
            RecordEnd::TooLong => Some(format!(
                "the record is longer than {} bytes (a quote that is never closed?)",
                self.max_record
            )),
        };
        if let Some(why) = unreadable {
            // Where the record ends cannot be known: the rest of the file is lost with it.
            self.ended = true;
            let err = Error::invalid_record(
                "CsvDataset",
                Some(&origin),
                0,
                format!("line {}: {why}", origin.record + 1),
            );
            if self.policy != ErrorPolicy::Skip {
                return Err(err);
            }
            self.stats.add_loss(
                0,
                true,
                format!("{err}; the rest of the file from that line is lost"),
            );
            return Ok(None);
        }
        if self.split == Split::Lines {
            if self.buf.last() == Some(&b'\n') {
                self.buf.pop();
            }
            self.buf.retain(|&b| b != b'\r');
        }
        let t = Tensor::scalar_bytes(bytes::Bytes::copy_from_slice(&self.buf), Some(origin));
        Ok(Some(Element::new(self.names.clone(), vec![t])))
    }

    fn state(&self) -> Result<State> {
        let mut ints = vec![self.line, self.offset];
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

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut w = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        w.write_all(data).unwrap();
        w.finish().unwrap()
    }

    /// Reads `bytes` (as file `name` in `dir`) to the end or the first error.
    fn read(
        dir: &std::path::Path,
        bytes: &[u8],
        compression: Compression,
        split: Split,
        policy: ErrorPolicy,
    ) -> (Vec<Vec<u8>>, Result<()>, Arc<StageStats>) {
        let path = dir.join("f");
        std::fs::write(&path, bytes).unwrap();
        let stats = Arc::new(StageStats::new("text_line", "source"));
        let path = path.to_str().unwrap();
        let mut it = TextLineIter::open(path, compression, split, policy, stats.clone()).unwrap();
        let mut got = Vec::new();
        loop {
            match it.next() {
                Ok(Some(e)) => got.push(e.tensors[0].bytes_data().unwrap().values[0].to_vec()),
                Ok(None) => return (got, Ok(()), stats),
                Err(e) => return (got, Err(e), stats),
            }
        }
    }

    #[test]
    fn a_cut_compressed_stream_is_a_located_error_or_a_counted_rest_lost() {
        let dir = tempfile::tempdir().unwrap();
        let text: String = (0..5000).map(|i| format!("line {i}\n")).collect();
        let gz = gzip(text.as_bytes());
        let cut = &gz[..gz.len() / 2];
        for split in [
            Split::Lines,
            Split::Csv {
                delim: b',',
                quote: true,
            },
        ] {
            let (got, end, stats) = read(
                dir.path(),
                cut,
                Compression::Gzip,
                split,
                ErrorPolicy::Raise,
            );
            assert!(!got.is_empty() && got.len() < 5000);
            let want: Vec<Vec<u8>> = (0..got.len())
                .map(|i| format!("line {i}").into_bytes())
                .collect();
            assert_eq!(got, want);
            match end {
                Err(Error::CorruptRecord {
                    file,
                    record,
                    offset,
                    reason,
                }) => {
                    assert!(file.ends_with("/f"), "{file}");
                    assert_eq!(record, got.len() as u64);
                    let before: usize = want.iter().map(|l| l.len() + 1).sum();
                    assert_eq!(offset, before as u64);
                    assert!(
                        reason.contains(&format!("line {}", got.len() + 1))
                            && reason.contains("truncated"),
                        "{reason}"
                    );
                }
                other => panic!("{other:?}"),
            }
            assert_eq!(stats.snapshot().rest_lost, 0);
            let (kept, end, stats) =
                read(dir.path(), cut, Compression::Gzip, split, ErrorPolicy::Skip);
            assert!(end.is_ok(), "{end:?}");
            assert_eq!(kept, got);
            let s = stats.snapshot();
            assert_eq!((s.skipped, s.rest_lost), (0, 1));
            let why = s.last_skip_reason.unwrap();
            assert!(why.contains("the rest of the file after byte"), "{why}");
            // A state saved after the loss restores past it: the loss is not counted again.
            let path = dir.path().join("f");
            let path = path.to_str().unwrap();
            let stats = Arc::new(StageStats::new("text_line", "source"));
            let mut it =
                TextLineIter::open(path, Compression::Gzip, split, ErrorPolicy::Skip, stats)
                    .unwrap();
            while it.next().unwrap().is_some() {}
            let state = it.state().unwrap();
            let again = Arc::new(StageStats::new("text_line", "source"));
            let mut it = TextLineIter::open_at(
                path,
                Compression::Gzip,
                split,
                ErrorPolicy::Skip,
                again.clone(),
                &state,
            )
            .unwrap();
            assert!(it.next().unwrap().is_none());
            assert_eq!(again.snapshot().rest_lost, 0);
        }
    }

    #[test]
    fn csv_records_split_as_tensorflow_reads_them() {
        let dir = tempfile::tempdir().unwrap();
        let csv = Split::Csv {
            delim: b',',
            quote: true,
        };
        let data = b"a,\"x\ny\",1\nb,\"p\"\"q\r\nr\",2\r\nc,z,3\rd,\"e,f\"\n\"g\"\"\"\n";
        let (got, end, _) = read(dir.path(), data, Compression::None, csv, ErrorPolicy::Raise);
        assert!(end.is_ok());
        let want: Vec<&[u8]> = vec![
            b"a,\"x\ny\",1",
            b"b,\"p\"\"q\r\nr\",2",
            b"c,z,3",
            b"d,\"e,f\"",
            b"\"g\"\"\"",
        ];
        assert_eq!(got, want);
        // Without quoting, a quote is a byte like any other; records end at every line break.
        let plain = Split::Csv {
            delim: b',',
            quote: false,
        };
        let (got, _, _) = read(
            dir.path(),
            data,
            Compression::None,
            plain,
            ErrorPolicy::Raise,
        );
        assert_eq!(got.len(), 7);
        assert_eq!(got[0], b"a,\"x");
        // Another delimiter: a quote after `,` does not open a field.
        let pipes = Split::Csv {
            delim: b'|',
            quote: true,
        };
        let (got, _, _) = read(
            dir.path(),
            b"a,\"b\nc|\"d\ne\"\n",
            Compression::None,
            pipes,
            ErrorPolicy::Raise,
        );
        assert_eq!(got, vec![b"a,\"b".to_vec(), b"c|\"d\ne\"".to_vec()]);
    }

    #[test]
    fn csv_records_carry_the_line_they_start_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.csv");
        std::fs::write(&path, b"h\n\"a\nb\r\nc\",1\r\nx,2\rlast,\"\r\"").unwrap();
        let stats = Arc::new(StageStats::new("text_line", "source"));
        let csv = Split::Csv {
            delim: b',',
            quote: true,
        };
        let path = path.to_str().unwrap();
        let mut it = TextLineIter::open(
            path,
            Compression::None,
            csv,
            ErrorPolicy::Raise,
            stats.clone(),
        )
        .unwrap();
        let mut at = Vec::new();
        while let Some(e) = it.next().unwrap() {
            let o = e.tensors[0]
                .bytes_data()
                .unwrap()
                .origin(0)
                .unwrap()
                .clone();
            at.push((o.record, o.offset));
        }
        assert_eq!(at, vec![(0, 0), (1, 2), (4, 14), (5, 18)]);
        // A state saved after the second record restores at the third.
        let mut it = TextLineIter::open(
            path,
            Compression::None,
            csv,
            ErrorPolicy::Raise,
            stats.clone(),
        )
        .unwrap();
        it.next().unwrap();
        it.next().unwrap();
        let state = it.state().unwrap();
        let mut again = TextLineIter::open_at(
            path,
            Compression::None,
            csv,
            ErrorPolicy::Raise,
            stats,
            &state,
        )
        .unwrap();
        let e = again.next().unwrap().unwrap();
        assert_eq!(&e.tensors[0].bytes_data().unwrap().values[0][..], b"x,2");
    }

    #[test]
    fn a_csv_file_ending_inside_a_quoted_field_is_an_error_or_a_skip() {
        let dir = tempfile::tempdir().unwrap();
        let csv = Split::Csv {
            delim: b',',
            quote: true,
        };
        let data = b"a,1\nb,\"open\nc,3\n";
        let (got, end, _) = read(dir.path(), data, Compression::None, csv, ErrorPolicy::Raise);
        assert_eq!(got, vec![b"a,1".to_vec()]);
        let e = end.unwrap_err().to_string();
        assert!(
            e.contains("line 2") && e.contains("inside the quoted field"),
            "{e}"
        );
        let (got, end, stats) = read(dir.path(), data, Compression::None, csv, ErrorPolicy::Skip);
        assert!(end.is_ok() && got == vec![b"a,1".to_vec()]);
        // Where the open record ends cannot be known: the rest of the file is lost.
        assert_eq!((stats.skipped(), stats.rest_lost()), (0, 1));
    }

    #[test]
    fn an_unclosed_quote_costs_at_most_the_longest_record_of_memory() {
        let dir = tempfile::tempdir().unwrap();
        let mut data = b"a,1\nb,\"open\n".to_vec();
        for i in 0..20_000 {
            data.extend_from_slice(format!("row {i},{i}\n").as_bytes());
        }
        std::fs::write(dir.path().join("f"), &data).unwrap();
        let path = dir.path().join("f");
        for policy in [ErrorPolicy::Raise, ErrorPolicy::Skip] {
            let stats = Arc::new(StageStats::new("text_line", "source"));
            let csv = Split::Csv {
                delim: b',',
                quote: true,
            };
            let mut it = TextLineIter::open(
                path.to_str().unwrap(),
                Compression::None,
                csv,
                policy,
                stats.clone(),
            )
            .unwrap();
            it.max_record = 4096;
            assert!(it.next().unwrap().is_some());
            let end = it.next();
            assert!(
                it.buf.capacity() < 4096 + 2 * BUFFER,
                "{}",
                it.buf.capacity()
            );
            match policy {
                ErrorPolicy::Raise => {
                    let e = end.unwrap_err().to_string();
                    assert!(
                        e.contains("line 2") && e.contains("longer than 4096"),
                        "{e}"
                    );
                }
                _ => {
                    assert!(end.unwrap().is_none());
                    assert_eq!(stats.rest_lost(), 1);
                }
            }
        }
    }
}
