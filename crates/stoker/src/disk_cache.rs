//! `cache(filename)`: the first complete pass writes every element to `filename` (TFRecord
//! framing, so every element is CRC-checked when read back); later passes — in this process or
//! another — read the file instead of running the input.
//!
//! The file is a header record (the fields), one record per element, and last a completion
//! record: the element count and a CRC32C over every element record. A pass writes under a
//! temporary name of its own (unique per process and pass) and publishes the file only once
//! it is complete and synced; when two passes finish, the first to publish wins. A file
//! without a valid completion record (cut short, damaged, or not written by this version) is
//! not a cache: the next pass runs the input and replaces it. Damage found while replaying
//! (a bad CRC, an element that does not decode, a count or checksum that does not match the
//! completion record) is an error naming the file and the element.

use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use stoker_core::element::{Element, Names, Schema};
use stoker_core::exec::state::Recount;
use stoker_core::exec::{BoxIter, ElementIter, MakeIter, State};
use stoker_core::{DType, Error, Result};
use stoker_formats::{masked_crc32c, Compression, RecordReader, RecordWriter};

use crate::element_codec;

#[derive(serde::Serialize, serde::Deserialize)]
struct Header {
    stoker_cache: u32,
    fields: Vec<(String, DType)>,
}

/// The version written in headers: 2 added the completion record.
const VERSION: u32 = 2;

fn header_of(names: &Names, dtypes: impl Iterator<Item = DType>) -> Header {
    Header {
        stoker_cache: VERSION,
        fields: names.iter().map(|n| n.to_string()).zip(dtypes).collect(),
    }
}

/// The completion record's content: a magic, the element count and a CRC32C over the element
/// records' bytes, in order.
const END_MAGIC: &[u8; 16] = b"stoker-cache-end";
const END_LEN: usize = 16 + 8 + 4;
/// The completion record as framed in the file: it ends the file, so it is found from the end.
const END_RECORD_LEN: u64 = (12 + END_LEN + 4) as u64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Completion {
    elements: u64,
    crc: u32,
}

impl Completion {
    fn encode(self) -> [u8; END_LEN] {
        let mut out = [0u8; END_LEN];
        out[..16].copy_from_slice(END_MAGIC);
        out[16..24].copy_from_slice(&self.elements.to_le_bytes());
        out[24..].copy_from_slice(&self.crc.to_le_bytes());
        out
    }

    fn decode(data: &[u8]) -> Option<Completion> {
        if data.len() != END_LEN || !data.starts_with(END_MAGIC) {
            return None;
        }
        Some(Completion {
            elements: u64::from_le_bytes(data[16..24].try_into().ok()?),
            crc: u32::from_le_bytes(data[24..].try_into().ok()?),
        })
    }

    /// The completion record at the end of `path`, if the file has a valid one.
    fn of_file(path: &str) -> Result<Option<Completion>> {
        let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        if len < END_RECORD_LEN {
            return Ok(None);
        }
        let mut framed = [0u8; END_RECORD_LEN as usize];
        file.seek(SeekFrom::Start(len - END_RECORD_LEN))
            .and_then(|_| file.read_exact(&mut framed))
            .map_err(|e| Error::io(path, e))?;
        let (head, rest) = framed.split_at(12);
        let (data, crc) = rest.split_at(END_LEN);
        let intact = head[..8] == (END_LEN as u64).to_le_bytes()
            && head[8..] == masked_crc32c(&head[..8]).to_le_bytes()
            && crc == masked_crc32c(data).to_le_bytes();
        Ok(intact.then(|| Completion::decode(data)).flatten())
    }
}

/// Replays `path` if a complete cache is there, else runs the input and writes it.
pub fn iterate(path: &str, schema: &Schema, make_input: MakeIter) -> Result<BoxIter> {
    iterate_at(path, schema, make_input, None)
}

/// Like [`iterate`], at a state its iterator reported: a replay of the file goes on after
/// the elements handed out; a pass that was writing it (or a replay whose file is gone)
/// starts writing again, running the input again through the elements handed out.
pub fn iterate_at(
    path: &str,
    schema: &Schema,
    make_input: MakeIter,
    at: Option<&State>,
) -> Result<BoxIter> {
    let position = at.map(|s| s.int("cache", 1)).transpose()?.unwrap_or(0);
    let mut it = start(path, schema, make_input)?;
    for _ in 0..position {
        if it.next()?.is_none() {
            return Err(stoker_core::exec::state::mismatch("cache"));
        }
    }
    Ok(match at {
        Some(at) => {
            let now = stoker_core::exec::skipped_by_unsaved(&*it);
            let recount = Recount::after_restore(at.skipped, now);
            Box::new(Recounted { inner: it, recount })
        }
        None => it,
    })
}

/// A cache restored at a state: its skip count goes on from the state's (running the input
/// again through the elements handed out counts their bad records again; the file holds none).
struct Recounted {
    inner: BoxIter,
    recount: Recount,
}

impl ElementIter for Recounted {
    fn state(&self) -> Result<State> {
        let mut s = self.inner.state()?;
        s.skipped = self.recount.of(s.skipped);
        Ok(s)
    }

    fn next(&mut self) -> Result<Option<Element>> {
        self.inner.next()
    }
}

fn start(path: &str, schema: &Schema, mut make_input: MakeIter) -> Result<BoxIter> {
    clean_stale_temps(path);
    if Path::new(path).is_file() {
        if let Some(done) = Completion::of_file(path)? {
            return Ok(Box::new(Reader::open(path, schema, done)?));
        }
        check_replaceable(path)?;
    }
    Ok(Box::new(Writer {
        input: Some(make_input()?),
        path: path.to_string(),
        tmp: temporary_name(path),
        out: None,
        buf: Vec::new(),
        empty_header: header_of(&schema.names(), schema.fields.iter().map(|f| f.dtype)),
        done: Completion {
            elements: 0,
            crc: 0,
        },
        skipped: 0,
    }))
}

/// Whether the file at `path` was written by a cache: its first record is a cache header.
fn is_cache_file(path: &str) -> bool {
    let Ok(mut records) = RecordReader::open(path, Compression::None, true) else {
        return false;
    };
    match records.next_record() {
        Ok(Some((head, _))) => serde_json::from_slice::<Header>(&head).is_ok(),
        _ => false,
    }
}

/// Refuses to let a pass replace the file at `path` unless a cache wrote it (an incomplete or
/// damaged cache is rebuilt): the name may be a typo for a data file, which must survive.
fn check_replaceable(path: &str) -> Result<()> {
    if is_cache_file(path) {
        return Ok(());
    }
    Err(Error::invalid(
        "cache",
        format!(
            "{path} exists and is not a stoker cache file (its first record is not a cache \
             header); a cache never replaces a file it did not write: give cache() another \
             filename, or delete the file if it is yours to delete"
        ),
    ))
}

/// A name for a pass's file while it is written: unique per process and pass, so that passes
/// running at once never share one.
fn temporary_name(path: &str) -> String {
    static PASSES: AtomicU64 = AtomicU64::new(0);
    let pass = PASSES.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{path}.tmp-{}-{pass}-{nanos:08x}", std::process::id())
}

/// How long a temporary file of a process that is gone must have been left unwritten before
/// it is removed: a directory shared between machines may hold a temporary file whose process
/// runs on another one (its pid means nothing here), and a writer flushes its buffer as it
/// fills.
const STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(10 * 60);

/// Removes what passes that were killed left of their temporary files for the cache at
/// `path`: the files named as [`temporary_name`] names them, whose process is not alive on
/// this machine and which have not been written to for [`STALE_AFTER`]. Nothing else is
/// touched: not another name's files, not a live process's, not a file of another pattern.
/// Failures are ignored (the files stay, as before).
fn clean_stale_temps(path: &str) {
    let p = Path::new(path);
    let (Some(dir), Some(name)) = (p.parent(), p.file_name().and_then(|n| n.to_str())) else {
        return;
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let prefix = format!("{name}.tmp-");
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(pid) = file_name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(temporary_pid)
        else {
            continue;
        };
        if process_alive(pid) {
            continue;
        }
        // Not following a link: only a file that is itself there.
        let Ok(meta) = entry.metadata() else {
            continue;
        };
        let idle = meta.modified().ok().and_then(|m| m.elapsed().ok());
        if meta.is_file() && idle.is_some_and(|d| d >= STALE_AFTER) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// The process id in the part of a temporary name after `<name>.tmp-` (`<pid>-<pass>-<8 hex
/// digits>`, as [`temporary_name`] writes it), or `None` if it is not one.
fn temporary_pid(rest: &str) -> Option<u32> {
    let mut parts = rest.split('-');
    let (pid, pass, nanos) = (parts.next()?, parts.next()?, parts.next()?);
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let hex = nanos.len() == 8
        && nanos
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if parts.next().is_some() || !digits(pid) || !digits(pass) || !hex {
        return None;
    }
    pid.parse().ok()
}

/// Whether process `pid` is alive on this machine (or might be: where that cannot be told,
/// yes).
#[cfg(unix)]
fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return true;
    };
    if pid <= 0 {
        return true;
    }
    // SAFETY: signal 0 is not sent: kill only checks that the process exists (and that we
    // may signal it); it touches no memory of ours.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

#[cfg(not(unix))]
fn process_alive(_pid: u32) -> bool {
    true
}

struct Reader {
    path: String,
    records: RecordReader,
    names: Names,
    done: Completion,
    /// Elements replayed so far, and the CRC32C of their records.
    seen: Completion,
}

impl Reader {
    fn open(path: &str, schema: &Schema, done: Completion) -> Result<Reader> {
        let mut records = RecordReader::open(path, Compression::None, true)?;
        // An element may be larger than any record a TFRecord file is allowed; the file is
        // plain, so each length is still checked against its size before anything is read.
        records.set_max_record_bytes(u64::MAX);
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
        Ok(Reader {
            path: path.to_string(),
            records,
            names,
            done,
            seen: Completion {
                elements: 0,
                crc: 0,
            },
        })
    }

    /// A replay error about element `element` (the header is not an element).
    fn damaged(&self, element: u64, offset: u64, reason: String) -> Error {
        Error::CorruptRecord {
            file: self.path.clone(),
            record: element,
            offset,
            reason: format!("cache element {element}: {reason}"),
        }
    }
}

impl ElementIter for Reader {
    fn state(&self) -> Result<State> {
        Ok(State::leaf(vec![1, self.seen.elements]))
    }

    fn next(&mut self) -> Result<Option<Element>> {
        let element = self.seen.elements;
        let next = self.records.next_record().map_err(|e| match e {
            Error::CorruptRecord { offset, reason, .. } => self.damaged(element, offset, reason),
            e => e,
        })?;
        let Some((data, origin)) = next else {
            return Err(self.damaged(
                element,
                0,
                "the file ends before its completion record".into(),
            ));
        };
        if element == self.done.elements {
            // The completion record: everything before it must add up to what it says.
            if Completion::decode(&data) != Some(self.seen) {
                return Err(self.damaged(
                    element,
                    origin.offset,
                    format!(
                        "the cache holds {element} elements with CRC32C {:08x}, its completion \
                         record says {} with {:08x}",
                        self.seen.crc, self.done.elements, self.done.crc
                    ),
                ));
            }
            return Ok(None);
        }
        self.seen.crc = crc32c::crc32c_append(self.seen.crc, &data);
        self.seen.elements += 1;
        element_codec::decode(data, &self.names)
            .map(Some)
            .map_err(|e| self.damaged(element, origin.offset, e.to_string()))
    }
}

struct Writer {
    input: Option<BoxIter>,
    path: String,
    tmp: String,
    out: Option<RecordWriter<BufWriter<File>>>,
    buf: Vec<u8>,
    empty_header: Header,
    done: Completion,
    /// Bad records its input skipped, once it ended (see [`State::skipped`]).
    skipped: u64,
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

    /// Writes the completion record, syncs the file and publishes it under `path`, unless a
    /// complete cache got there first (then this pass's file is discarded: it holds the same).
    fn finish(&mut self) -> Result<()> {
        let header = std::mem::replace(
            &mut self.empty_header,
            header_of(&Names::from(vec![]), std::iter::empty()),
        );
        self.writer(&header)?;
        let Some(mut w) = self.out.take() else {
            return Ok(());
        };
        let published = (|| {
            w.write(&self.done.encode())?;
            let file = w.finish()?.into_inner().map_err(|e| e.into_error())?;
            file.sync_all()
        })()
        .map_err(|e| self.io(e))
        .and_then(|()| publish(&self.tmp, &self.path));
        if published.is_err() {
            let _ = std::fs::remove_file(&self.tmp);
        }
        published
    }
}

/// Moves the complete file `tmp` to `path`: the first complete cache there wins (a hard link
/// fails if `path` exists); an incomplete file there is replaced.
fn publish(tmp: &str, path: &str) -> Result<()> {
    let io = |e| Error::io(path, e);
    match std::fs::hard_link(tmp, path) {
        Ok(()) => std::fs::remove_file(tmp).map_err(io),
        Err(e)
            if e.kind() == std::io::ErrorKind::AlreadyExists
                && Completion::of_file(path)?.is_some() =>
        {
            std::fs::remove_file(tmp).map_err(io)
        }
        // An incomplete file to replace, or a file system without hard links. A file that
        // appeared there meanwhile and is not a cache is left alone.
        Err(_) => {
            if Path::new(path).exists() {
                check_replaceable(path)?;
            }
            std::fs::rename(tmp, path).map_err(io)
        }
    }
}

impl ElementIter for Writer {
    fn state(&self) -> Result<State> {
        let skipped = match &self.input {
            Some(input) => stoker_core::exec::skipped_by_unsaved(&**input),
            None => self.skipped,
        };
        Ok(State::leaf(vec![0, self.done.elements]).with_skipped(skipped))
    }

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
                self.done.crc = crc32c::crc32c_append(self.done.crc, &buf);
                self.done.elements += 1;
                self.buf = buf;
                r.map_err(|err| self.io(err))?;
                Ok(Some(e))
            }
            None => {
                // (An input that cannot report its state cannot be resumed: nothing to count.)
                self.skipped = stoker_core::exec::skipped_by(&**input).unwrap_or(0);
                self.input = None;
                self.finish()?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn aged(path: &Path, secs: u64) {
        let t = std::time::SystemTime::now() - std::time::Duration::from_secs(secs);
        File::options()
            .append(true)
            .open(path)
            .unwrap()
            .set_modified(t)
            .unwrap();
    }

    #[test]
    fn temporary_files_of_dead_processes_are_removed_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("c.cache");
        let cache = cache.to_str().unwrap();
        // A process that has exited: its pid is not alive.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        assert!(!process_alive(dead));
        assert!(process_alive(std::process::id()));
        let ours = temporary_name(cache);
        assert_eq!(
            temporary_pid(ours.strip_prefix(&format!("{cache}.tmp-")).unwrap()),
            Some(std::process::id())
        );
        let stale = format!("{cache}.tmp-{dead}-3-0badcafe");
        let recent = format!("{cache}.tmp-{dead}-4-0badcaf0");
        let keep = [
            // A live process's (this one's), however old.
            format!("{cache}.tmp-{}-0-00000001", std::process::id()),
            // Another cache's, and names of other patterns.
            format!("{}/other.cache.tmp-{dead}-0-0badcafe", dir.path().display()),
            format!("{cache}.tmp-{dead}-0-0badcafe-mine"),
            format!("{cache}.tmp-{dead}-x-0badcafe"),
            format!("{cache}.tmp-{dead}-0-0BADCAFE"),
            format!("{cache}.tmp-notes"),
            format!("{cache}.tmp"),
            cache.to_string(),
        ];
        for f in keep.iter().chain([&stale, &recent]) {
            std::fs::write(f, b"x").unwrap();
            aged(Path::new(f), 3600);
        }
        std::fs::write(&recent, b"x").unwrap();
        // A directory of the pattern is not a file to remove.
        let as_dir = format!("{cache}.tmp-{dead}-5-0badcafe");
        std::fs::create_dir(&as_dir).unwrap();
        clean_stale_temps(cache);
        assert!(!Path::new(&stale).exists());
        assert!(Path::new(&recent).exists(), "written to within STALE_AFTER");
        assert!(Path::new(&as_dir).is_dir());
        for f in &keep {
            assert!(Path::new(f).exists(), "{f} removed");
        }
        // A cache name without a directory part looks in the current one (no panic).
        clean_stale_temps("no-such-cache-here");
    }
}
