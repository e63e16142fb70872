//! `shuffle(buffer_size, seed)`: a seeded buffer shuffle with tf.data's semantics — fill a
//! buffer, hand out a uniformly chosen element, refill its place from the input.

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::element::Element;
use crate::error::Result;
use crate::exec::{BoxIter, ElementIter};
use crate::stats::StageStats;

pub struct ShuffleIter {
    input: BoxIter,
    buffer: Vec<Element>,
    capacity: usize,
    rng: StdRng,
    input_done: bool,
    stats: Arc<StageStats>,
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
        }
    }
}

impl ElementIter for ShuffleIter {
    fn next(&mut self) -> Result<Option<Element>> {
        while !self.input_done && self.buffer.len() < self.capacity {
            match self.stats.pull(&mut self.input)? {
                Some(e) => self.buffer.push(e),
                None => self.input_done = true,
            }
        }
        self.stats.sample_buffer(self.buffer.len(), self.capacity);
        if self.buffer.is_empty() {
            return Ok(None);
        }
        let i = self.rng.random_range(0..self.buffer.len());
        Ok(Some(self.buffer.swap_remove(i)))
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
