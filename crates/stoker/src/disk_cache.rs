//! `cache(filename)`: the first complete pass writes every element to `filename` (TFRecord
//! framing, so every element is CRC-checked when read back); later passes — in this process or
//! another — read the file instead of running the input. The file appears only when a pass
//! completes (written under a temporary name, then renamed), so an interrupted pass leaves no
//! half cache behind.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use stoker_core::element::{Element, Names, Schema};
use stoker_core::exec::{BoxIter, ElementIter, MakeIter};
use stoker_core::{DType, Error, Result};
use stoker_formats::{Compression, RecordReader, RecordWriter};

use crate::element_codec;

#[derive(serde::Serialize, serde::Deserialize)]
struct Header {
    stoker_cache: u32,
    fields: Vec<(String, DType)>,
}

fn header_of(names: &Names, dtypes: impl Iterator<Item = DType>) -> Header {
    Header {
        stoker_cache: 1,
        fields: names.iter().map(|n| n.to_string()).zip(dtypes).collect(),
    }
}

/// Replays `path` if a complete cache is there, else runs the input and writes it.
pub fn iterate(path: &str, schema: &Schema, mut make_input: MakeIter) -> Result<BoxIter> {
    if Path::new(path).is_file() {
        return Ok(Box::new(Reader::open(path, schema)?));
    }
    Ok(Box::new(Writer {
        input: Some(make_input()?),
        path: path.to_string(),
        tmp: format!("{path}.tmp-{}", std::process::id()),
        out: None,
        buf: Vec::new(),
        empty_header: header_of(&schema.names(), schema.fields.iter().map(|f| f.dtype)),
    }))
}

struct Reader {
    records: RecordReader,
    names: Names,
}

impl Reader {
    fn open(path: &str, schema: &Schema) -> Result<Reader> {
        let mut records = RecordReader::open(path, Compression::None, true)?;
        let bad = |why: String| {
            Error::invalid(
                "cache",
                format!("{path}: {why}; delete the file to rebuild the cache"),
            )
        };
        let (head, _) = records
            .next_record()?
            .ok_or_else(|| bad("the cache file is empty".into()))?;
        let header: Header = serde_json::from_slice(&head)
            .map_err(|e| bad(format!("not a stoker cache file ({e})")))?;
        if !schema.dynamic {
            let want: Vec<(String, DType)> = schema
                .fields
                .iter()
                .map(|f| (f.name.clone(), f.dtype))
                .collect();
            if want != header.fields {
                return Err(bad(format!(
                    "it holds fields {:?} but the pipeline produces {:?}",
                    header.fields, want
                )));
            }
        }
        let names: Names = header
            .fields
            .iter()
            .map(|(n, _)| std::sync::Arc::from(n.as_str()))
            .collect();
        Ok(Reader { records, names })
    }
}

impl ElementIter for Reader {
    fn next(&mut self) -> Result<Option<Element>> {
        match self.records.next_record()? {
            Some((data, _)) => element_codec::decode(data, &self.names).map(Some),
            None => Ok(None),
        }
    }
}

struct Writer {
    input: Option<BoxIter>,
    path: String,
    tmp: String,
    out: Option<RecordWriter<BufWriter<File>>>,
    buf: Vec<u8>,
    empty_header: Header,
}

impl Writer {
    fn io(&self, e: std::io::Error) -> Error {
        Error::io(self.tmp.clone(), e)
    }

    fn writer(&mut self, header: &Header) -> Result<&mut RecordWriter<BufWriter<File>>> {
        if self.out.is_none() {
            let mut w =
                RecordWriter::create(&self.tmp, Compression::None).map_err(|e| self.io(e))?;
            let head = serde_json::to_vec(header).map_err(|e| Error::internal(e.to_string()))?;
            w.write(&head).map_err(|e| self.io(e))?;
            self.out = Some(w);
        }
        self.out
            .as_mut()
            .ok_or_else(|| Error::internal("cache writer"))
    }
}

impl ElementIter for Writer {
    fn next(&mut self) -> Result<Option<Element>> {
        let Some(input) = self.input.as_mut() else {
            return Ok(None);
        };
        match input.next()? {
            Some(e) => {
                let header = header_of(&e.names, e.tensors.iter().map(|t| t.dtype()));
                let mut buf = std::mem::take(&mut self.buf);
                element_codec::encode(&e, &mut buf);
                let r = self.writer(&header)?.write(&buf);
                self.buf = buf;
                r.map_err(|err| self.io(err))?;
                Ok(Some(e))
            }
            None => {
                self.input = None;
                let header = std::mem::replace(
                    &mut self.empty_header,
                    header_of(&Names::from(vec![]), std::iter::empty()),
                );
                self.writer(&header)?;
                if let Some(w) = self.out.take() {
                    let file = w.finish().map_err(|e| self.io(e))?;
                    file.into_inner()
                        .map_err(|e| self.io(e.into_error()))?
                        .sync_all()
                        .map_err(|e| self.io(e))?;
                }
                std::fs::rename(&self.tmp, &self.path)
                    .map_err(|e| Error::io(self.path.clone(), e))?;
                Ok(None)
            }
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        if self.out.take().is_some() {
            // An unfinished pass: its partial file must not be taken for a cache.
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}
