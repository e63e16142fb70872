//! An XSpace's host spans left in the file: its bytes (mapped), and the host lines read again,
//! span by span, when the model's host spans are read ([`crate::model::Trace::host_spans`]).

use std::collections::VecDeque;
use std::io::Read;
use std::path::Path;

use super::decode::{Event, IdMap, Index, LineEvents, LineRef};
use crate::error::{AnalyzeError, Result};
use crate::model::{host_order, HostInFile, HostKind, HostSpan, SpanSource};

/// The host lines of an XSpace left in the file: those whose spans come in order of their
/// start (all, in the profilers' files), which are decoded again and merged.
pub(crate) struct LazyLines {
    pub(crate) bytes: XspaceBytes,
    pub(crate) index: Index,
    pub(crate) lines: Vec<LazyLine>,
    /// Per plane, by event metadata id: the name (index into the trace's names) and kind of
    /// the host spans of that metadata.
    pub(crate) names: Vec<IdMap<(u32, HostKind)>>,
}

impl HostInFile for LazyLines {
    fn lines(&self) -> usize {
        self.lines.len()
    }

    fn read_again(&self) -> Vec<Box<dyn SpanSource + '_>> {
        (self.lines.iter())
            .map(|l| -> Box<dyn SpanSource + '_> {
                Box::new(LineCursor {
                    events: LineEvents::new(&self.bytes, &self.index, &l.line),
                    names: self.names.get(l.line.plane),
                    thread: l.thread,
                    only_spans: l.only_spans,
                    bytes: &self.bytes,
                    released: l.line.at,
                    group: Vec::new(),
                    ahead: None,
                })
            })
            .collect()
    }
}

/// A host line left in the file.
#[derive(Clone, Copy)]
pub(crate) struct LazyLine {
    pub(crate) line: LineRef,
    pub(crate) thread: u32,
    /// Every timed event of the line is a host span (no step marker, no allocator's event on
    /// it): its events' stats need not be decoded again.
    pub(crate) only_spans: bool,
}

/// How many bytes of a line a [`LineCursor`] decodes before it lets them go.
const RELEASE_CHUNK: usize = 1 << 20;

/// One XSpace line's host spans, decoded again in the order of [`crate::model::sort_host`]: the line has
/// them by start, and those of one start are sorted as they come.
struct LineCursor<'t> {
    events: LineEvents<'t>,
    names: Option<&'t IdMap<(u32, HostKind)>>,
    thread: u32,
    only_spans: bool,
    bytes: &'t XspaceBytes,
    /// The bytes up to here have been let go.
    released: usize,
    /// Spans of one start, the first in order last.
    group: Vec<HostSpan>,
    /// The first span of the next start.
    ahead: Option<HostSpan>,
}

impl SpanSource for LineCursor<'_> {
    fn fill(&mut self, out: &mut VecDeque<HostSpan>, max: usize) {
        for _ in 0..max {
            match self.next_in_order() {
                Some(h) => out.push_back(h),
                None => return,
            }
        }
    }
}

impl LineCursor<'_> {
    fn decode(&mut self) -> Option<HostSpan> {
        let span = self.decode_next();
        if span.is_none() {
            // The line's end: its last bytes are let go too.
            self.bytes.done(self.released, self.events.position());
            self.released = self.events.position();
        }
        span
    }

    fn decode_next(&mut self) -> Option<HostSpan> {
        let (names, thread) = (self.names?, self.thread);
        loop {
            let span = if self.only_spans {
                let (id, start, dur) = self.events.next_timing()?;
                let end = start + dur;
                names.get(id).and_then(|&(name, kind)| {
                    (start.is_finite() && end.is_finite()).then_some(HostSpan {
                        start,
                        end,
                        kind,
                        name,
                        thread,
                    })
                })
            } else {
                self.events
                    .next_with(|e| xspace_host_span(e, names, thread))?
            };
            let at = self.events.position();
            if at - self.released >= RELEASE_CHUNK {
                self.bytes.done(self.released, at);
                self.released = at;
            }
            if span.is_some() {
                return span;
            }
        }
    }

    /// The next span, in the order of [`crate::model::sort_host`].
    fn next_in_order(&mut self) -> Option<HostSpan> {
        if let Some(h) = self.group.pop() {
            return Some(h);
        }
        let first = self.ahead.take().or_else(|| self.decode())?;
        self.group.push(first);
        loop {
            match self.decode() {
                Some(h) if h.start == first.start => self.group.push(h),
                other => {
                    self.ahead = other;
                    break;
                }
            }
        }
        self.group.sort_unstable_by(|a, b| host_order(b, a));
        self.group.pop()
    }
}

/// What an event of a host plane is to the model.
pub(crate) enum HostPlaneEvent {
    /// A step marker, with its step number.
    Step(f64),
    /// An allocator's event: +1 or -1 (allocation, deallocation) and the bytes in use after it.
    Memory(f64, f64),
    /// A host span.
    Span,
}

pub(crate) fn host_plane_event(e: &Event<'_>) -> HostPlaneEvent {
    if let Some(n) = e.stat("step_num").and_then(|v| v.as_f64()) {
        return HostPlaneEvent::Step(n);
    }
    let sign = match e.name {
        "MemoryAllocation" => Some(1.0),
        "MemoryDeallocation" => Some(-1.0),
        _ => None,
    };
    match (sign, e.stat("bytes_allocated").and_then(|v| v.as_f64())) {
        (Some(sign), Some(allocated)) => HostPlaneEvent::Memory(sign, allocated),
        _ => HostPlaneEvent::Span,
    }
}

/// The host span an event of a host line is, as the first read made it (`names`: its plane's
/// host spans by metadata id).
pub(crate) fn xspace_host_span(
    e: &Event<'_>,
    names: &IdMap<(u32, HostKind)>,
    thread: u32,
) -> Option<HostSpan> {
    let (start, end) = (e.start_us, e.start_us + e.dur_us);
    if !start.is_finite() || !end.is_finite() {
        return None;
    }
    if !matches!(host_plane_event(e), HostPlaneEvent::Span) {
        return None;
    }
    let &(name, kind) = names.get(e.metadata_id)?;
    Some(HostSpan {
        start,
        end,
        kind,
        name,
        thread,
    })
}

/// An XSpace's bytes: a plain file mapped (only the pages decoded become resident: payloads
/// skipped unread, such as HLO protos, are never read from disk), a gzipped one inflated.
pub(crate) enum XspaceBytes {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for XspaceBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            XspaceBytes::Mapped(m) => m,
            XspaceBytes::Owned(v) => v,
        }
    }
}

impl XspaceBytes {
    /// Lets go of the mapped pages wholly inside [start, end), which the reader has done with:
    /// they leave the process's memory (the page cache keeps them), so that its resident size
    /// stays below the file's.
    pub(crate) fn done(&self, start: usize, end: usize) {
        let XspaceBytes::Mapped(map) = self else {
            return;
        };
        const PAGE: usize = 4096;
        let (a, b) = (
            start.div_ceil(PAGE) * PAGE,
            (end.min(map.len()) / PAGE) * PAGE,
        );
        if b > a {
            // SAFETY: the map is a read-only mapping of a file: MADV_DONTNEED drops the pages
            // from this process only, and a later read of them faults the same bytes back in
            // from the file, so every slice borrowed from the map still sees what it saw.
            // (A page size other than 4 KiB only makes the kernel round the range, or refuse
            // it, which is ignored: the pages then stay resident.)
            let _ =
                unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, a, b - a) };
        }
    }
}

pub(crate) fn read_all(path: &Path) -> Result<XspaceBytes> {
    let io = |e| AnalyzeError::io(path, e);
    let mut file = std::fs::File::open(path).map_err(io)?;
    let mut magic = [0u8; 2];
    let n = file.read(&mut magic).map_err(io)?;
    if n == 2 && magic != [0x1f, 0x8b] {
        // SAFETY: the map is read-only and lives as long as the trace (its host lines are
        // decoded again by the analysis and the report). Its bytes change only if another
        // program rewrites the file in place meanwhile (profilers write a new file); then
        // decoding sees other bytes, which it checks like any input, or, if the file is cut
        // short, the process gets SIGBUS, as with any memory-mapped reader.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        return Ok(XspaceBytes::Mapped(map));
    }
    let mut bytes = Vec::new();
    crate::dialect::open(path)?
        .read_to_end(&mut bytes)
        .map_err(io)?;
    Ok(XspaceBytes::Owned(bytes))
}
