//! `shard(num_shards, index)`: keeps elements `index, index + n, index + 2n, ...`.

use crate::element::Element;
use crate::error::Result;
use crate::exec::{BoxIter, ElementIter, State};

pub struct ShardIter {
    input: BoxIter,
    num_shards: u64,
    index: u64,
    position: u64,
}

impl ShardIter {
    pub fn new(input: BoxIter, num_shards: u64, index: u64) -> Self {
        ShardIter {
            input,
            num_shards,
            index,
            position: 0,
        }
    }
}

impl ShardIter {
    /// Restored at the input position the state holds.
    pub fn restore(input: BoxIter, num_shards: u64, index: u64, state: &State) -> Result<Self> {
        let mut it = ShardIter::new(input, num_shards, index);
        it.position = state.int("shard", 0)?;
        Ok(it)
    }
}

impl ElementIter for ShardIter {
    fn state(&self) -> Result<State> {
        Ok(State::new(vec![self.position], vec![self.input.state()?]))
    }

    fn next(&mut self) -> Result<Option<Element>> {
        while let Some(e) = self.input.next()? {
            let pos = self.position;
            self.position += 1;
            if pos % self.num_shards == self.index {
                return Ok(Some(e));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::testutil::*;

    #[test]
    fn shards_partition_the_input() {
        let mut all = Vec::new();
        for i in 0..3 {
            let got = drain(Box::new(ShardIter::new(ints(0..10), 3, i)));
            assert!(got.iter().all(|v| v % 3 == i as i64));
            all.extend(got);
        }
        all.sort();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
    }
}
