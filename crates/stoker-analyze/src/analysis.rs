//! Per step and overall: step time, accelerator busy and idle, every idle gap on the compute
//! streams classified by cause, the input-bound share with TensorFlow Profiler's bands,
//! host-to-device copies, top kernels, and recommendations tied to their evidence.

use std::cmp::Reverse;
use std::collections::HashMap;

use serde::Serialize;

use crate::intervals::{Sweep, Union, UnionBuilder};
use crate::model::{DeviceKind, DeviceOp, Direction, HostKind, HostSpan, Launch, Step, Trace};

/// The causes of idle time on the compute streams, in the order an idle moment is credited
/// (to the first present then): (JSON key, name).
pub const CAUSES: [(&str, &str); 10] = [
    ("input", "waiting for input"),
    ("communication", "communication (collectives)"),
    ("h2d", "host-to-device copy"),
    ("copies", "device-to-host / device-to-device copy"),
    (
        "queued",
        "queued on the device (the next kernel was launched, not started)",
    ),
    ("sync", "synchronisation"),
    ("launch", "kernel launch"),
    ("host_ops", "host operators"),
    ("python", "Python (the training loop outside traced ops)"),
    ("untraced", "host idle / untraced"),
];

/// Idle time on the compute streams, by what the device and the host were doing meanwhile
/// (ms). The fields add up to the idle time.
#[derive(Clone, Debug, Default, Serialize)]
pub struct GapCauses {
    /// The host was getting the next batch (DataLoader `__next__`, `IteratorGetNext`,
    /// stoker's `stoker:next` spans, the host between TensorFlow 1.x `session.run` calls).
    pub input: f64,
    /// A collective ran on the device (NCCL / RCCL kernels: exposed communication) or was
    /// being called on the host.
    pub communication: f64,
    /// A host-to-device copy was running.
    pub h2d: f64,
    /// A device-to-host or device-to-device copy was running.
    pub copies: f64,
    /// The next kernel had been launched (its launch call had begun) and had not started: the
    /// device, not the host, held it back (its launch latency, a wait on another stream or
    /// an event). HTA's "kernel wait" and "other" are such time.
    pub queued: f64,
    /// The host was waiting for the device (synchronize, blocking copy).
    pub sync: f64,
    /// The host was launching kernels (the device's queue was empty).
    pub launch: f64,
    /// The host ran operators or other runtime calls, launching nothing.
    pub host_ops: f64,
    /// Inside a step, no traced operator on the host: the training loop's Python (its
    /// functions named when the Python tracer was on).
    pub python: f64,
    /// Nothing recorded on the host: outside the steps, or a host that was idle.
    pub untraced: f64,
}

impl GapCauses {
    pub fn values(&self) -> [f64; 10] {
        [
            self.input,
            self.communication,
            self.h2d,
            self.copies,
            self.queued,
            self.sync,
            self.launch,
            self.host_ops,
            self.python,
            self.untraced,
        ]
    }
    fn from_values(v: [f64; 10]) -> GapCauses {
        let [input, communication, h2d, copies, queued, sync, launch, host_ops, python, untraced] =
            v;
        GapCauses {
            input,
            communication,
            h2d,
            copies,
            queued,
            sync,
            launch,
            host_ops,
            python,
            untraced,
        }
    }
    /// Milliseconds per class of `spans` (µs), as [`Causes::classify`] returns them.
    fn from_classes(classes: &[Vec<(f64, f64)>; 10]) -> GapCauses {
        GapCauses::from_values(std::array::from_fn(|i| {
            classes[i].iter().fold(0.0, |acc, (x, y)| acc + (y - x)) * 1e-3
        }))
    }
    pub fn total(&self) -> f64 {
        self.values().iter().sum()
    }
    fn largest(&self) -> &'static str {
        let v = self.values();
        let i = (0..v.len()).fold(0, |best, i| if v[i] > v[best] { i } else { best });
        CAUSES[i].1
    }
    fn add(&mut self, o: &GapCauses) {
        let (a, b) = (self.values(), o.values());
        *self = GapCauses::from_values(std::array::from_fn(|i| a[i] + b[i]));
    }
    fn scale(&mut self, k: f64) {
        let a = self.values();
        *self = GapCauses::from_values(a.map(|v| v * k));
    }
}

/// What one cause of idle time was, with the evidence: the spans that overlapped the idle time
/// credited to it, most first.
#[derive(Clone, Debug, Serialize)]
pub struct CauseEvidence {
    /// The key of [`CAUSES`].
    pub cause: &'static str,
    pub name: &'static str,
    pub ms_per_step: f64,
    /// Of the idle time of the steps kept.
    pub share_of_idle: f64,
    /// What overlapped it (a host span, or device work with its device and stream), and for
    /// how long in all, most first (at most 5).
    pub top: Vec<Overlap>,
    /// How the cause was told, where `top` cannot say it.
    pub note: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Overlap {
    pub what: String,
    pub ms: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct StepStats {
    pub name: String,
    /// Host step time: the step marker's span.
    pub step_ms: f64,
    /// Until the last device work launched in the step has finished.
    pub device_step_ms: f64,
    pub busy_ms: f64,
    pub idle_ms: f64,
    /// Time in data loading within the step.
    pub input_ms: f64,
    pub input_percent: f64,
    pub gaps: GapCauses,
    pub h2d_bytes: f64,
    pub h2d_ms: f64,
    /// Host-to-device copy time not overlapped by kernels.
    pub h2d_exposed_ms: f64,
    /// Left out of the totals: warm-up.
    pub warmup: bool,
    /// Left out of the totals: cut off by the end of the profile.
    pub incomplete: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct KernelStat {
    pub name: String,
    pub count: u64,
    pub total_ms: f64,
    pub share: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct H2d {
    pub bytes_per_step: f64,
    pub ms_per_step: f64,
    pub gbps: Option<f64>,
    pub pageable_bytes: f64,
    pub pinned_bytes: f64,
    pub exposed_ms_per_step: f64,
}

/// Kernels tied to the host calls that launched them (by correlation id).
#[derive(Clone, Debug, Serialize)]
pub struct LaunchStats {
    /// Kernels whose launch call is in the trace.
    pub matched: u64,
    /// Median time from the launch call's return to the kernel's start, µs: small when the
    /// device waits for the host, large when the host runs ahead.
    pub median_queue_us: f64,
    /// Share of those kernels that started within 10 µs of their launch returning: the device
    /// had been waiting for that launch.
    pub waited_share: f64,
}

/// Host work overlapping an idle gap.
#[derive(Clone, Debug, Serialize)]
pub struct HostActivity {
    pub name: String,
    /// `data loading`, `launch`, `sync`, `cpu`, `collective` or `python`.
    pub kind: &'static str,
    /// The thread it ran on, by the trace's name for it (`None`: the trace does not say).
    pub thread: Option<String>,
    pub overlap_ms: f64,
}

/// One of the longest stretches of idle compute, with what the host was doing then.
#[derive(Clone, Debug, Serialize)]
pub struct IdleGap {
    pub step: String,
    /// From the step's start.
    pub at_ms: f64,
    pub ms: f64,
    /// The cause that covers most of the gap.
    pub cause: &'static str,
    pub by_cause: GapCauses,
    /// The host spans overlapping it, longest overlap first (at most 5).
    pub host: Vec<HostActivity>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Recommendation {
    pub action: String,
    pub evidence: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct Analysis {
    pub path: String,
    pub dialect: String,
    /// The rank in a distributed job, when the trace says.
    pub rank: Option<i64>,
    pub events: u64,
    /// Events left out: complete events without a time or with one that is not finite, and
    /// XSpace's aggregated (untimed) events.
    pub skipped_events: u64,
    /// Values in the trace that cannot be true (a duration over a day, a copy of more than a
    /// petabyte...), left out of the analysis: how many of each kind, and the first.
    pub warnings: Vec<String>,
    pub devices: Vec<i64>,
    pub kernels: u64,
    /// How the steps were found: `ProfilerStep`, or the whole trace as one step.
    pub steps_from: String,
    pub steps: Vec<StepStats>,
    /// Over the steps kept (warm-up left out), per step.
    pub step_ms: f64,
    /// The device's compute over the steps' time (the host's steps, or xprof's device steps).
    pub busy_percent: f64,
    /// The device's compute from its first event to its last, over the whole trace: the
    /// window HTA and TraceLens measure busy over. `None` without device activity.
    pub busy_percent_device_span: Option<f64>,
    pub idle_percent: f64,
    pub input_percent: f64,
    /// TensorFlow Profiler's band; "cannot tell" where the trace has no step markers (no
    /// step time, as xprof says).
    pub verdict: String,
    /// For TensorFlow / JAX profiles of an accelerator, xprof's input-bound conclusion in its
    /// own terms (its overview page's rules: input ≥ 20 % highly, ≥ 5 % moderately, else
    /// 'All others' — the step time that is neither device compute nor input — ≥ 3 %
    /// potentially, else not input-bound).
    pub xprof_conclusion: Option<String>,
    pub gaps_ms_per_step: GapCauses,
    /// The causes with idle time, in the order of [`CAUSES`], each with its evidence.
    pub idle_by_cause: Vec<CauseEvidence>,
    pub h2d: H2d,
    pub top_kernels: Vec<KernelStat>,
    /// The longest idle gaps of the steps kept (at most 10), longest first.
    pub largest_gaps: Vec<IdleGap>,
    /// Median kernel time, µs.
    pub median_kernel_us: f64,
    /// The share of idle time the host spent launching kernels or running operators (host
    /// overhead).
    pub launch_share: f64,
    /// `None` when no kernel could be tied to its launch.
    pub launches: Option<LaunchStats>,
    /// Per device, from the allocator's events (empty when the trace has none).
    pub memory: Vec<crate::memory::DeviceMemory>,
    pub recommendations: Vec<Recommendation>,
}

/// xprof's conclusion from the input share and the device's compute share of step time.
fn xprof_conclusion(input: f64, compute: f64) -> String {
    let others = (100.0 - compute - input).max(0.0);
    if input >= 20.0 {
        format!("HIGHLY input-bound: {input:.1} % of the step time is waiting for input")
    } else if input >= 5.0 {
        format!("MODERATELY input-bound: {input:.1} % of the step time is waiting for input")
    } else if others >= 3.0 {
        format!(
            "POTENTIALLY input-bound: {others:.1} % of the step time is 'All others' (neither \
             device compute nor input: I/O, Python, or both)"
        )
    } else {
        format!("NOT input-bound: only {input:.1} % of the step time is waiting for input")
    }
}

/// TensorFlow Profiler's bands.
pub fn verdict(input_percent: f64) -> &'static str {
    if input_percent >= 20.0 {
        "highly input-bound"
    } else if input_percent >= 5.0 {
        "moderately input-bound"
    } else {
        "not input-bound"
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// What the device and the host were doing while the compute streams were idle, in the order
/// of [`CAUSES`]: each idle moment goes to the first cause present then.
pub struct Causes {
    /// Kernels and memsets, not collectives'.
    pub compute: Union,
    /// One per cause of [`CAUSES`] but the last (untraced: what is left).
    pub by_priority: [Union; 9],
}

/// The cause (index into [`CAUSES`]) that device work of `kind` makes: `None` for compute.
fn device_cause(kind: DeviceKind) -> Option<usize> {
    match kind {
        DeviceKind::Collective => Some(1),
        DeviceKind::Memcpy(Direction::HtoD) => Some(2),
        DeviceKind::Memcpy(_) => Some(3),
        DeviceKind::Kernel | DeviceKind::Memset => None,
    }
}

/// The cause (index into [`CAUSES`]) that host work of `kind` makes.
fn host_cause(kind: HostKind) -> usize {
    match kind {
        HostKind::DataLoading => 0,
        HostKind::Collective => 1,
        HostKind::Sync => 5,
        HostKind::Launch => 6,
        HostKind::Cpu => 7,
        HostKind::Python => 8,
    }
}

/// The cause [`CAUSES`] gives the time a compute kernel waited, launched, to start.
const QUEUED: usize = 4;
/// The cause of time inside a step with no traced op on the host.
const PYTHON: usize = 8;

/// The idle gap right before compute op `op` if the device held it back: its launch call
/// (looked up in `launches`, sorted by correlation id) began while the device was still busy
/// before the gap, as HTA tells "kernel wait" from "host wait", on the device's compute work.
fn queued_gap(compute: &Union, launches: &[Launch], op: &DeviceOp) -> Option<(f64, f64)> {
    let c = op.correlation?;
    let i = launches.binary_search_by_key(&c, |l| l.correlation).ok()?;
    let launched = launches[i].start;
    if launched >= op.start {
        return None;
    }
    let (x, y) = compute.gap_before(op.start, launched)?;
    (x > launched).then_some((x, y))
}

impl Causes {
    /// Over the whole trace, or only what overlaps `window` (one step's report).
    pub fn new(t: &Trace, window: Option<(f64, f64)>) -> Causes {
        let (a, b) = window.unwrap_or((f64::NEG_INFINITY, f64::INFINITY));
        let host: Vec<HostSpan> = (t.host_spans())
            .filter(|h| h.end > a && h.start < b)
            .collect();
        Causes::with_host(t, (a, b), &host)
    }

    /// [`Causes::new`] over [a, b), with the host spans that overlap it (sorted by start).
    pub fn with_host(t: &Trace, (a, b): (f64, f64), host: &[HostSpan]) -> Causes {
        let (compute, by_priority) = unions(
            &t.launches,
            t.device_ops.iter().filter(|o| o.end > a && o.start < b),
            host.iter(),
            t.steps.iter().filter(|s| s.end > a && s.start < b),
        );
        Causes {
            compute,
            by_priority,
        }
    }

    /// The idle parts of [a, b) on the compute streams, split into the classes of [`CAUSES`].
    pub fn classify(&self, a: f64, b: f64) -> [Vec<(f64, f64)>; 10] {
        classify(&self.compute, &self.by_priority, a, b)
    }
}

/// The union of the compute work, and of each cause's work but the last, of the given device
/// ops (their launches looked up in `launches`), host spans and steps (each sorted by start).
fn unions<'o, 'h, 's>(
    launches: &[Launch],
    device_ops: impl Iterator<Item = &'o DeviceOp>,
    host: impl Iterator<Item = &'h HostSpan>,
    steps: impl Iterator<Item = &'s Step>,
) -> (Union, [Union; 9]) {
    let mut spans: [UnionBuilder; 9] = Default::default();
    let mut compute = Union::builder();
    let mut kernels = Vec::new();
    for o in device_ops {
        match device_cause(o.kind) {
            Some(i) => spans[i].push(o.start, o.end),
            None => {
                compute.push(o.start, o.end);
                kernels.push(o);
            }
        }
    }
    let compute = compute.finish();
    // (The ops come sorted by start, and so do the gaps before them.)
    for o in kernels {
        if let Some((x, y)) = queued_gap(&compute, launches, o) {
            spans[QUEUED].push(x, y);
        }
    }
    for h in host {
        spans[host_cause(h.kind)].push(h.start, h.end);
    }
    // Inside a step the training loop runs: what no traced op covers there is its Python
    // (or untraced code on its thread).
    for s in steps {
        spans[PYTHON].push(s.start, s.end);
    }
    (compute, spans.map(UnionBuilder::finish))
}

/// The idle parts of [a, b) (not covered by `compute`), split into the classes of
/// [`CAUSES`]: each to the first of `by_priority` that covers it, the rest untraced.
fn classify(compute: &Union, by_priority: &[Union; 9], a: f64, b: f64) -> [Vec<(f64, f64)>; 10] {
    let mut out: [Vec<(f64, f64)>; 10] = Default::default();
    let mut left = compute.gaps(a, b);
    for (i, cause) in by_priority.iter().enumerate() {
        let mut rest = Vec::new();
        for &(x, y) in &left {
            out[i].extend(cause.within(x, y));
            rest.extend(cause.gaps(x, y));
        }
        left = rest;
    }
    out[9] = left;
    out
}

/// A gap by its length, then the earlier first: (length, step, start), as bits (lengths are
/// not negative, so their bits order as they do).
type GapKey = (u64, Reverse<usize>, Reverse<u64>);

/// A span's name, and for device work its device and stream.
type EvidenceKey = (u32, Option<(i64, i64)>);

/// Per cause, what overlapped the idle time credited to it, gathered a step at a time.
struct Evidence {
    /// Per cause, by (name, device and stream) of device work: how much of its idle time
    /// each overlapped.
    device: [HashMap<EvidenceKey, f64>; 9],
    /// Per cause, by the name of host spans (millions of them), in a table by name id.
    host: [Vec<f64>; 9],
    /// Per cause: idle time, its stretches and the longest.
    us: [f64; 10],
    stretches: [usize; 10],
    longest: [f64; 10],
}

impl Evidence {
    fn new() -> Evidence {
        Evidence {
            device: Default::default(),
            host: Default::default(),
            us: [0.0; 10],
            stretches: [0; 10],
            longest: [0.0; 10],
        }
    }

    /// One step's idle time by cause (`idle`: per cause, disjoint stretches sorted by start),
    /// and the device ops and host spans that overlap the step.
    fn add(
        &mut self,
        t: &Trace,
        idle: &[Vec<(f64, f64)>; 10],
        compute: &Union,
        ops: &[&DeviceOp],
        host: &[HostSpan],
    ) {
        for (i, stretches) in idle.iter().enumerate() {
            for (x, y) in stretches {
                self.us[i] += y - x;
                self.longest[i] = self.longest[i].max(y - x);
            }
            self.stretches[i] += stretches.len();
        }
        for o in ops {
            // Device work overlapping its cause's idle time, and kernels that waited, queued.
            let (i, (x, y)) = match device_cause(o.kind) {
                Some(i) => (i, (o.start, o.end)),
                None => match queued_gap(compute, &t.launches, o) {
                    Some(gap) => (QUEUED, gap),
                    None => continue,
                },
            };
            let ov = overlap(&idle[i], x, y);
            if ov > 0.0 {
                *self.device[i]
                    .entry((o.name, Some((o.device, o.stream))))
                    .or_insert(0.0) += ov;
            }
        }
        for h in host {
            let i = host_cause(h.kind);
            let ov = overlap(&idle[i], h.start, h.end);
            if ov > 0.0 {
                let table = &mut self.host[i];
                if table.is_empty() {
                    table.resize(t.names.len(), 0.0);
                }
                table[h.name as usize] += ov;
            }
        }
    }

    /// Per cause with idle time, its share and what overlapped it most, per step of `steps`.
    fn finish(mut self, t: &Trace, steps: f64) -> Vec<CauseEvidence> {
        let mut by = std::mem::take(&mut self.device);
        for (i, table) in self.host.iter().enumerate() {
            for (name, &ov) in table.iter().enumerate() {
                if ov > 0.0 {
                    *by[i].entry((name as u32, None)).or_insert(0.0) += ov;
                }
            }
        }
        let python_traced = t.python_functions > 0;
        let total: f64 = self.us.iter().fold(0.0, |a, b| a + b);
        let mut out = Vec::new();
        for (i, &(cause, name)) in CAUSES.iter().enumerate() {
            let us = self.us[i];
            if us <= 0.0 {
                continue;
            }
            let by = by.get_mut(i).map(std::mem::take).unwrap_or_default();
            let mut top: Vec<Overlap> = by
                .into_iter()
                .map(|((n, stream), us)| Overlap {
                    what: match stream {
                        Some((d, s)) => {
                            format!("{} (device {d}, stream {s})", t.names[n as usize])
                        }
                        None => t.names[n as usize].clone(),
                    },
                    ms: us * 1e-3 / steps,
                })
                .collect();
            top.sort_by(|p, q| q.ms.total_cmp(&p.ms).then(p.what.cmp(&q.what)));
            top.truncate(5);
            let note = match cause {
                "python" if !python_traced => Some(
                    "inside the steps with no traced op on the host (with_stack=True or the \
                     Python tracer names the functions)"
                        .to_string(),
                ),
                "untraced" => Some(format!(
                    "{} stretches, the longest {:.2} ms, with no step running and nothing \
                     recorded on the host",
                    self.stretches[i],
                    self.longest[i] * 1e-3
                )),
                _ => None,
            };
            out.push(CauseEvidence {
                cause,
                name,
                ms_per_step: us * 1e-3 / steps,
                share_of_idle: if total > 0.0 { us / total } else { 0.0 },
                top,
                note,
            });
        }
        out
    }
}

/// How much of [x, y) the sorted, disjoint `spans` cover.
fn overlap(spans: &[(f64, f64)], x: f64, y: f64) -> f64 {
    let first = spans.partition_point(|s| s.1 <= x);
    spans[first..]
        .iter()
        .take_while(|s| s.0 < y)
        .map(|s| s.1.min(y) - s.0.max(x))
        .filter(|d| *d > 0.0)
        .fold(0.0, |a, b| a + b)
}

pub fn analyze(t: &Trace) -> Analysis {
    // The device's compute over the whole trace; the causes' work step by step, from what
    // overlaps each step (millions of host spans are not all merged at once).
    let compute = &device_compute(t);
    let h2d_ops: Vec<_> = t
        .device_ops
        .iter()
        .filter(|o| o.kind == DeviceKind::Memcpy(Direction::HtoD))
        .collect();
    let (steps_from, marks) = step_marks(t);
    let Measured {
        steps,
        mut longest,
        evidence,
    } = measure_steps(t, compute, &h2d_ops, &marks);

    let kept: Vec<&StepStats> = steps
        .iter()
        .filter(|s| !s.warmup && !s.incomplete)
        .collect();
    let n = kept.len().max(1) as f64;
    let total_step: f64 = kept.iter().map(|s| s.step_ms).fold(0.0, |a, b| a + b);
    let pct = |v: f64| {
        if total_step > 0.0 {
            100.0 * v / total_step
        } else {
            0.0
        }
    };
    let busy: f64 = kept.iter().map(|s| s.busy_ms).fold(0.0, |a, b| a + b);
    let input_ms: f64 = kept.iter().map(|s| s.input_ms).fold(0.0, |a, b| a + b);
    let mut gaps = GapCauses::default();
    for s in &kept {
        gaps.add(&s.gaps);
    }
    gaps.scale(1.0 / n);

    let h2d_stats = h2d_summary(&kept, &h2d_ops, n);
    let (top, kernel_count, median_kernel_us) = top_kernels(t);
    let mut devices: Vec<i64> = t.device_ops.iter().map(|o| o.device).collect();
    devices.sort_unstable();
    devices.dedup();

    longest.sort_by_key(|g| Reverse(g.0));
    let largest_gaps = longest.into_iter().map(|(_, gap)| gap).collect();
    let input_percent = pct(input_ms);
    let idle_ms = total_step - busy;
    let busy_percent_device_span = device_span_busy(t, compute);
    // Without step markers there is no step time: the whole trace stands in for a step, but
    // its host activity around the device's work says nothing about the steps.
    let no_steps = t.steps.is_empty();
    let xspace_like = matches!(t.dialect.as_str(), "xspace" | "tensorflow/jax trace viewer");
    let launch_share = if idle_ms > 0.0 {
        (gaps.launch + gaps.host_ops) * n / idle_ms
    } else {
        0.0
    };
    let idle_by_cause = evidence.finish(t, n);
    let mut a = Analysis {
        path: t.path.clone(),
        dialect: t.dialect.clone(),
        rank: t.header.rank,
        events: t.header.events,
        skipped_events: t.skipped_events,
        warnings: t.warnings.clone(),
        devices,
        kernels: kernel_count,
        steps_from,
        step_ms: total_step / n,
        busy_percent: pct(busy),
        busy_percent_device_span,
        idle_percent: pct(idle_ms),
        input_percent,
        verdict: if no_steps {
            CANNOT_TELL.to_string()
        } else {
            verdict(input_percent).to_string()
        },
        xprof_conclusion: if no_steps && xspace_like {
            Some(XPROF_NO_STEPS.to_string())
        } else {
            (xspace_like && !t.device_ops.is_empty())
                .then(|| xprof_conclusion(input_percent, pct(busy)))
        },
        gaps_ms_per_step: gaps,
        idle_by_cause,
        h2d: h2d_stats,
        top_kernels: top.into_iter().take(10).collect(),
        largest_gaps,
        median_kernel_us,
        launch_share,
        launches: launch_stats(t),
        memory: crate::memory::device_memory(
            &t.memory,
            &marks
                .iter()
                .zip(&steps)
                .map(|((name, a, b), s)| (name.clone(), *a, *b, !s.warmup && !s.incomplete))
                .collect::<Vec<_>>(),
            t.span.map_or(0.0, |(a, _)| a),
        ),
        recommendations: Vec::new(),
        steps,
    };
    // Advice needs steps to weigh the causes against.
    if !no_steps {
        a.recommendations = recommend(&a);
    }
    a
}

/// The device's compute over the whole trace: its ops that no cause claims as idle time.
fn device_compute(t: &Trace) -> Union {
    let mut u = Union::builder();
    for o in t
        .device_ops
        .iter()
        .filter(|o| device_cause(o.kind).is_none())
    {
        u.push(o.start, o.end);
    }
    u.finish()
}

/// The steps the analysis measures, and how they were found: the trace's steps, or without
/// any the whole trace as one.
fn step_marks(t: &Trace) -> (String, Vec<(String, f64, f64)>) {
    if t.steps.is_empty() {
        // From the first recorded activity to the last: not the profiler's window, whose
        // stretches with nothing recorded say nothing about the device.
        let (a, b) = match (t.activity_start, t.activity_end) {
            (Some(a), Some(b)) => (a, b),
            _ => t.span.unwrap_or((0.0, 0.0)),
        };
        (
            "the whole trace (no step markers: from its first activity to its last)".into(),
            vec![("trace".into(), a, b)],
        )
    } else {
        (
            t.steps_from
                .clone()
                .unwrap_or_else(|| "step markers".into()),
            t.steps
                .iter()
                .map(|s| (s.name.clone(), s.start, s.end))
                .collect(),
        )
    }
}

/// The steps measured, each from what overlaps it, and across them the longest gaps and the
/// evidence of the causes.
struct Measured {
    steps: Vec<StepStats>,
    /// The longest gaps of the steps kept, with their causes and what the host did then.
    longest: Vec<(GapKey, IdleGap)>,
    evidence: Evidence,
}

/// The most gaps [`Measured::longest`] holds.
const MAX_GAPS: usize = 10;

/// Each step's idle time and its causes, copies and device span, in one sweep over the device
/// ops, the host spans and the step markers; warm-up and cut-off steps are marked (and left
/// out of the gaps and the evidence).
fn measure_steps(
    t: &Trace,
    compute: &Union,
    h2d_ops: &[&DeviceOp],
    marks: &[(String, f64, f64)],
) -> Measured {
    // The first of three or more steps is warm-up; a last step that ends long after the last
    // activity was cut off by the profiler (both left out, unless nothing would be left).
    let warmup_steps = usize::from(marks.len() >= 3);
    let cut_last = match (marks.last(), t.activity_end) {
        (Some((_, a, b)), Some(end)) => marks.len() > warmup_steps + 1 && *b > end + 0.1 * (b - a),
        _ => false,
    };

    let mut steps = Vec::with_capacity(marks.len());
    // (The longest gaps are found while the step's host spans are at hand.)
    let mut longest: Vec<(GapKey, IdleGap)> = Vec::with_capacity(MAX_GAPS + 1);
    let mut evidence = Evidence::new();
    // The smallest start of each mark and those after it: what each sweep must still hold.
    // (Steps come in order of their start; measured on the device, they may not.)
    let mut keep_after: Vec<f64> = marks.iter().map(|m| m.1).collect();
    for i in (0..keep_after.len().saturating_sub(1)).rev() {
        keep_after[i] = keep_after[i].min(keep_after[i + 1]);
    }
    let (mut op_sweep, mut host_sweep, mut step_sweep) = (
        Sweep::new(t.device_ops.iter()),
        Sweep::new(t.host_spans()),
        Sweep::new(t.steps.iter()),
    );
    let (mut ops, mut host): (Vec<&DeviceOp>, Vec<HostSpan>) = (Vec::new(), Vec::new());
    for (i, (name, a, b)) in marks.iter().enumerate() {
        let (a, b) = (*a, *b);
        ops.clear();
        let keep = keep_after[i];
        ops.extend(op_sweep.window(a, b, keep).copied());
        host.clear();
        host.extend(host_sweep.window(a, b, keep).copied());
        let (_, by_priority) = unions(
            &t.launches,
            ops.iter().copied(),
            host.iter(),
            step_sweep.window(a, b, keep).copied(),
        );
        let busy = compute.covered(a, b);
        let classes = classify(compute, &by_priority, a, b);
        let gaps = GapCauses::from_classes(&classes);
        let kept_step = i >= warmup_steps && !(cut_last && i + 1 == marks.len());
        if kept_step {
            evidence.add(t, &classes, compute, &ops, &host);
        }
        if kept_step && !t.device_ops.is_empty() {
            keep_longest_gaps(
                &mut longest,
                t,
                compute,
                &by_priority,
                &host,
                (i, name),
                (a, b),
            );
        }
        steps.push(step_stats(
            compute,
            h2d_ops,
            &by_priority,
            t,
            (name, a, b),
            gaps,
            busy,
            (i < warmup_steps, cut_last && i + 1 == marks.len()),
        ));
    }

    Measured {
        steps,
        longest,
        evidence,
    }
}

/// Adds the longest idle gaps of step `i` (named `name`, from `a` to `b`) to `longest`, which
/// keeps the [`MAX_GAPS`] longest of all steps: the step's longest first, then those longer
/// than the shortest kept, each with its causes and what the host did then.
#[allow(clippy::too_many_arguments)]
fn keep_longest_gaps(
    longest: &mut Vec<(GapKey, IdleGap)>,
    t: &Trace,
    compute: &Union,
    by_priority: &[Union; 9],
    host: &[HostSpan],
    (i, name): (usize, &str),
    (a, b): (f64, f64),
) {
    // The step's longest gaps first, then those longer than the shortest kept: the
    // causes and host activity are worked out for at most MAX_GAPS gaps per step.
    let mut candidates: Vec<(GapKey, f64, f64)> = (compute.gaps(a, b).into_iter())
        .map(|(x, y)| (((y - x).to_bits(), Reverse(i), Reverse(x.to_bits())), x, y))
        .collect();
    if candidates.len() > MAX_GAPS {
        candidates.select_nth_unstable_by_key(MAX_GAPS - 1, |c| Reverse(c.0));
        candidates.truncate(MAX_GAPS);
    }
    for (key, x, y) in candidates {
        let shortest = longest.iter().map(|g| g.0).min();
        if longest.len() == MAX_GAPS && shortest.is_some_and(|s| key < s) {
            continue;
        }
        let by_cause = GapCauses::from_classes(&classify(compute, by_priority, x, y));
        let gap = IdleGap {
            step: name.to_string(),
            at_ms: (x - a) * 1e-3,
            ms: (y - x) * 1e-3,
            cause: by_cause.largest(),
            by_cause,
            host: host_during(t, host, x, y),
        };
        longest.push((key, gap));
        if longest.len() > MAX_GAPS {
            longest.sort_by_key(|g| Reverse(g.0));
            longest.truncate(MAX_GAPS);
        }
    }
}

/// A step's figures (from `a` to `b`, named `name`): its time, the device's busy time and its
/// last op's end, the input's share, the host-to-device copies and how much of them no
/// compute hid; whether it is warm-up, or was cut off.
#[allow(clippy::too_many_arguments)]
fn step_stats(
    compute: &Union,
    h2d_ops: &[&DeviceOp],
    by_priority: &[Union; 9],
    t: &Trace,
    (name, a, b): (&str, f64, f64),
    gaps: GapCauses,
    busy: f64,
    (warmup, incomplete): (bool, bool),
) -> StepStats {
    let device_end = t
        .device_ops
        .iter()
        .skip(t.device_ops.partition_point(|o| o.start < a))
        .take_while(|o| o.start < b)
        .map(|o| o.end)
        .fold(b, f64::max);
    // `h2d_ops` is sorted by start (as `device_ops` is): the step's copies are one run.
    let first = h2d_ops.partition_point(|o| o.start < a);
    let in_step: Vec<_> = h2d_ops[first..]
        .iter()
        .take_while(|o| o.start < b)
        .collect();
    let exposed: f64 = in_step
        .iter()
        .map(|o| (o.end - o.start) - compute.covered(o.start, o.end))
        .fold(0.0, |a, b| a + b);
    let input_ms = by_priority[0].covered(a, b) * 1e-3;
    let step_ms = (b - a) * 1e-3;
    StepStats {
        name: name.to_string(),
        step_ms,
        device_step_ms: (device_end - a) * 1e-3,
        busy_ms: busy * 1e-3,
        idle_ms: step_ms - busy * 1e-3,
        input_ms,
        input_percent: if step_ms > 0.0 {
            100.0 * input_ms / step_ms
        } else {
            0.0
        },
        gaps,
        h2d_bytes: in_step
            .iter()
            .filter_map(|o| o.bytes)
            .fold(0.0, |a, b| a + b),
        h2d_ms: in_step
            .iter()
            .map(|o| o.end - o.start)
            .fold(0.0, |a, b| a + b)
            * 1e-3,
        h2d_exposed_ms: exposed * 1e-3,
        warmup,
        incomplete,
    }
}

/// The host-to-device copies per step kept (`n` of them), and the bytes copied from pinned
/// and pageable memory over the trace.
fn h2d_summary(kept: &[&StepStats], h2d_ops: &[&DeviceOp], n: f64) -> H2d {
    let h2d_bytes: f64 = kept.iter().map(|s| s.h2d_bytes).fold(0.0, |a, b| a + b);
    let h2d_ms: f64 = kept.iter().map(|s| s.h2d_ms).fold(0.0, |a, b| a + b);
    let (mut pageable, mut pinned) = (0.0, 0.0);
    for o in h2d_ops {
        match o.pinned {
            Some(true) => pinned += o.bytes.unwrap_or(0.0),
            Some(false) => pageable += o.bytes.unwrap_or(0.0),
            None => {}
        }
    }
    H2d {
        bytes_per_step: h2d_bytes / n,
        ms_per_step: h2d_ms / n,
        gbps: (h2d_ms > 0.0 && h2d_bytes > 0.0).then(|| h2d_bytes / (h2d_ms * 1e-3) / 1e9),
        pageable_bytes: pageable,
        pinned_bytes: pinned,
        exposed_ms_per_step: kept
            .iter()
            .map(|s| s.h2d_exposed_ms)
            .fold(0.0, |a, b| a + b)
            / n,
    }
}

/// The kernels that took the most time (all, by time), how many kernels ran, and their
/// median duration (µs).
fn top_kernels(t: &Trace) -> (Vec<KernelStat>, u64, f64) {
    let mut by_name: HashMap<u32, (u64, f64)> = HashMap::new();
    let mut durations = Vec::new();
    for o in (t.device_ops.iter())
        .filter(|o| matches!(o.kind, DeviceKind::Kernel | DeviceKind::Collective))
    {
        let e = by_name.entry(o.name).or_insert((0, 0.0));
        e.0 += 1;
        e.1 += o.end - o.start;
        durations.push(o.end - o.start);
    }
    let kernel_total: f64 = by_name.values().map(|v| v.1).fold(0.0, |a, b| a + b);
    let mut top: Vec<KernelStat> = by_name
        .iter()
        .map(|(name, (count, total))| KernelStat {
            name: t.names[*name as usize].clone(),
            count: *count,
            total_ms: total * 1e-3,
            share: if kernel_total > 0.0 {
                total / kernel_total
            } else {
                0.0
            },
        })
        .collect();
    top.sort_by(|a, b| b.total_ms.total_cmp(&a.total_ms).then(a.name.cmp(&b.name)));
    let kernel_count = durations.len() as u64;
    let median_kernel_us = median(durations);
    (top, kernel_count, median_kernel_us)
}

/// The verdict of a trace without step markers.
pub const CANNOT_TELL: &str = "cannot tell: the trace has no step markers, so no step time";

/// What xprof's overview page concludes on a profile without steps, word for word.
const XPROF_NO_STEPS: &str =
    "No step time measured. Therefore we cannot tell where the performance bottleneck is.";

/// The device's compute (`compute`) over the span from its first event to its last, in %.
fn device_span_busy(t: &Trace, compute: &Union) -> Option<f64> {
    let first = t.device_ops.iter().map(|o| o.start).reduce(f64::min)?;
    let last = t.device_ops.iter().map(|o| o.end).reduce(f64::max)?;
    (last > first).then(|| 100.0 * compute.covered(first, last) / (last - first))
}

/// Kernels matched to their launches (`t.launches` is sorted by correlation id).
fn launch_stats(t: &Trace) -> Option<LaunchStats> {
    const WAITED_US: f64 = 10.0;
    let mut queue = Vec::new();
    for o in (t.device_ops.iter())
        .filter(|o| matches!(o.kind, DeviceKind::Kernel | DeviceKind::Collective))
    {
        let Some(c) = o.correlation else { continue };
        let Ok(i) = t.launches.binary_search_by_key(&c, |l| l.correlation) else {
            continue;
        };
        queue.push((o.start - t.launches[i].end).max(0.0));
    }
    if queue.is_empty() {
        return None;
    }
    let matched = queue.len() as u64;
    let waited = queue.iter().filter(|&&q| q < WAITED_US).count() as f64 / queue.len() as f64;
    Some(LaunchStats {
        matched,
        median_queue_us: median(queue),
        waited_share: waited,
    })
}

/// The spans of `host` overlapping [x, y), by name, kind and thread, longest overlap first (at
/// most 5).
fn host_during(t: &Trace, host: &[HostSpan], x: f64, y: f64) -> Vec<HostActivity> {
    let mut by: HashMap<(u32, HostKind, u32), f64> = HashMap::new();
    // (`host` is sorted by start.)
    for h in host.iter().take_while(|h| h.start < y) {
        let overlap = h.end.min(y) - h.start.max(x);
        if overlap > 0.0 {
            *by.entry((h.name, h.kind, h.thread)).or_insert(0.0) += overlap;
        }
    }
    let mut out: Vec<HostActivity> = by
        .into_iter()
        .map(|((name, kind, thread), us)| HostActivity {
            name: t.names[name as usize].clone(),
            thread: (t.threads.get(thread as usize))
                .filter(|n| !n.is_empty())
                .cloned(),
            kind: match kind {
                HostKind::DataLoading => "data loading",
                HostKind::Launch => "launch",
                HostKind::Sync => "sync",
                HostKind::Cpu => "cpu",
                HostKind::Collective => "collective",
                HostKind::Python => "python",
            },
            overlap_ms: us * 1e-3,
        })
        .collect();
    out.sort_by(|p, q| {
        q.overlap_ms
            .total_cmp(&p.overlap_ms)
            .then(p.name.cmp(&q.name))
    });
    out.truncate(5);
    out
}

fn recommend(a: &Analysis) -> Vec<Recommendation> {
    [
        input_advice(a),
        pinned_copy_advice(a),
        prefetch_advice(a),
        launch_advice(a),
        mixed_precision_advice(a),
        batch_norm_advice(a),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Where getting the next batch takes a share of each step: a faster input, as the trace's
/// framework has it.
fn input_advice(a: &Analysis) -> Option<Recommendation> {
    let g = &a.gaps_ms_per_step;
    if a.input_percent >= 5.0 {
        let action = if a.dialect == "kineto" {
            "feed the accelerator faster: more DataLoader workers (num_workers, with \
             persistent_workers), or a faster input pipeline (stoker: parallel native decoding \
             and prefetching)"
        } else if a.steps_from.starts_with("session.run") {
            "move the input off feed_dict into a pipeline that runs beside the steps: a \
             tf.data pipeline (parallel map with num_parallel_calls=AUTOTUNE, .prefetch(AUTOTUNE)) \
             feeding the graph through an iterator instead of Python preparing each feed between \
             session.run calls, or a faster input pipeline (stoker: parallel native decoding and \
             prefetching)"
        } else {
            "feed the accelerator faster: parallel tf.data stages (num_parallel_calls=AUTOTUNE, \
             interleave), .cache() and .prefetch(AUTOTUNE), or a faster input pipeline (stoker: \
             parallel native decoding and prefetching)"
        };
        let idle = if a.devices.is_empty() {
            String::new()
        } else {
            format!(
                "; the device is idle {:.1} ms per step while it happens",
                g.input
            )
        };
        return Some(Recommendation {
            action: action.into(),
            evidence: format!(
                "{:.1} % of each step ({:.2} of {:.2} ms) is spent getting the next batch \
                 ({}){idle}",
                a.input_percent,
                a.input_percent * a.step_ms / 100.0,
                a.step_ms,
                a.verdict,
            ),
        });
    }
    None
}

/// Where copies from pageable memory are not hidden by compute: pinned memory, copied
/// without blocking.
fn pinned_copy_advice(a: &Analysis) -> Option<Recommendation> {
    if a.h2d.pageable_bytes > 0.0 && a.h2d.exposed_ms_per_step > 0.01 * a.step_ms {
        return Some(Recommendation {
            action: "copy from pinned memory without blocking: DataLoader(pin_memory=True) and \
                     .to(device, non_blocking=True)"
                .into(),
            evidence: format!(
                "{:.1} MB of host-to-device copies come from pageable memory; {:.2} ms of copy \
                 per step is not overlapped with kernels",
                a.h2d.pageable_bytes / 1e6,
                a.h2d.exposed_ms_per_step
            ),
        });
    }
    None
}

/// Where the compute streams wait for host-to-device copies: prefetching to the device.
fn prefetch_advice(a: &Analysis) -> Option<Recommendation> {
    let g = &a.gaps_ms_per_step;
    if g.h2d > 0.0 && g.h2d >= 0.05 * a.step_ms {
        return Some(Recommendation {
            action: "prefetch batches to the device (copy the next batch while this one \
                     computes)"
                .into(),
            evidence: format!(
                "the compute streams wait {:.2} ms per step for host-to-device copies",
                g.h2d
            ),
        });
    }
    None
}

/// Where the device waits for kernel launches: fewer, bigger kernels.
fn launch_advice(a: &Analysis) -> Option<Recommendation> {
    let g = &a.gaps_ms_per_step;
    // Launch-bound: much idle time under host work, tiny kernels, and (when launches can be
    // tied to kernels) most kernels starting as soon as their launch returns.
    let waited = a.launches.as_ref().map(|l| l.waited_share);
    if a.kernels > 0
        && g.launch + g.host_ops >= 0.2 * a.step_ms
        && a.median_kernel_us < 20.0
        && waited.is_none_or(|w| w >= 0.5)
    {
        let tied = a
            .launches
            .as_ref()
            .map(|l| {
                format!(
                    "; {:.0} % of kernels started within 10 µs of their launch returning \
                     (median queue {:.1} µs)",
                    l.waited_share * 100.0,
                    l.median_queue_us
                )
            })
            .unwrap_or_default();
        return Some(Recommendation {
            action: "the device waits for kernel launches: use a larger batch, or compile the \
                     step (torch.compile / CUDA graphs, XLA) to launch fewer, bigger kernels"
                .into(),
            evidence: format!(
                "{:.1} ms per step of idle device time overlaps kernel launches ({:.1} ms) and \
                 host operators ({:.1} ms), and the median kernel takes {:.1} µs{tied}",
                g.launch + g.host_ops,
                g.launch,
                g.host_ops,
                a.median_kernel_us
            ),
        });
    }
    None
}

/// Where FP32 kernels take most of the top kernels' time: mixed precision.
fn mixed_precision_advice(a: &Analysis) -> Option<Recommendation> {
    let fp32: f64 = a
        .top_kernels
        .iter()
        .filter(|k| {
            let n = k.name.to_ascii_lowercase();
            // cuDNN and ATen name FP32 kernels by their template arguments (`<float, …`).
            n.contains("sgemm") || n.contains("fp32") || n.contains("f32") || n.contains("<float")
        })
        .map(|k| k.share)
        .fold(0.0, |a, b| a + b);
    if fp32 >= 0.5 {
        return Some(Recommendation {
            action: "use mixed precision (torch.autocast / Keras mixed_float16): FP32 kernels \
                     dominate"
                .into(),
            evidence: format!(
                "FP32 GEMM/convolution kernels take {:.0} % of kernel time among the top kernels",
                fp32 * 100.0
            ),
        });
    }
    None
}

/// Where batch-norm kernels take a share of the top kernels' time: fused batch norm.
fn batch_norm_advice(a: &Analysis) -> Option<Recommendation> {
    let bn: Vec<&KernelStat> = a
        .top_kernels
        .iter()
        .filter(|k| {
            let n = k.name.to_ascii_lowercase();
            n.contains("batch_norm")
                || n.contains("batchnorm")
                || n.contains("bn_fw")
                || n.contains("bn_bw")
        })
        .collect();
    let bn_share: f64 = bn.iter().map(|k| k.share).fold(0.0, |a, b| a + b);
    if bn_share >= 0.1 {
        return Some(Recommendation {
            action: "fuse batch norm (cuDNN's fused kernels, channels-last, or compile the \
                     model): many small batch-norm kernels"
                .into(),
            evidence: format!(
                "batch-norm kernels take {:.0} % of kernel time ({} launches)",
                bn_share * 100.0,
                bn.iter().map(|k| k.count).sum::<u64>()
            ),
        });
    }
    None
}

impl Analysis {
    /// The analysis as text for a terminal.
    pub fn to_text(&self) -> String {
        let mut out = self.text_summary();
        self.text_idle_causes(&mut out);
        self.text_notes(&mut out);
        self.text_device_work(&mut out);
        self.text_longest_gaps(&mut out);
        self.text_recommendations(&mut out);
        out.push('\n');
        out
    }

    /// The trace, its steps, the verdict and the device's busy and idle time.
    fn text_summary(&self) -> String {
        let a = self;
        let g = &a.gaps_ms_per_step;
        let kept = a
            .steps
            .iter()
            .filter(|s| !s.warmup && !s.incomplete)
            .count();
        let rank = a.rank.map(|r| format!("rank {r}, ")).unwrap_or_default();
        format!(
            "{} ({rank}{}, {} events, {} kernels on device(s) {:?})\n\
             steps: {} from {} ({} warm-up or cut off, left out); {:.2} ms per step\n\
             verdict: {}\n\
             device busy {:.1} %, idle {:.1} % ({:.2} ms per step){}\n",
            a.path,
            a.dialect,
            a.events,
            a.kernels,
            a.devices,
            kept,
            a.steps_from,
            a.steps.len() - kept,
            a.step_ms,
            if a.verdict == CANNOT_TELL {
                format!(
                    "{CANNOT_TELL} (the whole trace as one: {:.1} % of it getting the next \
                     batch)",
                    a.input_percent
                )
            } else {
                format!(
                    "{}: {:.1} % of step time getting the next batch",
                    a.verdict, a.input_percent
                )
            },
            a.busy_percent,
            a.idle_percent,
            g.total(),
            a.busy_percent_device_span
                .map_or(String::new(), |b| format!(
                    "; busy {b:.1} % from the device's first event to its last (HTA's and \
                 TraceLens' window)"
                )),
        )
    }

    /// The idle time per step by cause, with what the device and the host did then.
    fn text_idle_causes(&self, out: &mut String) {
        let a = self;
        if !a.idle_by_cause.is_empty() {
            out.push_str("idle per step by cause (what the device and the host were doing):\n");
        }
        for c in &a.idle_by_cause {
            let top: Vec<String> = (c.top.iter().take(3))
                .map(|o| format!("{} {:.2} ms", short(&o.what, 60), o.ms))
                .collect();
            let evidence = match (&c.note, top.is_empty()) {
                (Some(note), true) => note.clone(),
                (None, _) => top.join(", "),
                (Some(note), false) => format!("{}; {note}", top.join(", ")),
            };
            out.push_str(&format!(
                "  {:>5.1} %  {:8.2} ms  {}: {evidence}\n",
                c.share_of_idle * 100.0,
                c.ms_per_step,
                c.name,
            ));
        }
    }

    /// xprof's conclusion, the events left out, the warnings, a trace without a device, and the memory.
    fn text_notes(&self, out: &mut String) {
        let a = self;
        if let Some(x) = &a.xprof_conclusion {
            out.push_str(&format!("in xprof's terms: {x}\n"));
        }
        if a.skipped_events > 0 {
            out.push_str(&format!(
                "{} events left out: no time, a time that is not a finite number, or untimed \
                 (aggregated)\n",
                a.skipped_events
            ));
        }
        for w in &a.warnings {
            out.push_str(&format!("warning: {w}\n"));
        }
        if a.devices.is_empty() {
            out.push_str(
                "no accelerator activity in this trace (CPU only): busy and idle refer to no \
                 device; the input share is of the host's step time\n",
            );
        }
        for m in &a.memory {
            out.push_str(&format!("memory {}\n", m.summary()));
        }
    }

    /// The host-to-device copies, the top kernels and how soon kernels started after their launch.
    fn text_device_work(&self, out: &mut String) {
        let a = self;
        let h = &a.h2d;
        if h.bytes_per_step > 0.0 || h.ms_per_step > 0.0 {
            out.push_str(&format!(
                "host-to-device: {:.2} MB and {:.2} ms per step{}, {:.2} ms exposed; pageable {:.1} \
                 MB, pinned {:.1} MB\n",
                h.bytes_per_step / 1e6,
                h.ms_per_step,
                h.gbps
                    .map(|g| format!(" ({g:.1} GB/s)"))
                    .unwrap_or_default(),
                h.exposed_ms_per_step,
                h.pageable_bytes / 1e6,
                h.pinned_bytes / 1e6
            ));
        }
        for k in a.top_kernels.iter().take(5) {
            out.push_str(&format!(
                "  {:5.1} %  {:9.2} ms  {:6}x  {}\n",
                k.share * 100.0,
                k.total_ms,
                k.count,
                short(&k.name, 80)
            ));
        }
        if let Some(l) = &a.launches {
            out.push_str(&format!(
                "launches: {} kernels tied to their launch; median {:.1} µs from launch to start, \
                 {:.0} % started within 10 µs (the device was waiting for the host)\n",
                l.matched,
                l.median_queue_us,
                l.waited_share * 100.0
            ));
        }
    }

    /// The longest idle gaps, and what the host was doing in each.
    fn text_longest_gaps(&self, out: &mut String) {
        let a = self;
        if !a.largest_gaps.is_empty() {
            out.push_str("longest idle gaps (what the host was doing):\n");
        }
        for g in a.largest_gaps.iter().take(3) {
            let host: Vec<String> = g
                .host
                .iter()
                .take(3)
                .map(|h| {
                    format!(
                        "{} ({}{}, {:.2} ms)",
                        short(&h.name, 60),
                        h.kind,
                        h.thread
                            .as_deref()
                            .map(|t| format!(" on {}", short(t, 30)))
                            .unwrap_or_default(),
                        h.overlap_ms
                    )
                })
                .collect();
            out.push_str(&format!(
                "  {:.2} ms in {} at +{:.2} ms, mostly {}: {}\n",
                g.ms,
                g.step,
                g.at_ms,
                g.cause,
                if host.is_empty() {
                    "no host activity recorded".to_string()
                } else {
                    host.join(", ")
                }
            ));
        }
    }

    /// What to change, and why.
    fn text_recommendations(&self, out: &mut String) {
        let a = self;
        for (i, r) in a.recommendations.iter().enumerate() {
            out.push_str(&format!(
                "  {}. {}\n     because {}\n",
                i + 1,
                r.action,
                r.evidence
            ));
        }
    }
}

/// `name` cut to at most `max` characters (on a character boundary), marked with "...".
fn short(name: &str, max: usize) -> String {
    if name.chars().count() <= max {
        return name.to_string();
    }
    let cut: String = name.chars().take(max - 3).collect();
    format!("{cut}...")
}

/// For traces of several ranks of one job: each rank's step time and input share, and the
/// slowest rank (which the others wait for at each collective). `None` for fewer than two ranks.
pub fn compare_ranks(analyses: &[Analysis]) -> Option<String> {
    let mut ranked: Vec<&Analysis> = analyses.iter().filter(|a| a.rank.is_some()).collect();
    if ranked.len() < 2 {
        return None;
    }
    ranked.sort_by_key(|a| a.rank);
    let slowest = ranked
        .iter()
        .max_by(|x, y| x.step_ms.total_cmp(&y.step_ms))?;
    let fastest = ranked
        .iter()
        .min_by(|x, y| x.step_ms.total_cmp(&y.step_ms))?;
    let mut out = String::from("ranks:\n");
    for a in &ranked {
        out.push_str(&format!(
            "  rank {}: {:.2} ms per step, {:.1} % input, device busy {:.1} %, idle for \
             communication {:.2} ms per step\n",
            a.rank.unwrap_or(-1),
            a.step_ms,
            a.input_percent,
            a.busy_percent,
            a.gaps_ms_per_step.communication
        ));
    }
    out.push_str(&format!(
        "slowest: rank {} at {:.2} ms per step, {:.1} % slower than the fastest (rank {})\n",
        slowest.rank.unwrap_or(-1),
        slowest.step_ms,
        if fastest.step_ms > 0.0 {
            100.0 * (slowest.step_ms / fastest.step_ms - 1.0)
        } else {
            0.0
        },
        fastest.rank.unwrap_or(-1)
    ));
    Some(out)
}
