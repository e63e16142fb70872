//! `interleave(f, cycle_length, block_length, num_parallel_calls)` with tf.data's order:
//! keep `cycle_length` datasets open, take `block_length` elements from each in turn, open
//! the next input element's dataset in a slot when its dataset ends. In parallel mode each
//! open dataset runs ahead on its own thread into a small buffer; the order stays the same.

use std::sync::Arc;

use crate::element::Element;
use crate::error::Result;
use crate::exec::prefetch::Prefetch;
use crate::exec::{BoxIter, ElementIter};
use crate::stats::StageStats;

/// Opens the dataset of one input element (e.g. the records of one file).
pub type OpenFn = Arc<dyn Fn(&Element) -> Result<BoxIter> + Send + Sync>;

pub struct InterleaveConfig {
    pub cycle_length: usize,
    pub block_length: usize,
    /// Run each open dataset on its own thread, handing over chunks of this many elements
    /// (0: no threads, sequential).
    pub prefetch_per_slot: usize,
}

pub struct InterleaveIter {
    input: BoxIter,
    open: OpenFn,
    slots: Vec<Option<BoxIter>>,
    config: InterleaveConfig,
    cycle_index: usize,
    block_index: usize,
    num_open: usize,
    end_of_input: bool,
    stats: Arc<StageStats>,
}

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
            },
            cycle_index: 0,
            block_index: 0,
            num_open: 0,
            end_of_input: false,
            stats,
        }
    }

    fn advance_to_next_in_cycle(&mut self) {
        self.block_index = 0;
        self.cycle_index = (self.cycle_index + 1) % self.config.cycle_length;
    }
}

impl ElementIter for InterleaveIter {
    fn next(&mut self) -> Result<Option<Element>> {
        while !self.end_of_input || self.num_open > 0 {
            if let Some(slot) = self.slots[self.cycle_index].as_mut() {
                if let Some(e) = slot.next()? {
                    self.block_index += 1;
                    if self.block_index == self.config.block_length {
                        self.advance_to_next_in_cycle();
                    }
                    return Ok(Some(e));
                }
                self.slots[self.cycle_index] = None;
                self.num_open -= 1;
                self.advance_to_next_in_cycle();
            } else if !self.end_of_input {
                match self.stats.pull(&mut self.input)? {
                    Some(arg) => {
                        let mut it = (self.open)(&arg)?;
                        if self.config.prefetch_per_slot > 0 {
                            let st = Arc::clone(&self.stats);
                            let chunk = self.config.prefetch_per_slot;
                            let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
                            it = Box::new(Prefetch::spawn_with_stop(it, 4, chunk, st, stop)?);
                        }
                        self.slots[self.cycle_index] = Some(it);
                        self.num_open += 1;
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
        let open: OpenFn = Arc::new(|e: &Element| {
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
}
