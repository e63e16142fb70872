//! Lines of text files (tf.data's `TextLineDataset`): each line without its `\n`, and without
//! any `\r` in it (as TensorFlow's line reader drops them), as a scalar string in field
//! `line`. A last line without a `\n` counts; an empty file has no lines.

use std::io::{BufRead, BufReader};
use std::sync::Arc;

use stoker_core::element::{names, Element, Names};
use stoker_core::exec::{ElementIter, State};
use stoker_core::{Error, Origin, Result, Tensor};

use crate::compression::Compression;
use crate::tfrecord_reader::ByteStream;

const BUFFER: usize = 256 << 10;

pub struct TextLineIter {
    reader: BufReader<ByteStream>,
    path: Arc<str>,
    /// Lines handed out, and the (decompressed) offset of the next one.
    line: u64,
    offset: u64,
    names: Names,
    buf: Vec<u8>,
}

impl TextLineIter {
    pub const FIELD: &'static str = "line";

    pub fn open(path: &str, compression: Compression) -> Result<TextLineIter> {
        Self::with_stream(path, ByteStream::open(path, compression)?, 0, 0)
    }

    /// Restored at a state this iterator reported.
    pub fn open_at(path: &str, compression: Compression, state: &State) -> Result<TextLineIter> {
        let (line, offset) = (state.int("text_line", 0)?, state.int("text_line", 1)?);
        let stream = ByteStream::open_at(path, compression, offset)?;
        Self::with_stream(path, stream, line, offset)
    }

    fn with_stream(path: &str, stream: ByteStream, line: u64, offset: u64) -> Result<TextLineIter> {
        Ok(TextLineIter {
            reader: BufReader::with_capacity(BUFFER, stream),
            path: Arc::from(path),
            line,
            offset,
            names: names(&[Self::FIELD]),
            buf: Vec::new(),
        })
    }
}

impl ElementIter for TextLineIter {
    fn next(&mut self) -> Result<Option<Element>> {
        self.buf.clear();
        let n = self.reader.read_until(b'\n', &mut self.buf).map_err(|e| {
            Error::io(
                self.path.to_string(),
                std::io::Error::new(
                    e.kind(),
                    format!(
                        "line {} (byte {} of the data): {e}",
                        self.line + 1,
                        self.offset
                    ),
                ),
            )
        })?;
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
        self.line += 1;
        if self.buf.last() == Some(&b'\n') {
            self.buf.pop();
        }
        self.buf.retain(|&b| b != b'\r');
        let t = Tensor::scalar_bytes(bytes::Bytes::copy_from_slice(&self.buf), Some(origin));
        Ok(Some(Element::new(self.names.clone(), vec![t])))
    }

    fn state(&self) -> Result<State> {
        Ok(State::leaf(vec![self.line, self.offset]))
    }
}
