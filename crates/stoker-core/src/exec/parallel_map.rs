//! Parallel `map`: worker threads apply the op chain; results come back in input order
//! (`deterministic`, the default) or as soon as they are ready.
//!
//! Ordered mode: a feeder thread pulls the input and, for each element, sends a one-shot
//! result slot to the consumer (in order, through a bounded channel: this bounds the elements
//! in flight) and the element with the slot's sender to the workers. The consumer waits on the
//! slots in order.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{bounded, Receiver, Sender};

use crate::element::Element;
use crate::error::{Error, Result};
use crate::exec::map::{apply_chain, OpChain, Positions};
use crate::exec::results::{Results, Running, Tagged};
use crate::exec::state::StateLog;
use crate::exec::{catch_panic, BoxIter, ElementIter, State};
use crate::options::ErrorPolicy;
use crate::seed::Seeds;
use crate::stats::StageStats;
use crate::trace;

type Slot = Receiver<Tagged>;

pub struct ParallelMap {
    running: Running,
    stats: Arc<StageStats>,
    capacity: usize,
    done: bool,
    /// In order: the input's state after each element sent to the workers (see `state`).
    log: Option<Arc<StateLog>>,
    /// Index of the next element to come out (in order).
    next_out: u64,
    /// The state after the last element handed out: `[next input index]` and the input's.
    last: Result<State>,
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
    /// What the drawn seeds stand for in this run.
    pub seeds: Arc<Seeds>,
    /// The positions the ops see (see [`Positions`]).
    pub positions: Positions,
}

/// A work item: an input element, its position in the pass, and where its result goes.
type Work = (Element, u64, Sender<Tagged>);

/// Starts a thread of the map named `name`, running `body`.
pub(crate) fn start_thread(
    name: String,
    body: impl FnOnce() + Send + 'static,
) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name)
        .spawn(body)
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
        } = self;
        for (element, index, reply) in work_rx {
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
}

impl Feeder {
    /// Ordered mode: pulls the input until it ends, fails or the stage stops, and for each
    /// element queues a one-shot result slot for the consumer (in input order) and sends the
    /// element with the slot's sender to the workers; `log` gets the input's state after each.
    /// An input error goes to a slot of its own.
    fn feed_ordered(self, log: Option<Arc<StateLog>>, order_tx: Sender<Slot>) {
        let Feeder {
            mut input,
            mut index,
            work_tx,
            stats: st,
            stop,
        } = self;
        while !stop.load(Ordering::Relaxed) {
            let (slot_tx, slot_rx) = bounded::<Tagged>(1);
            match catch_panic(&st.name, || st.pull(&mut input)) {
                Ok(Some(e)) => {
                    if let Some(log) = &log {
                        log.push(index, input.state());
                    }
                    index += 1;
                    if order_tx.send(slot_rx).is_err()
                        || work_tx.send((e, index - 1, slot_tx)).is_err()
                    {
                        break;
                    }
                }
                Ok(None) => break,
                Err(err) => {
                    let _ = slot_tx.send((index, Err(err)));
                    let _ = order_tx.send(slot_rx);
                    break;
                }
            }
        }
        // The input goes before the channels close: the end the consumer sees comes after it.
        drop(input);
    }

    /// Unordered mode: pulls the input until it ends, fails or the stage stops, and sends each
    /// element to the workers with a sender of the shared result channel, which an input error
    /// goes to as well.
    fn feed_unordered(self, result_tx: Sender<Tagged>) {
        let Feeder {
            mut input,
            mut index,
            work_tx,
            stats: st,
            stop,
        } = self;
        while !stop.load(Ordering::Relaxed) {
            match catch_panic(&st.name, || st.pull(&mut input)) {
                Ok(Some(e)) => {
                    index += 1;
                    if work_tx.send((e, index - 1, result_tx.clone())).is_err() {
                        break;
                    }
                }
                Ok(None) => break,
                Err(err) => {
                    let _ = result_tx.send((index, Err(err)));
                    break;
                }
            }
        }
        // The input goes before the channels close: the end the consumer sees comes after it.
        drop(input);
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
        let capacity = config.buffer.max(workers);
        let stop = Arc::new(AtomicBool::new(false));
        // Work items carry the element's position, given in input order by the feeder.
        let (work_tx, work_rx) = bounded::<Work>(workers);
        let first_index = config.first_index;
        let first_state = input
            .state()
            .map(|s| State::new(vec![first_index], vec![s]));
        let log = config.deterministic.then(|| Arc::new(StateLog::default()));
        let feeder_log = log.clone();
        let mut threads = Vec::with_capacity(workers + 1);

        // Unordered mode: every worker sends straight to one result channel.
        let (result_tx, result_rx) = bounded::<Tagged>(capacity);
        for w in 0..workers {
            let worker = Worker {
                work_rx: work_rx.clone(),
                ops: Arc::clone(&ops),
                stats: Arc::clone(&stats),
                stop: Arc::clone(&stop),
                policy: config.policy,
                seeds: Arc::clone(&config.seeds),
                positions: config.positions,
                epoch: config.epoch,
            };
            threads.push(start_thread(format!("stoker-map-{w}"), move || {
                worker.run()
            })?);
        }
        drop(work_rx);

        let output;
        let feeder = Feeder {
            input,
            index: first_index,
            work_tx,
            stats: Arc::clone(&stats),
            stop: Arc::clone(&stop),
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
        stats.set_workers(workers);
        Ok(ParallelMap {
            running: Running::new(output, threads, stop),
            stats,
            capacity,
            done: false,
            log,
            next_out: first_index,
            last: first_state,
        })
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
            if let (Some(log), Some(_)) = (&self.log, &outcome) {
                let index = self.next_out;
                self.next_out += 1;
                if let Some(saved) = log.take_through(index) {
                    self.last = saved.map(|s| State::new(vec![index + 1], vec![s]));
                }
            }
            match outcome {
                None => self.done = true,
                Some(Ok(Some(e))) => {
                    self.stats.add_elements(1);
                    return Ok(Some(e));
                }
                // An element skipped under the skip policy: go on.
                Some(Ok(None)) => {}
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
        let ops: OpChain = Arc::from(vec![Arc::new(Square { panic_at }) as Arc<dyn Op>]);
        ParallelMap::spawn(
            ints(0..n),
            ops,
            ParallelMapConfig {
                epoch: 0,
                workers: 3,
                buffer: 8,
                deterministic,
                policy: ErrorPolicy::Raise,
                first_index: 0,
                seeds: Arc::default(),
                positions: Positions::default(),
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
