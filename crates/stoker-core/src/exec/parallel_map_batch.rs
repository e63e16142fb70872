//! A parallel `map` followed by `batch`, fused: each worker writes the element it has just
//! made straight into its row of the batch buffer (tf.data's `map_and_batch`).
//!
//! Unfused, every element goes through a channel to the batch stage, which copies it on the
//! consumer's thread, one element after another, from another core's cache. Fused, the copies
//! run on all workers at once, right after the element was made (still in the worker's
//! cache), and the element's buffer goes back to the pool warm for the worker's next element.
//!
//! A worker that needs work pulls the next input element itself, under a lock ([`Feed`]),
//! which numbers the elements and gives each batch a [`Pending`] record; the worker that writes
//! a batch's last row finishes it and sends it on, to the batch's one-shot slot (ordered mode:
//! the consumer takes slots in order) or to a shared channel. (A feeder thread handing out the
//! elements had to be woken for every element, and on cores all busy with workers it took them
//! from the workers: on W3 with 2 workers on 2 cores, about 1,300 preemptions per epoch.)
//! Where the schema fixes the rows' shapes, each batch's buffers are made with the batch, and
//! the worker offers the element's row to its ops ([`RowSlots`]): an op that writes its output
//! there leaves nothing to copy.
//! The results equal `map` then `batch`: the same rows in the same order, the same element
//! seeds, the same errors (an element's error fails its batch, and the batch's rows are lost,
//! as in `batch`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, Sender};

use crate::element::{Element, Schema};
use crate::error::{Error, Result};
use crate::exec::batch::{BatchBuilder, RowWritten};
use crate::exec::map::{apply_chain, OpChain, Positions};
use crate::exec::parallel_map::{park_above, start_thread, ParallelMapConfig};
use crate::exec::results::{Results, Running, Tagged};
use crate::exec::state::StateLog;
use crate::exec::{catch_panic, BoxIter, ElementIter, State};
use crate::knob::Knob;
use crate::options::ErrorPolicy;
use crate::ram::{RamBudget, Reservation};
use crate::row_slots::RowSlots;
use crate::seed::Seeds;
use crate::stats::StageStats;
use crate::storage::{batch_pool, BufferPool};
use crate::trace;

pub struct BatchConfig {
    pub size: usize,
    pub drop_remainder: bool,
    /// The map's output schema, to lay out each batch before its rows arrive (a dynamic one
    /// is fine: the first row to arrive then lays it out, and nothing is written in place).
    pub rows: Schema,
}

pub struct ParallelMapBatch {
    running: Running,
    map_stats: Arc<StageStats>,
    batch_stats: Arc<StageStats>,
    batches_in_flight: usize,
    done: bool,
    /// In order: the state after each batch's last row was taken (see `Feed::log_batch`).
    log: Option<Arc<StateLog>>,
    /// The index of the next batch to come out.
    next_out: u64,
    /// The state after the last batch handed out.
    last: Result<State>,
    /// Where a knob sets the parallelism: it, how to start worker `w`, and the workers started.
    tuned: Option<Tuned>,
    /// Where its batches in flight are in a RAM budget.
    in_flight: Option<Arc<InFlight>>,
}

/// The batches made and not yet handed out, where they are in a RAM budget: the first is the
/// stage's working set; each one after it is made once its bytes are reserved.
struct InFlight {
    ram: Arc<RamBudget>,
    /// In the order they were made: each batch's reservation (`None`: the first in flight).
    batches: Mutex<VecDeque<Option<Reservation>>>,
    /// A batch's bytes: from the schema where it fixes them, else the last batch's.
    bytes: AtomicU64,
}

impl InFlight {
    fn new(ram: Arc<RamBudget>, bytes: Option<u64>) -> Arc<InFlight> {
        Arc::new(InFlight {
            ram,
            batches: Mutex::default(),
            bytes: AtomicU64::new(bytes.unwrap_or(0)),
        })
    }

    /// `new_batch`, waiting first for room for the batch where `in_flight` is given.
    fn gated(
        in_flight: Option<Arc<Self>>,
        mut new_batch: NewBatch,
        stop: Arc<AtomicBool>,
    ) -> NewBatch {
        match in_flight {
            None => new_batch,
            Some(f) => Box::new(move || if f.admit(&stop) { new_batch() } else { None }),
        }
    }

    /// Waits until another batch may be made: none is in flight, or its bytes are reserved.
    /// False once `stop` is set.
    fn admit(&self, stop: &AtomicBool) -> bool {
        loop {
            {
                let mut batches = self.batches.lock().unwrap_or_else(|e| e.into_inner());
                if batches.is_empty() {
                    batches.push_back(None);
                    return true;
                }
                if let Some(r) = self.ram.try_reserve(self.bytes.load(Ordering::Relaxed)) {
                    batches.push_back(Some(r));
                    return true;
                }
            }
            if stop.load(Ordering::Relaxed) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A batch of `bytes` was handed out: the oldest reservation goes.
    fn handed_out(&self, bytes: Option<u64>) {
        if let Some(b) = bytes.filter(|&b| b > 0) {
            self.bytes.store(b, Ordering::Relaxed);
        }
        let mut batches = self.batches.lock().unwrap_or_else(|e| e.into_inner());
        batches.pop_front();
    }
}

/// Batches in flight besides the one the consumer holds: enough that workers finishing a
/// batch's last rows can start on the next one.
const BATCHES_IN_FLIGHT: usize = 2;

/// A batch's bytes where `rows` fixes every field's shape.
fn batch_bytes(rows: &Schema, size: usize) -> Option<u64> {
    if rows.dynamic {
        return None;
    }
    let mut total = 0usize;
    for f in &rows.fields {
        let shape = f.static_shape()?;
        total += shape.iter().product::<usize>() * f.dtype.size()? * size;
    }
    Some(total as u64)
}

struct Tuned {
    knob: Arc<Knob>,
    /// `None` once the feed is gone (every worker ended): there is nothing left to do.
    start: Box<dyn Fn(usize) -> Result<Option<crate::exec::threads::Handle>> + Send>,
    started: usize,
}

/// One batch being filled.
struct Pending {
    state: Mutex<PendingState>,
    /// The batch's position in the stage's output.
    index: u64,
    reply: Sender<Tagged>,
    size: usize,
    drop_remainder: bool,
}

#[derive(Default)]
struct PendingState {
    /// Made from the schema with the batch, else by the first row to arrive, from its shapes.
    builder: Option<BatchBuilder>,
    written: usize,
    /// Rows this batch gets, known once they have all been handed out.
    expected: Option<usize>,
    /// The batch, or an error in its place, was sent (once: an ordered slot holds one).
    sent: bool,
}

impl Pending {
    fn lock(&self) -> std::sync::MutexGuard<'_, PendingState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends `err` in place of the batch, unless it already failed. The builder stays (rows
    /// may be being written into it); it goes with the last work item holding this batch.
    fn fail(&self, err: Error) {
        let mut state = self.lock();
        if !state.sent {
            state.sent = true;
            let _ = self.reply.send((self.index, Err(err)));
        }
    }

    /// Records that the batch gets `rows` rows (all handed out), and sends it if they are all
    /// written.
    fn close(&self, rows: usize) {
        let mut state = self.lock();
        state.expected = Some(rows);
        self.finish_if_complete(&mut state);
    }

    /// Sends the batch if every expected row is written (`state` is this batch's, locked).
    fn finish_if_complete(&self, state: &mut PendingState) {
        if state.sent || state.expected != Some(state.written) {
            return;
        }
        let rows = state.written;
        let outcome = match state.builder.take() {
            _ if rows == 0 || (rows < self.size && self.drop_remainder) => Ok(None),
            None => Ok(None),
            Some(builder) => builder.finish(rows).map(Some),
        };
        state.sent = true;
        let _ = self.reply.send((self.index, outcome));
    }

    /// Where the ops making row `row` may write it, once the batch is laid out.
    fn row_slots(&self, row: usize) -> Option<RowSlots> {
        let state = self.lock();
        if state.sent {
            return None;
        }
        // SAFETY: each row is one work item's, which asks once, before its element is made,
        // and writes the row (`write`) only after.
        state.builder.as_ref().map(|b| unsafe { b.row_slots(row) })
    }

    /// Writes `element` into row `row`; `slots` are the row's, if it had them.
    fn write(
        &self,
        row: usize,
        element: Element,
        slots: Option<RowSlots>,
        pool: &Arc<BufferPool>,
    ) -> RowWritten {
        let write = {
            let mut state = self.lock();
            if state.sent {
                return RowWritten::default();
            }
            let size = self.size;
            let builder = state
                .builder
                .get_or_insert_with(|| BatchBuilder::new(&element, size, pool));
            match builder.reserve(row, &element) {
                Ok(w) => w,
                Err(e) => {
                    drop(state);
                    self.fail(e);
                    return RowWritten::default();
                }
            }
        };
        // SAFETY: the builder stays in `state`, which lives as long as `self`, until the batch
        // is finished, and that waits for this row to be counted below (a failed batch is
        // never finished). Each row is reserved by one work item only, so nothing else
        // touches these bytes.
        let written = unsafe { write.write(&element) };
        // Before the row counts: the batch goes out with its last row, and a batch whose
        // buffers nothing else shares reaches NumPy writable.
        drop((element, slots));
        let mut state = self.lock();
        state.written += 1;
        self.finish_if_complete(&mut state);
        written
    }
}

/// A work item: an input element, its position in the pass, its batch and row.
type Work = (Element, u64, Arc<Pending>, usize);

/// Makes the record of the next batch (and, ordered, queues its slot for the consumer); `None`
/// once the consumer is gone.
type NewBatch = Box<dyn FnMut() -> Option<Arc<Pending>> + Send>;

/// The input, and where its next element goes; the workers take turns pulling from it.
struct Feed {
    input: BoxIter,
    /// The next element's position in the pass.
    index: u64,
    /// The batch being handed out, and its next row.
    current: Option<(Arc<Pending>, usize)>,
    new_batch: NewBatch,
    /// The input ended or failed, or the consumer is gone: no more work.
    ended: bool,
    /// In order: the state after each batch's last row was taken (`None`: unordered).
    log: Option<Arc<StateLog>>,
}

impl Feed {
    /// The state of a batch over a map whose next element is `self.index`, as `batch` over
    /// `map` report it.
    fn state(&self) -> Result<State> {
        let map = State::new(vec![self.index], vec![self.input.state()?]);
        Ok(State::over(map))
    }

    fn log_batch(&self, batch: u64) {
        if let Some(log) = &self.log {
            log.push(batch, self.state());
        }
    }
}

impl Feed {
    /// The next work item; `None` when there is no more.
    fn next(&mut self, stats: &StageStats) -> Option<Work> {
        if self.ended {
            return None;
        }
        let Some((pending, row)) = self
            .current
            .take()
            .or_else(|| Some(((self.new_batch)()?, 0)))
        else {
            self.ended = true;
            return None;
        };
        match catch_panic(&stats.name, || stats.pull(&mut self.input)) {
            Ok(Some(element)) => {
                let work = (element, self.index, Arc::clone(&pending), row);
                self.index += 1;
                if row + 1 < pending.size {
                    self.current = Some((pending, row + 1));
                } else {
                    self.log_batch(pending.index);
                    pending.close(row + 1);
                }
                Some(work)
            }
            Ok(None) => {
                self.log_batch(pending.index);
                pending.close(row);
                self.ended = true;
                None
            }
            Err(err) => {
                pending.fail(err);
                self.ended = true;
                None
            }
        }
    }
}

/// What a worker thread holds: the feed it takes turns pulling from, the ops and how to run
/// them, and the stats of both stages (the copies into the batch count as the batch's).
struct Worker {
    feed: Arc<Mutex<Feed>>,
    stop: Arc<AtomicBool>,
    ops: OpChain,
    map_stats: Arc<StageStats>,
    batch_stats: Arc<StageStats>,
    policy: ErrorPolicy,
    epoch: u64,
    positions: Positions,
    seeds: Arc<Seeds>,
    pool: Arc<BufferPool>,
    /// This worker's number, and the knob it parks at or above.
    number: usize,
    knob: Option<Arc<Knob>>,
}

impl Worker {
    /// The next work item, pulled from the feed under its lock; `None` once the stage stops or
    /// the feed has no more.
    fn next_work(&self) -> Option<Work> {
        park_above(self.knob.as_deref(), self.number, &self.stop);
        if self.stop.load(Ordering::Relaxed) {
            return None;
        }
        let mut feed = self.feed.lock().unwrap_or_else(|e| e.into_inner());
        let work = feed.next(&self.map_stats);
        if work.is_none() {
            // No more work: the parked workers end too, letting go of the feed, whose end
            // closes the channels the consumer waits on.
            self.stop.store(true, Ordering::Relaxed);
            if let Some(k) = &self.knob {
                k.wake();
            }
        }
        work
    }

    /// Until there is no more work: makes each work item's element with the ops, offering them
    /// its batch row, and writes it into that row, or fails the batch with the element's error.
    fn run(self) {
        let (st, bst, pool) = (&self.map_stats, &self.batch_stats, &self.pool);
        while let Some((element, index, pending, row)) = self.next_work() {
            let t = Instant::now();
            let slots = pending.row_slots(row);
            let out = catch_panic(&st.name, || {
                let position = (self.positions.at(index), self.epoch);
                apply_chain(
                    &self.ops,
                    element,
                    self.policy,
                    st,
                    position,
                    slots.as_ref(),
                    &self.seeds,
                )
            });
            st.add_busy(t.elapsed());
            trace::span(st.trace_name(), trace::Category::Stage, t, Some(index));
            match out {
                Ok((Some(e), _)) => {
                    st.add_elements(1);
                    let t = Instant::now();
                    let w = pending.write(row, e, slots, pool);
                    bst.add_row_bytes(w.copied, w.in_place);
                    bst.add_busy(t.elapsed());
                    let name = bst.trace_name();
                    trace::span(name, trace::Category::Stage, t, Some(index));
                }
                // Only fused when bad records raise, so nothing is dropped.
                Ok((None, _)) => pending.fail(Error::internal(
                    "an element was dropped inside a fused map and batch",
                )),
                Err(e) => pending.fail(e),
            }
        }
    }
}

impl ParallelMapBatch {
    /// `map_stats` gets the ops' time and counts elements; `batch_stats` gets the copies into
    /// the batch and counts batches.
    pub fn spawn(
        input: BoxIter,
        ops: OpChain,
        config: ParallelMapConfig,
        batch: BatchConfig,
        map_stats: Arc<StageStats>,
        batch_stats: Arc<StageStats>,
    ) -> Result<ParallelMapBatch> {
        let workers = config.workers.max(1);
        let size = batch.size.max(1);
        let batches_in_flight = BATCHES_IN_FLIGHT;
        let stop = Arc::new(AtomicBool::new(false));

        let (result_tx, result_rx) = bounded::<Tagged>(batches_in_flight);
        let (order_tx, order_rx) = bounded::<Receiver<Tagged>>(batches_in_flight);
        let ordered = config.deterministic;
        let output = if ordered {
            Results::Ordered(order_rx)
        } else {
            Results::unordered(result_rx)
        };
        let (rows, drop_remainder) = (batch.rows, batch.drop_remainder);
        let pool = batch_pool();
        let batch_pool = Arc::clone(&pool);
        let mut batches = 0u64;
        let in_flight = config
            .ram
            .map(|ram| InFlight::new(ram, batch_bytes(&rows, size)));
        let new_batch: NewBatch = Box::new(move || {
            let reply = if ordered {
                let (slot_tx, slot_rx) = bounded::<Tagged>(1);
                order_tx.send(slot_rx).ok()?;
                slot_tx
            } else {
                result_tx.clone()
            };
            let builder = BatchBuilder::from_schema(&rows, size, &batch_pool);
            batches += 1;
            Some(Arc::new(Pending {
                index: batches - 1,
                state: Mutex::new(PendingState {
                    builder,
                    ..PendingState::default()
                }),
                reply,
                size,
                drop_remainder,
            }))
        });
        let new_batch = InFlight::gated(in_flight.clone(), new_batch, Arc::clone(&stop));
        let log = ordered.then(|| Arc::new(StateLog::default()));
        let feed = Feed {
            input,
            index: config.first_index,
            current: None,
            new_batch,
            ended: false,
            log: log.clone(),
        };
        let first_state = feed.state();
        let feed = Arc::new(Mutex::new(feed));

        // With a knob, `workers` is the most it may start; it starts as many as the knob says.
        let knob = config.knob.clone();
        let first = knob.as_ref().map_or(workers, |k| k.get().clamp(1, workers));
        let (policy, epoch, positions) = (config.policy, config.epoch, config.positions);
        let (worker_stop, seeds, worker_knob) = (Arc::clone(&stop), config.seeds, knob.clone());
        let (map_st, batch_st) = (Arc::clone(&map_stats), Arc::clone(&batch_stats));
        // The workers hold the feed: once they have all ended it goes, and with it the
        // channels the consumer waits on; workers started later take it while it is there.
        let weak_feed = Arc::downgrade(&feed);
        let start = move |w: usize| {
            let Some(feed) = weak_feed.upgrade() else {
                return Ok(None);
            };
            let worker = Worker {
                feed,
                stop: Arc::clone(&worker_stop),
                ops: Arc::clone(&ops),
                map_stats: Arc::clone(&map_st),
                batch_stats: Arc::clone(&batch_st),
                policy,
                epoch,
                positions,
                seeds: Arc::clone(&seeds),
                pool: Arc::clone(&pool),
                number: w,
                knob: worker_knob.clone(),
            };
            start_thread(format!("stoker-map-{w}"), move || worker.run()).map(Some)
        };
        let threads: Vec<_> = (0..first).map(&start).collect::<Result<Vec<_>>>()?;
        let threads = threads.into_iter().flatten().collect();
        drop(feed);
        map_stats.set_workers(first);
        // The copies into the batch run on the map's workers too.
        batch_stats.set_workers(first);
        let mut running = Running::new(output, threads, stop);
        let tuned = knob.map(|knob| {
            running.wake_on_stop(Arc::clone(&knob));
            Tuned {
                knob,
                start: Box::new(start),
                started: first,
            }
        });
        Ok(ParallelMapBatch {
            running,
            map_stats,
            batch_stats,
            batches_in_flight,
            done: false,
            log,
            next_out: 0,
            last: first_state,
            tuned,
            in_flight,
        })
    }
}

impl ElementIter for ParallelMapBatch {
    fn state(&self) -> Result<State> {
        if self.log.is_none() {
            return Err(crate::exec::state::unsupported(
                &self.map_stats.name,
                "with deterministic=False its batches come out in no fixed order",
            ));
        }
        match &self.last {
            Ok(s) => Ok(s.clone()),
            Err(e) => Err(Error::invalid("state", e.to_string())),
        }
    }

    fn next(&mut self) -> Result<Option<Element>> {
        while !self.done {
            let t = Instant::now();
            // `None`: the stream ended (every sender is gone).
            let lost = "a batch ended without a result";
            let outcome = self
                .running
                .recv(&self.map_stats, self.batches_in_flight, lost);
            self.batch_stats.add_wait_input(t.elapsed());
            if let Some(tuned) = &mut self.tuned {
                while tuned.started < tuned.knob.get() {
                    if let Some(t) = (tuned.start)(tuned.started)? {
                        self.running.push_thread(t);
                    }
                    tuned.started += 1;
                }
                let active = tuned.knob.get().min(tuned.started);
                self.map_stats.set_workers(active);
                self.batch_stats.set_workers(active);
            }
            if let (Some(in_flight), Some(out)) = (&self.in_flight, &outcome) {
                let bytes = match out {
                    Ok(Some(e)) => Some(e.nbytes() as u64),
                    _ => None,
                };
                in_flight.handed_out(bytes);
            }
            if let (Some(log), Some(_)) = (&self.log, &outcome) {
                let batch = self.next_out;
                self.next_out += 1;
                if let Some(saved) = log.take_through(batch) {
                    self.last = saved;
                }
            }
            match outcome {
                None => self.done = true,
                Some(Ok(Some(e))) => {
                    self.batch_stats.add_elements(1);
                    return Ok(Some(e));
                }
                // An empty or dropped last batch.
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
    use crate::element::{names, FieldSpec, Schema};
    use crate::exec::batch::BatchIter;
    use crate::exec::map::MapIter;
    use crate::exec::testutil::*;
    use crate::op::{Op, OpCtx};
    use crate::options::ErrorPolicy;
    use crate::tensor::Tensor;
    use std::sync::atomic::AtomicUsize;

    /// `x` → `{v: [x, x², a value drawn from the element's seed], s: "e<x>"}`, slower for
    /// even x so that elements finish out of order; fails at `fail_at`, and makes `v` one
    /// value longer at `long_at`. With `in_place`, `v` goes into the batch row when one is
    /// offered (counted in `taken`).
    #[derive(Debug, Default)]
    struct Row {
        fail_at: Option<i64>,
        long_at: Option<i64>,
        in_place: bool,
        taken: Arc<AtomicUsize>,
    }
    impl Op for Row {
        fn name(&self) -> &str {
            "row"
        }
        fn output_schema(&self, input: &Schema) -> Result<Schema> {
            Ok(input.clone())
        }
        fn apply(&self, e: Element, ctx: &OpCtx<'_>) -> Result<Option<Element>> {
            let x = value(&e);
            if Some(x) == self.fail_at {
                return Err(Error::invalid("row", format!("bad element {x}")));
            }
            if x % 2 == 0 {
                std::thread::sleep(std::time::Duration::from_micros(300));
            }
            let mut v = vec![
                x,
                x * x,
                (ctx.element_seed(crate::seed::Seed::given(7)) % 1000) as i64,
            ];
            if Some(x) == self.long_at {
                v.push(0);
            }
            let slot = ctx
                .row_slot("v", DType::I64, &[v.len()])
                .filter(|_| self.in_place);
            let v = match slot {
                Some(slot) => {
                    self.taken.fetch_add(1, Ordering::Relaxed);
                    slot.fill(|out: &mut [i64]| {
                        out.copy_from_slice(&v);
                        Ok(())
                    })?
                }
                None => Tensor::from_slice(DType::I64, vec![v.len()], &v)?,
            };
            let s = bytes::Bytes::from(format!("e{x}"));
            Ok(Some(Element::new(
                names(&["v", "s"]),
                vec![v, Tensor::from_bytes(vec![], vec![s], Vec::new())?],
            )))
        }
        fn spec(&self) -> Result<serde_json::Value> {
            Ok(serde_json::json!({"op": "row"}))
        }
    }

    fn stats() -> Arc<StageStats> {
        Arc::new(StageStats::new("s", "s"))
    }

    fn chain_of(row: Row) -> OpChain {
        Arc::from(vec![Arc::new(row) as Arc<dyn Op>])
    }

    fn chain(fail_at: Option<i64>, long_at: Option<i64>) -> OpChain {
        chain_of(Row {
            fail_at,
            long_at,
            ..Row::default()
        })
    }

    /// What `Row` makes, as a schema: `v` of `v_len` values, `s` a string.
    fn row_schema(v_len: usize) -> Schema {
        Schema::new(vec![
            FieldSpec::fixed("v", DType::I64, &[v_len]),
            FieldSpec::fixed("s", DType::Bytes, &[]),
        ])
    }

    fn fused(n: i64, size: usize, drop_remainder: bool, deterministic: bool) -> BoxIter {
        fused_with(n, size, drop_remainder, deterministic, chain(None, None))
    }

    fn fused_with(
        n: i64,
        size: usize,
        drop_remainder: bool,
        deterministic: bool,
        ops: OpChain,
    ) -> BoxIter {
        let rows = Schema::dynamic();
        fused_rows(n, size, drop_remainder, deterministic, ops, rows, stats())
    }

    fn fused_rows(
        n: i64,
        size: usize,
        drop_remainder: bool,
        deterministic: bool,
        ops: OpChain,
        rows: Schema,
        batch_stats: Arc<StageStats>,
    ) -> BoxIter {
        let config = three_workers(deterministic, None);
        let batch = BatchConfig {
            size,
            drop_remainder,
            rows,
        };
        let it = ParallelMapBatch::spawn(ints(0..n), ops, config, batch, stats(), batch_stats);
        Box::new(it.unwrap())
    }

    /// Three workers, epoch 3, its batches in flight in `ram` where given.
    fn three_workers(deterministic: bool, ram: Option<Arc<RamBudget>>) -> ParallelMapConfig {
        ParallelMapConfig {
            epoch: 3,
            workers: 3,
            buffer: 6,
            deterministic,
            policy: ErrorPolicy::Raise,
            first_index: 0,
            first_skipped: 0,
            seeds: Arc::default(),
            positions: Default::default(),
            knob: None,
            ram,
        }
    }

    /// `map` then `batch`, one element at a time.
    fn reference(n: i64, size: usize, drop_remainder: bool) -> BoxIter {
        let rows = Schema::dynamic();
        sequential(n, size, drop_remainder, chain(None, None), rows, stats())
    }

    fn sequential(
        n: i64,
        size: usize,
        drop_remainder: bool,
        ops: OpChain,
        rows: Schema,
        batch_stats: Arc<StageStats>,
    ) -> BoxIter {
        let map = MapIter::new(
            ints(0..n),
            ops,
            ErrorPolicy::Raise,
            stats(),
            3,
            Arc::default(),
        );
        let map = crate::stats::Metered::wrap(Box::new(map), stats());
        Box::new(BatchIter::new(map, size, drop_remainder, rows, batch_stats))
    }

    /// Each batch as (v values, v shape, s values).
    fn batches(mut it: BoxIter) -> Vec<(Vec<i64>, Vec<usize>, Vec<String>)> {
        let mut out = Vec::new();
        while let Some(b) = it.next().unwrap() {
            let s = b.tensors[1].bytes_data().unwrap();
            out.push((
                b.tensors[0].typed::<i64>().unwrap().to_vec(),
                b.tensors[0].shape().to_vec(),
                s.values
                    .iter()
                    .map(|v| String::from_utf8(v.to_vec()).unwrap())
                    .collect(),
            ));
        }
        out
    }

    #[test]
    fn equals_map_then_batch() {
        for (n, size, drop) in [
            (100, 8, false),
            (100, 8, true),
            (96, 8, false),
            (5, 8, false),
        ] {
            let want = batches(reference(n, size, drop));
            assert_eq!(
                batches(fused(n, size, drop, true)),
                want,
                "n={n} size={size}"
            );
        }
        assert!(batches(fused(5, 8, true, true)).is_empty());
        assert!(batches(fused(0, 8, false, true)).is_empty());
    }

    /// The knob moved while it runs (workers started and parked): the same batches.
    #[test]
    fn a_knob_moved_while_it_runs_keeps_the_batches() {
        let knob = Arc::new(Knob::new("num_parallel_calls", 1, 6, 1, true));
        let config = ParallelMapConfig {
            epoch: 3,
            workers: 6,
            buffer: 12,
            deterministic: true,
            policy: ErrorPolicy::Raise,
            first_index: 0,
            first_skipped: 0,
            seeds: Arc::default(),
            positions: Default::default(),
            knob: Some(Arc::clone(&knob)),
            ram: None,
        };
        let batch = BatchConfig {
            size: 8,
            drop_remainder: false,
            rows: Schema::dynamic(),
        };
        let ops = chain(None, None);
        let mut it =
            ParallelMapBatch::spawn(ints(0..300), ops, config, batch, stats(), stats()).unwrap();
        let mut got = Vec::new();
        while let Some(e) = it.next().unwrap() {
            got.push(e);
            knob.set([6, 1, 4, 2][got.len() / 5 % 4], "test");
        }
        assert_eq!(it.tuned.as_ref().map(|t| t.started), Some(6));
        let got = batches(crate::exec::VecIter::boxed(
            got.into_iter().map(Ok).collect(),
        ));
        assert_eq!(got, batches(reference(300, 8, false)));
    }

    #[test]
    fn batches_in_flight_wait_for_room_in_the_ram_budget() {
        for (limit, deterministic) in [(1, true), (1, false), (1 << 20, true)] {
            let ram = RamBudget::new(limit, "test");
            let config = three_workers(deterministic, Some(Arc::clone(&ram)));
            let batch = BatchConfig {
                size: 8,
                drop_remainder: false,
                rows: Schema::dynamic(),
            };
            let ops = chain(None, None);
            let it = ParallelMapBatch::spawn(ints(0..200), ops, config, batch, stats(), stats());
            let mut got = batches(Box::new(it.unwrap()));
            let mut want = batches(reference(200, 8, false));
            if !deterministic {
                got.sort();
                want.sort();
            }
            assert_eq!(got, want, "limit {limit}");
            assert!(ram.peak() <= limit);
            assert_eq!(ram.used(), 0);
        }
    }

    #[test]
    fn unordered_gives_the_same_batches_in_some_order() {
        let mut want = batches(reference(100, 8, false));
        let mut got = batches(fused(100, 8, false, false));
        want.sort();
        got.sort();
        assert_eq!(got, want);
    }

    #[test]
    fn an_element_error_fails_its_batch_after_the_earlier_batches() {
        let mut it = fused_with(100, 8, false, true, chain(Some(21), None));
        for _ in 0..2 {
            assert!(it.next().unwrap().is_some());
        }
        let err = it.next().unwrap_err().to_string();
        assert!(err.contains("bad element 21"), "{err}");
        assert!(it.next().unwrap().is_none());
    }

    #[test]
    fn unequal_shapes_are_an_error_naming_the_field() {
        let mut it = fused_with(100, 8, false, true, chain(None, Some(12)));
        assert!(it.next().unwrap().is_some());
        let err = it.next().unwrap_err().to_string();
        assert!(err.contains("field 'v'") && err.contains("[4]"), "{err}");
    }

    /// [`batches`], checking that each batch's dense buffer is its own (so NumPy gets a full
    /// batch writable): no row slot or row tensor outlives the batch's last row.
    fn own_batches(mut it: BoxIter) -> Vec<(Vec<i64>, Vec<usize>, Vec<String>)> {
        let mut all = Vec::new();
        while let Some(b) = it.next().unwrap() {
            let (storage, _) = b.tensors[0].storage().unwrap();
            assert_eq!(
                Arc::strong_count(storage),
                1,
                "batch {} is shared",
                all.len()
            );
            all.push(b);
        }
        batches(crate::exec::VecIter::boxed(
            all.into_iter().map(Ok).collect(),
        ))
    }

    /// A map whose op writes `v` into the batch rows, fused with the batch or one element at
    /// a time; the count of rows it wrote in place, and the batch's counters.
    fn in_place(
        fused: bool,
        n: i64,
        size: usize,
        drop: bool,
        rows: Schema,
    ) -> (BoxIter, Arc<AtomicUsize>, Arc<StageStats>) {
        let row = Row {
            in_place: true,
            ..Row::default()
        };
        in_place_with(row, fused, n, size, drop, rows)
    }

    /// [`in_place`] with `row` as the op.
    fn in_place_with(
        row: Row,
        fused: bool,
        n: i64,
        size: usize,
        drop: bool,
        rows: Schema,
    ) -> (BoxIter, Arc<AtomicUsize>, Arc<StageStats>) {
        let taken = Arc::clone(&row.taken);
        let st = stats();
        let it = if fused {
            fused_rows(n, size, drop, true, chain_of(row), rows, Arc::clone(&st))
        } else {
            sequential(n, size, drop, chain_of(row), rows, Arc::clone(&st))
        };
        (it, taken, st)
    }

    #[test]
    fn ops_write_their_output_into_the_batch_rows() {
        for (n, size, drop) in [
            (100, 8, false),
            (100, 8, true),
            (5, 8, false),
            (0, 8, false),
        ] {
            let want = batches(reference(n, size, drop));
            for fused in [true, false] {
                let (it, taken, st) = in_place(fused, n, size, drop, row_schema(3));
                assert_eq!(own_batches(it), want, "n={n} size={size} fused={fused}");
                // Every element made (those of a dropped remainder too) had its row, and the
                // batch found `v` there: nothing to copy.
                assert_eq!(taken.load(Ordering::Relaxed), n as usize, "fused={fused}");
                let counted = st.snapshot();
                assert_eq!(counted.in_place_bytes, n as u64 * 24, "fused={fused}");
                assert_eq!(counted.copied_bytes, 0, "fused={fused}");
            }
        }
    }

    #[test]
    fn a_schema_unlike_the_elements_only_costs_the_copy() {
        // No slot fits the 3 values made; or the fields come in another order than the
        // schema's, so the first row lays the batch out again and the in-place row is copied.
        let reordered = Schema::new(vec![
            FieldSpec::fixed("s", DType::Bytes, &[]),
            FieldSpec::fixed("v", DType::I64, &[3]),
        ]);
        let want = batches(reference(100, 8, false));
        for (rows, reorders) in [(row_schema(5), false), (reordered, true)] {
            for fused in [true, false] {
                let (it, taken, st) = in_place(fused, 100, 8, false, rows.clone());
                assert_eq!(own_batches(it), want, "{rows:?} fused={fused}");
                let counted = st.snapshot();
                assert!(counted.copied_bytes >= 24, "the first row is copied");
                assert_eq!(counted.copied_bytes + counted.in_place_bytes, 100 * 24);
                let taken = taken.load(Ordering::Relaxed);
                if reorders {
                    // The op finds its slot in every row (the first rows are then copied).
                    assert_eq!(taken, 100, "fused={fused}");
                } else {
                    // The rows laid out by the first element to arrive have slots that fit.
                    assert!(taken < 100, "fused={fused}: {taken}");
                }
            }
        }
    }

    #[test]
    fn unequal_shapes_are_an_error_also_in_a_batch_laid_out_by_the_schema() {
        for fused in [true, false] {
            let row = Row {
                long_at: Some(12),
                in_place: true,
                ..Row::default()
            };
            let (mut it, _, _) = in_place_with(row, fused, 100, 8, false, row_schema(3));
            assert!(it.next().unwrap().is_some());
            let err = it.next().unwrap_err().to_string();
            assert!(err.contains("field 'v'") && err.contains("[4]"), "{err}");
        }
    }

    #[test]
    fn early_drop_joins_threads() {
        for deterministic in [true, false] {
            let mut it = fused(1_000_000, 16, false, deterministic);
            it.next().unwrap().unwrap();
            drop(it);
        }
    }
}
