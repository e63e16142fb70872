//! `prefetch(n)`: a producer thread runs the input ahead into a bounded buffer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError};

use crate::element::Element;
use crate::error::{Error, Result};
use crate::exec::{catch_panic, BoxIter, ElementIter};
use crate::stats::StageStats;

pub struct Prefetch {
    rx: Option<Receiver<Result<Option<Element>>>>,
    handle: Option<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    capacity: usize,
    stats: Arc<StageStats>,
    done: bool,
}

/// The outcome of waiting for an element with a time limit.
pub enum Poll {
    Ready(Result<Option<Element>>),
    Pending,
}

impl Prefetch {
    /// Starts the producer thread. `capacity` elements are buffered (at least 1).
    pub fn spawn(input: BoxIter, capacity: usize, stats: Arc<StageStats>) -> Result<Prefetch> {
        Prefetch::spawn_with_stop(input, capacity, stats, Arc::new(AtomicBool::new(false)))
    }

    /// Like [`Prefetch::spawn`], with the flag that dropping this prefetch sets (shared with
    /// the stages it drives, so that they stop too).
    pub fn spawn_with_stop(
        mut input: BoxIter,
        capacity: usize,
        stats: Arc<StageStats>,
        stop: Arc<AtomicBool>,
    ) -> Result<Prefetch> {
        let capacity = capacity.max(1);
        let (tx, rx) = bounded::<Result<Option<Element>>>(capacity);
        let producer_stop = Arc::clone(&stop);
        let producer_stats = Arc::clone(&stats);
        let handle = std::thread::Builder::new()
            .name(format!("stoker-{}", stats.name))
            .spawn(move || {
                let st = producer_stats;
                while !producer_stop.load(Ordering::Relaxed) {
                    let item = catch_panic(&st.name, || st.pull(&mut input));
                    let last = !matches!(item, Ok(Some(_)));
                    let t = Instant::now();
                    if tx.send(item).is_err() {
                        break; // the consumer is gone
                    }
                    st.add_blocked_output(t.elapsed());
                    if last {
                        break;
                    }
                }
            })
            .map_err(|e| Error::io("spawning a prefetch thread", e))?;
        stats.set_workers(1);
        Ok(Prefetch {
            rx: Some(rx),
            handle: Some(handle),
            stop,
            capacity,
            stats,
            done: false,
        })
    }

    /// Waits at most `timeout` for the next element.
    pub fn poll(&mut self, timeout: Duration) -> Poll {
        if self.done {
            return Poll::Ready(Ok(None));
        }
        let Some(rx) = self.rx.as_ref() else {
            return Poll::Ready(Ok(None));
        };
        self.stats.sample_buffer(rx.len(), self.capacity);
        let r = match rx.recv_timeout(timeout) {
            Ok(item) => item,
            Err(RecvTimeoutError::Timeout) => return Poll::Pending,
            Err(RecvTimeoutError::Disconnected) => Err(Error::WorkerPanic {
                step: self.stats.name.clone(),
                message: "the producer thread ended without a result".into(),
            }),
        };
        match &r {
            Ok(Some(_)) => self.stats.add_elements(1),
            _ => self.done = true,
        }
        Poll::Ready(r)
    }
}

impl ElementIter for Prefetch {
    fn next(&mut self) -> Result<Option<Element>> {
        loop {
            if let Poll::Ready(r) = self.poll(Duration::from_secs(3600)) {
                return r;
            }
        }
    }
}

impl Drop for Prefetch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Dropping the receiver makes a blocked `send` fail, so the producer exits.
        drop(self.rx.take());
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::testutil::*;

    #[test]
    fn order_is_kept_and_early_drop_joins() {
        let st = Arc::new(StageStats::new("p", "prefetch"));
        let p = Prefetch::spawn(ints(0..50), 4, st.clone()).unwrap();
        assert_eq!(drain(Box::new(p)), (0..50).collect::<Vec<_>>());
        // Stop early, with the producer blocked on a full buffer: drop must return.
        let mut p = Prefetch::spawn(ints(0..1_000_000), 2, st).unwrap();
        assert_eq!(value(&p.next().unwrap().unwrap()), 0);
        drop(p);
    }
}
