//! Writing TFRecord files that TensorFlow reads back.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use flate2::write::{GzEncoder, ZlibEncoder};

use crate::compression::Compression;
use crate::masked_crc32c;

enum Sink<W: Write> {
    Plain(W),
    Gzip(GzEncoder<W>),
    Zlib(ZlibEncoder<W>),
}

/// Writes records framed as `u64 length | masked crc(length) | data | masked crc(data)`.
pub struct RecordWriter<W: Write> {
    sink: Sink<W>,
}

impl RecordWriter<BufWriter<File>> {
    pub fn create(path: impl AsRef<Path>, compression: Compression) -> io::Result<Self> {
        let file = File::create(path)?;
        Ok(RecordWriter::new(
            BufWriter::with_capacity(1 << 20, file),
            compression,
        ))
    }
}

impl<W: Write> RecordWriter<W> {
    pub fn new(out: W, compression: Compression) -> Self {
        let level = flate2::Compression::default();
        let sink = match compression {
            Compression::None => Sink::Plain(out),
            Compression::Gzip => Sink::Gzip(GzEncoder::new(out, level)),
            Compression::Zlib => Sink::Zlib(ZlibEncoder::new(out, level)),
        };
        RecordWriter { sink }
    }

    fn out(&mut self) -> &mut dyn Write {
        match &mut self.sink {
            Sink::Plain(w) => w,
            Sink::Gzip(w) => w,
            Sink::Zlib(w) => w,
        }
    }

    pub fn write(&mut self, record: &[u8]) -> io::Result<()> {
        let len = (record.len() as u64).to_le_bytes();
        let mut header = [0u8; 12];
        header[..8].copy_from_slice(&len);
        header[8..].copy_from_slice(&masked_crc32c(&len).to_le_bytes());
        let out = self.out();
        out.write_all(&header)?;
        out.write_all(record)?;
        out.write_all(&masked_crc32c(record).to_le_bytes())
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out().flush()
    }

    /// Ends the compressed stream and flushes; returns the underlying writer.
    pub fn finish(self) -> io::Result<W> {
        let mut w = match self.sink {
            Sink::Plain(w) => w,
            Sink::Gzip(w) => w.finish()?,
            Sink::Zlib(w) => w.finish()?,
        };
        w.flush()?;
        Ok(w)
    }
}
