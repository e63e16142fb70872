//! `repeat(count)`: runs the input again, `count` times or forever.

use crate::element::Element;
use crate::error::Result;
use crate::exec::{BoxIter, ElementIter, State};

/// Makes the iterator of pass `pass` over the input, restored at a state if one is given.
pub type MakePass = Box<dyn FnMut(u64, Option<&State>) -> Result<BoxIter> + Send>;

pub struct RepeatIter {
    make: MakePass,
    current: Option<BoxIter>,
    /// Epochs left to start; `None` for forever.
    remaining: Option<u64>,
    produced_this_epoch: bool,
    /// Passes started.
    passes: u64,
    /// Bad records the passes that ended skipped (see [`State::skipped`]).
    skipped: u64,
}

const OP: &str = "repeat";

impl RepeatIter {
    pub fn new(make: MakePass, count: Option<u64>) -> Self {
        RepeatIter {
            make,
            current: None,
            remaining: count,
            produced_this_epoch: false,
            passes: 0,
            skipped: 0,
        }
    }

    /// Restored from a state: the pass it was in, at its input's saved state.
    pub fn restore(make: MakePass, count: Option<u64>, state: &State) -> Result<Self> {
        let mut it = RepeatIter::new(make, count);
        it.passes = state.int(OP, 0)?;
        it.produced_this_epoch = state.int(OP, 1)? != 0;
        it.skipped = state.skipped;
        if let Some(c) = &mut it.remaining {
            *c = c.saturating_sub(it.passes);
        }
        if let Some(inner) = state.inputs.first() {
            let pass = it
                .passes
                .checked_sub(1)
                .ok_or_else(|| crate::exec::state::mismatch(OP))?;
            it.current = Some((it.make)(pass, Some(inner))?);
        }
        Ok(it)
    }
}

impl ElementIter for RepeatIter {
    fn state(&self) -> Result<State> {
        let inputs = match &self.current {
            Some(cur) => vec![cur.state()?],
            None => Vec::new(),
        };
        let produced = u64::from(self.produced_this_epoch);
        Ok(State::new(vec![self.passes, produced], inputs).with_skipped(self.skipped))
    }

    fn next(&mut self) -> Result<Option<Element>> {
        loop {
            if self.current.is_none() {
                match &mut self.remaining {
                    Some(0) => return Ok(None),
                    Some(n) => *n -= 1,
                    None => {}
                }
                self.current = Some((self.make)(self.passes, None)?);
                self.passes += 1;
                self.produced_this_epoch = false;
            }
            if let Some(cur) = self.current.as_mut() {
                if let Some(e) = cur.next()? {
                    self.produced_this_epoch = true;
                    return Ok(Some(e));
                }
            }
            if let Some(ended) = self.current.take() {
                // (A pass that cannot report its state cannot be resumed: nothing to count.)
                self.skipped += crate::exec::skipped_by(&*ended).unwrap_or(0);
            }
            if !self.produced_this_epoch {
                // An empty epoch: repeating it forever would spin without producing anything.
                return Ok(None);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::testutil::*;

    #[test]
    fn counts_and_empty_input() {
        let it = RepeatIter::new(Box::new(|_, _| Ok(ints(0..3))), Some(2));
        assert_eq!(drain(Box::new(it)), vec![0, 1, 2, 0, 1, 2]);
        let it = RepeatIter::new(Box::new(|_, _| Ok(ints(0..3))), Some(0));
        assert_eq!(drain(Box::new(it)), Vec::<i64>::new());
        let it = RepeatIter::new(Box::new(|_, _| Ok(ints(0..0))), None);
        assert_eq!(drain(Box::new(it)), Vec::<i64>::new());
        let mut it = RepeatIter::new(Box::new(|_, _| Ok(ints(0..2))), None);
        let got: Vec<i64> = (0..7)
            .map(|_| value(&it.next().unwrap().unwrap()))
            .collect();
        assert_eq!(got, vec![0, 1, 0, 1, 0, 1, 0]);
    }
}
