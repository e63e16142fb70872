//! Where a parallel stage's results arrive: one-shot slots taken in input order
//! (`deterministic`), or one channel in the order they finish.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::Receiver;

use crate::element::Element;
use crate::error::{Error, Result};
use crate::stats::StageStats;

/// An element, `None` for one dropped (skipped, or an empty last batch), or an error.
pub type Outcome = Result<Option<Element>>;

pub enum Results {
    /// One slot per item, in input order.
    Ordered(Receiver<Receiver<Outcome>>),
    Unordered(Receiver<Outcome>),
}

impl Results {
    /// The next outcome, or `None` once every sender is gone. Samples the fill of the stage's
    /// buffer (`capacity` items) into `stats`; `lost` describes an item whose slot was dropped
    /// without a result (its worker died).
    pub fn recv(&self, stats: &StageStats, capacity: usize, lost: &str) -> Option<Outcome> {
        match self {
            Results::Ordered(order) => {
                stats.sample_buffer(order.len(), capacity);
                order.recv().ok().map(|slot| {
                    slot.recv().unwrap_or_else(|_| {
                        Err(Error::WorkerPanic {
                            step: stats.name.clone(),
                            message: lost.into(),
                        })
                    })
                })
            }
            Results::Unordered(results) => {
                stats.sample_buffer(results.len(), capacity);
                results.recv().ok()
            }
        }
    }
}

/// A parallel stage's results and the threads that make them. Dropping it stops the threads:
/// it raises `stop`, closes the result channels (a blocked sender fails) and joins them, so
/// stopping early never leaks a thread or hangs.
pub struct Running {
    results: Option<Results>,
    threads: Vec<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
}

impl Running {
    pub fn new(results: Results, threads: Vec<JoinHandle<()>>, stop: Arc<AtomicBool>) -> Running {
        Running {
            results: Some(results),
            threads,
            stop,
        }
    }

    /// See [`Results::recv`].
    pub fn recv(&self, stats: &StageStats, capacity: usize, lost: &str) -> Option<Outcome> {
        self.results
            .as_ref()
            .and_then(|r| r.recv(stats, capacity, lost))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        drop(self.results.take());
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
