//! The timeline: spans per thread (a stage's work on an element, each op inside it, waits for
//! input and on a full buffer) and buffer fill levels, recorded only while tracing is on, and
//! written as Chrome Trace Event JSON (opens in Perfetto and chrome://tracing).
//!
//! Off, a would-be span costs one relaxed atomic load. On, each thread appends to its own
//! ring buffer (its lock is only contended by the writer of the file). Memory stays bounded:
//! a full ring drops its oldest spans, spans shorter than [`MIN_SPAN_NS`] are only counted
//! (per stage: how many and their total time), and the file says what was dropped.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use serde_json::{json, Value};

/// Spans kept per thread; the oldest go first.
pub const RING_SPANS: usize = 1 << 17;
/// Spans shorter than this are counted, not kept: a reader stage's per-record spans of a few
/// microseconds would fill the ring in a fraction of a second and show nothing.
pub const MIN_SPAN_NS: u64 = 10_000;
/// Counter samples kept per thread.
const RING_COUNTERS: usize = 1 << 15;

static ON: AtomicBool = AtomicBool::new(false);
/// Bumped at each start, so that threads drop rings left from an earlier trace.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// Whether spans are being recorded.
#[inline]
pub fn enabled() -> bool {
    ON.load(Relaxed)
}

/// What a span is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Category {
    /// A stage's work on one element (or batch).
    Stage,
    /// One op inside a map.
    Op,
    /// Waiting for the input stage.
    WaitInput,
    /// Blocked on a full output buffer.
    BlockedOutput,
}

impl Category {
    fn name(self) -> &'static str {
        match self {
            Category::Stage => "stage",
            Category::Op => "op",
            Category::WaitInput => "wait_input",
            Category::BlockedOutput => "blocked_output",
        }
    }
}

struct Span {
    name: Arc<str>,
    cat: Category,
    start_ns: u64,
    dur_ns: u64,
    /// The element's position in its stage's pass, when known.
    element: Option<u64>,
}

struct Sample {
    name: Arc<str>,
    ts_ns: u64,
    value: u64,
}

#[derive(Default)]
struct Ring {
    generation: u64,
    thread: String,
    tid: u64,
    spans: VecDeque<Span>,
    counters: VecDeque<Sample>,
    dropped_spans: u64,
    dropped_samples: u64,
}

struct Registry {
    rings: Mutex<Vec<Arc<Mutex<Ring>>>>,
    totals: Mutex<Vec<Arc<Totals>>>,
    next_tid: AtomicU64,
}

fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(|| Registry {
        rings: Mutex::new(Vec::new()),
        totals: Mutex::new(Vec::new()),
        next_tid: AtomicU64::new(1),
    })
}

fn epoch() -> Instant {
    static E: OnceLock<Instant> = OnceLock::new();
    *E.get_or_init(Instant::now)
}

/// Nanoseconds on the trace's clock.
pub fn now_ns() -> u64 {
    ns_since_epoch(Instant::now())
}

fn ns_since_epoch(t: Instant) -> u64 {
    u64::try_from(t.saturating_duration_since(epoch()).as_nanos()).unwrap_or(u64::MAX)
}

thread_local! {
    static RING: RefCell<Option<Arc<Mutex<Ring>>>> = const { RefCell::new(None) };
    /// The name the calling thread works under, where it is not its own (a pool thread).
    static NAME: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Says that the calling thread now works under `name` (a pool thread taking a stage's job):
/// its spans from now on go to a track of that name.
pub fn name_thread(name: &str) {
    NAME.with(|n| *n.borrow_mut() = Some(name.to_string()));
    RING.with(|cell| *cell.borrow_mut() = None);
}

/// Runs `f` on this thread's ring for the current trace, made on first use.
fn with_ring(f: impl FnOnce(&mut Ring)) {
    let generation = GENERATION.load(Relaxed);
    RING.with(|cell| {
        let mut slot = cell.borrow_mut();
        let ring = slot.get_or_insert_with(|| {
            let r = Arc::new(Mutex::new(Ring::default()));
            let reg = registry();
            {
                let mut g = r.lock().unwrap_or_else(|e| e.into_inner());
                g.tid = reg.next_tid.fetch_add(1, Relaxed);
                g.thread = NAME
                    .with(|n| n.borrow().clone())
                    .or_else(|| std::thread::current().name().map(str::to_string))
                    .unwrap_or_else(|| format!("thread {}", g.tid));
                g.generation = generation;
            }
            reg.rings
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(Arc::clone(&r));
            r
        });
        let mut g = ring.lock().unwrap_or_else(|e| e.into_inner());
        if g.generation != generation {
            // Left from an earlier trace.
            g.spans.clear();
            g.counters.clear();
            g.dropped_spans = 0;
            g.dropped_samples = 0;
            g.generation = generation;
        }
        f(&mut g);
    });
}

/// Records a span from `start` to now on this thread, if tracing is on.
#[inline]
pub fn span(name: &str, cat: Category, start: Instant, element: Option<u64>) {
    if enabled() {
        span_of(name, cat, start, start.elapsed(), element);
    }
}

/// Records a span of `dur` from `start` (for callers that have measured it already).
/// `name` should be a string that lives as long as its stage or op (it is looked up by
/// address first).
#[inline]
pub fn span_of(
    name: &str,
    cat: Category,
    start: Instant,
    dur: std::time::Duration,
    element: Option<u64>,
) {
    if !enabled() {
        return;
    }
    let dur_ns = u64::try_from(dur.as_nanos()).unwrap_or(u64::MAX);
    let kept = dur_ns >= MIN_SPAN_NS;
    let shared = count(name, cat, dur_ns, kept);
    if let (true, Some(name)) = (kept, shared) {
        record_span(name, cat, start, dur_ns, element);
    }
}

/// Every span of one (name, category) on one thread: how many and how long, in all and of
/// those too short to keep. Written by its thread only, read by the writer of the file.
struct Totals {
    name: Arc<str>,
    cat: Category,
    generation: u64,
    count: AtomicU64,
    total_ns: AtomicU64,
    short_count: AtomicU64,
    short_ns: AtomicU64,
}

/// Adds `v` to a counter only this thread writes: a load and a store, no locked instruction.
#[inline]
fn bump(c: &AtomicU64, v: u64) {
    c.store(c.load(Relaxed).wrapping_add(v), Relaxed);
}

thread_local! {
    /// This thread's totals of the current trace. A reader stage makes hundreds of thousands
    /// of spans a second, so they are found by the name's address (then checked by content).
    static TOTALS: RefCell<(u64, Vec<Arc<Totals>>)> = const { RefCell::new((0, Vec::new())) };
}

/// Counts a span; returns the shared name when the span is to be kept.
fn count(name: &str, cat: Category, dur_ns: u64, kept: bool) -> Option<Arc<str>> {
    let generation = GENERATION.load(Relaxed);
    TOTALS.with(|cell| {
        let mut table = cell.borrow_mut();
        if table.0 != generation {
            *table = (generation, Vec::new());
        }
        let found = table.1.iter().position(|t| {
            t.cat == cat
                && (std::ptr::eq(t.name.as_ptr(), name.as_ptr()) && t.name.len() == name.len()
                    || *t.name == *name)
        });
        let index = match found {
            Some(i) => i,
            None => {
                let t = Arc::new(Totals {
                    name: Arc::from(name),
                    cat,
                    generation,
                    count: AtomicU64::new(0),
                    total_ns: AtomicU64::new(0),
                    short_count: AtomicU64::new(0),
                    short_ns: AtomicU64::new(0),
                });
                registry()
                    .totals
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(Arc::clone(&t));
                table.1.push(t);
                table.1.len() - 1
            }
        };
        let t = &table.1[index];
        bump(&t.count, 1);
        bump(&t.total_ns, dur_ns);
        if kept {
            Some(Arc::clone(&t.name))
        } else {
            bump(&t.short_count, 1);
            bump(&t.short_ns, dur_ns);
            None
        }
    })
}

#[cold]
fn record_span(name: Arc<str>, cat: Category, start: Instant, dur_ns: u64, element: Option<u64>) {
    with_ring(|r| {
        if r.spans.len() >= RING_SPANS {
            r.spans.pop_front();
            r.dropped_spans += 1;
        }
        r.spans.push_back(Span {
            name,
            cat,
            start_ns: ns_since_epoch(start),
            dur_ns,
            element,
        });
    });
}

/// Time per op name over the current trace (every span, kept or not): (name, calls, seconds),
/// summed over threads.
pub fn op_totals() -> Vec<(String, u64, f64)> {
    let generation = GENERATION.load(Relaxed);
    let mut by_name: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for t in registry()
        .totals
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|t| t.generation == generation && t.cat == Category::Op)
    {
        let e = by_name.entry(t.name.to_string()).or_insert((0, 0));
        e.0 += t.count.load(Relaxed);
        e.1 += t.total_ns.load(Relaxed);
    }
    by_name
        .into_iter()
        .map(|(name, (calls, ns))| (name, calls, ns as f64 / 1e9))
        .collect()
}

/// Records a buffer's fill level, if tracing is on.
#[inline]
pub fn counter(name: &Arc<str>, value: u64) {
    if enabled() {
        record_counter(name, value);
    }
}

#[cold]
fn record_counter(name: &Arc<str>, value: u64) {
    let ts_ns = ns_since_epoch(Instant::now());
    with_ring(|r| {
        if r.counters.len() >= RING_COUNTERS {
            r.counters.pop_front();
            r.dropped_samples += 1;
        }
        r.counters.push_back(Sample {
            name: Arc::clone(name),
            ts_ns,
            value,
        });
    });
}

/// Starts a new trace (dropping what an earlier one left).
pub fn start() {
    epoch();
    GENERATION.fetch_add(1, Relaxed);
    // Counters of earlier traces are no longer written.
    let generation = GENERATION.load(Relaxed);
    registry()
        .totals
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|c| c.generation == generation);
    ON.store(true, Relaxed);
}

/// Stops recording; what was recorded stays until the next [`start`].
pub fn stop() {
    ON.store(false, Relaxed);
}

/// The recorded trace as a Chrome Trace Event JSON object.
pub fn to_json() -> Value {
    let generation = GENERATION.load(Relaxed);
    let pid = 1;
    let mut events = vec![json!({
        "name": "process_name", "ph": "M", "pid": pid, "tid": 0,
        "args": {"name": "stoker"},
    })];
    let (mut dropped_spans, mut dropped_samples) = (0u64, 0u64);
    let rings = registry()
        .rings
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    for ring in rings {
        let r = ring.lock().unwrap_or_else(|e| e.into_inner());
        if r.generation != generation {
            continue;
        }
        events.push(json!({
            "name": "thread_name", "ph": "M", "pid": pid, "tid": r.tid,
            "args": {"name": r.thread},
        }));
        for s in &r.spans {
            let mut args = serde_json::Map::new();
            if let Some(e) = s.element {
                args.insert("element".into(), json!(e));
            }
            events.push(json!({
                "name": &*s.name, "cat": s.cat.name(), "ph": "X", "pid": pid, "tid": r.tid,
                "ts": s.start_ns as f64 / 1e3, "dur": s.dur_ns as f64 / 1e3, "args": args,
            }));
        }
        for c in &r.counters {
            events.push(json!({
                "name": format!("buffer: {}", c.name), "ph": "C", "pid": pid, "tid": r.tid,
                "ts": c.ts_ns as f64 / 1e3, "args": {"elements": c.value},
            }));
        }
        dropped_spans += r.dropped_spans;
        dropped_samples += r.dropped_samples;
    }
    // Short spans, summed over threads per (stage, category).
    let mut short: BTreeMap<(String, &'static str), (u64, u64)> = BTreeMap::new();
    for t in registry()
        .totals
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|t| t.generation == generation && t.short_count.load(Relaxed) > 0)
    {
        let e = short
            .entry((t.name.to_string(), t.cat.name()))
            .or_insert((0, 0));
        e.0 += t.short_count.load(Relaxed);
        e.1 += t.short_ns.load(Relaxed);
    }
    let short: Vec<Value> = short
        .into_iter()
        .map(|((name, cat), (count, total))| {
            json!({"name": name, "cat": cat, "count": count, "total_ms": total as f64 / 1e6})
        })
        .collect();
    json!({
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "producer": "stoker",
            "ring_spans_per_thread": RING_SPANS,
            "dropped_spans": dropped_spans,
            "dropped_counter_samples": dropped_samples,
            "min_span_us": MIN_SPAN_NS as f64 / 1e3,
            "short_spans_not_kept": short,
        },
    })
}

/// Writes the recorded trace to `path`.
pub fn write(path: &std::path::Path) -> std::io::Result<()> {
    let file = std::fs::File::create(path)?;
    let mut w = std::io::BufWriter::new(file);
    serde_json::to_writer(&mut w, &to_json())?;
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tracing is process-wide: these tests take turns.
    static SERIAL: Mutex<()> = Mutex::new(());

    #[test]
    #[cfg_attr(
        miri,
        ignore = "an op span meant to be too short lasts longer under Miri's clock"
    )]
    fn records_only_while_on_and_writes_chrome_events() {
        let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let name: Arc<str> = Arc::from("stage a");
        stop();
        span(&name, Category::Stage, Instant::now(), None);
        start();
        let t = Instant::now();
        std::thread::sleep(std::time::Duration::from_millis(2));
        span(&name, Category::Stage, t, Some(7));
        span(&name, Category::Op, Instant::now(), None); // too short: counted only
        counter(&name, 3);
        stop();
        let v = to_json();
        let events = v["traceEvents"].as_array().unwrap();
        // Other tests may run stages meanwhile (tracing is process-wide): only this name.
        let spans: Vec<&Value> = (events.iter())
            .filter(|e| e["ph"] == "X" && e["name"] == "stage a")
            .collect();
        assert_eq!(spans.len(), 1, "{v}");
        assert_eq!(spans[0]["args"]["element"], 7);
        assert!(spans[0]["dur"].as_f64().unwrap() >= 2000.0);
        assert!(events.iter().any(|e| e["ph"] == "C"
            && e["name"] == "buffer: stage a"
            && e["args"]["elements"] == 3));
        assert!(events
            .iter()
            .any(|e| e["ph"] == "M" && e["name"] == "thread_name"));
        let short = v["otherData"]["short_spans_not_kept"].as_array().unwrap();
        assert!(short
            .iter()
            .any(|s| s["name"] == "stage a" && s["cat"] == "op" && s["count"] == 1));
    }

    #[test]
    fn op_totals_count_every_span_of_a_name() {
        let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        start();
        for i in 0..1000 {
            // A new string each time, as a short-lived name would be: one entry all the same.
            let name = format!("op{}", i % 2);
            span(&name, Category::Op, Instant::now(), None);
        }
        let t = Instant::now();
        std::thread::sleep(std::time::Duration::from_millis(1));
        span("op0", Category::Op, t, None);
        let totals = op_totals();
        stop();
        let get = |n: &str| totals.iter().find(|(name, ..)| name == n).cloned();
        assert_eq!(get("op0").map(|t| t.1), Some(501));
        assert_eq!(get("op1").map(|t| t.1), Some(500));
        assert!(get("op0").is_some_and(|t| t.2 >= 0.001));
        let entries = registry()
            .totals
            .lock()
            .unwrap()
            .iter()
            // Other tests may run ops meanwhile (tracing is process-wide): only these names.
            .filter(|t| t.generation == GENERATION.load(Relaxed) && t.cat == Category::Op)
            .filter(|t| matches!(&*t.name, "op0" | "op1"))
            .count();
        assert_eq!(entries, 2);
    }
}
