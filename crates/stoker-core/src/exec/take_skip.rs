//! `take(n)` and `skip(n)`.

use crate::element::Element;
use crate::error::Result;
use crate::exec::{BoxIter, ElementIter, State};

pub struct TakeIter {
    input: BoxIter,
    remaining: u64,
}

impl TakeIter {
    pub fn new(input: BoxIter, n: u64) -> Self {
        TakeIter {
            input,
            remaining: n,
        }
    }
}

impl TakeIter {
    /// Restored: `remaining` elements still to take (from the state).
    pub fn restore(input: BoxIter, state: &State) -> Result<Self> {
        Ok(TakeIter {
            input,
            remaining: state.int("take", 0)?,
        })
    }
}

impl ElementIter for TakeIter {
    fn state(&self) -> Result<State> {
        Ok(State::new(vec![self.remaining], vec![self.input.state()?]))
    }

    fn next(&mut self) -> Result<Option<Element>> {
        if self.remaining == 0 {
            return Ok(None);
        }
        let r = self.input.next()?;
        if r.is_some() {
            self.remaining -= 1;
        } else {
            self.remaining = 0;
        }
        Ok(r)
    }
}

pub struct SkipIter {
    input: BoxIter,
    to_skip: u64,
}

impl SkipIter {
    pub fn new(input: BoxIter, n: u64) -> Self {
        SkipIter { input, to_skip: n }
    }
}

impl SkipIter {
    /// Restored: `to_skip` elements still to skip (from the state).
    pub fn restore(input: BoxIter, state: &State) -> Result<Self> {
        Ok(SkipIter {
            input,
            to_skip: state.int("skip", 0)?,
        })
    }
}

impl ElementIter for SkipIter {
    fn state(&self) -> Result<State> {
        Ok(State::new(vec![self.to_skip], vec![self.input.state()?]))
    }

    fn next(&mut self) -> Result<Option<Element>> {
        while self.to_skip > 0 {
            self.to_skip -= 1;
            if self.input.next()?.is_none() {
                self.to_skip = 0;
                return Ok(None);
            }
        }
        self.input.next()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::testutil::*;

    #[test]
    fn edges() {
        assert_eq!(drain(Box::new(TakeIter::new(ints(0..5), 3))), vec![0, 1, 2]);
        assert_eq!(
            drain(Box::new(TakeIter::new(ints(0..5), 0))),
            Vec::<i64>::new()
        );
        assert_eq!(
            drain(Box::new(TakeIter::new(ints(0..5), 9))),
            vec![0, 1, 2, 3, 4]
        );
        assert_eq!(drain(Box::new(SkipIter::new(ints(0..5), 3))), vec![3, 4]);
        assert_eq!(
            drain(Box::new(SkipIter::new(ints(0..5), 0))),
            vec![0, 1, 2, 3, 4]
        );
        assert_eq!(
            drain(Box::new(SkipIter::new(ints(0..5), 9))),
            Vec::<i64>::new()
        );
    }
}
