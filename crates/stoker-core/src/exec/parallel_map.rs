//! Parallel `map`: worker threads apply the op chain; results come back in input order
//! (`deterministic`, the default) or as soon as they are ready.
//!
//! Ordered mode: a feeder thread pulls the input and, for each element, sends a one-shot
//! result slot to the consumer (in order, through a bounded channel: this bounds the elements
//! in flight) and the element with the slot's sender to the workers. The consumer waits on the
//! slots in order.
//!
//! With a [`Knob`], the parallelism moves while it runs: workers are started as the knob rises,
//! those numbered at or above it park, and the elements in flight are bounded by tokens, two
//! per worker, that the feeder takes before each element and the consumer gives back after it
//! (withholding them while the knob has come down).

use crate::exec::threads::Handle;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{bounded, Receiver, Sender};

use crate::element::Element;
use crate::error::{Error, Result};
use crate::exec::map::{apply_chain, OpChain, Positions};
use crate::exec::results::{Results, Running};
use crate::exec::state::StateLog;
use crate::exec::{catch_panic, BoxIter, ElementIter, State};
use crate::knob::Knob;
use crate::options::ErrorPolicy;
use crate::seed::Seeds;
use crate::stats::StageStats;
use crate::trace;

/// An element made (`None`: dropped by an op), with the bad records the ops dropped making it.
type Made = (Option<Element>, u64);
type Tagged = crate::exec::results::Tagged<Made>;
type Slot = Receiver<Tagged>;

pub struct ParallelMap {
    running: Running<Made>,
    stats: Arc<StageStats>,
    capacity: usize,
    done: bool,
    /// In order: the input's state after each element sent to the workers (see `state`).
    log: Option<Arc<StateLog>>,
    /// Index of the next element to come out (in order).
    next_out: u64,
    /// The state after the last element handed out: `[next input index]` and the input's.
    last: Result<State>,
    /// Bad records the ops dropped before the next element to come out (in order).
    skipped: u64,
    /// Where the parallelism is tuned while it runs.
    tuned: Option<Tuned>,
}

/// A parallel map's moving parts when a knob sets its parallelism.
struct Tuned {
    knob: Arc<Knob>,
    /// Starts worker `w`.
    start: Box<dyn FnMut(usize) -> Result<Handle> + Send>,
    started: usize,
    /// The feeder's tokens: one per element it may have in flight.
    tokens: Sender<()>,
    issued: usize,
}

impl Tuned {
    /// Gives back the token of an element taken, or withholds it where the knob came down,
    /// and issues more where it went up; starts the workers the knob now asks for.
    fn after_element(&mut self, running: &mut Running<Made>) -> Result<()> {
        let target = 2 * self.knob.get();
        if self.issued > target || self.tokens.try_send(()).is_err() {
            self.issued -= 1;
        }
        while self.issued < target && self.tokens.try_send(()).is_ok() {
            self.issued += 1;
        }
        while self.started < self.knob.get() {
            running.push_thread((self.start)(self.started)?);
            self.started += 1;
        }
        Ok(())
    }
}

pub struct ParallelMapConfig {
    /// Which pass over the stage this is (see [`crate::op::OpCtx::epoch`]).
    pub epoch: u64,
    pub workers: usize,
    /// Elements in flight beyond the ones being worked on.
    pub buffer: usize,
    pub deterministic: bool,
    pub policy: ErrorPolicy,
    /// The index of the input's first element in the pass (not 0 when restored).
    pub first_index: u64,
    /// Bad records dropped before that element (see [`State::skipped`]).
    pub first_skipped: u64,
    /// What the drawn seeds stand for in this run.
    pub seeds: Arc<Seeds>,
    /// The positions the ops see (see [`Positions`]).
    pub positions: Positions,
    /// Where the parallelism is set while it runs (`workers` is then its largest value);
    /// `None`: `workers` throughout.
    pub knob: Option<Arc<Knob>>,
    /// The RAM budget its results made ahead of the consumer are reserved in (a fused map and
    /// batch's batches beyond the first in flight); `None`: not budgeted.
    pub ram: Option<Arc<crate::ram::RamBudget>>,
}

/// A work item: an input element, its position in the pass, and where its result goes.
type Work = (Element, u64, Sender<Tagged>);

/// Runs `body` on a thread of the map named `name` (see [`crate::exec::threads`]).
pub(crate) fn start_thread(name: String, body: impl FnOnce() + Send + 'static) -> Result<Handle> {
    crate::exec::threads::spawn(name, body)
        .map_err(|e| Error::spawn("spawning a map worker thread", e))
}

/// What a worker thread holds: the work channel, the ops and how to run them.
struct Worker {
    work_rx: Receiver<Work>,
    ops: OpChain,
    stats: Arc<StageStats>,
    stop: Arc<AtomicBool>,
    policy: ErrorPolicy,
    seeds: Arc<Seeds>,
    positions: Positions,
    epoch: u64,
    /// This worker's number, and the knob it parks at or above.
    number: usize,
    knob: Option<Arc<Knob>>,
}

/// Parks worker `number` while the knob is at or below it (until the stage stops).
pub(crate) fn park_above(knob: Option<&Knob>, number: usize, stop: &AtomicBool) {
    let Some(knob) = knob else { return };
    let parked = |v: usize| number >= v && !stop.load(Ordering::Relaxed);
    while parked(knob.get()) {
        knob.wait_while(std::time::Duration::from_millis(200), parked);
    }
}

impl Worker {
    /// Applies the ops to each work item and sends the result where the item says, until the
    /// work channel closes, the stage stops, or the result has nowhere to go.
    fn run(self) {
        let Worker {
            work_rx,
            ops,
            stats: st,
            stop,
            policy,
            seeds,
            positions,
            epoch,
            number,
            knob,
        } = self;
        loop {
            park_above(knob.as_deref(), number, &stop);
            let Ok((element, index, reply)) = work_rx.recv() else {
                break;
            };
            // Once stopped, queued elements are not worked on: a slow op (a Python function)
            // must not delay the end.
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let t = Instant::now();
            let out = catch_panic(&st.name, || {
                apply_chain(
                    &ops,
                    element,
                    policy,
                    &st,
                    (positions.at(index), epoch),
                    None,
                    &seeds,
                )
            });
            st.add_busy(t.elapsed());
            trace::span(st.trace_name(), trace::Category::Stage, t, Some(index));
            let t = Instant::now();
            if reply.send((index, out)).is_err() {
                break;
            }
            st.blocked_since(t);
        }
    }
}

/// What the feeder thread holds: the input, numbered from `index`, and the workers' channel.
struct Feeder {
    input: BoxIter,
    index: u64,
    work_tx: Sender<Work>,
    stats: Arc<StageStats>,
    stop: Arc<AtomicBool>,
    /// One token per element it may put in flight, where a knob sets the parallelism.
    tokens: Option<Receiver<()>>,
}

impl Feeder {
    /// Waits for a token, where elements in flight are bounded by tokens; false once the
    /// consumer is gone.
    fn token(&self) -> bool {
        let Some(tokens) = &self.tokens else {
            return true;
        };
        tokens.recv().is_ok()
    }

    /// Ordered mode: pulls the input until it ends, fails or the stage stops, and for each
    /// element queues a one-shot result slot for the consumer (in input order) and sends the
    /// element with the slot's sender to the workers; `log` gets the input's state after each.
    /// An input error goes to a slot of its own.
    fn feed_ordered(mut self, log: Option<Arc<StateLog>>, order_tx: Sender<Slot>) {
        while !self.stop.load(Ordering::Relaxed) && self.token() {
            let Feeder {
                input,
                index,
                work_tx,
                stats: st,
                ..
            } = &mut self;
            let (slot_tx, slot_rx) = bounded::<Tagged>(1);
            match catch_panic(&st.name, || st.pull(input)) {
                Ok(Some(e)) => {
                    if let Some(log) = &log {
                        log.push(*index, input.state());
                    }
                    *index += 1;
                    if order_tx.send(slot_rx).is_err()
                        || work_tx.send((e, *index - 1, slot_tx)).is_err()
                    {
                        break;
                    }
                }
                Ok(None) => {
                    // The input's state at its end: bad records it skipped after its last
                    // element count there.
                    if let Some(log) = &log {
                        log.push(*index, input.state());
                    }
                    break;
                }
                Err(err) => {
                    let _ = slot_tx.send((*index, Err(err)));
                    let _ = order_tx.send(slot_rx);
                    break;
                }
            }
        }
        // The input goes before the channels close: the end the consumer sees comes after it.
        drop(self);
    }

    /// Unordered mode: pulls the input until it ends, fails or the stage stops, and sends each
    /// element to the workers with a sender of the shared result channel, which an input error
    /// goes to as well.
    fn feed_unordered(mut self, result_tx: Sender<Tagged>) {
        while !self.stop.load(Ordering::Relaxed) && self.token() {
            let Feeder {
                input,
                index,
                work_tx,
                stats: st,
                ..
            } = &mut self;
            match catch_panic(&st.name, || st.pull(input)) {
                Ok(Some(e)) => {
                    *index += 1;
                    if work_tx.send((e, *index - 1, result_tx.clone())).is_err() {
                        break;
                    }
                }
                Ok(None) => break,
                Err(err) => {
                    let _ = result_tx.send((*index, Err(err)));
                    break;
                }
            }
        }
        // The input goes before the channels close: the end the consumer sees comes after it.
        drop(self);
    }
}

impl ParallelMap {
    /// Starts the workers and the thread that feeds them `input`.
    pub fn spawn(
        input: BoxIter,
        ops: OpChain,
        config: ParallelMapConfig,
        stats: Arc<StageStats>,
    ) -> Result<ParallelMap> {
        let workers = config.workers.max(1);
        // With a knob, `workers` is the most it may start; it starts as many as the knob says,
        // and its tokens bound the elements in flight below the channels' capacity.
        let knob = config.knob.clone();
        let capacity = match knob {
            Some(_) => 2 * workers,
            None => config.buffer.max(workers),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let first = knob.as_ref().map_or(workers, |k| k.get().clamp(1, workers));
        // Work items carry the element's position, given in input order by the feeder.
        let (work_tx, work_rx) = bounded::<Work>(workers);
        let first_index = config.first_index;
        let first_skipped = config.first_skipped;
        let first_state = input
            .state()
            .map(|s| State::new(vec![first_index], vec![s]).with_skipped(first_skipped));
        let log = config.deterministic.then(|| Arc::new(StateLog::default()));
        let feeder_log = log.clone();
        let mut threads = Vec::with_capacity(first + 1);

        // Unordered mode: every worker sends straight to one result channel.
        let (result_tx, result_rx) = bounded::<Tagged>(capacity);
        let worker = Worker {
            work_rx,
            ops: Arc::clone(&ops),
            stats: Arc::clone(&stats),
            stop: Arc::clone(&stop),
            policy: config.policy,
            seeds: Arc::clone(&config.seeds),
            positions: config.positions,
            epoch: config.epoch,
            number: 0,
            knob: knob.clone(),
        };
        let start = move |w: usize| {
            let worker = Worker {
                work_rx: worker.work_rx.clone(),
                ops: Arc::clone(&worker.ops),
                stats: Arc::clone(&worker.stats),
                stop: Arc::clone(&worker.stop),
                seeds: Arc::clone(&worker.seeds),
                knob: worker.knob.clone(),
                number: w,
                ..worker
            };
            start_thread(format!("stoker-map-{w}"), move || worker.run())
        };
        for w in 0..first {
            threads.push(start(w)?);
        }
        // Tokens bound the elements in flight, two per worker the knob asks for.
        let (token_tx, token_rx) = bounded::<()>(capacity);
        let tuned = match &knob {
            Some(k) => {
                let issued = (0..2 * first)
                    .take_while(|_| token_tx.try_send(()).is_ok())
                    .count();
                Some(Tuned {
                    knob: Arc::clone(k),
                    start: Box::new(start),
                    started: first,
                    tokens: token_tx,
                    issued,
                })
            }
            None => None,
        };

        let output;
        let feeder = Feeder {
            input,
            index: first_index,
            work_tx,
            stats: Arc::clone(&stats),
            stop: Arc::clone(&stop),
            tokens: tuned.is_some().then_some(token_rx),
        };
        if config.deterministic {
            drop(result_rx);
            drop(result_tx);
            let (order_tx, order_rx) = bounded::<Slot>(capacity);
            output = Results::Ordered(order_rx);
            let feed = move || feeder.feed_ordered(feeder_log, order_tx);
            threads.push(start_thread("stoker-map-feed".into(), feed)?);
        } else {
            // Each work item carries a sender of the shared result channel; the channel closes
            // once the feeder and every in-flight item have dropped theirs.
            output = Results::unordered(result_rx);
            let feed = move || feeder.feed_unordered(result_tx);
            threads.push(start_thread("stoker-map-feed".into(), feed)?);
        }
        stats.set_workers(first);
        let mut running = Running::new(output, threads, stop);
        if let Some(k) = &knob {
            running.wake_on_stop(Arc::clone(k));
        }
        Ok(ParallelMap {
            running,
            stats,
            capacity,
            done: false,
            log,
            next_out: first_index,
            last: first_state,
            skipped: first_skipped,
            tuned,
        })
    }
}

impl Drop for ParallelMap {
    /// The tokens go first: a feeder waiting for one ends, and the threads can be joined.
    fn drop(&mut self) {
        drop(self.tuned.take());
    }
}

impl ElementIter for ParallelMap {
    fn state(&self) -> Result<State> {
        if self.log.is_none() {
            return Err(crate::exec::state::unsupported(
                &self.stats.name,
                "with deterministic=False its elements come out in no fixed order",
            ));
        }
        match &self.last {
            Ok(s) => Ok(s.clone()),
            Err(e) => Err(Error::invalid("state", e.to_string())),
        }
    }

    fn next(&mut self) -> Result<Option<Element>> {
        while !self.done {
            // `None`: the stream ended (every sender is gone).
            let lost = "a worker thread ended without a result";
            let outcome = self.running.recv(&self.stats, self.capacity, lost);
            if let (Some(tuned), Some(_)) = (&mut self.tuned, &outcome) {
                tuned.after_element(&mut self.running)?;
                self.stats.set_workers(tuned.knob.get().min(tuned.started));
            }
            if let Some(Ok((_, skipped))) = &outcome {
                self.skipped += skipped;
            }
            if let (Some(log), Some(_)) = (&self.log, &outcome) {
                let index = self.next_out;
                self.next_out += 1;
                if let Some(saved) = log.take_through(index) {
                    let skipped = self.skipped;
                    self.last =
                        saved.map(|s| State::new(vec![index + 1], vec![s]).with_skipped(skipped));
                }
            }
            match outcome {
                None => {
                    self.done = true;
                    // The state at the input's end, where it ended cleanly.
                    if let Some(Ok(end)) = self
                        .log
                        .as_ref()
                        .and_then(|l| l.take_through(self.next_out))
                    {
                        let skipped = self.skipped;
                        self.last =
                            Ok(State::new(vec![self.next_out], vec![end]).with_skipped(skipped));
                    }
                }
                Some(Ok((Some(e), _))) => {
                    self.stats.add_elements(1);
                    return Ok(Some(e));
                }
                // An element skipped under the skip policy: go on.
                Some(Ok((None, _))) => {}
                Some(Err(e)) => {
                    self.done = true;
                    return Err(e);
                }
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::element::Schema;
    use crate::exec::testutil::*;
    use crate::op::{Op, OpCtx};
    use crate::tensor::Tensor;

    #[derive(Debug)]
    struct Square {
        panic_at: Option<i64>,
    }
    impl Op for Square {
        fn name(&self) -> &str {
            "square"
        }
        fn output_schema(&self, input: &Schema) -> Result<Schema> {
            Ok(input.clone())
        }
        fn apply(&self, e: Element, _: &OpCtx<'_>) -> Result<Option<Element>> {
            let v = value(&e);
            if Some(v) == self.panic_at {
                panic!("boom at {v}");
            }
            if v % 2 == 0 {
                // Vary the work so that results finish out of order.
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            let t = Tensor::from_slice(DType::I64, vec![], &[v * v])?;
            Ok(Some(Element::new(e.names.clone(), vec![t])))
        }
        fn spec(&self) -> Result<serde_json::Value> {
            Ok(serde_json::json!({"op": "square"}))
        }
    }

    fn pm(n: i64, deterministic: bool, panic_at: Option<i64>) -> ParallelMap {
        pm_tuned(n, deterministic, panic_at, None)
    }

    fn pm_tuned(
        n: i64,
        deterministic: bool,
        panic_at: Option<i64>,
        knob: Option<Arc<Knob>>,
    ) -> ParallelMap {
        let ops: OpChain = Arc::from(vec![Arc::new(Square { panic_at }) as Arc<dyn Op>]);
        ParallelMap::spawn(
            ints(0..n),
            ops,
            ParallelMapConfig {
                epoch: 0,
                workers: knob.as_ref().map_or(3, |k| k.max),
                buffer: 8,
                deterministic,
                policy: ErrorPolicy::Raise,
                first_index: 0,
                first_skipped: 0,
                seeds: Arc::default(),
                positions: Positions::default(),
                knob,
                ram: None,
            },
            Arc::new(StageStats::new("map", "map")),
        )
        .unwrap()
    }

    #[test]
    fn ordered_results_in_input_order() {
        let want: Vec<i64> = (0..200).map(|i| i * i).collect();
        assert_eq!(drain(Box::new(pm(200, true, None))), want);
    }

    /// The knob moved up and down while the map runs: the same results, in order, and no
    /// more workers working than the knob says.
    #[test]
    fn a_knob_moved_while_it_runs_keeps_the_results() {
        for deterministic in [true, false] {
            let knob = Arc::new(Knob::new("num_parallel_calls", 1, 8, 1, true));
            let mut it = pm_tuned(600, deterministic, None, Some(Arc::clone(&knob)));
            let mut got = Vec::new();
            let mut most_started = 0;
            while let Some(e) = it.next().unwrap() {
                got.push(e.tensors[0].typed::<i64>().unwrap()[0]);
                let v = [1, 8, 3, 5, 2][got.len() / 120 % 5];
                knob.set(v, "test");
                most_started = most_started.max(it.tuned.as_ref().map_or(0, |t| t.started));
            }
            if !deterministic {
                got.sort();
            }
            let want: Vec<i64> = (0..600).map(|i| i * i).collect();
            assert_eq!(got, want);
            assert_eq!(most_started, 8, "workers are started as the knob rises");
        }
    }

    #[test]
    fn a_map_with_workers_parked_stops_at_once() {
        let knob = Arc::new(Knob::new("num_parallel_calls", 1, 8, 8, true));
        let mut it = pm_tuned(100_000, true, None, Some(Arc::clone(&knob)));
        for _ in 0..20 {
            it.next().unwrap();
        }
        knob.set(1, "test");
        for _ in 0..20 {
            it.next().unwrap();
        }
        let t = std::time::Instant::now();
        drop(it);
        assert!(
            t.elapsed() < std::time::Duration::from_millis(150),
            "{:?}",
            t.elapsed()
        );
    }

    #[test]
    fn unordered_results_are_the_same_set() {
        let mut got = drain(Box::new(pm(200, false, None)));
        got.sort();
        let want: Vec<i64> = (0..200).map(|i| i * i).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn worker_panic_becomes_an_error_and_drop_does_not_hang() {
        let mut it = pm(1000, true, Some(5));
        let mut seen = 0;
        let err = loop {
            match it.next() {
                Ok(Some(_)) => seen += 1,
                Ok(None) => panic!("ended without the panic"),
                Err(e) => break e,
            }
        };
        assert_eq!(seen, 5);
        assert!(
            matches!(&err, Error::WorkerPanic { message, .. } if message.contains("boom at 5")),
            "{err}"
        );
        assert!(it.next().unwrap().is_none());
    }

    #[test]
    fn unordered_results_before_a_failure_all_come_out_before_its_error() {
        // Element 998 sleeps, 999 fails at once: the failure must wait for 998.
        for _ in 0..20 {
            let mut it = pm(1000, false, Some(999));
            let mut got = Vec::new();
            let err = loop {
                match it.next() {
                    Ok(Some(e)) => got.push(value(&e)),
                    Ok(None) => panic!("ended without the failure"),
                    Err(e) => break e,
                }
            };
            assert!(err.to_string().contains("boom at 999"), "{err}");
            got.sort_unstable();
            assert_eq!(got, (0..999).map(|i| i * i).collect::<Vec<_>>());
        }
    }

    #[test]
    fn early_drop_joins_threads() {
        for det in [true, false] {
            let mut it = pm(1_000_000, det, None);
            it.next().unwrap().unwrap();
            drop(it);
        }
    }
}
