//! The XSpace of the TensorFlow and JAX profilers (`.xplane.pb`), read into the model through
//! xprof's model of planes and lines. Its host spans are mostly left in the file and read
//! again when asked for (`host_lines`).

pub mod decode;
mod host_lines;

use std::collections::HashSet;
use std::path::Path;

use decode::{Event, IdMap, Index, Line, LineEvents, StatValue};
use host_lines::{
    host_plane_event, read_all, xspace_host_span, HostPlaneEvent, LazyLine, LazyLines, XspaceBytes,
};

use crate::build::{short_name, Builder, MAX_DURATION_US, MAX_TIME_US};
use crate::dialect::chrome_json::raw::Header;
use crate::dialect::xprof::XprofEvent;
use crate::error::Result;
use crate::model::{HostKind, LazyHost, MemoryEvent, Trace};

/// The XSpace protobuf (`.xplane.pb`, `.xplane.pb.gz`).
pub struct Xspace;

impl super::Dialect for Xspace {
    fn by_name(&self, name: &str) -> bool {
        name.ends_with(".pb") || name.ends_with(".pb.gz")
    }

    fn by_content(&self, head: &[u8]) -> bool {
        decode::looks_like_xspace(head)
    }

    fn read(&self, path: &Path) -> Result<Trace> {
        read_with(path, &|_| false)
    }
}

/// An XSpace being read: the model, and how its host lines came.
#[derive(Default)]
struct XspaceReader {
    b: Builder,
    /// Per line (by its index in the file), how its host spans came.
    host_lines: Vec<Option<HostLine>>,
    /// The host lines (by index) with events that are not host spans (step markers, the
    /// allocator's events).
    lines_with_markers: HashSet<usize>,
    /// Per plane (by index), the host span each event metadata id stands for.
    host_names: Vec<IdMap<(u32, HostKind)>>,
}

/// Reads the XSpace at `path`, holding in memory the host spans of the lines (by index) that
/// `hold` picks, as if they had come out of order (to check that what is left in the file
/// reads back the same).
fn read_with(path: &Path, hold: &dyn Fn(usize) -> bool) -> Result<Trace> {
    let mut r = XspaceReader::default();
    let bytes = read_all(path)?;
    let (counts, index) = decode::read_xspace(
        path,
        &bytes,
        |line, e| r.xspace_event(line, e),
        |start, end| bytes.done(start, end),
    )?;
    r.leave_host_in_file(bytes, index, hold);
    r.b.trace.dialect = "xspace".into();
    r.b.trace.skipped_events += counts.untimed;
    let mut trace = r.b.finish(|_| false, true);
    trace.header = Header {
        events: counts.events,
        ..Header::default()
    };
    trace.path = path.display().to_string();
    Ok(trace)
}

/// How an XSpace line's host spans came in the first read.
struct HostLine {
    thread: u32,
    last_start: f64,
    /// Each started no earlier than the one before.
    in_order: bool,
}

/// Which memory an allocator event counts in, as xprof's memory profile keys it: the last of its
/// `index_on_host`, `device_ordinal` (the device, as for a TPU host's cores, which share one
/// allocator name) and `allocator_name` stats; and the allocator's name where the key is the
/// device.
fn memory_id(e: &Event<'_>) -> (String, Option<String>) {
    let (mut id, mut name) = (None, None);
    for (stat, value) in &e.stats {
        match (*stat, value) {
            ("index_on_host" | "device_ordinal", v) => {
                id = v.as_f64().map(|d| format!("{}", d as i64));
            }
            ("allocator_name", StatValue::Str(s)) => {
                id = Some(s.to_string());
                name = Some(s.to_string());
            }
            _ => {}
        }
    }
    let allocator = name.filter(|n| id.as_deref() != Some(n.as_str()));
    (id.unwrap_or_else(|| "allocator".to_string()), allocator)
}

impl XspaceReader {
    /// An event of the XSpace, as its plane and line say: a step marker or an allocator's
    /// event on a host plane, else an event of xprof's model.
    fn xspace_event(&mut self, line: &Line<'_>, e: &Event<'_>) {
        let (start, end) = (e.start_us, e.start_us + e.dur_us);
        if !start.is_finite() || !end.is_finite() {
            self.b.trace.skipped_events += 1;
            return;
        }
        if e.dur_us > MAX_DURATION_US || start.abs() > MAX_TIME_US {
            self.b.implausible(
                "events left out (a duration over a day, or a time beyond any clock's)",
                || {
                    format!(
                        "'{}' at {start} µs lasting {} µs",
                        short_name(e.name),
                        e.dur_us
                    )
                },
            );
            return;
        }
        if line.plane.starts_with("/host:") {
            let event = host_plane_event(e);
            if !matches!(event, HostPlaneEvent::Span) {
                self.lines_with_markers.insert(line.index);
            }
            match event {
                HostPlaneEvent::Step(n) => {
                    self.b.note_span(start, end);
                    self.b.step(e.name, n, start, end);
                    return;
                }
                HostPlaneEvent::Memory(sign, heap) => {
                    // The allocator's events (TensorFlow's and XLA's BFC allocators, a TPU's
                    // memory): the heap and the stack in use after each, as xprof's memory
                    // profile reads them.
                    self.b.note_span(start, end);
                    let (device, allocator) = memory_id(e);
                    let bytes = e.stat("allocation_bytes").and_then(|v| v.as_f64());
                    let stack = e.stat("bytes_reserved").and_then(|v| v.as_f64());
                    self.b.trace.memory.push(MemoryEvent {
                        ts: start,
                        device,
                        bytes: sign * bytes.unwrap_or(0.0),
                        allocated: heap + stack.unwrap_or(0.0),
                        reserved: None,
                        allocator_peak: e.stat("peak_bytes_in_use").and_then(|v| v.as_f64()),
                        stack: Some(stack.unwrap_or(0.0)),
                        allocator,
                    });
                    return;
                }
                HostPlaneEvent::Span => {}
            }
        }
        let details = match e.stat("memcpy_details") {
            Some(StatValue::Str(s)) => Some(s.as_ref()),
            _ => None,
        };
        let correlation = e
            .stat("correlation_id")
            .and_then(|v| v.as_f64())
            .map(|c| c as u64);
        let host_span = self.b.xprof_event(XprofEvent {
            plane: line.plane,
            line: line.name,
            name: e.name,
            details,
            correlation,
            start,
            end,
            in_file: true,
        });
        if let Some(thread) = host_span {
            let (line, plane) = (line.index, line.plane_index);
            self.xspace_host_event(line, plane, e.metadata_id, e.name, thread, start);
        }
    }

    /// An XSpace's host span, left in the file: what its line and metadata id stand for is
    /// noted, and whether the line's spans come in order of their start.
    fn xspace_host_event(
        &mut self,
        line: usize,
        plane: usize,
        metadata: i64,
        name: &str,
        thread: u32,
        start: f64,
    ) {
        let kind = self.b.host_kind(name);
        let id = self.b.intern(name);
        if self.host_names.len() <= plane {
            self.host_names.resize_with(plane + 1, IdMap::default);
        }
        self.host_names[plane].insert(metadata, (id, kind));
        if self.host_lines.len() <= line {
            self.host_lines.resize_with(line + 1, || None);
        }
        let state = self.host_lines[line].get_or_insert(HostLine {
            thread,
            last_start: start,
            in_order: true,
        });
        state.in_order &= start >= state.last_start;
        state.last_start = start;
    }

    /// After the first read of an XSpace: its host lines are left in the file, but for any
    /// whose spans did not come in order of their start, which are decoded now and held.
    fn leave_host_in_file(
        &mut self,
        bytes: XspaceBytes,
        index: Index,
        hold: &dyn Fn(usize) -> bool,
    ) {
        let mut lines = Vec::new();
        for (i, state) in std::mem::take(&mut self.host_lines).into_iter().enumerate() {
            let (Some(state), Some(line)) = (state, index.lines.get(i)) else {
                continue;
            };
            if state.in_order && !hold(i) {
                lines.push(LazyLine {
                    line: *line,
                    thread: state.thread,
                    only_spans: !self.lines_with_markers.contains(&i),
                });
                continue;
            }
            let Some(names) = self.host_names.get(line.plane) else {
                continue;
            };
            let mut events = LineEvents::new(&bytes, &index, line);
            while let Some(span) = events.next_with(|e| xspace_host_span(e, names, state.thread)) {
                self.b.trace.host_held.extend(span);
            }
        }
        self.b.trace.lazy_host = Some(LazyHost(Box::new(LazyLines {
            bytes,
            index,
            lines,
            names: std::mem::take(&mut self.host_names),
        })));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::HostSpan;

    /// An XSpace's host spans left in the file and read back through the merge are the spans,
    /// in the order, and make the analysis, that holding them all in memory does.
    #[test]
    fn host_spans_left_in_the_file_read_back_as_held() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/traces");
        for name in [
            "jax/jax_gpu_train.xplane.pb",
            "jax/jax_gpu_train_steps_line.xplane.pb",
            "jax/jax_train.xplane.pb",
            "tensorflow/xspace/tf_keras_fit.xplane.pb",
            "tensorflow/xspace/tf_keras_fit_batchtrace.xplane.pb",
            "tensorflow/xspace/tf_custom_loop.xplane.pb",
        ] {
            let path = dir.join(name);
            let held = read_with(&path, &|_| true).unwrap_or_else(|e| panic!("{e}"));
            assert!(held.lazy_host.as_ref().is_some_and(|l| l.0.lines() == 0));
            let bits = |h: HostSpan| (h.start.to_bits(), h.end.to_bits(), h.kind, h.name, h.thread);
            let want: Vec<_> = held.host_spans().map(bits).collect();
            assert!(!want.is_empty(), "{name}");
            let json = |t: &Trace| serde_json::to_string(&crate::analysis::analyze(t)).ok();
            // All left in the file, or every other line (the rest merged with those held).
            let every_other: &dyn Fn(usize) -> bool = &|i| i % 2 == 1;
            for hold in [&|_| false, every_other] {
                let lazy = read_with(&path, hold).unwrap_or_else(|e| panic!("{e}"));
                let left = lazy.lazy_host.as_ref().map_or(0, |l| l.0.lines());
                assert!(left > 0, "{name}: no line left in the file");
                let got: Vec<_> = lazy.host_spans().map(bits).collect();
                assert!(
                    got == want,
                    "{name}: {} spans read back, {} held",
                    got.len(),
                    want.len()
                );
                assert_eq!(json(&lazy), json(&held), "{name}");
            }
        }
    }
}
