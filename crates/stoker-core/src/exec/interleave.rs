//! `interleave(f, cycle_length, block_length, num_parallel_calls)` with tf.data's order:
//! keep `cycle_length` datasets open, take `block_length` elements from each in turn, open
//! the next input element's dataset in a slot when its dataset ends. In parallel mode each
//! open dataset runs ahead on its own thread into a small buffer; the order stays the same.

use std::sync::Arc;
use std::time::Instant;

use crate::element::Element;
use crate::error::Result;
use crate::exec::prefetch::Prefetch;
use crate::exec::state::Recount;
use crate::exec::{skipped_by, skipped_by_unsaved, BoxIter, ElementIter, State};
use crate::knob::Knob;
use crate::stats::StageStats;

/// Opens the dataset of one input element (e.g. the records of one file), at a saved state
/// if one is given: `(index, element, state)`, `index` counting the pass's input elements
/// from 0 (for errors and skips to say which one).
pub type OpenFn = Arc<dyn Fn(u64, &Element, Option<&State>) -> Result<BoxIter> + Send + Sync>;

pub struct InterleaveConfig {
    pub cycle_length: usize,
    pub block_length: usize,
    /// Elements each open dataset reads ahead on its own thread; 0 for none.
    pub prefetch_per_slot: usize,
    /// Where it is tuned: how many of the cycle's slots read ahead (the first ones; the
    /// others are read on the consumer's thread). `None`: every slot, where
    /// `prefetch_per_slot` is not 0. The order is the same either way.
    pub reads: Option<Arc<Knob>>,
}

/// An open dataset: its iterator, the index of the input element it was opened from, and
/// whether it reads ahead on a thread of its own.
struct Slot {
    it: BoxIter,
    element: u64,
    ahead: bool,
}

pub struct InterleaveIter {
    input: BoxIter,
    open: OpenFn,
    slots: Vec<Option<Slot>>,
    config: InterleaveConfig,
    cycle_index: usize,
    block_index: usize,
    num_open: usize,
    end_of_input: bool,
    /// Input elements taken so far.
    taken: u64,
    /// Bad records skipped by the datasets that ended (see [`State::skipped`]).
    closed_skipped: u64,
    /// The count of the input and the datasets that ended, from the input's (whose state is
    /// not saved).
    recount: Recount,
    stats: Arc<StageStats>,
}

const OP: &str = "interleave";

impl InterleaveIter {
    pub fn new(
        input: BoxIter,
        open: OpenFn,
        config: InterleaveConfig,
        stats: Arc<StageStats>,
    ) -> Self {
        let cycle = config.cycle_length.max(1);
        if config.prefetch_per_slot > 0 {
            stats.set_workers(cycle);
        }
        InterleaveIter {
            input,
            open,
            slots: (0..cycle).map(|_| None).collect(),
            config: InterleaveConfig {
                cycle_length: cycle,
                block_length: config.block_length.max(1),
                prefetch_per_slot: config.prefetch_per_slot,
                reads: config.reads,
            },
            cycle_index: 0,
            block_index: 0,
            num_open: 0,
            end_of_input: false,
            taken: 0,
            closed_skipped: 0,
            recount: Recount::default(),
            stats,
        }
    }

    /// The cycle length a state was saved with (it fixes the order, so a restore keeps it
    /// whatever the thread budget is now).
    pub fn saved_cycle_length(state: &State) -> Result<usize> {
        Ok(state.int(OP, 0)? as usize)
    }

    /// Restored from a state: `input` is a fresh iterator over the pass's input (at its
    /// start); it is run through the elements taken so far, and the datasets that were open
    /// are opened again from their elements, at their saved states.
    pub fn restore(
        mut input: BoxIter,
        open: OpenFn,
        config: InterleaveConfig,
        stats: Arc<StageStats>,
        state: &State,
    ) -> Result<Self> {
        let cycle = Self::saved_cycle_length(state)?;
        if cycle != config.cycle_length.max(1) || state.inputs.len() != cycle {
            return Err(crate::exec::state::mismatch(OP));
        }
        let taken = state.int(OP, 4)?;
        let open_slots: Vec<(usize, u64, &State)> = state
            .inputs
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match (s.ints.as_slice(), s.inputs.first()) {
                ([element], Some(inner)) => Some((i, *element, inner)),
                _ => None,
            })
            .collect();
        let wanted: Vec<u64> = open_slots.iter().map(|(_, e, _)| *e).collect();
        let elements = crate::exec::replay::replay(&mut input, taken, &wanted)?;
        let mut it = InterleaveIter::new(input, open, config, stats);
        it.cycle_index = state.int(OP, 1)? as usize % cycle;
        it.block_index = state.int(OP, 2)? as usize;
        it.end_of_input = state.int(OP, 3)? != 0;
        it.taken = taken;
        // The saved count holds the input's, which the run above counted again.
        it.recount = Recount::after_restore(state.skipped, skipped_by_unsaved(&*it.input));
        for ((i, element, inner), arg) in open_slots.into_iter().zip(elements) {
            let slot = it.start(&arg, element, i, Some(inner))?;
            it.slots[i] = Some(slot);
            it.num_open += 1;
        }
        Ok(it)
    }

    /// Opens input element `element` (`arg`) in slot `slot`.
    fn start(&self, arg: &Element, element: u64, slot: usize, at: Option<&State>) -> Result<Slot> {
        let it = (self.open)(element, arg, at)?;
        let mut open = Slot {
            it,
            element,
            ahead: false,
        };
        if self.reads_ahead(slot) {
            self.read_ahead(&mut open)?;
        }
        Ok(open)
    }

    /// Whether slot `slot` reads ahead on a thread of its own now.
    fn reads_ahead(&self, slot: usize) -> bool {
        self.config.prefetch_per_slot > 0
            && self.config.reads.as_ref().is_none_or(|k| slot < k.get())
    }

    /// Moves `slot`'s reading onto a thread of its own (its state stays its dataset's).
    fn read_ahead(&self, slot: &mut Slot) -> Result<()> {
        let st = Arc::clone(&self.stats);
        let chunk = self.config.prefetch_per_slot;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let it = std::mem::replace(&mut slot.it, crate::exec::VecIter::boxed(Vec::new()));
        slot.it = Box::new(Prefetch::spawn_with_stop(it, 4, chunk, st, stop)?);
        slot.ahead = true;
        Ok(())
    }

    /// Where the slots reading ahead are tuned: the slots read ahead now.
    fn count_ahead(&self) {
        if self.config.reads.is_some() {
            let n = self.slots.iter().flatten().filter(|s| s.ahead).count();
            self.stats.set_workers(n);
        }
    }

    fn advance_to_next_in_cycle(&mut self) {
        self.block_index = 0;
        self.cycle_index = (self.cycle_index + 1) % self.config.cycle_length;
    }
}

impl ElementIter for InterleaveIter {
    fn state(&self) -> Result<State> {
        let mut inputs = Vec::with_capacity(self.slots.len());
        for slot in &self.slots {
            inputs.push(match slot {
                Some(s) => State::new(vec![s.element], vec![s.it.state()?]),
                None => State::default(),
            });
        }
        let ints = vec![
            self.config.cycle_length as u64,
            self.cycle_index as u64,
            self.block_index as u64,
            u64::from(self.end_of_input),
            self.taken,
        ];
        // The input's own state is not needed: a restore runs it again (see `restore`).
        let skipped = self.closed_skipped + self.recount.of(skipped_by_unsaved(&*self.input));
        Ok(State::new(ints, inputs).with_skipped(skipped))
    }

    fn next(&mut self) -> Result<Option<Element>> {
        while !self.end_of_input || self.num_open > 0 {
            let here = self.cycle_index;
            let inline = self.slots[here].as_ref().is_some_and(|s| !s.ahead);
            if inline && self.reads_ahead(here) {
                // The knob rose: this slot reads ahead from now on. (One that reads ahead
                // keeps its thread until its dataset ends.)
                if let Some(mut open) = self.slots[here].take() {
                    self.read_ahead(&mut open)?;
                    self.slots[here] = Some(open);
                }
                self.count_ahead();
            }
            if let Some(slot) = self.slots[self.cycle_index].as_mut() {
                let t = (!slot.ahead && self.config.reads.is_some()).then(Instant::now);
                let next = slot.it.next()?;
                if let Some(t) = t {
                    // Read on the consumer's thread: it waited for the data as for a slot
                    // reading ahead (the tuner's sign that more should).
                    self.stats.add_starved(t.elapsed());
                }
                if let Some(e) = next {
                    self.block_index += 1;
                    if self.block_index == self.config.block_length {
                        self.advance_to_next_in_cycle();
                    }
                    return Ok(Some(e));
                }
                if let Some(ended) = self.slots[self.cycle_index].take() {
                    // (One that cannot report its state cannot be resumed: nothing to count.)
                    self.closed_skipped += skipped_by(&*ended.it).unwrap_or(0);
                }
                self.num_open -= 1;
                self.count_ahead();
                self.advance_to_next_in_cycle();
            } else if !self.end_of_input {
                match self.stats.pull(&mut self.input)? {
                    Some(arg) => {
                        let slot = self.start(&arg, self.taken, self.cycle_index, None)?;
                        self.taken += 1;
                        self.slots[self.cycle_index] = Some(slot);
                        self.num_open += 1;
                        self.count_ahead();
                    }
                    None => self.end_of_input = true,
                }
            } else {
                self.advance_to_next_in_cycle();
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::testutil::*;

    fn run(cycle: usize, block: usize, prefetch: usize) -> Vec<i64> {
        // Input i opens a dataset of i+1 elements 10*i, 10*i+1, ...
        let open: OpenFn = Arc::new(|_, e: &Element, _: Option<&State>| {
            let i = value(e);
            Ok(ints(10 * i..10 * i + i + 1))
        });
        let it = InterleaveIter::new(
            ints(0..4),
            open,
            InterleaveConfig {
                cycle_length: cycle,
                block_length: block,
                prefetch_per_slot: prefetch,
                reads: None,
            },
            Arc::new(StageStats::new("i", "interleave")),
        );
        drain(Box::new(it))
    }

    #[test]
    fn tf_data_order() {
        // Orders produced by tf.data (2.21) for
        // Dataset.range(4).interleave(lambda i: range(10i, 10i+i+1), cycle_length, block_length):
        // an exhausted slot moves the cycle on before the next input is opened there.
        let want = vec![0, 10, 11, 20, 21, 30, 22, 31, 32, 33];
        assert_eq!(run(2, 1, 0), want);
        assert_eq!(run(2, 1, 2), want);
        // block_length 2
        assert_eq!(run(2, 2, 0), vec![0, 10, 11, 20, 21, 22, 30, 31, 32, 33]);
        // cycle 1 is sequential
        assert_eq!(run(1, 1, 0), vec![0, 10, 11, 20, 21, 22, 30, 31, 32, 33]);
    }

    #[test]
    fn the_order_is_the_cycle_s_while_the_slots_reading_ahead_change() {
        let open: OpenFn = Arc::new(|_, e: &Element, _: Option<&State>| {
            let i = value(e);
            Ok(ints(100 * i..100 * i + 37 + i))
        });
        let config = |reads| InterleaveConfig {
            cycle_length: 4,
            block_length: 3,
            prefetch_per_slot: 8,
            reads,
        };
        let stats = || Arc::new(StageStats::new("i", "interleave"));
        let want = drain(Box::new(InterleaveIter::new(
            ints(0..10),
            Arc::clone(&open),
            config(None),
            stats(),
        )));
        let knob = Arc::new(Knob::new("num_parallel_reads", 1, 4, 1, true));
        let st = stats();
        let mut it = InterleaveIter::new(ints(0..10), open, config(Some(knob.clone())), st.clone());
        let mut got = Vec::new();
        let mut most = 0;
        while let Some(e) = it.next().unwrap() {
            got.push(value(&e));
            knob.set([1, 4, 2, 3][got.len() / 25 % 4], "test");
            most = most.max(st.snapshot().workers);
        }
        assert_eq!(got, want);
        assert!(most >= 3, "at most {most} slots read ahead");
    }
}
