//! A pipeline's RAM budget: the bytes its buffers left to `AUTOTUNE` may hold together.
//!
//! A buffer reserves an element's bytes before it queues the element, and the reservation
//! goes with the element ([`Reservation`]): handed out, dropped with the buffer, or lost in a
//! panic, the bytes come back. An element the buffer cannot reserve waits in its producer's
//! hands until the buffer is empty; what the stages hold while they work (an element being
//! made, a batch being filled) is the engine's working set, not buffered.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// The budget and what the buffers hold of it.
#[derive(Debug)]
pub struct RamBudget {
    limit: u64,
    /// Where the limit comes from, for `explain()`.
    pub source: String,
    used: AtomicU64,
    peak: AtomicU64,
}

/// Bytes reserved in a [`RamBudget`], given back when dropped.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<RamBudget>,
    bytes: u64,
}

impl Reservation {
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Relaxed);
    }
}

impl RamBudget {
    pub fn new(limit: u64, source: impl Into<String>) -> Arc<RamBudget> {
        Arc::new(RamBudget {
            limit: limit.max(1),
            source: source.into(),
            used: AtomicU64::new(0),
            peak: AtomicU64::new(0),
        })
    }

    /// The budget `ram_budget` asks for, else [`DEFAULT_SHARE`] of the memory available to
    /// this process (see [`available_memory`]).
    pub fn for_option(ram_budget: Option<u64>) -> Arc<RamBudget> {
        match ram_budget {
            Some(b) => RamBudget::new(b, format!("ram_budget={b}, as set")),
            None => match available_memory() {
                Some((avail, from)) => RamBudget::new(
                    (avail as f64 * DEFAULT_SHARE) as u64,
                    format!("half of the {} available ({from})", human_bytes(avail)),
                ),
                None => RamBudget::new(FALLBACK, "the memory available is unknown here"),
            },
        }
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes reserved now.
    pub fn used(&self) -> u64 {
        self.used.load(Relaxed)
    }

    /// The most bytes reserved at once so far.
    pub fn peak(&self) -> u64 {
        self.peak.load(Relaxed)
    }

    /// Reserves `bytes` if the budget has room for them.
    pub fn try_reserve(self: &Arc<Self>, bytes: u64) -> Option<Reservation> {
        let mut used = self.used.load(Relaxed);
        loop {
            let after = used.checked_add(bytes)?;
            if after > self.limit {
                return None;
            }
            match self
                .used
                .compare_exchange_weak(used, after, Relaxed, Relaxed)
            {
                Ok(_) => {
                    self.peak.fetch_max(after, Relaxed);
                    return Some(Reservation {
                        budget: Arc::clone(self),
                        bytes,
                    });
                }
                Err(now) => used = now,
            }
        }
    }
}

/// The default budget's share of the available memory (as tf.data's `ram_budget`).
pub const DEFAULT_SHARE: f64 = 0.5;
/// The budget where the available memory cannot be read.
const FALLBACK: u64 = 1 << 30;

/// `n` bytes as people read them (`1.5 GiB`).
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// The memory this process may still use, and where the number comes from: the room left
/// under its cgroup's limit (v2 `memory.max`, v1 `memory.limit_in_bytes`) where that is
/// smaller than the machine's `MemAvailable`, else `MemAvailable` (Linux; `None` elsewhere).
pub fn available_memory() -> Option<(u64, &'static str)> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let machine = meminfo.lines().find_map(|l| {
        let kib = l.strip_prefix("MemAvailable:")?.trim().strip_suffix("kB")?;
        kib.trim().parse::<u64>().ok().map(|k| k * 1024)
    })?;
    match cgroup_room() {
        Some(room) if room < machine => Some((room, "the room under this cgroup's memory limit")),
        _ => Some((machine, "MemAvailable")),
    }
}

/// The room under this process's cgroup memory limit, where it has one.
fn cgroup_room() -> Option<u64> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let read = |path: String| {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
    };
    for line in cgroup.lines() {
        // `hierarchy-ID:controllers:path`; v2 has an empty controller list.
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let path = path.trim_end_matches('/');
        if controllers.is_empty() {
            for dir in [format!("/sys/fs/cgroup{path}"), "/sys/fs/cgroup".into()] {
                if let Some(max) = read(format!("{dir}/memory.max")) {
                    let used = read(format!("{dir}/memory.current")).unwrap_or(0);
                    return Some(max.saturating_sub(used));
                }
            }
        } else if controllers.split(',').any(|c| c == "memory") {
            for dir in [
                format!("/sys/fs/cgroup/memory{path}"),
                "/sys/fs/cgroup/memory".into(),
            ] {
                if let Some(max) = read(format!("{dir}/memory.limit_in_bytes")) {
                    let used = read(format!("{dir}/memory.usage_in_bytes")).unwrap_or(0);
                    return Some(max.saturating_sub(used));
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_stay_within_the_limit_and_come_back_when_dropped() {
        let b = RamBudget::new(100, "test");
        let r1 = b.try_reserve(60).expect("room");
        assert!(b.try_reserve(50).is_none());
        let r2 = b.try_reserve(40).expect("room");
        assert_eq!((b.used(), b.peak()), (100, 100));
        drop(r1);
        assert_eq!(b.used(), 40);
        assert_eq!(r2.bytes(), 40);
        drop(r2);
        assert_eq!((b.used(), b.peak()), (0, 100));
    }

    #[test]
    #[cfg_attr(miri, ignore = "reads /proc and /sys: Miri's isolation has no files")]
    fn the_default_is_a_share_of_what_is_available() {
        let b = RamBudget::for_option(None);
        if let Some((avail, _)) = available_memory() {
            // What is available moves between two reads: within a tenth.
            let want = avail as f64 * DEFAULT_SHARE;
            assert!(
                (b.limit() as f64 - want).abs() < 0.1 * want,
                "{} vs {want}",
                b.limit()
            );
            assert!(b.source.contains("available"), "{}", b.source);
        }
        assert_eq!(RamBudget::for_option(Some(5)).limit(), 5);
        assert_eq!(human_bytes(1536 * 1024), "1.5 MiB");
    }
}
