//! One model over all trace dialects: device activity (kernels, memcpy, memset) per device and
//! stream, host spans that matter (steps, data loading, runtime launches and synchronisation).
//! The dialects ([`crate::dialect`]) build it from the events as they stream by. Times are
//! microseconds, as every dialect writes `ts` and `dur` (Kineto keeps them in µs even when
//! `displayTimeUnit` says `ns`).

use std::collections::VecDeque;

use crate::dialect::chrome_json::raw::Header;

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
    /// Every host span, in the order of `sort_host`: those held, merged with those a
    /// dialect left in the file (an XSpace's lines, decoded again: a pass over them).
    pub fn host_spans(&self) -> HostSpans<'_> {
        let mut spans = HostSpans {
            held: self.host_held.iter(),
            lines: Vec::new(),
            heap: std::collections::BinaryHeap::new(),
        };
        let Some(lazy) = self.lazy_host.as_ref().filter(|l| l.0.lines() > 0) else {
            return spans; // the held spans alone, not merged
        };
        spans.lines = (lazy.0.read_again().into_iter())
            .map(|source| Buffered {
                source,
                ready: VecDeque::with_capacity(SPAN_BATCH),
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

/// Host spans a dialect left in the file, so that millions of spans are not held at once:
/// [`Trace::host_spans`] reads them again and merges them with those held.
pub(crate) trait HostInFile: Send + Sync {
    /// How many sources (lines) of spans are left in the file.
    fn lines(&self) -> usize;
    /// A reader of each source's spans, each in the order of [`sort_host`].
    fn read_again(&self) -> Vec<Box<dyn SpanSource + '_>>;
}

/// One source's spans, in order, handed over a batch at a time: a call per batch, not per
/// span, as a merge over millions of spans would otherwise make.
pub(crate) trait SpanSource {
    /// Appends the next spans, up to `max`, to `out`; none once the source is done.
    fn fill(&mut self, out: &mut VecDeque<HostSpan>, max: usize);
}

/// How many spans a source hands over at a time.
const SPAN_BATCH: usize = 256;

/// A source of spans and those of its spans taken and not yet merged.
struct Buffered<'t> {
    source: Box<dyn SpanSource + 't>,
    ready: VecDeque<HostSpan>,
}

impl Buffered<'_> {
    fn next(&mut self) -> Option<HostSpan> {
        if self.ready.is_empty() {
            self.source.fill(&mut self.ready, SPAN_BATCH);
        }
        self.ready.pop_front()
    }
}

/// Host spans a dialect left in the file (`HostInFile`).
pub struct LazyHost(pub(crate) Box<dyn HostInFile>);

impl std::fmt::Debug for LazyHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LazyHost({} lines)", self.0.lines())
    }
}

/// See [`Trace::host_spans`].
pub struct HostSpans<'t> {
    held: std::slice::Iter<'t, HostSpan>,
    lines: Vec<Buffered<'t>>,
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

/// Host spans by start, the enclosing span first where two start together; in place (a stable
/// sort would take half their memory again).
pub(crate) fn sort_host(host: &mut [HostSpan]) {
    host.sort_unstable_by(host_order);
}

pub(crate) fn host_order(a: &HostSpan, b: &HostSpan) -> std::cmp::Ordering {
    (a.start.total_cmp(&b.start))
        .then(b.end.total_cmp(&a.end))
        .then(a.name.cmp(&b.name))
        .then(a.thread.cmp(&b.thread))
}
