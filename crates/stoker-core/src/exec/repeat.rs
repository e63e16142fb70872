//! `repeat(count)`: runs the input again, `count` times or forever.

use crate::element::Element;
use crate::error::Result;
use crate::exec::{BoxIter, ElementIter, MakeIter};

pub struct RepeatIter {
    make: MakeIter,
    current: Option<BoxIter>,
    /// Epochs left to start; `None` for forever.
    remaining: Option<u64>,
    produced_this_epoch: bool,
}

impl RepeatIter {
    pub fn new(make: MakeIter, count: Option<u64>) -> Self {
        RepeatIter {
            make,
            current: None,
            remaining: count,
            produced_this_epoch: false,
        }
    }
}

impl ElementIter for RepeatIter {
    fn next(&mut self) -> Result<Option<Element>> {
        loop {
            if self.current.is_none() {
                match &mut self.remaining {
                    Some(0) => return Ok(None),
                    Some(n) => *n -= 1,
                    None => {}
                }
                self.current = Some((self.make)()?);
                self.produced_this_epoch = false;
            }
            if let Some(cur) = self.current.as_mut() {
                if let Some(e) = cur.next()? {
                    self.produced_this_epoch = true;
                    return Ok(Some(e));
                }
            }
            self.current = None;
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
        let it = RepeatIter::new(Box::new(|| Ok(ints(0..3))), Some(2));
        assert_eq!(drain(Box::new(it)), vec![0, 1, 2, 0, 1, 2]);
        let it = RepeatIter::new(Box::new(|| Ok(ints(0..3))), Some(0));
        assert_eq!(drain(Box::new(it)), Vec::<i64>::new());
        let it = RepeatIter::new(Box::new(|| Ok(ints(0..0))), None);
        assert_eq!(drain(Box::new(it)), Vec::<i64>::new());
        let mut it = RepeatIter::new(Box::new(|| Ok(ints(0..2))), None);
        let got: Vec<i64> = (0..7)
            .map(|_| value(&it.next().unwrap().unwrap()))
            .collect();
        assert_eq!(got, vec![0, 1, 0, 1, 0, 1, 0]);
    }
}
