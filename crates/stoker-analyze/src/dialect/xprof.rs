//! xprof's model of a profile, which both the XSpace and the trace viewer JSON of the
//! TensorFlow and JAX profilers carry: planes (`/device:GPU:0`, `/host:CPU`) of lines (a
//! device's streams, a host's threads) of events.

use crate::build::{direction, Builder, ThreadKey};
use crate::model::{DeviceKind, DeviceOp, Launch};

impl Builder {
    /// An event of xprof's model (XSpace, or the trace viewer's JSON): planes `/device:GPU:0`
    /// (lines `Stream #N(...)`; TPUs `XLA Ops`) and `/host:CPU` (a line per thread). A host
    /// span from an XSpace is left to its reader, which is given its thread.
    pub(crate) fn xprof_event(&mut self, e: XprofEvent<'_>) -> Option<u32> {
        self.note_span(e.start, e.end);
        if let Some(device) = e.plane.strip_prefix("/device:") {
            self.xprof_device_event(device, &e);
            None
        } else if e.plane.starts_with("/host:") {
            self.xprof_host_event(&e)
        } else {
            None
        }
    }

    /// An event of a device's plane (`device`: the plane's name after `/device:`): a step of
    /// its `Steps` line, or a device op of a stream's line.
    fn xprof_device_event(&mut self, device: &str, e: &XprofEvent<'_>) {
        let &XprofEvent {
            line,
            name,
            details,
            correlation,
            start,
            end,
            ..
        } = e;
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
        let pinned = if details.contains("kind_src:pinned") || details.contains("kind_dst:pinned") {
            Some(true)
        } else if details.contains("kind_src:pageable") || details.contains("kind_dst:pageable") {
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
    }

    /// An event of a host's plane: a host span on its line's thread (left to the reader, where
    /// the span stays in the file: its thread returned), and a launch where it has a
    /// correlation id.
    fn xprof_host_event(&mut self, e: &XprofEvent<'_>) -> Option<u32> {
        let &XprofEvent {
            line,
            name,
            correlation,
            start,
            end,
            in_file,
            ..
        } = e;
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
        if in_file {
            return Some(thread);
        }
        self.host_event(name, thread, start, end);
        None
    }
}

/// An event of xprof's model, as both its readers (XSpace, trace viewer JSON) give it.
pub(crate) struct XprofEvent<'a> {
    pub(crate) plane: &'a str,
    pub(crate) line: &'a str,
    pub(crate) name: &'a str,
    /// `memcpy_details`: a copy's kind and size.
    pub(crate) details: Option<&'a str>,
    pub(crate) correlation: Option<u64>,
    pub(crate) start: f64,
    pub(crate) end: f64,
    /// From an XSpace, whose host spans stay in the file: a host span is left to its reader.
    pub(crate) in_file: bool,
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
