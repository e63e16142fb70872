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
    /// file, else built by scanning the file's record headers.
    pub fn of_file(path: &str) -> Result<RecordIndex> {
        let idx = RecordIndex::path_for(path);
        let fresh = |p: &str| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        match (fresh(&idx), fresh(path)) {
            (Some(i), Some(d)) if i >= d => RecordIndex::read(&idx, path),
            _ => RecordIndex::scan(path),
        }
    }

    /// Builds the index by reading each record's header (its length and the length's CRC,
    /// checked) and seeking past its data.
    pub fn scan(path: &str) -> Result<RecordIndex> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let mut r = BufReader::with_capacity(1 << 16, file);
        let mut index = RecordIndex::default();
        let mut at = 0u64;
        let mut header = [0u8; HEADER as usize];
        while at < len {
            let record = index.len() as u64;
            let bad = |reason: String| Error::CorruptRecord {
                file: path.to_string(),
                record,
                offset: at,
                reason,
            };
            if len - at < HEADER {
                return Err(bad(format!(
                    "{} bytes at the end are not a record",
                    len - at
                )));
            }
            r.read_exact(&mut header).map_err(|e| Error::io(path, e))?;
            let (len8, crc4) = header.split_at(8);
            if masked_crc32c(len8) != u32::from_le_bytes([crc4[0], crc4[1], crc4[2], crc4[3]]) {
                return Err(bad(
                    "length CRC mismatch: not a TFRecord file, or damaged".into()
                ));
            }
            let n = u64::from_le_bytes([
                len8[0], len8[1], len8[2], len8[3], len8[4], len8[5], len8[6], len8[7],
            ]);
            let size = n
                .checked_add(HEADER + FOOTER)
                .filter(|s| *s <= len - at)
                .ok_or_else(|| bad(format!("a record of {n} bytes does not fit in the file")))?;
            index.offsets.push(at);
            index.sizes.push(size);
            let skip = i64::try_from(size - HEADER).map_err(|_| bad("record too large".into()))?;
            r.seek_relative(skip).map_err(|e| Error::io(path, e))?;
            at += size;
        }
        Ok(index)
    }

    /// Reads an index file (`<offset> <size>` per line) of data file `data`.
    pub fn read(idx: &str, data: &str) -> Result<RecordIndex> {
        let text = std::fs::read(idx).map_err(|e| Error::io(idx, e))?;
        let data_len = std::fs::metadata(data)
            .map_err(|e| Error::io(data, e))?
            .len();
        let mut index = RecordIndex::default();
        index.offsets.reserve(text.len() / 8);
        index.sizes.reserve(text.len() / 8);
        let mut end = 0u64;
        let mut at = 0;
        let mut line = 0usize;
        while at < text.len() {
            line += 1;
            let bad = |why: &str| {
                Error::invalid(
                    "index",
                    format!("{idx}, line {line}: {why} (rebuild it with `stoker index {data}`)"),
                )
            };
            let Some((offset, size, next)) = index_line(&text, at) else {
                return Err(bad("expected `<offset> <size>`, whole numbers"));
            };
            at = next;
            if offset < end || size < HEADER + FOOTER || offset.saturating_add(size) > data_len {
                return Err(bad("the record does not fit the data file"));
            }
            end = offset + size;
            index.offsets.push(offset);
            index.sizes.push(size);
        }
        Ok(index)
    }

    /// Writes the index as `<offset> <size>` lines.
    pub fn write(&self, idx: &str) -> Result<()> {
        let tmp = format!("{idx}.tmp-{}", std::process::id());
        let io = |e| Error::io(idx, e);
        let mut w = BufWriter::new(File::create(&tmp).map_err(io)?);
        for (o, s) in self.offsets.iter().zip(&self.sizes) {
            writeln!(w, "{o} {s}").map_err(io)?;
        }
        w.flush().map_err(io)?;
        drop(w);
        std::fs::rename(&tmp, idx).map_err(io)
    }
}

/// The line of `text` at `at`: `<a> <b>` (decimal, separated by spaces or tabs), and where
/// the next line starts; `None` for anything else. Written out because an index has a line
/// per record: splitting and `str::parse` per field made reading one cost more than scanning
/// its data file.
fn index_line(text: &[u8], mut at: usize) -> Option<(u64, u64, usize)> {
    let mut numbers = [0u64; 2];
    for (k, v) in numbers.iter_mut().enumerate() {
        while k > 0 && matches!(text.get(at), Some(b' ' | b'\t')) {
            at += 1;
        }
        let start = at;
        while let Some(&b) = text.get(at).filter(|b| b.is_ascii_digit()) {
            *v = *v * 10 + u64::from(b - b'0');
            at += 1;
        }
        // At most 19 digits: no overflow.
        if at == start || at - start > 19 {
            return None;
        }
    }
    while matches!(text.get(at), Some(b' ' | b'\t' | b'\r')) {
        at += 1;
    }
    match text.get(at) {
        None => Some((numbers[0], numbers[1], at)),
        Some(b'\n') => Some((numbers[0], numbers[1], at + 1)),
        Some(_) => None,
    }
}

/// Reads records of one file by index, checking their framing and (optionally) data CRCs.
pub struct RecordFile {
    path: String,
    file: File,
    pub index: RecordIndex,
    verify_crc: bool,
}

impl RecordFile {
    pub fn open(path: &str, index: RecordIndex, verify_crc: bool) -> Result<RecordFile> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        Ok(RecordFile {
            path: path.to_string(),
            file,
            index,
            verify_crc,
        })
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    /// The data of `records` (sorted by record), reading records that lie close together
    /// in one read each.
    pub fn read_many(&self, records: &[usize]) -> Result<Vec<Bytes>> {
        // Only records nearly adjacent are read together: scattered ones (a global shuffle's)
        // would make a read carry far more than the records.
        const GAP: u64 = 4 << 10;
        const SPAN: u64 = 1 << 20;
        if let Some(&bad) = records.iter().find(|&&r| r >= self.index.len()) {
            return self.read(bad).map(|_| Vec::new());
        }
        let mut out = Vec::with_capacity(records.len());
        let mut k = 0;
        while k < records.len() {
            let first = records[k];
            let start = self.index.offsets[first];
            let mut end = start + self.index.sizes[first];
            let mut j = k + 1;
            while let Some(&r) = records.get(j) {
                let (o, s) = (self.index.offsets[r], self.index.sizes[r]);
                if o < end || o - end > GAP || o + s - start > SPAN {
                    break;
                }
                end = o + s;
                j += 1;
            }
            let mut span = vec![0u8; (end - start) as usize];
            read_exact_at(&self.file, &mut span, start).map_err(|e| Error::io(&*self.path, e))?;
            let span = Bytes::from(span);
            for &r in &records[k..j] {
                let at = (self.index.offsets[r] - start) as usize;
                let framed = span.slice(at..at + self.index.sizes[r] as usize);
                out.push(self.check(r, framed)?);
            }
            k = j;
        }
        Ok(out)
    }

    /// The data of record `i`'s framed bytes, its framing and CRCs checked.
    fn check(&self, i: usize, framed: Bytes) -> Result<Bytes> {
        let (offset, size) = (self.index.offsets[i], self.index.sizes[i]);
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
        let data = framed.slice(HEADER as usize..(size - FOOTER) as usize);
        if self.verify_crc
            && masked_crc32c(&data).to_le_bytes() != framed[(size - FOOTER) as usize..]
        {
            return Err(bad("data CRC mismatch: the record's content is damaged"));
        }
        Ok(data)
    }

    /// Record `i`'s data.
    pub fn read(&self, i: usize) -> Result<Bytes> {
        let (Some(&offset), Some(&size)) = (self.index.offsets.get(i), self.index.sizes.get(i))
        else {
            return Err(Error::invalid(
                "index",
                format!(
                    "{} has {} records, not {}",
                    self.path,
                    self.index.len(),
                    i + 1
                ),
            ));
        };
        let mut framed = vec![0u8; size as usize];
        read_exact_at(&self.file, &mut framed, offset).map_err(|e| Error::io(&*self.path, e))?;
        self.check(i, Bytes::from(framed))
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
        let f = RecordFile::open(&path, index, true).unwrap();
        assert_eq!(&f.read(2).unwrap()[..], b"hello world");
        assert_eq!(&f.read(0).unwrap()[..], b"");
        assert!(f.read(3).is_err());
        // Several at once (read together where they lie close): the same data.
        let many = f.read_many(&[0, 2]).unwrap();
        assert_eq!(
            (&many[0][..], &many[1][..]),
            (&b""[..], &b"hello world"[..])
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
    }
}
