//! Chrome trace JSON read into the model: the PyTorch profiler's (Kineto) categories, the
//! `B`/`E` pairs and metadata every writer uses, and the events whose kind only their
//! process's name tells (TensorFlow timeline, trace viewer JSON), resolved at the end.

use std::borrow::Cow;
use std::collections::HashMap;

use super::raw::{as_f64, as_string, Args, Id, Num, RawEvent};
use super::tf_timeline::{Pending, SessionRuns};
use super::trace_viewer::xprof_plane;
use crate::build::{
    direction, is_collective_call, is_data_loading, runtime_kind, short_name, Builder, ThreadKey,
    MAX_BYTES, MAX_DURATION_US, MAX_TIME_US,
};
use crate::model::{DeviceKind, DeviceOp, HostKind, Launch, MemoryEvent, Step, Trace};

/// A `B` event waiting for its `E`: name, category, start.
type OpenSpan = (String, Option<String>, Num);

/// A Chrome trace JSON being read: the model, and what the JSON's events say about each other.
#[derive(Default)]
pub(crate) struct JsonReader {
    pub(crate) b: Builder,
    process_names: HashMap<Id, String>,
    pending: Vec<Pending>,
    /// Open `B` events per (pid, tid).
    open: HashMap<(Option<Id>, Option<Id>), Vec<OpenSpan>>,
    /// Some event had a category only Kineto writes.
    kineto: bool,
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

fn lower(s: Option<&str>) -> String {
    s.unwrap_or("").to_ascii_lowercase()
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

impl JsonReader {
    /// An event, by its phase: complete (`X`, or a `B` and its `E`), Kineto's allocator event,
    /// or the metadata naming processes and threads.
    pub(crate) fn event(&mut self, e: RawEvent<'_>) {
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
                        self.b.thread_names.insert((pid, tid), n);
                    }
                }
            }
            _ => {}
        }
    }

    /// Kineto's allocator event (`[memory]`): the bytes allocated or freed, and the totals
    /// after it, on the device its arguments name.
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
            self.b.implausible(
                "allocator events left out (a size or a total over a petabyte)",
                || format!("at {} µs: {b} bytes", ts.0),
            );
            return;
        }
        if !ts.0.is_finite() || ts.0.abs() > MAX_TIME_US {
            self.b.implausible(
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
        self.b.note_span(ts.0, ts.0);
        self.b.trace.memory.push(MemoryEvent {
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

    /// A complete event (`X`, or a `B`/`E` pair): its time checked, then by its category.
    fn complete(&mut self, e: RawEvent<'_>) {
        let Some((start, end)) = self.timed(&e) else {
            return;
        };
        self.b.note_span(start, end);
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
            self.b.trace.steps.push(Step { name, start, end });
            return;
        }
        let args = e.args.clone().unwrap_or_default();
        if let Some(n) = as_f64(args.step_num) {
            self.b.step(name, n, start, end);
            return;
        }
        if cat != "trace" {
            // (Kineto's `Trace` span covers the whole profiling window.)
            self.b.note_activity(start, end);
        }
        let span = (start, end);
        match cat.as_str() {
            "kernel" | "gpu_memcpy" | "memcpy" | "gpu_memset" | "memset" => {
                self.device_op(&e, &cat, &args, span);
            }
            "cuda_runtime" | "runtime" | "cuda_driver" | "hip_runtime" => {
                self.runtime_call(&e, &args, span);
            }
            _ => self.other_event(e, &cat, &args, span),
        }
    }

    /// A complete event's start and end, where it has a plausible time and duration; else
    /// counted as skipped (no time, or one not finite) or as implausible.
    fn timed(&mut self, e: &RawEvent<'_>) -> Option<(f64, f64)> {
        let (Some(ts), Some(dur)) = (e.ts, e.dur) else {
            self.b.trace.skipped_events += 1;
            return None;
        };
        let (start, end) = (ts.0, ts.0 + dur.0.max(0.0));
        if !start.is_finite() || !end.is_finite() {
            self.b.trace.skipped_events += 1;
            return None;
        }
        if dur.0 > MAX_DURATION_US || start.abs() > MAX_TIME_US {
            let name = e.name.as_deref().unwrap_or("").to_string();
            self.b.implausible(
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
            return None;
        }
        Some((start, end))
    }

    /// Kineto's device activity (`cat`: kernel, copy or memset), on the device and stream its
    /// arguments name (else its pid and tid).
    fn device_op(
        &mut self,
        e: &RawEvent<'_>,
        cat: &str,
        args: &Args<'_>,
        (start, end): (f64, f64),
    ) {
        let name: &str = e.name.as_deref().unwrap_or("");
        let id = self.b.intern(name);
        let kind = match cat {
            "kernel" if self.b.collective(id) => DeviceKind::Collective,
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
            self.b
                .implausible("copy sizes left out (negative, or over a petabyte)", || {
                    format!("'{}' at {start} µs of {b} bytes", short_name(name))
                });
        }
        let name = id;
        self.b.trace.device_ops.push(DeviceOp {
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

    /// A runtime or driver call: a launch (by its correlation id) and a host span.
    fn runtime_call(&mut self, e: &RawEvent<'_>, args: &Args<'_>, (start, end): (f64, f64)) {
        let name: &str = e.name.as_deref().unwrap_or("");
        if let Some(c) = as_f64(args.correlation) {
            self.b.trace.launches.push(Launch {
                correlation: c as u64,
                start,
                end,
            });
        }
        let thread = self.b.thread(ThreadKey::Ids(e.pid.clone(), e.tid.clone()));
        self.b
            .push_host(runtime_kind(name), name, thread, start, end);
    }

    /// Any other event: a host span of the categories Kineto writes for host work (Python,
    /// operators) or of data loading, else an event whose kind its process's name tells,
    /// kept until the names are read.
    fn other_event(
        &mut self,
        e: RawEvent<'_>,
        cat: &str,
        args: &Args<'_>,
        (start, end): (f64, f64),
    ) {
        let name: &str = e.name.as_deref().unwrap_or("");
        let host = is_data_loading(name)
            || cat == "python_function"
            || cat == "cpu_op"
            || cat == "operator";
        let thread = if host {
            self.b.thread(ThreadKey::Ids(e.pid.clone(), e.tid.clone()))
        } else {
            0
        };
        if is_data_loading(name) {
            self.b
                .push_host(HostKind::DataLoading, name, thread, start, end);
        } else if cat == "python_function" {
            self.b.trace.python_functions += 1;
            self.b.push_host(HostKind::Python, name, thread, start, end);
        } else if cat == "cpu_op" || cat == "operator" {
            self.b.trace.cpu_ops += 1;
            let kind = if is_collective_call(name) {
                HostKind::Collective
            } else {
                HostKind::Cpu
            };
            self.b.push_host(kind, name, thread, start, end);
        } else if let Some(pid) = e.pid {
            // TensorFlow 1.x timeline (`cat: "Op"`), TensorFlow / JAX trace viewer JSON:
            // decided by the process's (and thread's) name, which may come later.
            let name = self.b.intern(name);
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

    /// The model, once every event is read: the events waiting for their process's name
    /// resolved, the dialect named, the steps found (a TensorFlow 1.x timeline's from its
    /// `session.run` calls where nothing marks them).
    pub(crate) fn finish(mut self) -> Trace {
        let pending = std::mem::take(&mut self.pending);
        let runs = SessionRuns::of(&pending, &self.process_names);
        let (xprof, tf_device) = self.resolve_pending(pending);
        self.b.trace.dialect = if xprof {
            "tensorflow/jax trace viewer".into()
        } else if tf_device || self.process_names.values().any(|n| n.contains("/job:")) {
            "tensorflow-timeline".into()
        } else if self.kineto {
            "kineto".into()
        } else {
            "chrome-json".into()
        };
        let session_runs = |b: &mut Builder| {
            let found = b.trace.steps.is_empty() && runs.starts.len() >= 2;
            if found {
                b.session_run_steps(&runs);
            }
            found
        };
        self.b.finish(session_runs, xprof)
    }

    /// The events whose kind their process's name tells, now that every name is read: trace
    /// viewer JSON's (xprof's planes as processes) and TensorFlow timelines'. Whether there
    /// were any of the first, and device ops among the second.
    fn resolve_pending(&mut self, pending: Vec<Pending>) -> (bool, bool) {
        let has_all = self
            .process_names
            .values()
            .any(|n| n.contains("stream:all"));
        let (mut xprof, mut tf_device) = (false, false);
        for p in pending {
            let Some(process) = self.process_names.get(&p.pid) else {
                continue;
            };
            if let Some(plane) = xprof_plane(process) {
                xprof = true;
                let plane = plane.to_string();
                self.b.trace_viewer_event(&plane, p);
            } else {
                let process = process.to_ascii_lowercase();
                tf_device |= self.b.timeline_event(&process, has_all, p);
            }
        }
        (xprof, tf_device)
    }
}
