//! Always-on per-stage counters. Cheap enough to keep on: a few relaxed atomic adds per element.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::element::Element;
use crate::error::Result;
use crate::exec::{BoxIter, Timed};
use crate::knob::{Knob, KnobKind, KnobSnapshot};
use crate::row_slots::RowSlots;
use crate::trace;

/// Counters of one pipeline stage, accumulated over every iteration of the pipeline.
#[derive(Debug, Default)]
pub struct StageStats {
    pub name: String,
    pub kind: String,
    /// `name`, shared by the timeline's spans.
    trace_name: Arc<str>,
    elements: AtomicU64,
    busy_ns: AtomicU64,
    wait_input_ns: AtomicU64,
    blocked_output_ns: AtomicU64,
    python_ns: AtomicU64,
    python_cpu_ns: AtomicU64,
    python_calls: AtomicU64,
    skipped: AtomicU64,
    skipped_bytes: AtomicU64,
    rest_lost: AtomicU64,
    warnings: AtomicU64,
    buffer_len: AtomicU64,
    buffer_capacity: AtomicU64,
    buffer_fill_sum: AtomicU64,
    buffer_samples: AtomicU64,
    /// When the timeline last got this stage's buffer fill (ns on the trace clock).
    last_fill_traced_ns: AtomicU64,
    workers: AtomicU64,
    copied_bytes: AtomicU64,
    in_place_bytes: AtomicU64,
    buffered_bytes: AtomicU64,
    buffered_bytes_peak: AtomicU64,
    starved_ns: AtomicU64,
    last_skip: Mutex<Option<String>>,
    last_warning: Mutex<Option<String>>,
    /// The stage its losses and warnings are counted in too: a dataset an `interleave`'s
    /// function opened has counters of its own, its losses are the interleave's.
    losses_to: Option<Arc<StageStats>>,
    /// Its knobs, kept across iterations: a new pass starts where the tuner left them.
    knobs: Mutex<Vec<Arc<Knob>>>,
}

/// A copy of a stage's counters at one moment.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct StageSnapshot {
    pub name: String,
    pub kind: String,
    pub elements: u64,
    /// Seconds spent on this stage's own work (summed over its worker threads).
    pub busy_s: f64,
    /// Seconds spent waiting for the input stage to hand over an element.
    pub wait_input_s: f64,
    /// Seconds producers spent blocked because this stage's output buffer was full.
    pub blocked_output_s: f64,
    /// Seconds spent inside Python functions (included in `busy_s`).
    pub python_s: f64,
    /// Of `python_s`, the seconds the calling threads ran on a CPU: a function holding the
    /// GIL computes; the rest it waited with the GIL released (I/O, a sleep).
    #[serde(default)]
    pub python_cpu_s: f64,
    pub python_calls: u64,
    /// Bad records skipped under the `skip` policy. Where a record reader passed over
    /// damaged bytes, the records it knows were there: records whose headers the damage
    /// destroyed cannot be counted, and lie in `skipped_bytes`.
    pub skipped: u64,
    /// Bytes of record files passed over after damage under the `skip` policy: the skipped
    /// records' own, and what lay between them and the next record read (not the rest of a
    /// file counted in `rest_lost`).
    pub skipped_bytes: u64,
    /// Files whose rest could not be read after damage under the `skip` policy (a damaged
    /// compressed stream): the records lost there are not in `skipped`, as they cannot be
    /// counted; `last_skip_reason` says from where.
    pub rest_lost: u64,
    /// Damaged input that was used anyway, as its decoder recovered from the damage (a JPEG
    /// with corrupt data libjpeg decodes through), and what the last one was.
    pub warnings: u64,
    pub last_warning: Option<String>,
    pub last_skip_reason: Option<String>,
    /// Elements in the output buffer when last looked at, its capacity, and its mean fill (0..1).
    pub buffer_len: u64,
    pub buffer_capacity: u64,
    pub buffer_fill_mean: Option<f64>,
    pub workers: u64,
    /// Bytes a batch copied from its elements into its rows.
    pub copied_bytes: u64,
    /// Bytes of a batch's rows the ops making its elements wrote there themselves (nothing
    /// left to copy; see `row_slots`).
    pub in_place_bytes: u64,
    /// Bytes of the elements in its output buffer held in the pipeline's RAM budget now, and
    /// the most it held at once (buffers left to `AUTOTUNE`).
    #[serde(skip_serializing_if = "is_zero")]
    pub buffered_bytes: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub buffered_bytes_peak: u64,
    /// Seconds its consumer waited on its empty output buffer (a prefetch's).
    #[serde(skip_serializing_if = "is_zero_s")]
    pub starved_s: f64,
    /// Its knobs' values now (parallelism, buffer sizes), and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub knobs: Vec<KnobSnapshot>,
}

/// Shortest interval between two buffer-fill samples of one stage on the timeline.
const FILL_TRACE_EVERY_NS: u64 = 100_000;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero_s(s: &f64) -> bool {
    *s == 0.0
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl StageStats {
    pub fn new(name: impl Into<String>, kind: impl Into<String>) -> StageStats {
        let name = name.into();
        StageStats {
            trace_name: Arc::from(name.as_str()),
            name,
            kind: kind.into(),
            ..StageStats::default()
        }
    }

    /// The stage's name as the timeline shows it.
    pub fn trace_name(&self) -> &Arc<str> {
        &self.trace_name
    }

    /// Counts the time since `start` as blocked on a full output buffer (and shows it on the
    /// timeline).
    pub fn blocked_since(&self, start: Instant) {
        self.add_blocked_output(start.elapsed());
        trace::span(
            &self.trace_name,
            trace::Category::BlockedOutput,
            start,
            None,
        );
    }

    pub fn add_elements(&self, n: u64) {
        self.elements.fetch_add(n, Relaxed);
    }
    pub fn add_busy(&self, d: Duration) {
        self.busy_ns.fetch_add(ns(d), Relaxed);
    }
    pub fn add_wait_input(&self, d: Duration) {
        self.wait_input_ns.fetch_add(ns(d), Relaxed);
    }
    pub fn add_blocked_output(&self, d: Duration) {
        self.blocked_output_ns.fetch_add(ns(d), Relaxed);
    }
    /// A call of a Python function: `d` from its start to its end, `cpu` of them running on
    /// the calling thread's CPU (where the platform tells); the rest the function waited
    /// (I/O, a sleep) with the GIL released.
    pub fn add_python(&self, d: Duration, cpu: Option<Duration>) {
        self.python_ns.fetch_add(ns(d), Relaxed);
        self.python_cpu_ns
            .fetch_add(ns(cpu.unwrap_or(d).min(d)), Relaxed);
        self.python_calls.fetch_add(1, Relaxed);
    }
    /// Counts a batch row's bytes: copied into it, or found already written there.
    pub fn add_row_bytes(&self, copied: usize, in_place: usize) {
        self.copied_bytes.fetch_add(copied as u64, Relaxed);
        self.in_place_bytes.fetch_add(in_place as u64, Relaxed);
    }
    /// Counts `bytes` more (or, negative, fewer) held in its output buffer's RAM budget.
    pub fn add_buffered_bytes(&self, bytes: i64) {
        let now = if bytes >= 0 {
            self.buffered_bytes.fetch_add(bytes as u64, Relaxed) + bytes as u64
        } else {
            let b = bytes.unsigned_abs();
            self.buffered_bytes.fetch_sub(b, Relaxed).saturating_sub(b)
        };
        self.buffered_bytes_peak.fetch_max(now, Relaxed);
    }
    /// Counts time its consumer waited on its empty output buffer.
    pub fn add_starved(&self, d: Duration) {
        self.starved_ns.fetch_add(ns(d), Relaxed);
    }
    pub fn set_workers(&self, n: usize) {
        self.workers.store(n as u64, Relaxed);
    }

    /// Its knob `name`, made at `value` in `min..=max` on first use; later passes get the
    /// same knob, at the value it has then.
    pub fn knob(
        &self,
        name: &'static str,
        (min, max): (usize, usize),
        value: usize,
        tuned: bool,
    ) -> Arc<Knob> {
        let mut knobs = self.knobs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = knobs.iter().find(|k| k.name == name) {
            return Arc::clone(k);
        }
        let k = Arc::new(Knob::new(name, min, max, value, tuned));
        knobs.push(Arc::clone(&k));
        k
    }

    /// Its knob for the size of its output buffer, `buffer_size` (see [`StageStats::knob`]); a
    /// tuned one starts with the reason `start`.
    pub fn buffer_knob(
        &self,
        range: (usize, usize),
        value: usize,
        tuned: bool,
        start: &str,
    ) -> Arc<Knob> {
        self.kind_knob(
            KnobKind::Buffer,
            "buffer_size",
            range,
            value,
            (tuned, start),
        )
    }

    /// Its knob `name` of kind `kind` (see [`StageStats::knob`]); where `tuned.0`, it starts
    /// with the reason `tuned.1`.
    pub fn kind_knob(
        &self,
        kind: KnobKind,
        name: &'static str,
        (min, max): (usize, usize),
        value: usize,
        (tuned, start): (bool, &str),
    ) -> Arc<Knob> {
        let mut knobs = self.knobs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = knobs.iter().find(|k| k.name == name) {
            return Arc::clone(k);
        }
        let k = Knob::new(name, min, max, value, tuned).of_kind(kind, start);
        let k = Arc::new(k);
        knobs.push(Arc::clone(&k));
        k
    }

    /// Its knobs.
    pub fn knobs(&self) -> Vec<Arc<Knob>> {
        self.knobs.lock().map(|k| k.clone()).unwrap_or_default()
    }

    /// Counts one skipped bad record and keeps its reason.
    pub fn add_skip(&self, reason: impl Into<String>) {
        self.add_loss(1, false, reason);
    }

    /// Counts `records` skipped bad records, and a file whose rest was lost if `rest_lost`,
    /// and keeps the reason.
    pub fn add_loss(&self, records: u64, rest_lost: bool, reason: impl Into<String>) {
        let reason = reason.into();
        if let Some(to) = &self.losses_to {
            to.add_loss(records, rest_lost, reason.clone());
        }
        self.skipped.fetch_add(records, Relaxed);
        self.rest_lost.fetch_add(u64::from(rest_lost), Relaxed);
        if let Ok(mut last) = self.last_skip.lock() {
            *last = Some(reason);
        }
    }

    /// Counts bytes of a record file passed over after damage (see
    /// [`StageSnapshot::skipped_bytes`]).
    pub fn add_skipped_bytes(&self, bytes: u64) {
        if let Some(to) = &self.losses_to {
            to.add_skipped_bytes(bytes);
        }
        self.skipped_bytes.fetch_add(bytes, Relaxed);
    }

    /// Counts input that was used though damaged (its decoder recovered), with its message.
    pub fn add_warning(&self, message: impl Into<String>) {
        let message = message.into();
        if let Some(to) = &self.losses_to {
            to.add_warning(message.clone());
        }
        self.warnings.fetch_add(1, Relaxed);
        if let Ok(mut last) = self.last_warning.lock() {
            *last = Some(message);
        }
    }

    /// Records the current fill of this stage's output buffer.
    pub fn sample_buffer(&self, len: usize, capacity: usize) {
        if trace::enabled() {
            // At most one sample per FILL_TRACE_EVERY_NS: a shuffle buffer is sampled for
            // every record, which would flood the timeline (and cost) for nothing.
            let now = trace::now_ns();
            let last = self.last_fill_traced_ns.load(Relaxed);
            if now.saturating_sub(last) >= FILL_TRACE_EVERY_NS || last > now {
                self.last_fill_traced_ns.store(now, Relaxed);
                trace::counter(&self.trace_name, len as u64);
            }
        }
        self.buffer_len.store(len as u64, Relaxed);
        self.buffer_capacity.store(capacity as u64, Relaxed);
        if let Some(fill) = (len * 1_000_000).checked_div(capacity) {
            self.buffer_fill_sum.fetch_add(fill as u64, Relaxed);
            self.buffer_samples.fetch_add(1, Relaxed);
        }
    }

    /// Pulls one element from `input`, counting the time as waiting for input.
    pub fn pull(&self, input: &mut BoxIter) -> Result<Option<Element>> {
        self.waiting(input, None)
    }

    /// [`pull`](StageStats::pull), offering `row` to the input (see [`ElementIter::next_into`]).
    ///
    /// [`ElementIter::next_into`]: crate::exec::ElementIter::next_into
    pub fn pull_into(&self, input: &mut BoxIter, row: &RowSlots) -> Result<Option<Element>> {
        self.waiting(input, Some(row))
    }

    fn waiting(&self, input: &mut BoxIter, row: Option<&RowSlots>) -> Result<Option<Element>> {
        let (r, (t, waited)) = if input.times_itself() {
            match input.next_timed(row) {
                (r, Some(timed)) => (r, timed),
                (r, None) => (r, (Instant::now(), Duration::ZERO)),
            }
        } else {
            let t = Instant::now();
            let (r, _) = input.next_timed(row);
            (r, (t, t.elapsed()))
        };
        self.add_wait_input(waited);
        trace::span_of(
            &self.trace_name,
            trace::Category::WaitInput,
            t,
            waited,
            None,
        );
        r
    }

    pub fn elements(&self) -> u64 {
        self.elements.load(Relaxed)
    }
    pub fn skipped(&self) -> u64 {
        self.skipped.load(Relaxed)
    }
    pub fn rest_lost(&self) -> u64 {
        self.rest_lost.load(Relaxed)
    }
    fn wait_input_ns(&self) -> u64 {
        self.wait_input_ns.load(Relaxed)
    }

    pub fn snapshot(&self) -> StageSnapshot {
        let s = |a: &AtomicU64| a.load(Relaxed) as f64 / 1e9;
        let samples = self.buffer_samples.load(Relaxed);
        StageSnapshot {
            name: self.name.clone(),
            kind: self.kind.clone(),
            elements: self.elements.load(Relaxed),
            busy_s: s(&self.busy_ns),
            wait_input_s: s(&self.wait_input_ns),
            blocked_output_s: s(&self.blocked_output_ns),
            python_s: s(&self.python_ns),
            python_cpu_s: s(&self.python_cpu_ns),
            python_calls: self.python_calls.load(Relaxed),
            skipped: self.skipped.load(Relaxed),
            skipped_bytes: self.skipped_bytes.load(Relaxed),
            rest_lost: self.rest_lost.load(Relaxed),
            warnings: self.warnings.load(Relaxed),
            last_warning: self.last_warning.lock().ok().and_then(|l| l.clone()),
            last_skip_reason: self.last_skip.lock().ok().and_then(|l| l.clone()),
            buffer_len: self.buffer_len.load(Relaxed),
            buffer_capacity: self.buffer_capacity.load(Relaxed),
            buffer_fill_mean: (samples > 0)
                .then(|| self.buffer_fill_sum.load(Relaxed) as f64 / samples as f64 / 1e6),
            workers: self.workers.load(Relaxed),
            copied_bytes: self.copied_bytes.load(Relaxed),
            in_place_bytes: self.in_place_bytes.load(Relaxed),
            buffered_bytes: self.buffered_bytes.load(Relaxed),
            buffered_bytes_peak: self.buffered_bytes_peak.load(Relaxed),
            starved_s: s(&self.starved_ns),
            knobs: self.knobs().iter().map(|k| k.snapshot()).collect(),
        }
    }
}

/// The stages of one pipeline, sink first (the order `explain` prints them).
#[derive(Debug, Default)]
pub struct StatsRegistry {
    stages: Mutex<Vec<(u64, Arc<StageStats>)>>,
    /// Where its stages' losses and warnings are counted too (see [`StatsRegistry::under`]).
    losses_to: Option<Arc<StageStats>>,
}

impl StatsRegistry {
    pub fn new() -> Arc<StatsRegistry> {
        Arc::new(StatsRegistry::default())
    }

    /// The counters of a pipeline run inside stage `stage` (a dataset an `interleave`'s
    /// function opened): kept apart, but every loss and warning is counted in `stage` too,
    /// so that the outer pipeline's stats account for it.
    pub fn under(stage: &Arc<StageStats>) -> Arc<StatsRegistry> {
        Arc::new(StatsRegistry {
            stages: Mutex::default(),
            losses_to: Some(Arc::clone(stage)),
        })
    }

    /// The stats of stage `key`, created on first use so that counters add up across epochs.
    pub fn stage(&self, key: u64, name: &str, kind: &str) -> Arc<StageStats> {
        let mut stages = self.stages.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, s)) = stages.iter().find(|(k, _)| *k == key) {
            return Arc::clone(s);
        }
        let mut stage = StageStats::new(name, kind);
        stage.losses_to = self.losses_to.clone();
        let s = Arc::new(stage);
        stages.push((key, Arc::clone(&s)));
        s
    }

    /// Whether the stage at address `stage` is one of this registry's stages (the address is
    /// only compared, never read).
    pub fn holds(&self, stage: *const StageStats) -> bool {
        let stages = self.stages.lock().unwrap_or_else(|e| e.into_inner());
        stages
            .iter()
            .any(|(_, s)| std::ptr::eq(Arc::as_ptr(s), stage))
    }

    pub fn snapshot(&self) -> Vec<StageSnapshot> {
        let stages = self.stages.lock().unwrap_or_else(|e| e.into_inner());
        stages.iter().map(|(_, s)| s.snapshot()).collect()
    }

    /// Its stages' counters.
    pub fn stages(&self) -> Vec<Arc<StageStats>> {
        let stages = self.stages.lock().unwrap_or_else(|e| e.into_inner());
        stages.iter().map(|(_, s)| Arc::clone(s)).collect()
    }

    /// Each stage's counters by its key.
    pub fn snapshot_by_key(&self) -> std::collections::HashMap<u64, StageSnapshot> {
        let stages = self.stages.lock().unwrap_or_else(|e| e.into_inner());
        stages.iter().map(|(k, s)| (*k, s.snapshot())).collect()
    }

    /// Total bad records skipped by all stages.
    pub fn skipped(&self) -> u64 {
        let stages = self.stages.lock().unwrap_or_else(|e| e.into_inner());
        stages.iter().map(|(_, s)| s.skipped()).sum()
    }
}

/// Wraps a synchronous stage: counts its elements and its busy time (time in `next` minus
/// the time it spent waiting for its input).
pub struct Metered {
    inner: BoxIter,
    stats: Arc<StageStats>,
}

impl Metered {
    pub fn wrap(inner: BoxIter, stats: Arc<StageStats>) -> BoxIter {
        Box::new(Metered { inner, stats })
    }
}

impl Metered {
    fn meter(&mut self, row: Option<&RowSlots>) -> (Result<Option<Element>>, Timed) {
        let wait_before = self.stats.wait_input_ns();
        let t = Instant::now();
        let r = match row {
            Some(row) => self.inner.next_into(row),
            None => self.inner.next(),
        };
        let elapsed = t.elapsed();
        trace::span_of(
            &self.stats.trace_name,
            trace::Category::Stage,
            t,
            elapsed,
            None,
        );
        let total = ns(elapsed);
        let waited = self.stats.wait_input_ns().saturating_sub(wait_before);
        self.stats
            .busy_ns
            .fetch_add(total.saturating_sub(waited), Relaxed);
        let r = match r {
            Ok(Some(e)) => {
                self.stats.add_elements(1);
                Ok(Some(e))
            }
            Ok(None) => Ok(None),
            Err(e) => Err(e.in_stage(&self.stats.name)),
        };
        (r, (t, elapsed))
    }
}

impl crate::exec::ElementIter for Metered {
    fn state(&self) -> Result<crate::exec::State> {
        (self.inner.state()).map_err(|e| e.in_stage(&self.stats.name))
    }

    fn next(&mut self) -> Result<Option<Element>> {
        self.meter(None).0
    }

    fn next_into(&mut self, row: &RowSlots) -> Result<Option<Element>> {
        self.meter(Some(row)).0
    }

    fn times_itself(&self) -> bool {
        true
    }

    fn next_timed(&mut self, row: Option<&RowSlots>) -> (Result<Option<Element>>, Option<Timed>) {
        let (r, timed) = self.meter(row);
        (r, Some(timed))
    }
}

/// Wraps the input of a stage that does not meter its own pulls: time in `next` is counted
/// as that stage's waiting for input.
pub struct WaitMeter {
    inner: BoxIter,
    stats: Arc<StageStats>,
}

impl WaitMeter {
    pub fn wrap(inner: BoxIter, stats: Arc<StageStats>) -> BoxIter {
        Box::new(WaitMeter { inner, stats })
    }
}

impl crate::exec::ElementIter for WaitMeter {
    fn state(&self) -> Result<crate::exec::State> {
        self.inner.state()
    }

    fn next(&mut self) -> Result<Option<Element>> {
        self.stats.pull(&mut self.inner)
    }
}
