//! One model over all trace dialects: device activity (kernels, memcpy, memset) per device and
//! stream, host spans that matter (steps, data loading, runtime launches and synchronisation),
//! built from the events as they stream by. Times are microseconds, as every dialect writes
//! `ts` and `dur` (Kineto keeps them in µs even when `displayTimeUnit` says `ns`).

use std::collections::HashMap;
use std::path::Path;

use std::io::Read;

use crate::error::{AnalyzeError, Result};
use std::borrow::Cow;

use crate::read::{as_f64, as_string, read_events, Header, Id, Num, RawEvent};
use crate::xspace::IdMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Direction {
    HtoD,
    DtoH,
    DtoD,
    Other,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum DeviceKind {
    Kernel,
    /// A collective's kernel (NCCL / RCCL, XLA's all-reduce, all-gather, …): communication,
    /// not compute.
    Collective,
    Memcpy(Direction),
    Memset,
}

/// Work on an accelerator.
#[derive(Clone, Debug)]
pub struct DeviceOp {
    pub start: f64,
    pub end: f64,
    pub kind: DeviceKind,
    pub device: i64,
    pub stream: i64,
    /// Index into [`Trace::names`].
    pub name: u32,
    pub bytes: Option<f64>,
    /// Memcpy from or to pinned host memory (`None`: not said).
    pub pinned: Option<bool>,
    /// The id that ties it to the host call that launched it (`None`: not said).
    pub correlation: Option<u64>,
}

/// A kernel launch (or copy / memset call) on the host, with the id of the device work it
/// launched.
#[derive(Clone, Copy, Debug)]
pub struct Launch {
    pub correlation: u64,
    pub start: f64,
    pub end: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HostKind {
    /// Waiting for the next batch: PyTorch's `enumerate(DataLoader)…__next__`, TensorFlow's
    /// `IteratorGetNext`, stoker's `stoker:next#…` spans, stoker's driver.
    DataLoading,
    /// A kernel launch (runtime or driver API).
    Launch,
    /// Waiting for the device: `cudaDeviceSynchronize`, `cudaStreamSynchronize`, a blocking
    /// `cudaMemcpy`, …
    Sync,
    /// Other host work: operators, other runtime calls.
    Cpu,
    /// A collective on the host: `nccl:all_reduce`, `c10d::allreduce_`, `gloo:…`,
    /// `record_param_comms`, TensorFlow's collective ops.
    Collective,
    /// A Python function (the Python tracer's spans: Kineto's `python_function`, xprof's `$…`).
    Python,
}

#[derive(Clone, Copy, Debug)]
pub struct HostSpan {
    pub start: f64,
    pub end: f64,
    pub kind: HostKind,
    /// Index into [`Trace::names`].
    pub name: u32,
    /// The thread it ran on: index into [`Trace::threads`] (0: not said).
    pub thread: u32,
}

impl crate::intervals::Timed for DeviceOp {
    fn start(&self) -> f64 {
        self.start
    }
    fn end(&self) -> f64 {
        self.end
    }
}

impl crate::intervals::Timed for HostSpan {
    fn start(&self) -> f64 {
        self.start
    }
    fn end(&self) -> f64 {
        self.end
    }
}

impl crate::intervals::Timed for Step {
    fn start(&self) -> f64 {
        self.start
    }
    fn end(&self) -> f64 {
        self.end
    }
}

#[derive(Clone, Debug)]
pub struct Step {
    pub name: String,
    pub start: f64,
    pub end: f64,
}

/// A trace in the common model.
#[derive(Debug, Default)]
pub struct Trace {
    pub path: String,
    pub header: Header,
    pub dialect: String,
    pub device_ops: Vec<DeviceOp>,
    /// The host spans held in memory, sorted (see [`sort_host`]). An XSpace's are mostly
    /// left in the file (`lazy_host`): [`Trace::host_spans`] reads them all.
    pub(crate) host_held: Vec<HostSpan>,
    /// An XSpace's host spans that are decoded again from the file each time they are read.
    pub(crate) lazy_host: Option<LazyHost>,
    /// Runtime / driver calls that carry a correlation id, sorted by it.
    pub launches: Vec<Launch>,
    pub steps: Vec<Step>,
    /// How the steps were found (`None`: no steps).
    pub steps_from: Option<String>,
    pub names: Vec<String>,
    /// The host threads that host spans ran on, by the trace's names for them (`thread 12`
    /// where it names none); the first, empty, stands for a thread not said.
    pub threads: Vec<String>,
    /// First and last time of any event.
    pub span: Option<(f64, f64)>,
    /// The end of the last event that is not a step marker: a step that ends well after it
    /// was cut off (the profiler stopped inside it).
    pub activity_end: Option<f64>,
    /// The start of the first event that is not the profiler's own window (Kineto's `Trace`).
    pub activity_start: Option<f64>,
    pub cpu_ops: u64,
    pub python_functions: u64,
    /// Complete events without a time or duration, or with one that is not finite.
    pub skipped_events: u64,
    /// What in the trace could not be true and was left out (a duration over a day, a copy of
    /// more than a petabyte...), one line per kind with the first example.
    pub warnings: Vec<String>,
    /// The allocator's events (Kineto's `[memory]`), in the file's order.
    pub memory: Vec<MemoryEvent>,
}

impl Trace {
    /// Every host span, in the order of [`sort_host`]: those held, merged with those an
    /// XSpace's lines are decoded to again (a pass over the file's host lines).
    pub fn host_spans(&self) -> HostSpans<'_> {
        let mut spans = HostSpans {
            held: self.host_held.iter(),
            lines: Vec::new(),
            heap: std::collections::BinaryHeap::new(),
        };
        let Some(lazy) = self.lazy_host.as_ref().filter(|l| !l.lines.is_empty()) else {
            return spans; // the held spans alone, not merged
        };
        spans.lines = (lazy.lines.iter())
            .map(|l| LineCursor {
                events: crate::xspace::LineEvents::new(&lazy.bytes, &lazy.index, &l.line),
                names: lazy.names.get(l.line.plane),
                thread: l.thread,
                only_spans: l.only_spans,
                bytes: &lazy.bytes,
                released: l.line.at,
                group: Vec::new(),
                ahead: None,
            })
            .collect();
        if let Some(&h) = spans.held.next() {
            spans.heap.push(std::cmp::Reverse((InOrder(h), 0)));
        }
        for i in 0..spans.lines.len() {
            if let Some(h) = spans.lines[i].next() {
                spans.heap.push(std::cmp::Reverse((InOrder(h), i + 1)));
            }
        }
        spans
    }
}

/// An XSpace's host spans left in the file: the lines whose spans come in order of their
/// start (all, in the profilers' files), which [`Trace::host_spans`] decodes again and merges,
/// so that millions of spans are not held at once.
pub struct LazyHost {
    bytes: XspaceBytes,
    index: crate::xspace::Index,
    lines: Vec<LazyLine>,
    /// Per plane, by event metadata id: the name (index into [`Trace::names`]) and kind of
    /// the host spans of that metadata.
    names: Vec<IdMap<(u32, HostKind)>>,
}

impl std::fmt::Debug for LazyHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LazyHost({} lines)", self.lines.len())
    }
}

/// See [`Trace::host_spans`].
pub struct HostSpans<'t> {
    held: std::slice::Iter<'t, HostSpan>,
    lines: Vec<LineCursor<'t>>,
    /// The next span of each source (0: the held spans; i + 1: line i).
    heap: std::collections::BinaryHeap<std::cmp::Reverse<(InOrder, usize)>>,
}

impl Iterator for HostSpans<'_> {
    type Item = HostSpan;

    fn next(&mut self) -> Option<HostSpan> {
        if self.lines.is_empty() {
            return self.held.next().copied();
        }
        let std::cmp::Reverse((InOrder(span), source)) = self.heap.pop()?;
        let refill = match source {
            0 => self.held.next().copied(),
            i => self.lines[i - 1].next(),
        };
        if let Some(h) = refill {
            self.heap.push(std::cmp::Reverse((InOrder(h), source)));
        }
        Some(span)
    }
}

/// A host span ordered as [`sort_host`] orders them.
#[derive(Clone, Copy)]
struct InOrder(HostSpan);

impl Ord for InOrder {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        host_order(&self.0, &other.0)
    }
}

impl PartialOrd for InOrder {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for InOrder {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for InOrder {}

/// How many bytes of a line a [`LineCursor`] decodes before it lets them go.
const RELEASE_CHUNK: usize = 1 << 20;

/// One XSpace line's host spans, decoded again in the order of [`sort_host`]: the line has
/// them by start, and those of one start are sorted as they come.
struct LineCursor<'t> {
    events: crate::xspace::LineEvents<'t>,
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

    fn next(&mut self) -> Option<HostSpan> {
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
enum HostPlaneEvent {
    /// A step marker, with its step number.
    Step(f64),
    /// An allocator's event: +1 or -1 (allocation, deallocation) and the bytes in use after it.
    Memory(f64, f64),
    /// A host span.
    Span,
}

fn host_plane_event(e: &crate::xspace::Event<'_>) -> HostPlaneEvent {
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

/// Which memory an allocator event counts in, as xprof's memory profile keys it: the last of its
/// `index_on_host`, `device_ordinal` (the device, as for a TPU host's cores, which share one
/// allocator name) and `allocator_name` stats; and the allocator's name where the key is the
/// device.
fn memory_id(e: &crate::xspace::Event<'_>) -> (String, Option<String>) {
    use crate::xspace::StatValue;
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

/// The host span an event of a host line is, as the first read made it (`names`: its plane's
/// host spans by metadata id).
fn xspace_host_span(
    e: &crate::xspace::Event<'_>,
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

/// One allocation or free, and the allocator's totals after it.
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryEvent {
    pub ts: f64,
    /// `cuda:0`, `cpu`, ...
    pub device: String,
    /// Bytes allocated (negative: freed).
    pub bytes: f64,
    pub allocated: f64,
    pub reserved: Option<f64>,
    /// The allocator's own peak since it was created, before the profile too (XSpace's
    /// `peak_bytes_in_use`).
    pub allocator_peak: Option<f64>,
    /// The stack reservation counted in `allocated` (XSpace's `bytes_reserved`: xprof's
    /// memory in use is the heap plus the stack).
    pub stack: Option<f64>,
    /// The allocator's name, where `device` is the device it serves (XSpace).
    pub allocator: Option<String>,
}

/// Events of a TensorFlow 1.x timeline, whose kind depends on their process's name, which may
/// come later in the file: kept compact until the end.
struct Pending {
    pid: Id,
    /// TensorFlow 1.x: the `_SOURCE` node every `session.run` starts with.
    source: bool,
    /// Trace viewer JSON: the id tying a launch to its device work.
    correlation: Option<u64>,
    tid: Option<Id>,
    /// A copy's kind and size, as TensorFlow / JAX device traces give them.
    details: Option<String>,
    start: f64,
    end: f64,
    name: u32,
}

/// The `session.run` calls of a TensorFlow 1.x timeline: when each started (its `_SOURCE`
/// node, on the first device that has them) and when its last op ended.
struct SessionRuns {
    starts: Vec<f64>,
    ends: Vec<f64>,
    last_end: f64,
}

impl SessionRuns {
    fn of(pending: &[Pending], process_names: &HashMap<Id, String>) -> SessionRuns {
        let is_tf1 = |pid: &Id| process_names.get(pid).is_some_and(|n| n.contains("/job:"));
        let first = pending
            .iter()
            .find(|p| p.source && is_tf1(&p.pid))
            .map(|p| p.pid.clone());
        let mut starts: Vec<f64> = pending
            .iter()
            .filter(|p| p.source && Some(&p.pid) == first.as_ref())
            .map(|p| p.start)
            .collect();
        starts.sort_by(f64::total_cmp);
        let mut ends = vec![f64::NEG_INFINITY; starts.len()];
        let mut last_end = f64::NEG_INFINITY;
        for p in pending.iter().filter(|p| is_tf1(&p.pid)) {
            let i = starts.partition_point(|&s| s <= p.start);
            if i > 0 {
                ends[i - 1] = ends[i - 1].max(p.end);
            }
            last_end = last_end.max(p.end);
        }
        for (e, s) in ends.iter_mut().zip(&starts) {
            *e = e.max(*s);
        }
        SessionRuns {
            starts,
            ends,
            last_end,
        }
    }
}

/// A `B` event waiting for its `E`: name, category, start.
type OpenSpan = (String, Option<String>, Num);

#[derive(Default)]
struct Builder {
    trace: Trace,
    name_ids: HashMap<String, u32>,
    process_names: HashMap<Id, String>,
    thread_names: HashMap<(Id, Id), String>,
    pending: Vec<Pending>,
    /// Open `B` events per (pid, tid).
    open: HashMap<(Option<Id>, Option<Id>), Vec<OpenSpan>>,
    /// Some event had a category only Kineto writes.
    kineto: bool,
    /// The trace was an XSpace.
    xspace: bool,
    /// The thread of each entry of `trace.threads` after the first, as (pid, tid), or as the
    /// line's name (XSpace, trace viewer JSON), resolved to names at the end.
    thread_ids: HashMap<ThreadKey, u32>,
    last_thread: Option<(ThreadKey, u32)>,
    last_line: Option<(String, u32)>,
    /// Per name in `trace.names`: whether a kernel of that name is a collective's, once asked.
    collective_names: Vec<Option<bool>>,
    /// The events of the devices' `Steps` lines (xprof's derived steps), as (device, name,
    /// start, end).
    device_step_line: Vec<(String, String, f64, f64)>,
    /// XSpace: per line (by its index in the file), how its host spans came.
    host_lines: Vec<Option<HostLine>>,
    /// XSpace: the host lines (by index) with events that are not host spans (step markers,
    /// the allocator's events).
    lines_with_markers: std::collections::HashSet<usize>,
    /// XSpace: per plane (by index), the host span each event metadata id stands for.
    host_names: Vec<IdMap<(u32, HostKind)>>,
    /// Values no profiler writes, left out: per kind, how many and the first.
    implausible: Vec<(&'static str, u64, String)>,
}

/// Bounds on what a trace can hold, beyond which a value is damage (or a hostile file), not a
/// measurement: left out with a warning, so that one event cannot stretch the trace's span or
/// the steps' sums to nonsense. An event lasting over a day (µs)...
const MAX_DURATION_US: f64 = 86_400e6;
/// ...a time more than about 3,000 years from the clock's zero (µs; Kineto's clock counts
/// from the Unix epoch)...
const MAX_TIME_US: f64 = 1e17;
/// ...and a copy or an allocator total of more than a petabyte.
const MAX_BYTES: f64 = 1e15;

/// How an XSpace line's host spans came in the first read.
struct HostLine {
    thread: u32,
    last_start: f64,
    /// Each started no earlier than the one before.
    in_order: bool,
}

/// A host line left in the file (see [`LazyHost`]).
#[derive(Clone, Copy)]
struct LazyLine {
    line: crate::xspace::LineRef,
    thread: u32,
    /// Every timed event of the line is a host span (no step marker, no allocator's event on
    /// it): its events' stats need not be decoded again.
    only_spans: bool,
}

/// A host thread as a trace names it: (pid, tid) for JSON events, whose thread names may come
/// later in the file; the line's name in xprof's model.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum ThreadKey {
    Ids(Option<Id>, Option<Id>),
    Line(String),
}

/// Categories of the PyTorch profiler (Kineto), current and 2021 (capitalised) schemas.
const KINETO_CATS: [&str; 14] = [
    "kernel",
    "gpu_memcpy",
    "memcpy",
    "gpu_memset",
    "memset",
    "cuda_runtime",
    "runtime",
    "cuda_driver",
    "cpu_op",
    "operator",
    "user_annotation",
    "gpu_user_annotation",
    "python_function",
    "cuda_profiler_range",
];

/// A name cut to 80 characters, for a message.
fn short_name(name: &str) -> String {
    match name.char_indices().nth(80) {
        Some((at, _)) => format!("{}...", &name[..at]),
        None => name.to_string(),
    }
}

fn lower(s: Option<&str>) -> String {
    s.unwrap_or("").to_ascii_lowercase()
}

fn direction(name: &str, kind: Option<String>) -> Direction {
    let text = format!("{name} {}", kind.unwrap_or_default()).to_ascii_lowercase();
    if text.contains("htod") || text.contains("h2d") || text.contains("hosttodevice") {
        Direction::HtoD
    } else if text.contains("dtoh") || text.contains("d2h") || text.contains("devicetohost") {
        Direction::DtoH
    } else if text.contains("dtod") || text.contains("d2d") || text.contains("devicetodevice") {
        Direction::DtoD
    } else {
        Direction::Other
    }
}

fn id_num(id: &Option<Id>) -> i64 {
    match id {
        Some(Id::Num(n)) => *n,
        Some(Id::Str(s)) => s
            .trim_start_matches(|c: char| !c.is_ascii_digit())
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|d| d.parse().ok())
            .unwrap_or(-1),
        None => -1,
    }
}

impl Builder {
    fn intern(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.name_ids.get(name) {
            return i;
        }
        let i = self.trace.names.len() as u32;
        self.trace.names.push(name.to_string());
        self.name_ids.insert(name.to_string(), i);
        i
    }

    fn event(&mut self, e: RawEvent<'_>) {
        match e.ph.as_deref() {
            Some("X") => self.complete(e),
            Some("B") => {
                if let Some(ts) = e.ts {
                    let name = e.name.as_deref().unwrap_or("").to_string();
                    let cat = e.cat.as_deref().map(str::to_string);
                    self.open
                        .entry((e.pid.clone(), e.tid.clone()))
                        .or_default()
                        .push((name, cat, ts));
                }
            }
            Some("E") => {
                let key = (e.pid.clone(), e.tid.clone());
                if let Some((name, cat, begin)) = self.open.get_mut(&key).and_then(Vec::pop) {
                    let Some(end) = e.ts else {
                        return;
                    };
                    self.complete(RawEvent {
                        ph: Some(Cow::Borrowed("X")),
                        cat: cat.map(Cow::Owned),
                        name: Some(Cow::Owned(name)),
                        pid: e.pid,
                        tid: e.tid,
                        ts: Some(begin),
                        dur: Some(Num(end.0 - begin.0)),
                        args: None,
                    });
                }
            }
            Some("i" | "I") if e.name.as_deref() == Some("[memory]") => self.memory(e),
            Some("M") if e.name.as_deref() == Some("process_name") => {
                if let (Some(pid), Some(args)) = (e.pid, e.args) {
                    if let Some(n) = as_string(args.name) {
                        self.process_names.insert(pid, n);
                    }
                }
            }
            Some("M") if e.name.as_deref() == Some("thread_name") => {
                if let (Some(pid), Some(tid), Some(args)) = (e.pid, e.tid, e.args) {
                    if let Some(n) = as_string(args.name) {
                        self.thread_names.insert((pid, tid), n);
                    }
                }
            }
            _ => {}
        }
    }

    fn memory(&mut self, e: RawEvent<'_>) {
        let (Some(ts), Some(args)) = (e.ts, e.args) else {
            return;
        };
        let Some(allocated) = as_f64(args.total_allocated) else {
            return;
        };
        let totals = [
            Some(allocated),
            as_f64(args.total_reserved),
            as_f64(args.bytes),
        ];
        if let Some(b) = totals.into_iter().flatten().find(|b| b.abs() > MAX_BYTES) {
            self.implausible(
                "allocator events left out (a size or a total over a petabyte)",
                || format!("at {} µs: {b} bytes", ts.0),
            );
            return;
        }
        if !ts.0.is_finite() || ts.0.abs() > MAX_TIME_US {
            self.implausible(
                "allocator events left out (a time beyond any clock's)",
                || format!("at {} µs", ts.0),
            );
            return;
        }
        let id = as_f64(args.device_id).unwrap_or(0.0);
        let device = match as_f64(args.device_type).map(|t| t as i64) {
            Some(0) => "cpu".to_string(),
            Some(1) => format!("cuda:{id}"),
            Some(t) => format!("device type {t}:{id}"),
            None => format!("device {id}"),
        };
        self.note_span(ts.0, ts.0);
        self.trace.memory.push(MemoryEvent {
            ts: ts.0,
            device,
            bytes: as_f64(args.bytes).unwrap_or(0.0),
            allocated,
            reserved: as_f64(args.total_reserved),
            allocator_peak: None,
            stack: None,
            allocator: None,
        });
    }

    /// Counts a value that cannot be true, of `kind`, keeping the first's description.
    fn implausible(&mut self, kind: &'static str, what: impl FnOnce() -> String) {
        match self.implausible.iter_mut().find(|(k, _, _)| *k == kind) {
            Some((_, n, _)) => *n += 1,
            None => self.implausible.push((kind, 1, what())),
        }
    }

    fn complete(&mut self, e: RawEvent<'_>) {
        let (Some(ts), Some(dur)) = (e.ts, e.dur) else {
            self.trace.skipped_events += 1;
            return;
        };
        let (start, end) = (ts.0, ts.0 + dur.0.max(0.0));
        if !start.is_finite() || !end.is_finite() {
            self.trace.skipped_events += 1;
            return;
        }
        if dur.0 > MAX_DURATION_US || start.abs() > MAX_TIME_US {
            let name = e.name.as_deref().unwrap_or("").to_string();
            self.implausible(
                "events left out (a duration over a day, or a time beyond any clock's)",
                || {
                    format!(
                        "'{}' at {} µs lasting {} µs",
                        short_name(&name),
                        ts.0,
                        dur.0
                    )
                },
            );
            return;
        }
        self.note_span(start, end);
        let cat = lower(e.cat.as_deref());
        self.kineto |= KINETO_CATS.contains(&cat.as_str());
        let name: &str = e.name.as_deref().unwrap_or("");
        if name.starts_with("ProfilerStep#") {
            if cat == "gpu_user_annotation" {
                // Kineto's copy of the step's annotation on the device timeline (the span
                // of the kernels it launched), not another step.
                return;
            }
            let name = name.to_string();
            self.trace.steps.push(Step { name, start, end });
            return;
        }
        let args = e.args.clone().unwrap_or_default();
        if let Some(n) = as_f64(args.step_num) {
            self.step(name, n, start, end);
            return;
        }
        if cat != "trace" {
            // (Kineto's `Trace` span covers the whole profiling window.)
            self.note_activity(start, end);
        }
        match cat.as_str() {
            "kernel" | "gpu_memcpy" | "memcpy" | "gpu_memset" | "memset" => {
                let id = self.intern(name);
                let kind = match cat.as_str() {
                    "kernel" if self.collective(id) => DeviceKind::Collective,
                    "kernel" => DeviceKind::Kernel,
                    "gpu_memset" | "memset" => DeviceKind::Memset,
                    _ => DeviceKind::Memcpy(direction(name, as_string(args.kind))),
                };
                let pinned = if name.contains("Pinned") {
                    Some(true)
                } else if name.contains("Pageable") {
                    Some(false)
                } else {
                    None
                };
                let device = as_f64(args.device).map_or_else(|| id_num(&e.pid), |d| d as i64);
                let stream = as_f64(args.stream).map_or_else(|| id_num(&e.tid), |s| s as i64);
                let mut bytes = as_f64(args.bytes);
                if let Some(b) = bytes.filter(|b| !(0.0..=MAX_BYTES).contains(b)) {
                    bytes = None;
                    self.implausible("copy sizes left out (negative, or over a petabyte)", || {
                        format!("'{}' at {start} µs of {b} bytes", short_name(name))
                    });
                }
                let name = id;
                self.trace.device_ops.push(DeviceOp {
                    start,
                    end,
                    kind,
                    device,
                    stream,
                    name,
                    bytes,
                    pinned,
                    correlation: as_f64(args.correlation).map(|c| c as u64),
                });
            }
            "cuda_runtime" | "runtime" | "cuda_driver" | "hip_runtime" => {
                if let Some(c) = as_f64(args.correlation) {
                    self.trace.launches.push(Launch {
                        correlation: c as u64,
                        start,
                        end,
                    });
                }
                let thread = self.thread(ThreadKey::Ids(e.pid.clone(), e.tid.clone()));
                self.push_host(runtime_kind(name), name, thread, start, end);
            }
            _ => {
                let host = is_data_loading(name)
                    || cat == "python_function"
                    || cat == "cpu_op"
                    || cat == "operator";
                let thread = if host {
                    self.thread(ThreadKey::Ids(e.pid.clone(), e.tid.clone()))
                } else {
                    0
                };
                if is_data_loading(name) {
                    self.push_host(HostKind::DataLoading, name, thread, start, end);
                } else if cat == "python_function" {
                    self.trace.python_functions += 1;
                    self.push_host(HostKind::Python, name, thread, start, end);
                } else if cat == "cpu_op" || cat == "operator" {
                    self.trace.cpu_ops += 1;
                    let kind = if is_collective_call(name) {
                        HostKind::Collective
                    } else {
                        HostKind::Cpu
                    };
                    self.push_host(kind, name, thread, start, end);
                } else if let Some(pid) = e.pid {
                    // TensorFlow 1.x timeline (`cat: "Op"`), TensorFlow / JAX trace viewer JSON:
                    // decided by the process's (and thread's) name, which may come later.
                    let name = self.intern(name);
                    let source = as_string(args.name).as_deref() == Some("_SOURCE");
                    self.pending.push(Pending {
                        pid,
                        source,
                        correlation: as_f64(args.correlation).map(|c| c as u64),
                        tid: e.tid,
                        details: as_string(args.memcpy_details),
                        start,
                        end,
                        name,
                    });
                }
            }
        }
    }

    fn finish(mut self) -> Trace {
        // TensorFlow timelines: `/gpu:0/stream:all Compute` holds every kernel (the per-stream
        // processes repeat them), `/gpu:0/memcpy Compute` the copies.
        let has_all = self
            .process_names
            .values()
            .any(|n| n.contains("stream:all"));
        let pending = std::mem::take(&mut self.pending);
        let runs = SessionRuns::of(&pending, &self.process_names);
        let mut tf_device = false;
        let mut xprof = false;
        for p in pending {
            let Some(pname) = self.process_names.get(&p.pid) else {
                continue;
            };
            // TensorFlow 2 / JAX trace viewer JSON: xprof's planes and lines as processes and
            // threads.
            if let Some(plane) = xprof_plane(pname) {
                xprof = true;
                let pname = plane.to_string();
                let tname = p
                    .tid
                    .as_ref()
                    .and_then(|t| self.thread_names.get(&(p.pid.clone(), t.clone())))
                    .cloned()
                    .unwrap_or_default();
                let name = self.trace.names[p.name as usize].clone();
                self.xprof_event(XprofEvent {
                    plane: &pname,
                    line: &tname,
                    name: &name,
                    details: p.details.as_deref(),
                    correlation: p.correlation,
                    start: p.start,
                    end: p.end,
                    xspace: None,
                });
                continue;
            }
            let pl = pname.to_ascii_lowercase();
            let device = pl
                .split("gpu:")
                .nth(1)
                .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|d| d.parse().ok())
                .unwrap_or(0);
            let name = &self.trace.names[p.name as usize];
            let kind = if pl.contains("/memcpy") {
                Some(DeviceKind::Memcpy(direction(name, None)))
            } else if pl.contains("stream:all") || (!has_all && pl.contains("/stream:")) {
                Some(if is_collective_kernel(name) {
                    DeviceKind::Collective
                } else {
                    DeviceKind::Kernel
                })
            } else {
                if is_data_loading(name) {
                    let thread = self.thread(ThreadKey::Ids(Some(p.pid.clone()), p.tid.clone()));
                    self.trace.host_held.push(HostSpan {
                        start: p.start,
                        end: p.end,
                        kind: HostKind::DataLoading,
                        name: p.name,
                        thread,
                    });
                }
                None
            };
            if let Some(kind) = kind {
                tf_device = true;
                self.trace.device_ops.push(DeviceOp {
                    start: p.start,
                    end: p.end,
                    kind,
                    device,
                    stream: 0,
                    name: p.name,
                    bytes: None,
                    pinned: None,
                    correlation: None,
                });
            }
        }
        self.trace.dialect = if self.xspace {
            "xspace".into()
        } else if xprof {
            "tensorflow/jax trace viewer".into()
        } else if tf_device || self.process_names.values().any(|n| n.contains("/job:")) {
            "tensorflow-timeline".into()
        } else if self.kineto {
            "kineto".into()
        } else {
            "chrome-json".into()
        };
        self.name_threads();
        self.trace
            .device_ops
            .sort_by(|a, b| a.start.total_cmp(&b.start));
        sort_host(&mut self.trace.host_held);
        self.trace.launches.sort_by_key(|l| l.correlation);
        self.trace.steps.sort_by(|a, b| a.start.total_cmp(&b.start));
        if !self.device_step_line.is_empty() {
            self.steps_from_device_line();
        } else if self.trace.steps.is_empty() && runs.starts.len() >= 2 {
            self.session_run_steps(&runs);
        } else if self.trace.steps.is_empty() {
            self.infer_steps();
        } else if self.trace.steps[0].name.starts_with("ProfilerStep#") {
            self.trace.steps_from = Some("ProfilerStep markers".into());
        } else if (self.xspace || xprof) && self.device_steps() {
            self.trace.steps_from = Some(
                "step markers (step_num), measured on the device as xprof does: from the \
                 first to the last device op the step launched"
                    .into(),
            );
        } else {
            self.trace.steps_from = Some("step markers (step_num)".into());
        }
        self.trace.warnings = (self.implausible.iter())
            .map(|(kind, n, first)| format!("{kind}: {n} (the first: {first})"))
            .collect();
        self.trace
    }

    /// The devices' `Steps` lines, which xprof derives from its grouping of the host's step
    /// markers and reads as the steps. Each device runs a step in its own span, and devices
    /// need not be in step (a step may run on one GPU well after another): as xprof, a step
    /// is as long as its longest device's span, and it is that span that the analysis looks
    /// at (a span from one device's start to another's end would be mostly idle time).
    fn steps_from_device_line(&mut self) {
        let mut spans: HashMap<(String, String), (f64, f64)> = HashMap::new();
        for (device, name, start, end) in std::mem::take(&mut self.device_step_line) {
            spans
                .entry((name, device))
                .and_modify(|s| *s = (s.0.min(start), s.1.max(end)))
                .or_insert((start, end));
        }
        let mut by_name: HashMap<String, usize> = HashMap::new();
        let mut steps: Vec<Step> = Vec::new();
        let mut ordered: Vec<_> = spans.into_iter().collect();
        // The same step on the same devices in the same order every time.
        ordered.sort_by(|a, b| a.0.cmp(&b.0));
        for ((name, _device), (start, end)) in ordered {
            match by_name.get(&name) {
                Some(&i) => {
                    if end - start > steps[i].end - steps[i].start {
                        steps[i].start = start;
                        steps[i].end = end;
                    }
                }
                None => {
                    by_name.insert(name.clone(), steps.len());
                    steps.push(Step { name, start, end });
                }
            }
        }
        steps.sort_by(|a, b| a.start.total_cmp(&b.start));
        self.trace.steps = steps;
        self.trace.steps_from = Some(
            "the devices' Steps line (xprof's steps: the device work of each host step)".into(),
        );
    }

    /// xprof's steps on an accelerator (TensorFlow / JAX profiles): a host step marker's step
    /// is the device work it launched, from its first op's start to its last op's end. Each
    /// step becomes that span where every step launched device work; false otherwise.
    fn device_steps(&mut self) -> bool {
        let t = &self.trace;
        if t.device_ops.is_empty() || t.launches.is_empty() {
            return false;
        }
        let mut spans = Vec::with_capacity(t.steps.len());
        for s in &t.steps {
            let mut ids: Vec<u64> = (t.launches.iter())
                .filter(|l| l.start >= s.start && l.start < s.end)
                .map(|l| l.correlation)
                .collect();
            ids.sort_unstable();
            ids.dedup();
            let span = (t.device_ops.iter())
                .filter(|o| o.correlation.is_some_and(|c| ids.binary_search(&c).is_ok()))
                .fold(None, |acc: Option<(f64, f64)>, o| match acc {
                    None => Some((o.start, o.end)),
                    Some((a, b)) => Some((a.min(o.start), b.max(o.end))),
                });
            match span {
                Some(span) => spans.push(span),
                None => return false,
            }
        }
        for (s, (a, b)) in self.trace.steps.iter_mut().zip(spans) {
            s.start = a;
            s.end = b;
        }
        true
    }

    /// TensorFlow 1.x timelines of several `session.run` calls: a step per run, from its
    /// `_SOURCE` to the next run's; the host time between a run's last op and the next run is
    /// the host preparing the next feed (the `feed_dict`, the Python input), counted as input.
    fn session_run_steps(&mut self, runs: &SessionRuns) {
        let gap = self.intern("between session.run calls (the next feed_dict, Python input)");
        let n = runs.starts.len();
        let end = self
            .trace
            .activity_end
            .unwrap_or(runs.last_end)
            .max(runs.last_end);
        for i in 0..n {
            let start = runs.starts[i];
            let next = runs.starts.get(i + 1).copied().unwrap_or(end);
            self.trace.steps.push(Step {
                name: format!("session.run #{}", i + 1),
                start,
                end: next,
            });
            if i + 1 < n && runs.ends[i] < next {
                self.trace.host_held.push(HostSpan {
                    start: runs.ends[i],
                    end: next,
                    kind: HostKind::DataLoading,
                    name: gap,
                    thread: 0,
                });
            }
        }
        sort_host(&mut self.trace.host_held);
        self.trace.steps_from = Some("session.run calls (their _SOURCE nodes)".into());
    }

    /// Without step markers, each fetch of a batch starts a step: steps run from one data
    /// loading call's start to the next's (nested or overlapping calls count once). The last
    /// runs to the end of the activity.
    fn infer_steps(&mut self) {
        let fetches: Vec<(f64, f64)> = crate::intervals::Union::new(
            self.trace
                .host_spans()
                .filter(|h| h.kind == HostKind::DataLoading)
                .map(|h| (h.start, h.end))
                .collect(),
        )
        .within(f64::NEG_INFINITY, f64::INFINITY)
        .collect();
        if fetches.len() < 3 {
            return;
        }
        let last = fetches[fetches.len() - 1].1;
        let end = self.trace.activity_end.unwrap_or(last).max(last);
        for (i, (a, _)) in fetches.iter().enumerate() {
            let b = fetches.get(i + 1).map_or(end, |n| n.0);
            self.trace.steps.push(Step {
                name: format!("inferred step {}", i + 1),
                start: *a,
                end: b,
            });
        }
        self.trace.steps_from = Some("data loading calls (no step markers: inferred)".into());
    }

    /// A step marker: TensorFlow's `Trace(name, step_num=)` (Keras: `Profiled batch`), JAX's
    /// `StepTraceAnnotation`.
    fn step(&mut self, name: &str, step_num: f64, start: f64, end: f64) {
        self.trace.steps.push(Step {
            name: format!("{name}#{step_num}"),
            start,
            end,
        });
    }

    fn xspace_event(&mut self, line: &crate::xspace::Line<'_>, e: &crate::xspace::Event<'_>) {
        let (start, end) = (e.start_us, e.start_us + e.dur_us);
        if !start.is_finite() || !end.is_finite() {
            self.trace.skipped_events += 1;
            return;
        }
        if e.dur_us > MAX_DURATION_US || start.abs() > MAX_TIME_US {
            self.implausible(
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
                    self.note_span(start, end);
                    self.step(e.name, n, start, end);
                    return;
                }
                HostPlaneEvent::Memory(sign, heap) => {
                    // The allocator's events (TensorFlow's and XLA's BFC allocators, a TPU's
                    // memory): the heap and the stack in use after each, as xprof's memory
                    // profile reads them.
                    self.note_span(start, end);
                    let (device, allocator) = memory_id(e);
                    let bytes = e.stat("allocation_bytes").and_then(|v| v.as_f64());
                    let stack = e.stat("bytes_reserved").and_then(|v| v.as_f64());
                    self.trace.memory.push(MemoryEvent {
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
            Some(crate::xspace::StatValue::Str(s)) => Some(s.as_ref()),
            _ => None,
        };
        let correlation = e
            .stat("correlation_id")
            .and_then(|v| v.as_f64())
            .map(|c| c as u64);
        self.xprof_event(XprofEvent {
            plane: line.plane,
            line: line.name,
            name: e.name,
            details,
            correlation,
            start,
            end,
            xspace: Some((line.index, line.plane_index, e.metadata_id)),
        });
    }

    fn note_span(&mut self, start: f64, end: f64) {
        self.trace.span = Some(match self.trace.span {
            None => (start, end),
            Some((a, b)) => (a.min(start), b.max(end)),
        });
    }

    fn push_host(&mut self, kind: HostKind, name: &str, thread: u32, start: f64, end: f64) {
        let name = self.intern(name);
        self.trace.host_held.push(HostSpan {
            start,
            end,
            kind,
            name,
            thread,
        });
    }

    /// Whether the kernel named `id` (in `trace.names`) is a collective's, decided once per
    /// name: a trace runs the same kernels millions of times.
    fn collective(&mut self, id: u32) -> bool {
        let i = id as usize;
        if self.collective_names.len() <= i {
            self.collective_names.resize(i + 1, None);
        }
        *self.collective_names[i].get_or_insert_with(|| is_collective_kernel(&self.trace.names[i]))
    }

    /// The index of a host thread in `trace.threads`.
    fn thread(&mut self, key: ThreadKey) -> u32 {
        // Events of one thread tend to come together.
        if let Some((last, i)) = &self.last_thread {
            if *last == key {
                return *i;
            }
        }
        if self.trace.threads.is_empty() {
            self.trace.threads.push(String::new());
        }
        let next = self.trace.threads.len() as u32;
        let i = *self.thread_ids.entry(key.clone()).or_insert(next);
        if i == next {
            self.trace.threads.push(String::new());
        }
        self.last_thread = Some((key, i));
        i
    }

    /// Names the threads, once every `thread_name` of the file has been read.
    fn name_threads(&mut self) {
        for (key, &i) in &self.thread_ids {
            let label = match key {
                ThreadKey::Line(line) => line.clone(),
                ThreadKey::Ids(pid, tid) => {
                    let named = match (pid, tid) {
                        (Some(p), Some(t)) => self.thread_names.get(&(p.clone(), t.clone())),
                        _ => None,
                    };
                    match (named, tid) {
                        (Some(n), _) => n.clone(),
                        (None, Some(Id::Num(t))) => format!("thread {t}"),
                        (None, Some(Id::Str(t))) => format!("thread {t}"),
                        (None, None) => "thread ?".to_string(),
                    }
                }
            };
            self.trace.threads[i as usize] = label;
        }
    }

    fn note_activity(&mut self, start: f64, end: f64) {
        self.trace.activity_end = Some(self.trace.activity_end.map_or(end, |a| a.max(end)));
        self.trace.activity_start = Some(self.trace.activity_start.map_or(start, |a| a.min(start)));
    }

    /// A host span, classified by its name.
    fn host_event(&mut self, name: &str, thread: u32, start: f64, end: f64) {
        let kind = self.host_kind(name);
        self.push_host(kind, name, thread, start, end);
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
        let kind = self.host_kind(name);
        let id = self.intern(name);
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
        index: crate::xspace::Index,
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
            let mut events = crate::xspace::LineEvents::new(&bytes, &index, line);
            while let Some(span) = events.next_with(|e| xspace_host_span(e, names, state.thread)) {
                self.trace.host_held.extend(span);
            }
        }
        self.trace.lazy_host = Some(LazyHost {
            bytes,
            index,
            lines,
            names: std::mem::take(&mut self.host_names),
        });
    }

    /// The kind of a host span by its name.
    fn host_kind(&mut self, name: &str) -> HostKind {
        if is_data_loading(name) {
            HostKind::DataLoading
        } else if name.starts_with('$') {
            // The Python tracer's function spans (which contain everything below them).
            self.trace.python_functions += 1;
            HostKind::Python
        } else if is_runtime_api(name) {
            runtime_kind(name)
        } else if is_collective_call(name) {
            self.trace.cpu_ops += 1;
            HostKind::Collective
        } else {
            self.trace.cpu_ops += 1;
            HostKind::Cpu
        }
    }

    /// An event of xprof's model (XSpace, or the trace viewer's JSON): planes `/device:GPU:0`
    /// (lines `Stream #N(...)`; TPUs `XLA Ops`) and `/host:CPU` (a line per thread).
    fn xprof_event(&mut self, e: XprofEvent<'_>) {
        let XprofEvent {
            plane,
            line,
            name,
            details,
            correlation,
            start,
            end,
            xspace,
        } = e;
        self.note_span(start, end);
        if let Some(device) = plane.strip_prefix("/device:") {
            if line == "Steps" {
                self.device_step_line
                    .push((device.to_string(), name.to_string(), start, end));
                return;
            }
            let Some(stream) = xprof_stream(device, line) else {
                return; // derived lines (XLA Modules, TensorFlow Ops, …) repeat the streams
            };
            self.note_activity(start, end);
            let details = details.unwrap_or("");
            let id = self.intern(name);
            let lower = name.to_ascii_lowercase();
            let kind = if self.collective(id) {
                DeviceKind::Collective
            } else if lower.contains("memcpy") {
                DeviceKind::Memcpy(direction(name, None))
            } else if lower.contains("memset") {
                DeviceKind::Memset
            } else {
                DeviceKind::Kernel
            };
            let pinned = if details.contains("kind_src:pinned")
                || details.contains("kind_dst:pinned")
            {
                Some(true)
            } else if details.contains("kind_src:pageable") || details.contains("kind_dst:pageable")
            {
                Some(false)
            } else {
                None
            };
            let bytes = details
                .split_whitespace()
                .find_map(|kv| kv.strip_prefix("size:"))
                .and_then(|v| v.parse().ok());
            let index = device
                .rsplit(':')
                .next()
                .and_then(|d| d.parse().ok())
                .unwrap_or(0);
            let name = id;
            self.trace.device_ops.push(DeviceOp {
                start,
                end,
                kind,
                device: index,
                stream,
                name,
                bytes,
                pinned,
                correlation,
            });
        } else if plane.starts_with("/host:") {
            self.note_activity(start, end);
            if let Some(correlation) = correlation {
                self.trace.launches.push(Launch {
                    correlation,
                    start,
                    end,
                });
            }
            // (A line's events come together: its name is compared, not copied, per event.)
            let thread = match &self.last_line {
                Some((last, i)) if last == line => *i,
                _ => {
                    let i = self.thread(ThreadKey::Line(line.to_string()));
                    self.last_line = Some((line.to_string(), i));
                    i
                }
            };
            match xspace {
                Some((line, plane, metadata)) => {
                    self.xspace_host_event(line, plane, metadata, name, thread, start);
                }
                None => self.host_event(name, thread, start, end),
            }
        }
    }
}

/// An event of xprof's model, as both its readers (XSpace, trace viewer JSON) give it.
struct XprofEvent<'a> {
    plane: &'a str,
    line: &'a str,
    name: &'a str,
    /// `memcpy_details`: a copy's kind and size.
    details: Option<&'a str>,
    correlation: Option<u64>,
    start: f64,
    end: f64,
    /// From an XSpace: the event's line and plane (their indices in the file) and metadata
    /// id, for a host span left in the file.
    xspace: Option<(usize, usize, i64)>,
}

/// CUDA / ROCm API calls (runtime and driver) by their names: `cudaLaunchKernel`,
/// `cuStreamSynchronize`, `hipMemcpy` (a prefix, then a capital), not `cumsum`.
fn is_runtime_api(name: &str) -> bool {
    ["cuda", "cu", "hip"].iter().any(|p| {
        name.strip_prefix(p)
            .and_then(|rest| rest.chars().next())
            .is_some_and(|c| c.is_ascii_uppercase())
    })
}

/// A collective's kernel: NCCL's and RCCL's (`ncclDevKernel_AllReduce_…`, `ncclKernel_…`),
/// XLA's collective ops as the device runs them (`all-reduce.3`, `all-gather-start`, …).
fn is_collective_kernel(name: &str) -> bool {
    // `nccl` or `rccl` anywhere, in any case: one pass (`| 0x20` lowercases ASCII letters).
    let ccl = (name.as_bytes()).windows(4).any(|w| {
        matches!(w[0] | 0x20, b'n' | b'r')
            && w[1] | 0x20 == b'c'
            && w[2] | 0x20 == b'c'
            && w[3] | 0x20 == b'l'
    });
    ccl || [
        "all-reduce",
        "all-gather",
        "reduce-scatter",
        "all-to-all",
        "collective-permute",
    ]
    .iter()
    .any(|p| {
        name.get(..p.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(p))
    })
}

/// A collective called on the host: PyTorch's `nccl:all_reduce`, `gloo:broadcast`,
/// `c10d::allreduce_`, `record_param_comms`; TensorFlow's `CollectiveReduceV2`, `NcclAllReduce`.
fn is_collective_call(name: &str) -> bool {
    [
        "nccl:",
        "gloo:",
        "mpi:",
        "c10d::",
        "record_param_comms",
        "Collective",
        "Nccl",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

/// What a runtime / driver call does to the device's timeline: a launch, a wait for the
/// device (synchronize, or a blocking copy), or other.
fn runtime_kind(name: &str) -> HostKind {
    if name.contains("Launch") {
        HostKind::Launch
    } else if name.contains("Synchronize") || matches!(name, "cudaMemcpy" | "hipMemcpy") {
        HostKind::Sync
    } else {
        HostKind::Cpu
    }
}

/// Host spans by start, the enclosing span first where two start together; in place (a stable
/// sort would take half their memory again).
fn sort_host(host: &mut [HostSpan]) {
    host.sort_unstable_by(host_order);
}

fn host_order(a: &HostSpan, b: &HostSpan) -> std::cmp::Ordering {
    (a.start.total_cmp(&b.start))
        .then(b.end.total_cmp(&a.end))
        .then(a.name.cmp(&b.name))
        .then(a.thread.cmp(&b.thread))
}

/// The plane a trace viewer JSON process stands for: `/device:GPU:0`, `/host:CPU`, written
/// alone (JAX's export) or after the host's name (xprof's trace viewer: `myhost /device:GPU:0`).
fn xprof_plane(process: &str) -> Option<&str> {
    ["/device:", "/host:"].iter().find_map(|p| {
        let at = process.find(p)?;
        (at == 0 || process[..at].ends_with(' ')).then(|| &process[at..])
    })
}

/// The stream of a device line holding device activity: `Stream #N(...)` on GPUs, the `XLA Ops`
/// line on TPUs (stream 0).
fn xprof_stream(device: &str, line: &str) -> Option<i64> {
    if let Some(rest) = line.strip_prefix("Stream #") {
        return Some(
            rest.split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|d| d.parse().ok())
                .unwrap_or(0),
        );
    }
    (device.starts_with("TPU") && line == "XLA Ops").then_some(0)
}

/// Host spans of waiting for the next batch: a `DataLoader`'s, tf.data's, and those stoker's
/// loaders and iterators leave in the frameworks' profilers (`stoker:next#...`).
fn is_data_loading(name: &str) -> bool {
    (name.contains("DataLoader") && (name.contains("__next__") || name.starts_with("enumerate(")))
        || name.contains("IteratorGetNext")
        || name.starts_with("stoker:next")
}

/// Reads `path` into the model: JSON (Kineto, TensorFlow timeline, trace viewer JSON), or an
/// XSpace protobuf (`.xplane.pb`), plain or gzipped.
pub fn load(path: &Path) -> Result<Trace> {
    load_with(path, &|_| false)
}

/// [`load`], holding in memory the host spans of the XSpace lines (by index) that `hold` picks,
/// as if they had come out of order (to check that what is left in the file reads back the
/// same).
fn load_with(path: &Path, hold: &dyn Fn(usize) -> bool) -> Result<Trace> {
    let mut b = Builder::default();
    // Room for the host spans the file may hold, so that millions of them are not copied as
    // the table grows (room not written to costs no memory). An XSpace event takes tens of
    // bytes, a JSON event hundreds.
    let size = std::fs::metadata(path).map_or(0, |m| m.len());
    let header = if is_xspace(path)? {
        let bytes = read_all(path)?;
        let (counts, index) = crate::xspace::read_xspace(
            path,
            &bytes,
            |line, e| b.xspace_event(line, e),
            |start, end| bytes.done(start, end),
        )?;
        b.leave_host_in_file(bytes, index, hold);
        b.xspace = true;
        b.trace.skipped_events += counts.untimed;
        Header {
            events: counts.events,
            ..Header::default()
        }
    } else {
        b.trace
            .host_held
            .reserve(((size / 400) as usize).min(1 << 28));
        read_events(path, |e| b.event(e))?
    };
    let mut trace = b.finish();
    trace.header = header;
    trace.path = path.display().to_string();
    Ok(trace)
}

/// An XSpace by its name (`.pb`, `.pb.gz`), or by its first byte when the name says nothing.
fn is_xspace(path: &Path) -> Result<bool> {
    let name = path.to_string_lossy();
    if name.ends_with(".pb") || name.ends_with(".pb.gz") {
        return Ok(true);
    }
    if name.ends_with(".json") || name.ends_with(".json.gz") {
        return Ok(false);
    }
    let mut first = [0u8; 1];
    let n = crate::read::open(path)?
        .read(&mut first)
        .map_err(|e| AnalyzeError::io(path, e))?;
    Ok(n == 1 && crate::xspace::looks_like_xspace(&first))
}

/// The whole (gunzipped) file: an XSpace is not a stream of events.
/// An XSpace's bytes: a plain file mapped (only the pages decoded become resident: payloads
/// skipped unread, such as HLO protos, are never read from disk), a gzipped one inflated.
enum XspaceBytes {
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
    fn done(&self, start: usize, end: usize) {
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

fn read_all(path: &Path) -> Result<XspaceBytes> {
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
    crate::read::open(path)?
        .read_to_end(&mut bytes)
        .map_err(io)?;
    Ok(XspaceBytes::Owned(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_calls_by_name() {
        for (name, kind) in [
            ("cudaLaunchKernel", Some(HostKind::Launch)),
            ("cuLaunchKernel", Some(HostKind::Launch)),
            ("cuStreamSynchronize", Some(HostKind::Sync)),
            ("hipMemcpy", Some(HostKind::Sync)),
            ("cudaMemcpyAsync", Some(HostKind::Cpu)),
            ("cumsum", None),
            ("custom_op", None),
        ] {
            assert_eq!(
                is_runtime_api(name).then(|| runtime_kind(name)),
                kind,
                "{name}"
            );
        }
    }

    #[test]
    fn collective_kernels_by_name() {
        for (name, want) in [
            ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", true),
            ("ncclKernel_AllGather_RING_LL_Sum_int8_t", true),
            ("void RCCL_kernel<...>", true),
            ("All-Reduce.3", true),
            ("all-gather-start", true),
            ("reduce-scatter.1", true),
            ("fusion_all-reduce", false),
            ("gemm_fusion_dot", false),
            ("", false),
            ("é", false),
        ] {
            assert_eq!(is_collective_kernel(name), want, "{name}");
        }
    }

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
            let held = load_with(&path, &|_| true).unwrap_or_else(|e| panic!("{e}"));
            assert!(held.lazy_host.as_ref().is_some_and(|l| l.lines.is_empty()));
            let bits = |h: HostSpan| (h.start.to_bits(), h.end.to_bits(), h.kind, h.name, h.thread);
            let want: Vec<_> = held.host_spans().map(bits).collect();
            assert!(!want.is_empty(), "{name}");
            let json = |t: &Trace| serde_json::to_string(&crate::analysis::analyze(t)).ok();
            // All left in the file, or every other line (the rest merged with those held).
            let every_other: &dyn Fn(usize) -> bool = &|i| i % 2 == 1;
            for hold in [&|_| false, every_other] {
                let lazy = load_with(&path, hold).unwrap_or_else(|e| panic!("{e}"));
                let left = lazy.lazy_host.as_ref().map_or(0, |l| l.lines.len());
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

    #[test]
    fn planes_of_trace_viewer_processes() {
        assert_eq!(xprof_plane("/device:GPU:0"), Some("/device:GPU:0"));
        assert_eq!(xprof_plane("myhost /device:GPU:1"), Some("/device:GPU:1"));
        assert_eq!(xprof_plane("myhost /host:CPU"), Some("/host:CPU"));
        assert_eq!(xprof_plane("python3"), None);
        assert_eq!(xprof_plane("/job:localhost/device:GPU:0 Compute"), None);
    }
}
