//! Device memory from the allocator's events (Kineto's `[memory]`, written with
//! `profile_memory=True`; XSpace's `MemoryAllocation` / `MemoryDeallocation`, per allocator
//! such as `GPU_0_bfc`): per device the peak allocated (and reserved) and when it was first
//! reached, and what each step allocates on top of what it started with.

use serde::Serialize;

use crate::model::MemoryEvent;

#[derive(Clone, Debug, Serialize)]
pub struct DeviceMemory {
    pub device: String,
    pub events: u64,
    pub peak_allocated_bytes: f64,
    pub peak_reserved_bytes: Option<f64>,
    /// The allocator's own peak since it was created, before the profile too (XSpace only).
    pub allocator_peak_bytes: Option<f64>,
    /// What "allocated" counts: PyTorch's allocated bytes (Kineto), or the heap plus the
    /// stack reservation (XSpace, xprof's memory in use).
    pub in_use: &'static str,
    /// The stack reservation at the peak (XSpace).
    pub peak_stack_bytes: Option<f64>,
    /// The allocator's name, where `device` is the device it serves (XSpace).
    pub allocator: Option<String>,
    /// When the peak was first reached, in ms from the trace's first event, and the step it
    /// fell in (`None`: outside every step).
    pub peak_at_ms: f64,
    pub peak_step: Option<String>,
    /// The steps kept: allocated at the start, the peak and at the end of each.
    pub steps: Vec<StepMemory>,
    /// Means over the steps kept: the rise from a step's start to its peak (what a step
    /// allocates on top of what it started with), and the net change over a step.
    pub step_rise_bytes: f64,
    pub step_net_bytes: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct StepMemory {
    pub step: String,
    pub start_bytes: f64,
    pub peak_bytes: f64,
    pub end_bytes: f64,
}

/// Memory per device, devices in order of first appearance. `steps`: (name, start, end, kept)
/// in time order; `origin`: the trace's first time.
pub fn device_memory(
    events: &[MemoryEvent],
    steps: &[(String, f64, f64, bool)],
    origin: f64,
) -> Vec<DeviceMemory> {
    let mut devices: Vec<&str> = Vec::new();
    for e in events {
        if !devices.contains(&e.device.as_str()) {
            devices.push(&e.device);
        }
    }
    devices
        .into_iter()
        .map(|d| {
            let mut ev: Vec<&MemoryEvent> = events.iter().filter(|e| e.device == d).collect();
            ev.sort_by(|a, b| a.ts.total_cmp(&b.ts));
            of_device(d, &ev, steps, origin)
        })
        .collect()
}

fn of_device(
    device: &str,
    ev: &[&MemoryEvent],
    steps: &[(String, f64, f64, bool)],
    origin: f64,
) -> DeviceMemory {
    let peak = ev.iter().fold(None::<&MemoryEvent>, |best, e| match best {
        Some(b) if b.allocated >= e.allocated => Some(b),
        _ => Some(e),
    });
    let (peak_bytes, peak_ts) = peak.map_or((0.0, origin), |e| (e.allocated, e.ts));
    let peak_stack_bytes = peak.and_then(|e| e.stack);
    let peak_step = steps
        .iter()
        .find(|(_, a, b, _)| (*a..=*b).contains(&peak_ts))
        .map(|(n, ..)| n.clone());
    // Allocated just before time `t`: the last event before it, else what the first event
    // found (its total less its own allocation).
    let before = |t: f64| {
        let i = ev.partition_point(|e| e.ts < t);
        match i {
            0 => ev.first().map_or(0.0, |e| e.allocated - e.bytes),
            _ => ev[i - 1].allocated,
        }
    };
    let kept: Vec<StepMemory> = steps
        .iter()
        .filter(|s| s.3)
        .map(|(name, a, b, _)| {
            let start = before(*a);
            let inside = ev.iter().filter(|e| e.ts >= *a && e.ts <= *b);
            let peak = inside.fold(start, |m, e| m.max(e.allocated));
            let end = {
                let i = ev.partition_point(|e| e.ts <= *b);
                if i == 0 {
                    start
                } else {
                    ev[i - 1].allocated
                }
            };
            StepMemory {
                step: name.clone(),
                start_bytes: start,
                peak_bytes: peak,
                end_bytes: end,
            }
        })
        .collect();
    let n = kept.len().max(1) as f64;
    DeviceMemory {
        device: device.to_string(),
        events: ev.len() as u64,
        peak_allocated_bytes: peak_bytes,
        peak_reserved_bytes: ev.iter().filter_map(|e| e.reserved).reduce(f64::max),
        allocator_peak_bytes: ev.iter().filter_map(|e| e.allocator_peak).reduce(f64::max),
        in_use: if peak_stack_bytes.is_some() {
            "heap + stack in use (xprof's memory profile)"
        } else {
            "allocated"
        },
        peak_stack_bytes,
        allocator: ev.iter().find_map(|e| e.allocator.clone()),
        peak_at_ms: (peak_ts - origin) * 1e-3,
        peak_step,
        step_rise_bytes: kept
            .iter()
            .map(|s| s.peak_bytes - s.start_bytes)
            .sum::<f64>()
            / n,
        step_net_bytes: kept
            .iter()
            .map(|s| s.end_bytes - s.start_bytes)
            .sum::<f64>()
            / n,
        steps: kept,
    }
}

impl DeviceMemory {
    /// One line: the peak, when, and what a step allocates.
    pub fn summary(&self) -> String {
        let mb = |b: f64| b / 1e6;
        let device = match &self.allocator {
            Some(a) => format!("device {} ({a})", self.device),
            None => self.device.clone(),
        };
        let stack = self
            .peak_stack_bytes
            .filter(|&s| s > 0.0)
            .map(|s| format!(", of it {:.1} MB stack", mb(s)))
            .unwrap_or_default();
        format!(
            "{device}: peak {:.1} MB {}{stack}{} at +{:.2} ms{}; a step allocates {:.1} MB on top of \
             what it starts with (net {:+.1} MB per step), {} allocator events{}",
            mb(self.peak_allocated_bytes),
            self.in_use,
            self.peak_reserved_bytes
                .map(|r| format!(" ({:.1} MB reserved)", mb(r)))
                .unwrap_or_default(),
            self.peak_at_ms,
            self.peak_step
                .as_deref()
                .map(|s| format!(" in {s}"))
                .unwrap_or_default(),
            mb(self.step_rise_bytes),
            mb(self.step_net_bytes),
            self.events,
            self.allocator_peak_bytes
                .map(|p| format!("; the allocator's peak since it started: {:.1} MB", mb(p)))
                .unwrap_or_default()
        )
    }
}
