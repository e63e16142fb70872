//! TensorFlow's timeline JSON (TensorFlow 1.x `Timeline`) and the events whose kind depends on
//! their process's name: the `session.run` calls that make its steps.

use std::collections::HashMap;

use super::raw::Id;
use crate::build::{direction, is_collective_kernel, is_data_loading, Builder, ThreadKey};
use crate::model::{sort_host, DeviceKind, DeviceOp, HostKind, HostSpan, Step};

/// Events of a TensorFlow 1.x timeline, whose kind depends on their process's name, which may
/// come later in the file: kept compact until the end.
pub(crate) struct Pending {
    pub(crate) pid: Id,
    /// TensorFlow 1.x: the `_SOURCE` node every `session.run` starts with.
    pub(crate) source: bool,
    /// Trace viewer JSON: the id tying a launch to its device work.
    pub(crate) correlation: Option<u64>,
    pub(crate) tid: Option<Id>,
    /// A copy's kind and size, as TensorFlow / JAX device traces give them.
    pub(crate) details: Option<String>,
    pub(crate) start: f64,
    pub(crate) end: f64,
    pub(crate) name: u32,
}

/// The `session.run` calls of a TensorFlow 1.x timeline: when each started (its `_SOURCE`
/// node, on the first device that has them) and when its last op ended.
pub(crate) struct SessionRuns {
    pub(crate) starts: Vec<f64>,
    pub(crate) ends: Vec<f64>,
    pub(crate) last_end: f64,
}

impl SessionRuns {
    pub(crate) fn of(pending: &[Pending], process_names: &HashMap<Id, String>) -> SessionRuns {
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

impl Builder {
    /// TensorFlow 1.x timelines of several `session.run` calls: a step per run, from its
    /// `_SOURCE` to the next run's; the host time between a run's last op and the next run is
    /// the host preparing the next feed (the `feed_dict`, the Python input), counted as input.
    pub(crate) fn session_run_steps(&mut self, runs: &SessionRuns) {
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
}

impl Builder {
    /// An event of a TensorFlow timeline, by its process's name (`process`, lowercase):
    /// `/gpu:0/stream:all Compute` holds every kernel (the per-stream processes repeat them,
    /// so they count only where `has_all` says no process holds them all), `/gpu:0/memcpy
    /// Compute` the copies; a host's processes hold data loading. Whether it was a device op.
    pub(crate) fn timeline_event(&mut self, process: &str, has_all: bool, p: Pending) -> bool {
        let pl = process;
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
        let Some(kind) = kind else {
            return false;
        };
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
        true
    }
}
