//! A stage's tunable setting (its parallelism, a buffer's size) while it runs: the stage reads
//! the current value, the autotuner moves it within its range, and both the value and the
//! reason for it are shown in the stage's stats.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

/// What a knob sets, which says how the tuner moves it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KnobKind {
    /// Worker threads: costs CPU where they compute.
    #[default]
    Parallelism,
    /// Elements a buffer holds: costs memory, in the pipeline's RAM budget.
    Buffer,
    /// Files (or datasets) of an interleave's cycle read ahead on threads of their own: the
    /// order is the cycle's whatever the value.
    Reads,
}

/// One knob of one stage.
#[derive(Debug)]
pub struct Knob {
    /// Its name, as the user sets it (`num_parallel_calls`, `buffer_size`, ...).
    pub name: &'static str,
    pub kind: KnobKind,
    pub min: usize,
    pub max: usize,
    /// Left to `AUTOTUNE`: the autotuner moves it. A value the user set is never moved.
    pub tuned: bool,
    value: AtomicUsize,
    /// Why it has its value: "set by the user", the tuner's last reason, ...
    reason: Mutex<String>,
    /// Wakes the threads waiting for the value to change (workers parked above it).
    changed: Condvar,
    lock: Mutex<()>,
    /// The tuner's latest moves: when, to what, and why (at most [`HISTORY`]).
    history: Mutex<VecDeque<(Instant, usize, String)>>,
}

/// The moves a knob remembers (the latest).
pub const HISTORY: usize = 256;

/// A knob's value and why, as `stats()` shows it.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct KnobSnapshot {
    pub name: String,
    pub kind: KnobKind,
    pub value: usize,
    pub min: usize,
    pub max: usize,
    pub tuned: bool,
    pub reason: String,
}

impl Knob {
    /// A knob at `value` (clamped into `min..=max`).
    pub fn new(name: &'static str, min: usize, max: usize, value: usize, tuned: bool) -> Knob {
        let max = max.max(min.max(1));
        let reason = if tuned {
            "AUTOTUNE: its share of the thread budget to start with"
        } else {
            "set by the user"
        };
        Knob {
            name,
            kind: KnobKind::Parallelism,
            min,
            max,
            tuned,
            value: AtomicUsize::new(value.clamp(min, max)),
            reason: Mutex::new(reason.into()),
            changed: Condvar::new(),
            lock: Mutex::new(()),
            history: Mutex::default(),
        }
    }

    /// The same knob of kind `kind` (a tuned one starts with the reason `start`).
    pub fn of_kind(mut self, kind: KnobKind, start: &str) -> Knob {
        self.kind = kind;
        if self.tuned {
            self.set_reason(start);
        }
        self
    }

    pub fn get(&self) -> usize {
        self.value.load(Relaxed)
    }

    /// Moves a tuned knob to `value` (clamped into its range) for `reason`, and wakes the
    /// threads waiting on it; a knob the user set keeps its value. Returns the value it has.
    pub fn set(&self, value: usize, reason: impl Into<String>) -> usize {
        if !self.tuned {
            return self.get();
        }
        let value = value.clamp(self.min, self.max);
        let reason = reason.into();
        if let Ok(mut h) = self.history.lock() {
            if h.len() == HISTORY {
                h.pop_front();
            }
            h.push_back((Instant::now(), value, reason.clone()));
        }
        if let Ok(mut r) = self.reason.lock() {
            *r = reason;
        }
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.value.store(value, Relaxed);
        self.changed.notify_all();
        value
    }

    /// Says why it has its value (a knob the user set too: how the budget bounds it).
    pub fn set_reason(&self, reason: impl Into<String>) {
        if let Ok(mut r) = self.reason.lock() {
            *r = reason.into();
        }
    }

    /// Wakes the threads waiting on it (to see that their stage stopped).
    pub fn wake(&self) {
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.changed.notify_all();
    }

    pub fn reason(&self) -> String {
        self.reason.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// Waits (at most `timeout`) while `blocked(value)` holds: a worker numbered above the
    /// knob's parallelism parks here until the knob rises.
    pub fn wait_while(&self, timeout: Duration, blocked: impl Fn(usize) -> bool) {
        let guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        if blocked(self.get()) {
            let _ = self.changed.wait_timeout(guard, timeout);
        }
    }

    /// The tuner's latest moves, oldest first: when, to what value, and why.
    pub fn history(&self) -> Vec<(Instant, usize, String)> {
        self.history
            .lock()
            .map(|h| h.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub fn snapshot(&self) -> KnobSnapshot {
        KnobSnapshot {
            name: self.name.into(),
            kind: self.kind,
            value: self.get(),
            min: self.min,
            max: self.max,
            tuned: self.tuned,
            reason: self.reason(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_value_the_user_set_never_moves() {
        let k = Knob::new("num_parallel_calls", 1, 64, 3, false);
        assert_eq!(k.set(10, "more"), 3);
        assert_eq!(k.get(), 3);
        assert_eq!(k.reason(), "set by the user");
    }

    #[test]
    fn a_tuned_value_stays_in_its_range() {
        let k = Knob::new("num_parallel_calls", 1, 8, 2, true);
        assert_eq!(k.set(100, "up"), 8);
        assert_eq!(k.set(0, "down"), 1);
        assert_eq!(k.snapshot().reason, "down");
        let h: Vec<(usize, String)> = k.history().into_iter().map(|(_, v, r)| (v, r)).collect();
        assert_eq!(h, [(8, "up".to_string()), (1, "down".to_string())]);
    }

    #[test]
    fn a_parked_waiter_wakes_when_the_value_rises() {
        let k = Arc::new(Knob::new("num_parallel_calls", 1, 8, 1, true));
        let k2 = Arc::clone(&k);
        let t = std::thread::spawn(move || {
            let start = std::time::Instant::now();
            while k2.get() < 3 {
                k2.wait_while(Duration::from_secs(10), |v| v < 3);
            }
            start.elapsed()
        });
        std::thread::sleep(Duration::from_millis(20));
        k.set(3, "up");
        let waited = t.join().unwrap_or(Duration::MAX);
        assert!(waited < Duration::from_secs(5), "waited {waited:?}");
    }
}
