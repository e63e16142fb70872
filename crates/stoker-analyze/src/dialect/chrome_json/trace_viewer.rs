//! The trace viewer JSON of the TensorFlow and JAX profilers (xprof's export): xprof's planes
//! and lines written as processes and threads.

use super::tf_timeline::Pending;
use crate::build::Builder;
use crate::dialect::xprof::XprofEvent;

impl Builder {
    /// An event of the process standing for xprof's `plane`, once the names of its process
    /// and thread (its line) are known.
    pub(crate) fn trace_viewer_event(&mut self, plane: &str, p: Pending) {
        let line = p
            .tid
            .as_ref()
            .and_then(|t| self.thread_names.get(&(p.pid.clone(), t.clone())))
            .cloned()
            .unwrap_or_default();
        let name = self.trace.names[p.name as usize].clone();
        self.xprof_event(XprofEvent {
            plane,
            line: &line,
            name: &name,
            details: p.details.as_deref(),
            correlation: p.correlation,
            start: p.start,
            end: p.end,
            in_file: false,
        });
    }
}

/// The plane a trace viewer JSON process stands for: `/device:GPU:0`, `/host:CPU`, written
/// alone (JAX's export) or after the host's name (xprof's trace viewer: `myhost /device:GPU:0`).
pub(crate) fn xprof_plane(process: &str) -> Option<&str> {
    ["/device:", "/host:"].iter().find_map(|p| {
        let at = process.find(p)?;
        (at == 0 || process[..at].ends_with(' ')).then(|| &process[at..])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn planes_of_trace_viewer_processes() {
        assert_eq!(xprof_plane("/device:GPU:0"), Some("/device:GPU:0"));
        assert_eq!(xprof_plane("myhost /device:GPU:1"), Some("/device:GPU:1"));
        assert_eq!(xprof_plane("myhost /host:CPU"), Some("/host:CPU"));
        assert_eq!(xprof_plane("python3"), None);
        assert_eq!(xprof_plane("/job:localhost/device:GPU:0 Compute"), None);
    }
}
