//! `prefetch(n)`: a producer thread runs the input ahead into a bounded buffer.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError};

use crate::element::Element;
use crate::error::{Error, Result};
use crate::exec::{catch_panic, BoxIter, ElementIter, State};
use crate::stats::StageStats;

/// The input's state right after an element, or why it has none (shared: once the input
/// has said it has none, every later element carries the same reason without a copy).
type Saved = std::result::Result<State, Arc<str>>;

/// What the producer hands over: some elements with the input's state after each, and, last,
/// how the input ended.
type Chunk = (Vec<(Element, Saved)>, Option<Result<()>>);

pub struct Prefetch {
    rx: Option<Receiver<Chunk>>,
    handle: Option<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    capacity: usize,
    stats: Arc<StageStats>,
    /// Elements received and not yet handed out.
    local: VecDeque<(Element, Saved)>,
    /// The input's state after the last element handed out.
    last: Saved,
    /// How the input ended, once received (handed out after `local` is empty).
    ending: Option<Result<()>>,
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
        Prefetch::spawn_with_stop(input, capacity, 1, stats, Arc::new(AtomicBool::new(false)))
    }

    /// Starts the producer thread, which hands elements over in chunks of up to `chunk`
    /// (`capacity` chunks are buffered). A chunk goes out when it is full, or at once when the
    /// consumer has nothing left to take: many small elements (records) then cost one channel
    /// hand-over (and at most one thread wake-up) per chunk, not per element. Dropping the
    /// prefetch sets `stop`, which the stages it drives may share.
    pub fn spawn_with_stop(
        mut input: BoxIter,
        capacity: usize,
        chunk: usize,
        stats: Arc<StageStats>,
        stop: Arc<AtomicBool>,
    ) -> Result<Prefetch> {
        let capacity = capacity.max(1);
        let chunk = chunk.max(1);
        let (tx, rx) = bounded::<Chunk>(capacity);
        let producer_stop = Arc::clone(&stop);
        let producer_stats = Arc::clone(&stats);
        let first: Saved = input.state().map_err(|e| Arc::from(e.to_string()));
        let handle = std::thread::Builder::new()
            .name(format!("stoker-{}", stats.name))
            .spawn(move || {
                let st = producer_stats;
                let mut pending = Vec::with_capacity(chunk);
                // Once the input has said it cannot report its state, it is not asked again.
                let mut no_state: Option<Arc<str>> = None;
                while !producer_stop.load(Ordering::Relaxed) {
                    let (ending, full) = match catch_panic(&st.name, || st.pull(&mut input)) {
                        Ok(Some(e)) => {
                            let saved = match &no_state {
                                Some(why) => Err(Arc::clone(why)),
                                None => input.state().map_err(|e| Arc::from(e.to_string())),
                            };
                            if let (Err(why), None) = (&saved, &no_state) {
                                no_state = Some(Arc::clone(why));
                            }
                            pending.push((e, saved));
                            (None, pending.len() >= chunk || tx.is_empty())
                        }
                        Ok(None) => (Some(Ok(())), true),
                        Err(e) => (Some(Err(e)), true),
                    };
                    if !full {
                        continue;
                    }
                    let last = ending.is_some();
                    let out = std::mem::replace(&mut pending, Vec::with_capacity(chunk));
                    let t = Instant::now();
                    if tx.send((out, ending)).is_err() {
                        break; // the consumer is gone
                    }
                    st.blocked_since(t);
                    if last {
                        break;
                    }
                }
            })
            .map_err(|e| Error::spawn("spawning a prefetch thread", e))?;
        stats.set_workers(1);
        Ok(Prefetch {
            rx: Some(rx),
            handle: Some(handle),
            stop,
            capacity,
            stats,
            local: VecDeque::new(),
            last: first,
            ending: None,
            done: false,
        })
    }

    /// Waits at most `timeout` for the next element.
    pub fn poll(&mut self, timeout: Duration) -> Poll {
        loop {
            if let Some((e, saved)) = self.local.pop_front() {
                self.stats.add_elements(1);
                self.last = saved;
                return Poll::Ready(Ok(Some(e)));
            }
            if let Some(ending) = self.ending.take() {
                self.done = true;
                return Poll::Ready(ending.map(|()| None));
            }
            if self.done {
                return Poll::Ready(Ok(None));
            }
            let Some(rx) = self.rx.as_ref() else {
                return Poll::Ready(Ok(None));
            };
            self.stats.sample_buffer(rx.len(), self.capacity);
            match rx.recv_timeout(timeout) {
                Ok((elements, ending)) => {
                    self.local.extend(elements);
                    self.ending = ending;
                }
                Err(RecvTimeoutError::Timeout) => return Poll::Pending,
                Err(RecvTimeoutError::Disconnected) => {
                    self.done = true;
                    return Poll::Ready(Err(Error::WorkerPanic {
                        step: self.stats.name.clone(),
                        message: "the producer thread ended without a result".into(),
                    }));
                }
            }
        }
    }
}

impl Prefetch {
    /// Asks the producer to stop and waits at most `wait` for its thread, and with it the
    /// stages it drives, to finish. True once it has; until then dropping the prefetch would
    /// wait for it (see [`detach`](Prefetch::detach)).
    pub fn stop_within(&mut self, wait: Duration) -> bool {
        self.stop.store(true, Ordering::Relaxed);
        // Dropping the receiver makes a blocked `send` fail, so the producer exits.
        drop(self.rx.take());
        let Some(handle) = self.handle.as_ref() else {
            return true;
        };
        let deadline = Instant::now() + wait;
        let mut nap = Duration::from_micros(100);
        while !handle.is_finished() {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            std::thread::sleep(nap.min(deadline - now));
            nap = (nap * 2).min(Duration::from_millis(10));
        }
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        true
    }

    /// Leaves the producer thread (asked to stop) to finish on its own: dropping the prefetch
    /// then returns at once. For a consumer that must not wait for a stage stuck in a call
    /// that never returns (a Python function, a read from a pipe).
    pub fn detach(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        drop(self.rx.take());
        self.handle = None;
    }
}

impl ElementIter for Prefetch {
    fn state(&self) -> Result<State> {
        self.last
            .clone()
            .map_err(|why| Error::invalid("state", why.to_string()))
    }

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

    /// Says it has started, then blocks in `next` until `release` is set.
    struct Stuck(Arc<AtomicBool>, Arc<AtomicBool>);
    impl ElementIter for Stuck {
        fn next(&mut self) -> Result<Option<Element>> {
            self.1.store(true, Ordering::Relaxed);
            while !self.0.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(None)
        }
    }

    #[test]
    fn a_stuck_producer_is_waited_for_only_so_long_then_detached() {
        let st = Arc::new(StageStats::new("p", "prefetch"));
        let release = Arc::new(AtomicBool::new(false));
        let started = Arc::new(AtomicBool::new(false));
        let stuck = Stuck(Arc::clone(&release), Arc::clone(&started));
        let mut p = Prefetch::spawn(Box::new(stuck), 2, st.clone()).unwrap();
        while !started.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let t = Instant::now();
        assert!(!p.stop_within(Duration::from_millis(30)));
        assert!(t.elapsed() < Duration::from_secs(1));
        p.detach();
        let t = Instant::now();
        drop(p);
        assert!(
            t.elapsed() < Duration::from_millis(100),
            "drop waited for a detached thread"
        );
        release.store(true, Ordering::Relaxed);
        // A producer that ends in time is joined.
        let mut p = Prefetch::spawn(ints(0..10), 2, st).unwrap();
        assert!(p.stop_within(Duration::from_secs(5)));
    }
}
