//! Where a parallel stage's results arrive: one-shot slots taken in input order
//! (`deterministic`), or one channel in the order they finish.
//!
//! Either way, the items before a failing one in the input all come out before its error.

use crate::exec::threads::Handle;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crossbeam_channel::Receiver;

use crate::element::Element;
use crate::error::{Error, Result};
use crate::knob::Knob;
use crate::stats::StageStats;

/// An element, `None` for one dropped (skipped, or an empty last batch), or an error; a stage
/// may send more with it (`T`).
pub type Outcome<T = Option<Element>> = Result<T>;

/// An outcome and the position of its item (element or batch) in the stage's input.
pub type Tagged<T = Option<Element>> = (u64, Outcome<T>);

pub enum Results<T = Option<Element>> {
    /// One slot per item, in input order.
    Ordered(Receiver<Receiver<Tagged<T>>>),
    /// One channel, in the order items finish. An error is held back until every item before
    /// it in the input has come out (they are in flight), so that, as in input order, nothing
    /// that came before a failure is lost; items after it may come out before it.
    Unordered {
        results: Receiver<Tagged<T>>,
        seen: Seen,
        held: Option<(u64, Error)>,
    },
}

/// Which positions have come out: all below `next`, and those in `above`.
#[derive(Default)]
pub struct Seen {
    next: u64,
    above: std::collections::BTreeSet<u64>,
}

impl Seen {
    fn mark(&mut self, index: u64) {
        self.above.insert(index);
        while self.above.remove(&self.next) {
            self.next += 1;
        }
    }

    /// Whether every position below `index` has come out.
    fn all_below(&self, index: u64) -> bool {
        self.next >= index
    }
}

impl<T> Results<T> {
    pub fn unordered(results: Receiver<Tagged<T>>) -> Results<T> {
        Results::Unordered {
            results,
            seen: Seen::default(),
            held: None,
        }
    }

    /// The next outcome, or `None` once every sender is gone. Samples the fill of the stage's
    /// buffer (`capacity` items) into `stats`; `lost` describes an item whose slot was dropped
    /// without a result (its worker died).
    pub fn recv(&mut self, stats: &StageStats, capacity: usize, lost: &str) -> Option<Outcome<T>> {
        match self {
            Results::Ordered(order) => {
                stats.sample_buffer(order.len(), capacity);
                order.recv().ok().map(|slot| match slot.recv() {
                    Ok((_, outcome)) => outcome,
                    Err(_) => Err(Error::WorkerPanic {
                        step: stats.name.clone(),
                        message: lost.into(),
                    }),
                })
            }
            Results::Unordered {
                results,
                seen,
                held,
            } => loop {
                if held.as_ref().is_some_and(|(at, _)| seen.all_below(*at)) {
                    return held.take().map(|(_, e)| Err(e));
                }
                stats.sample_buffer(results.len(), capacity);
                let Ok((index, outcome)) = results.recv() else {
                    return held.take().map(|(_, e)| Err(e));
                };
                seen.mark(index);
                match outcome {
                    Err(e) => {
                        if held.as_ref().is_none_or(|(at, _)| index < *at) {
                            *held = Some((index, e));
                        }
                    }
                    ok => return Some(ok),
                }
            },
        }
    }
}

/// A parallel stage's results and the threads that make them. Dropping it stops the threads:
/// it raises `stop`, closes the result channels (a blocked sender fails) and joins them, so
/// stopping early never leaks a thread or hangs.
pub struct Running<T = Option<Element>> {
    results: Option<Results<T>>,
    threads: Vec<Handle>,
    stop: Arc<AtomicBool>,
    /// Where parked workers wait: woken on stop.
    knob: Option<Arc<Knob>>,
}

impl<T> Running<T> {
    pub fn new(results: Results<T>, threads: Vec<Handle>, stop: Arc<AtomicBool>) -> Running<T> {
        Running {
            results: Some(results),
            threads,
            stop,
            knob: None,
        }
    }

    /// Wakes the workers parked on `knob` when it stops.
    pub fn wake_on_stop(&mut self, knob: Arc<Knob>) {
        self.knob = Some(knob);
    }

    /// A thread started after the others (a worker the knob asked for).
    pub fn push_thread(&mut self, thread: Handle) {
        self.threads.push(thread);
    }

    /// See [`Results::recv`].
    pub fn recv(&mut self, stats: &StageStats, capacity: usize, lost: &str) -> Option<Outcome<T>> {
        self.results
            .as_mut()
            .and_then(|r| r.recv(stats, capacity, lost))
    }
}

impl<T> Drop for Running<T> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(k) = &self.knob {
            k.wake();
        }
        drop(self.results.take());
        for t in self.threads.drain(..) {
            t.join();
        }
    }
}
