//! The model as a dialect builds it: what every dialect hands over (device ops, host spans,
//! steps, memory events, by the model's names and threads), and what is derived once all is
//! read (the steps where no marker gives them, the threads' names, the order of everything).

use std::collections::HashMap;

use crate::dialect::chrome_json::raw::Id;
use crate::model::{sort_host, Direction, HostKind, HostSpan, Step, Trace};

/// A trace being built.
#[derive(Default)]
pub(crate) struct Builder {
    pub(crate) trace: Trace,
    name_ids: HashMap<String, u32>,
    /// Names of host threads by (pid, tid), as JSON traces give them (`thread_name`).
    pub(crate) thread_names: HashMap<(Id, Id), String>,
    /// The thread of each entry of `trace.threads` after the first, as (pid, tid), or as the
    /// line's name (XSpace, trace viewer JSON), resolved to names at the end.
    thread_ids: HashMap<ThreadKey, u32>,
    last_thread: Option<(ThreadKey, u32)>,
    pub(crate) last_line: Option<(String, u32)>,
    /// Per name in `trace.names`: whether a kernel of that name is a collective's, once asked.
    collective_names: Vec<Option<bool>>,
    /// The events of the devices' `Steps` lines (xprof's derived steps), as (device, name,
    /// start, end).
    pub(crate) device_step_line: Vec<(String, String, f64, f64)>,
    /// Values no profiler writes, left out: per kind, how many and the first.
    implausible: Vec<(&'static str, u64, String)>,
}

/// Bounds on what a trace can hold, beyond which a value is damage (or a hostile file), not a
/// measurement: left out with a warning, so that one event cannot stretch the trace's span or
/// the steps' sums to nonsense. An event lasting over a day (µs)...
pub(crate) const MAX_DURATION_US: f64 = 86_400e6;
/// ...a time more than about 3,000 years from the clock's zero (µs; Kineto's clock counts
/// from the Unix epoch)...
pub(crate) const MAX_TIME_US: f64 = 1e17;
/// ...and a copy or an allocator total of more than a petabyte.
pub(crate) const MAX_BYTES: f64 = 1e15;

/// A host thread as a trace names it: (pid, tid) for JSON events, whose thread names may come
/// later in the file; the line's name in xprof's model.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum ThreadKey {
    Ids(Option<Id>, Option<Id>),
    Line(String),
}

/// A name cut to 80 characters, for a message.
pub(crate) fn short_name(name: &str) -> String {
    match name.char_indices().nth(80) {
        Some((at, _)) => format!("{}...", &name[..at]),
        None => name.to_string(),
    }
}

pub(crate) fn direction(name: &str, kind: Option<String>) -> Direction {
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

impl Builder {
    pub(crate) fn intern(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.name_ids.get(name) {
            return i;
        }
        let i = self.trace.names.len() as u32;
        self.trace.names.push(name.to_string());
        self.name_ids.insert(name.to_string(), i);
        i
    }

    /// Counts a value that cannot be true, of `kind`, keeping the first's description.
    pub(crate) fn implausible(&mut self, kind: &'static str, what: impl FnOnce() -> String) {
        match self.implausible.iter_mut().find(|(k, _, _)| *k == kind) {
            Some((_, n, _)) => *n += 1,
            None => self.implausible.push((kind, 1, what())),
        }
    }

    /// The trace, once its dialect has handed over all it read: the threads named, everything
    /// in order, the steps found, the warnings written. `structural_steps` finds steps in the
    /// trace's structure rather than in markers (a dialect's own evidence, asked where no
    /// device `Steps` line gives them; true where it found them); `xprof`: the trace is of
    /// xprof's model, whose steps are measured on the device.
    pub(crate) fn finish(
        mut self,
        structural_steps: impl FnOnce(&mut Builder) -> bool,
        xprof: bool,
    ) -> Trace {
        self.name_threads();
        self.trace
            .device_ops
            .sort_by(|a, b| a.start.total_cmp(&b.start));
        sort_host(&mut self.trace.host_held);
        self.trace.launches.sort_by_key(|l| l.correlation);
        self.trace.steps.sort_by(|a, b| a.start.total_cmp(&b.start));
        self.find_steps(structural_steps, xprof);
        self.trace.warnings = (self.implausible.iter())
            .map(|(kind, n, first)| format!("{kind}: {n} (the first: {first})"))
            .collect();
        self.trace
    }

    /// The steps and how they were found, by the first evidence the trace has of: the devices'
    /// `Steps` line, the dialect's structure, data loading calls (where nothing marks a step),
    /// PyTorch's step markers, xprof's steps measured on the device, step markers.
    fn find_steps(&mut self, structural_steps: impl FnOnce(&mut Builder) -> bool, xprof: bool) {
        if !self.device_step_line.is_empty() {
            self.steps_from_device_line();
            return;
        }
        if structural_steps(self) {
            return;
        }
        if self.trace.steps.is_empty() {
            self.infer_steps();
        } else if self.trace.steps[0].name.starts_with("ProfilerStep#") {
            self.trace.steps_from = Some("ProfilerStep markers".into());
        } else if xprof && self.device_steps() {
            self.trace.steps_from = Some(
                "step markers (step_num), measured on the device as xprof does: from the \
                 first to the last device op the step launched"
                    .into(),
            );
        } else {
            self.trace.steps_from = Some("step markers (step_num)".into());
        }
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
    pub(crate) fn step(&mut self, name: &str, step_num: f64, start: f64, end: f64) {
        self.trace.steps.push(Step {
            name: format!("{name}#{step_num}"),
            start,
            end,
        });
    }

    pub(crate) fn note_span(&mut self, start: f64, end: f64) {
        self.trace.span = Some(match self.trace.span {
            None => (start, end),
            Some((a, b)) => (a.min(start), b.max(end)),
        });
    }

    pub(crate) fn push_host(
        &mut self,
        kind: HostKind,
        name: &str,
        thread: u32,
        start: f64,
        end: f64,
    ) {
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
    pub(crate) fn collective(&mut self, id: u32) -> bool {
        let i = id as usize;
        if self.collective_names.len() <= i {
            self.collective_names.resize(i + 1, None);
        }
        *self.collective_names[i].get_or_insert_with(|| is_collective_kernel(&self.trace.names[i]))
    }

    /// The index of a host thread in `trace.threads`.
    pub(crate) fn thread(&mut self, key: ThreadKey) -> u32 {
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

    pub(crate) fn note_activity(&mut self, start: f64, end: f64) {
        self.trace.activity_end = Some(self.trace.activity_end.map_or(end, |a| a.max(end)));
        self.trace.activity_start = Some(self.trace.activity_start.map_or(start, |a| a.min(start)));
    }

    /// A host span, classified by its name.
    pub(crate) fn host_event(&mut self, name: &str, thread: u32, start: f64, end: f64) {
        let kind = self.host_kind(name);
        self.push_host(kind, name, thread, start, end);
    }

    /// The kind of a host span by its name.
    pub(crate) fn host_kind(&mut self, name: &str) -> HostKind {
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
}

/// CUDA / ROCm API calls (runtime and driver) by their names: `cudaLaunchKernel`,
/// `cuStreamSynchronize`, `hipMemcpy` (a prefix, then a capital), not `cumsum`.
pub(crate) fn is_runtime_api(name: &str) -> bool {
    ["cuda", "cu", "hip"].iter().any(|p| {
        name.strip_prefix(p)
            .and_then(|rest| rest.chars().next())
            .is_some_and(|c| c.is_ascii_uppercase())
    })
}

/// A collective's kernel: NCCL's and RCCL's (`ncclDevKernel_AllReduce_…`, `ncclKernel_…`),
/// XLA's collective ops as the device runs them (`all-reduce.3`, `all-gather-start`, …).
pub(crate) fn is_collective_kernel(name: &str) -> bool {
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
pub(crate) fn is_collective_call(name: &str) -> bool {
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
pub(crate) fn runtime_kind(name: &str) -> HostKind {
    if name.contains("Launch") {
        HostKind::Launch
    } else if name.contains("Synchronize") || matches!(name, "cudaMemcpy" | "hipMemcpy") {
        HostKind::Sync
    } else {
        HostKind::Cpu
    }
}

/// Host spans of waiting for the next batch: a `DataLoader`'s, tf.data's, and those stoker's
/// loaders and iterators leave in the frameworks' profilers (`stoker:next#...`).
pub(crate) fn is_data_loading(name: &str) -> bool {
    (name.contains("DataLoader") && (name.contains("__next__") || name.starts_with("enumerate(")))
        || name.contains("IteratorGetNext")
        || name.starts_with("stoker:next")
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
}
