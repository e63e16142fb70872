//! `shard(num_shards, index)`: keeps elements `index, index + n, index + 2n, ...` (of the
//! first `limit` when there is one).

use crate::element::Element;
use crate::error::Result;
use crate::exec::{BoxIter, ElementIter, State};

pub struct ShardIter {
    input: BoxIter,
    num_shards: u64,
    index: u64,
    position: u64,
    limit: Option<u64>,
}

impl ShardIter {
    pub fn new(input: BoxIter, num_shards: u64, index: u64) -> Self {
        ShardIter {
            input,
            num_shards,
            index,
            position: 0,
            limit: None,
        }
    }

    /// Only the input's first `limit` elements are shared out (the rest is not read).
    pub fn with_limit(mut self, limit: Option<u64>) -> Self {
        self.limit = limit;
        self
    }
}

impl ShardIter {
    /// Restored at the input position the state holds.
    pub fn restore(mut self, state: &State) -> Result<Self> {
        self.position = state.int("shard", 0)?;
        Ok(self)
    }
}

impl ElementIter for ShardIter {
    fn state(&self) -> Result<State> {
        Ok(State::new(vec![self.position], vec![self.input.state()?]).sharing())
    }

    fn next(&mut self) -> Result<Option<Element>> {
        while self.limit.is_none_or(|l| self.position < l) {
            let Some(e) = self.input.next()? else {
                break;
            };
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

    #[test]
    fn a_limit_shares_out_only_a_prefix() {
        let got = drain(Box::new(
            ShardIter::new(ints(0..10), 3, 1).with_limit(Some(6)),
        ));
        assert_eq!(got, vec![1, 4]);
    }
}
