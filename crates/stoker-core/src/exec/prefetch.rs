//! `prefetch(n)`: a producer thread runs the input ahead into a bounded buffer.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError};

use crate::element::Element;
use crate::error::{Error, Result};
use crate::exec::threads::Handle;
use crate::exec::{catch_panic, BoxIter, ElementIter, State};
use crate::knob::Knob;
use crate::ram::{RamBudget, Reservation};
use crate::stats::StageStats;

/// The input's state right after an element, or why it has none (shared: once the input
/// has said it has none, every later element carries the same reason without a copy).
type Saved = std::result::Result<State, Arc<str>>;

/// An element in the buffer, with the input's state after it and, in a bounded buffer, its
/// place there.
type Queued = (Element, Saved, Option<Ticket>);

/// How the input ended, and, where it ended cleanly, its state then (bad records it skipped
/// after its last element count there).
type Ending = (Result<()>, Option<Saved>);

/// What the producer hands over: some elements, and, last, how the input ended.
type Chunk = (Vec<Queued>, Option<Ending>);

/// What bounds a buffer besides its capacity: a knob for the elements it holds (its depth),
/// and the RAM budget its elements' bytes are reserved in.
#[derive(Clone, Default)]
pub struct Bounds {
    pub depth: Option<Arc<Knob>>,
    pub ram: Option<Arc<RamBudget>>,
}

/// What the producer and consumer of a bounded buffer share: the elements queued (sent and
/// not yet handed out), and a signal when one is taken.
struct Gate {
    bounds: Bounds,
    queued: AtomicUsize,
    lock: Mutex<()>,
    taken: Condvar,
    stats: Arc<StageStats>,
    /// The RAM budget stopped the buffer below its depth last time it was full (said once in
    /// the depth knob's reason, until the depth moves).
    ram_bound: AtomicBool,
}

/// An element's place in a bounded buffer, and the bytes it holds of the RAM budget: given
/// back when the element is handed out or dropped.
struct Ticket {
    gate: Arc<Gate>,
    reserved: Option<Reservation>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Some(r) = self.reserved.take() {
            self.gate.stats.add_buffered_bytes(-(r.bytes() as i64));
        }
        self.gate.queued.fetch_sub(1, Ordering::Relaxed);
        let _guard = self.gate.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.gate.taken.notify_one();
    }
}

impl Gate {
    /// Says in the depth knob's reason that the RAM budget, not the depth, bounds the buffer.
    fn say_ram_bound(&self, ram: &RamBudget, queued: usize, bytes: u64) {
        let Some(depth) = &self.bounds.depth else {
            return;
        };
        if self.ram_bound.swap(true, Ordering::Relaxed) {
            return;
        }
        use crate::ram::human_bytes as h;
        depth.set_reason(format!(
            "{} of {}: the RAM budget ({} of {} held by buffers, {}) has no room for another \
             element of {}",
            queued,
            depth.get(),
            h(ram.used()),
            h(ram.limit()),
            ram.source,
            h(bytes)
        ));
    }

    /// Waits until the buffer may take an element of `bytes`: while it holds fewer than its
    /// depth, with the bytes reserved in the RAM budget, or, where the budget has no room, once
    /// the buffer is empty (the element then waits there rather than in the producer's hands,
    /// reserving nothing). `None` once `stop` is set; else the ticket, and whether it waited.
    fn admit(self: &Arc<Self>, bytes: u64, stop: &AtomicBool) -> Option<(Ticket, bool)> {
        let mut guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut waited = false;
        loop {
            if stop.load(Ordering::Relaxed) {
                return None;
            }
            let queued = self.queued.load(Ordering::Relaxed);
            let depth = self.bounds.depth.as_ref().map_or(usize::MAX, |k| k.get());
            if queued < depth {
                let reserved = match &self.bounds.ram {
                    None => Some(None),
                    Some(ram) => match ram.try_reserve(bytes) {
                        Some(r) => Some(Some(r)),
                        None if queued == 0 => Some(None),
                        None => {
                            self.say_ram_bound(ram, queued, bytes);
                            None
                        }
                    },
                };
                if let Some(reserved) = reserved {
                    if let Some(r) = &reserved {
                        self.stats.add_buffered_bytes(r.bytes() as i64);
                    }
                    self.queued.fetch_add(1, Ordering::Relaxed);
                    let ticket = Ticket {
                        gate: Arc::clone(self),
                        reserved,
                    };
                    return Some((ticket, waited));
                }
            }
            // Woken when the consumer takes an element; the time limit also sees another
            // buffer give bytes back, the depth rise, and `stop`.
            waited = true;
            guard = self
                .taken
                .wait_timeout(guard, Duration::from_millis(5))
                .map_or_else(|e| e.into_inner().0, |(g, _)| g);
        }
    }
}

pub struct Prefetch {
    rx: Option<Receiver<Chunk>>,
    handle: Option<Handle>,
    stop: Arc<AtomicBool>,
    capacity: usize,
    stats: Arc<StageStats>,
    /// Elements received and not yet handed out.
    local: VecDeque<Queued>,
    /// The input's state after the last element handed out; once the end was handed out,
    /// where the input ended cleanly, its state at the end.
    last: Saved,
    /// How the input ended, once received (handed out after `local` is empty).
    ending: Option<Ending>,
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
        input: BoxIter,
        capacity: usize,
        chunk: usize,
        stats: Arc<StageStats>,
        stop: Arc<AtomicBool>,
    ) -> Result<Prefetch> {
        Prefetch::spawn_bounded(input, capacity, chunk, stats, stop, Bounds::default())
    }

    /// Like [`spawn_with_stop`](Prefetch::spawn_with_stop), its buffer also bounded by
    /// `bounds`: it holds at most the depth knob's elements (up to `capacity`), and their
    /// bytes within the RAM budget.
    pub fn spawn_bounded(
        mut input: BoxIter,
        capacity: usize,
        chunk: usize,
        stats: Arc<StageStats>,
        stop: Arc<AtomicBool>,
        bounds: Bounds,
    ) -> Result<Prefetch> {
        let capacity = capacity.max(1);
        let bounded_by = bounds.depth.is_some() || bounds.ram.is_some();
        // A bounded buffer counts the elements it holds one by one: a chunk still being filled
        // would hold places its consumer cannot free.
        let chunk = if bounded_by { 1 } else { chunk.max(1) };
        let (tx, rx) = bounded::<Chunk>(capacity);
        let producer_stop = Arc::clone(&stop);
        let producer_stats = Arc::clone(&stats);
        let gate = bounded_by.then(|| {
            Arc::new(Gate {
                bounds,
                queued: AtomicUsize::new(0),
                lock: Mutex::new(()),
                taken: Condvar::new(),
                stats: Arc::clone(&stats),
                ram_bound: AtomicBool::new(false),
            })
        });
        let first: Saved = input.state().map_err(|e| Arc::from(e.to_string()));
        let name = format!("stoker-{}", stats.name);
        let handle = crate::exec::threads::spawn(name, move || {
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
                        let ticket = match &gate {
                            Some(gate) => {
                                let t = Instant::now();
                                let Some((ticket, waited)) =
                                    gate.admit(e.nbytes() as u64, &producer_stop)
                                else {
                                    break;
                                };
                                if waited {
                                    st.blocked_since(t);
                                }
                                Some(ticket)
                            }
                            None => None,
                        };
                        pending.push((e, saved, ticket));
                        (None, pending.len() >= chunk || tx.is_empty())
                    }
                    Ok(None) => {
                        let end = match &no_state {
                            Some(_) => None,
                            None => Some(input.state().map_err(|e| Arc::from(e.to_string()))),
                        };
                        (Some((Ok(()), end)), true)
                    }
                    Err(e) => (Some((Err(e), None)), true),
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
            if let Some((e, saved, ticket)) = self.local.pop_front() {
                drop(ticket);
                self.stats.add_elements(1);
                self.last = saved;
                return Poll::Ready(Ok(Some(e)));
            }
            if let Some((ending, end)) = self.ending.take() {
                self.done = true;
                if let Some(Ok(end)) = end {
                    self.last = Ok(end);
                }
                return Poll::Ready(ending.map(|()| None));
            }
            if self.done {
                return Poll::Ready(Ok(None));
            }
            let Some(rx) = self.rx.as_ref() else {
                return Poll::Ready(Ok(None));
            };
            self.stats.sample_buffer(rx.len(), self.capacity);
            let t = Instant::now();
            let received = rx.recv_timeout(timeout);
            self.stats.add_starved(t.elapsed());
            match received {
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
            h.join();
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
            h.join();
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

    /// Elements `{"x": [i; 125]}` (1,000 bytes each) for i in range, counting those made.
    fn kilobytes(n: i64, made: Arc<AtomicUsize>) -> BoxIter {
        struct Counted(i64, i64, Arc<AtomicUsize>);
        impl ElementIter for Counted {
            fn next(&mut self) -> Result<Option<Element>> {
                if self.0 == self.1 {
                    return Ok(None);
                }
                self.0 += 1;
                self.2.fetch_add(1, Ordering::Relaxed);
                let t =
                    crate::Tensor::from_slice(crate::DType::I64, vec![125], &[self.0 - 1; 125])?;
                Ok(Some(Element::new(crate::element::names(&["x"]), vec![t])))
            }
        }
        Box::new(Counted(0, n, made))
    }

    /// A bounded prefetch over `n` elements of 1,000 bytes, counting those made.
    fn bounded(
        n: i64,
        depth: Option<&Arc<Knob>>,
        ram: Option<&Arc<RamBudget>>,
    ) -> (Prefetch, Arc<AtomicUsize>, Arc<StageStats>) {
        let st = Arc::new(StageStats::new("p", "prefetch"));
        let made = Arc::new(AtomicUsize::new(0));
        let bounds = Bounds {
            depth: depth.cloned(),
            ram: ram.cloned(),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let input = kilobytes(n, made.clone());
        let p = Prefetch::spawn_bounded(input, 64, 1, st.clone(), stop, bounds).unwrap();
        (p, made, st)
    }

    /// Takes every element, slowly, checking after each how far the producer ran ahead.
    fn take_slowly(
        (mut p, made, _): (Prefetch, Arc<AtomicUsize>, Arc<StageStats>),
    ) -> (Vec<i64>, usize) {
        let (mut out, mut ahead) = (Vec::new(), 0);
        while let Some(e) = p.next().unwrap() {
            out.push(value(&e));
            std::thread::sleep(Duration::from_millis(2));
            ahead = ahead.max(made.load(Ordering::Relaxed) - out.len());
        }
        (out, ahead)
    }

    #[test]
    fn a_ram_budget_bounds_the_bytes_buffered() {
        let ram = RamBudget::new(3_500, "test");
        let run = bounded(40, None, Some(&ram));
        let st = Arc::clone(&run.2);
        let (out, ahead) = take_slowly(run);
        assert_eq!(out, (0..40).collect::<Vec<_>>());
        // Three in the budget, one in the producer's hands (or alone in the buffer).
        assert!(ahead <= 4, "{ahead} elements ahead");
        assert!(ahead >= 3, "the budget's room went unused: {ahead} ahead");
        assert_eq!((ram.peak(), ram.used()), (3_000, 0));
        let snap = st.snapshot();
        assert_eq!((snap.buffered_bytes_peak, snap.buffered_bytes), (3_000, 0));
    }

    #[test]
    fn a_buffer_with_no_room_in_the_budget_still_hands_over_one_element_at_a_time() {
        let ram = RamBudget::new(1, "test");
        let (out, ahead) = take_slowly(bounded(20, None, Some(&ram)));
        assert_eq!(out, (0..20).collect::<Vec<_>>());
        assert!(ahead <= 2, "{ahead} elements ahead");
        assert_eq!(ram.peak(), 0);
    }

    #[test]
    fn a_depth_knob_bounds_the_elements_buffered_and_can_move() {
        let depth = Arc::new(Knob::new("buffer_size", 1, 64, 2, true));
        let (out, ahead) = take_slowly(bounded(30, Some(&depth), None));
        assert_eq!(out, (0..30).collect::<Vec<_>>());
        assert!(
            (2..=3).contains(&ahead),
            "{ahead} elements ahead of a depth of 2"
        );
        depth.set(8, "deeper");
        let (_, ahead) = take_slowly(bounded(30, Some(&depth), None));
        assert!(
            (8..=9).contains(&ahead),
            "{ahead} elements ahead of a depth of 8"
        );
    }

    #[test]
    fn dropping_a_full_bounded_buffer_gives_its_bytes_back() {
        let ram = RamBudget::new(10_000, "test");
        let (mut p, made, _) = bounded(1_000, None, Some(&ram));
        assert_eq!(value(&p.next().unwrap().unwrap()), 0);
        while made.load(Ordering::Relaxed) < 11 {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(ram.used() > 0);
        drop(p);
        assert_eq!(ram.used(), 0);
    }
}
