//! `shuffle(buffer_size, seed)`: a seeded buffer shuffle with tf.data's semantics — fill a
//! buffer, hand out a uniformly chosen element, refill its place from the input.

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::element::Element;
use crate::error::Result;
use crate::exec::{BoxIter, ElementIter, VecIter};
use crate::stats::StageStats;

pub struct ShuffleIter {
    input: BoxIter,
    buffer: Vec<Element>,
    capacity: usize,
    rng: StdRng,
    input_done: bool,
    stats: Arc<StageStats>,
    /// Elements taken from the input, and handed out, this pass.
    pulled: u64,
    handed_out: u64,
    /// The seed of this pass (saved with the state, so that a restore in a process that
    /// drew another seed for the dataset still replays this pass's order).
    seed: u64,
}

impl ShuffleIter {
    /// `seed` fully determines the order for a given input order.
    pub fn new(input: BoxIter, capacity: usize, seed: u64, stats: Arc<StageStats>) -> Self {
        ShuffleIter {
            input,
            buffer: Vec::with_capacity(capacity.min(1 << 16)),
            capacity: capacity.max(1),
            rng: StdRng::seed_from_u64(seed),
            input_done: false,
            stats,
            pulled: 0,
            handed_out: 0,
            seed,
        }
    }

    /// Restored from a state: `input` is a fresh iterator over the pass's input (at its
    /// start). The pass's seed comes from the state. The seeded decisions are replayed over input positions to find which elements
    /// the buffer held, in which order; the input is run through the elements taken so far,
    /// keeping those, so that it ends positioned where the saved one was.
    pub fn restore(
        input: BoxIter,
        capacity: usize,
        stats: Arc<StageStats>,
        state: &crate::exec::State,
    ) -> Result<Self> {
        ShuffleIter::restore_with(capacity, stats, state, |positions, pulled| {
            let mut input = input;
            let buffer = crate::exec::state::replay(&mut input, pulled, positions)?;
            Ok((buffer, input))
        })
    }

    /// The number of input elements taken by the iterator whose state is `state`.
    pub fn taken(state: &crate::exec::State) -> Result<u64> {
        state.int(OP, 0)
    }

    /// Like [`restore`](ShuffleIter::restore), getting the buffer's elements from `load`:
    /// given their input positions (in buffer order) and the number of input elements taken,
    /// it returns those elements and the input positioned after the ones taken (e.g. by
    /// random access, without running the input through them).
    pub fn restore_with(
        capacity: usize,
        stats: Arc<StageStats>,
        state: &crate::exec::State,
        load: impl FnOnce(&[u64], u64) -> Result<(Vec<Element>, BoxIter)>,
    ) -> Result<Self> {
        let pulled = state.int(OP, 0)?;
        let handed_out = state.int(OP, 1)?;
        let input_done = state.int(OP, 2)? != 0;
        let seed = state.int(OP, 3)?;
        let mut it = ShuffleIter::new(VecIter::boxed(Vec::new()), capacity, seed, stats);
        let mut positions: Vec<u64> = Vec::new();
        let mut next = 0u64;
        for _ in 0..handed_out {
            while next < pulled && positions.len() < it.capacity {
                positions.push(next);
                next += 1;
            }
            if positions.is_empty() {
                return Err(crate::exec::state::mismatch(OP));
            }
            let i = it.rng.random_range(0..positions.len());
            positions.swap_remove(i);
        }
        if next != pulled && handed_out > 0 {
            return Err(crate::exec::state::mismatch(OP));
        }
        let (buffer, input) = load(&positions, pulled)?;
        if buffer.len() != positions.len() {
            return Err(crate::exec::state::mismatch(OP));
        }
        it.buffer = buffer;
        it.input = input;
        it.input_done = input_done;
        it.pulled = pulled;
        it.handed_out = handed_out;
        Ok(it)
    }
}

const OP: &str = "shuffle";

impl ElementIter for ShuffleIter {
    fn next(&mut self) -> Result<Option<Element>> {
        while !self.input_done && self.buffer.len() < self.capacity {
            match self.stats.pull(&mut self.input)? {
                Some(e) => {
                    self.buffer.push(e);
                    self.pulled += 1;
                }
                None => self.input_done = true,
            }
        }
        self.stats.sample_buffer(self.buffer.len(), self.capacity);
        if self.buffer.is_empty() {
            return Ok(None);
        }
        let i = self.rng.random_range(0..self.buffer.len());
        self.handed_out += 1;
        Ok(Some(self.buffer.swap_remove(i)))
    }

    fn state(&self) -> Result<crate::exec::State> {
        let done = u64::from(self.input_done);
        Ok(crate::exec::State::leaf(vec![
            self.pulled,
            self.handed_out,
            done,
            self.seed,
        ]))
    }
}

/// The seed of epoch `epoch` for a shuffle seeded with `seed` (SplitMix64 finaliser, so that
/// neighbouring epochs get unrelated orders).
pub fn epoch_seed(seed: u64, epoch: u64) -> u64 {
    let mut z = seed ^ epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::testutil::*;

    fn run(seed: u64, cap: usize) -> Vec<i64> {
        let st = Arc::new(StageStats::new("s", "shuffle"));
        drain(Box::new(ShuffleIter::new(ints(0..100), cap, seed, st)))
    }

    #[test]
    fn same_seed_same_order_and_a_permutation() {
        let a = run(7, 10);
        assert_eq!(a, run(7, 10));
        assert_ne!(a, run(8, 10));
        assert_ne!(a, (0..100).collect::<Vec<_>>());
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn buffer_bounds_displacement() {
        // With a buffer of 10, element i cannot come out before position i - 9.
        let a = run(3, 10);
        for (pos, v) in a.iter().enumerate() {
            assert!(*v as usize <= pos + 9, "{v} at {pos}");
        }
        // Buffer 1 is the identity.
        assert_eq!(run(3, 1), (0..100).collect::<Vec<_>>());
    }
}
