//! One model over all trace dialects: device activity (kernels, memcpy, memset) per device and
//! stream, host spans that matter (steps, data loading, runtime launches and synchronisation),
//! built from the events as they stream by. Times are microseconds, as every dialect writes
//! `ts` and `dur` (Kineto keeps them in µs even when `displayTimeUnit` says `ns`).

use std::collections::HashMap;
use std::path::Path;

use crate::error::Result;
use std::borrow::Cow;

use crate::read::{as_f64, as_string, read_events, Header, Id, Num, RawEvent};

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
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostKind {
    /// Waiting for the next batch: PyTorch's `enumerate(DataLoader)…__next__`, TensorFlow's
    /// `IteratorGetNext`, stoker's driver.
    DataLoading,
    /// A kernel launch (runtime or driver API).
    Launch,
    /// Waiting for the device: `cudaDeviceSynchronize`, `cudaStreamSynchronize`, a blocking
    /// `cudaMemcpy`, …
    Sync,
    /// Other host work: operators, other runtime calls.
    Cpu,
}

#[derive(Clone, Debug)]
pub struct HostSpan {
    pub start: f64,
    pub end: f64,
    pub kind: HostKind,
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
    pub host: Vec<HostSpan>,
    pub steps: Vec<Step>,
    pub names: Vec<String>,
    /// First and last time of any event.
    pub span: Option<(f64, f64)>,
    /// The end of the last event that is not a step marker: a step that ends well after it
    /// was cut off (the profiler stopped inside it).
    pub activity_end: Option<f64>,
    pub cpu_ops: u64,
    pub python_functions: u64,
    /// Complete events without a time or duration, or with one that is not finite.
    pub skipped_events: u64,
}

/// Events of a TensorFlow 1.x timeline, whose kind depends on their process's name, which may
/// come later in the file: kept compact until the end.
struct Pending {
    pid: Id,
    start: f64,
    end: f64,
    name: u32,
}

/// A `B` event waiting for its `E`: name, category, start.
type OpenSpan = (String, Option<String>, Num);

#[derive(Default)]
struct Builder {
    trace: Trace,
    name_ids: HashMap<String, u32>,
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
            Some("M") if e.name.as_deref() == Some("process_name") => {
                if let (Some(pid), Some(args)) = (e.pid, e.args) {
                    if let Some(n) = as_string(args.name) {
                        self.process_names.insert(pid, n);
                    }
                }
            }
            _ => {}
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
        self.trace.span = Some(match self.trace.span {
            None => (start, end),
            Some((a, b)) => (a.min(start), b.max(end)),
        });
        let cat = lower(e.cat.as_deref());
        self.kineto |= KINETO_CATS.contains(&cat.as_str());
        let name: &str = e.name.as_deref().unwrap_or("");
        if name.starts_with("ProfilerStep#") {
            let name = name.to_string();
            self.trace.steps.push(Step { name, start, end });
            return;
        }
        if cat != "trace" {
            // (Kineto's `Trace` span covers the whole profiling window.)
            self.trace.activity_end = Some(self.trace.activity_end.map_or(end, |a| a.max(end)));
        }
        let args = e.args.clone().unwrap_or_default();
        match cat.as_str() {
            "kernel" | "gpu_memcpy" | "memcpy" | "gpu_memset" | "memset" => {
                let kind = match cat.as_str() {
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
                let name = self.intern(name);
                self.trace.device_ops.push(DeviceOp {
                    start,
                    end,
                    kind,
                    device,
                    stream,
                    name,
                    bytes: as_f64(args.bytes),
                    pinned,
                });
            }
            "cuda_runtime" | "runtime" | "cuda_driver" | "hip_runtime" => {
                let kind = if name.contains("Launch") {
                    HostKind::Launch
                } else if name.contains("Synchronize")
                    || ((name == "cudaMemcpy" || name == "hipMemcpy") && dur.0 > 0.0)
                {
                    HostKind::Sync
                } else {
                    HostKind::Cpu
                };
                self.trace.host.push(HostSpan { start, end, kind });
            }
            _ => {
                if is_data_loading(name) {
                    self.trace.host.push(HostSpan {
                        start,
                        end,
                        kind: HostKind::DataLoading,
                    });
                } else if cat == "python_function" {
                    self.trace.python_functions += 1;
                } else if cat == "cpu_op" || cat == "operator" {
                    self.trace.cpu_ops += 1;
                    self.trace.host.push(HostSpan {
                        start,
                        end,
                        kind: HostKind::Cpu,
                    });
                } else if let Some(pid) = e.pid {
                    // TensorFlow 1.x timeline (`cat: "Op"`): decided by the process name.
                    let name = self.intern(name);
                    self.pending.push(Pending {
                        pid,
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
        let mut tf_device = false;
        for p in pending {
            let Some(pname) = self.process_names.get(&p.pid) else {
                continue;
            };
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
                Some(DeviceKind::Kernel)
            } else {
                if is_data_loading(name) {
                    self.trace.host.push(HostSpan {
                        start: p.start,
                        end: p.end,
                        kind: HostKind::DataLoading,
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
                });
            }
        }
        self.trace.dialect =
            if tf_device || self.process_names.values().any(|n| n.contains("/job:")) {
                "tensorflow-timeline".into()
            } else if self.kineto {
                "kineto".into()
            } else {
                "chrome-json".into()
            };
        self.trace
            .device_ops
            .sort_by(|a, b| a.start.total_cmp(&b.start));
        self.trace.host.sort_by(|a, b| a.start.total_cmp(&b.start));
        self.trace.steps.sort_by(|a, b| a.start.total_cmp(&b.start));
        self.trace
    }
}

/// Host spans of waiting for the next batch.
fn is_data_loading(name: &str) -> bool {
    (name.contains("DataLoader") && (name.contains("__next__") || name.starts_with("enumerate(")))
        || name.contains("IteratorGetNext")
}

/// Reads `path` into the model.
pub fn load(path: &Path) -> Result<Trace> {
    let mut b = Builder::default();
    let header = read_events(path, |e| b.event(e))?;
    let mut trace = b.finish();
    trace.header = header;
    trace.path = path.display().to_string();
    Ok(trace)
}
