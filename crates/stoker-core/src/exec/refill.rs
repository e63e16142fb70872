//! Keeps batches whole after an op that drops bad rows of a batch under the `skip` policy (a
//! batched `parse_example`): the batches that come out are those `batch(size, drop_remainder)`
//! would have made had the bad records been skipped before it.
//!
//! A whole batch with nothing carried over passes through untouched, so an undamaged input
//! costs nothing. From the first short batch on, rows are carried over and restacked (a copy)
//! until the input ends; the last rows make a short batch unless `drop_remainder`. Rows from
//! different batches may differ in padded shape (a `VarLenFeature` is padded to the longest
//! row of its batch): numeric fields are then padded again, to the longest of the new batch.

use std::collections::VecDeque;

use crate::element::Element;
use crate::error::{Error, Result};
use crate::exec::padded_batch::{stack_padded, Padding};
use crate::exec::{BoxIter, ElementIter, State};

pub struct Refill {
    input: BoxIter,
    size: usize,
    drop_remainder: bool,
    /// Rows carried over, each an element without the batch dimension.
    carry: VecDeque<Element>,
    ended: bool,
    /// The input batches the carried rows come from: the input's state before each, and its
    /// number of rows; `front_taken` rows of the first were handed out already.
    sources: VecDeque<(Result<State>, usize)>,
    front_taken: usize,
}

const OP: &str = "refill";

impl Refill {
    /// Refills the batches of `input` to `size` rows.
    pub fn new(input: BoxIter, size: usize, drop_remainder: bool) -> Refill {
        Refill {
            input,
            size: size.max(1),
            drop_remainder,
            carry: VecDeque::new(),
            ended: false,
            sources: VecDeque::new(),
            front_taken: 0,
        }
    }

    /// Restored from a state: `input` is at the state saved before the first batch whose
    /// rows were still carried, which is taken again, less the rows handed out.
    pub fn restore(
        input: BoxIter,
        size: usize,
        drop_remainder: bool,
        state: &State,
    ) -> Result<Refill> {
        let mut it = Refill::new(input, size, drop_remainder);
        if state.int(OP, 0)? == 1 {
            let taken = state.int(OP, 1)? as usize;
            if !it.pull()? || it.carry.len() < taken {
                return Err(crate::exec::state::mismatch(OP));
            }
            it.carry.drain(..taken);
            it.front_taken = taken;
        }
        Ok(it)
    }

    /// Takes the next input batch into the carried rows; false at the end.
    fn pull(&mut self) -> Result<bool> {
        let before = self.input.state();
        let Some(batch) = self.input.next()? else {
            self.ended = true;
            return Ok(false);
        };
        self.sources.push_back((before, Refill::rows(&batch)?));
        self.carry_rows(&batch)?;
        Ok(true)
    }

    /// Notes that `n` carried rows were handed out.
    fn handed_out(&mut self, mut n: usize) {
        while n > 0 {
            let Some((_, rows)) = self.sources.front() else {
                break;
            };
            let left = rows - self.front_taken;
            if n >= left {
                self.sources.pop_front();
                self.front_taken = 0;
                n -= left;
            } else {
                self.front_taken += n;
                n = 0;
            }
        }
    }

    /// The number of rows of a batch (its fields' first dimension).
    fn rows(batch: &Element) -> Result<usize> {
        match batch.tensors.first().map(|t| t.shape().first()) {
            Some(Some(&n)) => Ok(n),
            Some(None) => Err(Error::internal(
                "a batch whose fields have no batch dimension",
            )),
            None => Ok(0),
        }
    }

    fn carry_rows(&mut self, batch: &Element) -> Result<()> {
        for i in 0..Refill::rows(batch)? {
            let tensors = batch
                .tensors
                .iter()
                .map(|t| t.row(i))
                .collect::<Result<Vec<_>>>()?;
            self.carry
                .push_back(Element::new(batch.names.clone(), tensors));
        }
        Ok(())
    }

    fn restack(&mut self, n: usize) -> Result<Element> {
        let rows: Vec<Element> = self.carry.drain(..n).collect();
        self.handed_out(n);
        stack_padded(&rows, &Padding::default())
    }
}

impl ElementIter for Refill {
    fn next(&mut self) -> Result<Option<Element>> {
        while !self.ended && self.carry.len() < self.size {
            if self.carry.is_empty() {
                // A whole batch with nothing carried over passes through untouched.
                let before = self.input.state();
                let Some(batch) = self.input.next()? else {
                    self.ended = true;
                    break;
                };
                if Refill::rows(&batch)? == self.size {
                    return Ok(Some(batch));
                }
                self.sources.push_back((before, Refill::rows(&batch)?));
                self.carry_rows(&batch)?;
            } else if !self.pull()? {
                break;
            }
        }
        let n = self.carry.len().min(self.size);
        if n == self.size || (n > 0 && !self.drop_remainder) {
            return self.restack(n).map(Some);
        }
        self.carry.clear();
        self.sources.clear();
        self.front_taken = 0;
        Ok(None)
    }

    fn state(&self) -> Result<State> {
        match self.sources.front() {
            None => Ok(State::new(vec![0, 0], vec![self.input.state()?])),
            Some((before, _)) => {
                let before = before
                    .as_ref()
                    .map_err(|e| crate::exec::state::unsupported(OP, &e.to_string()))?;
                Ok(State::new(
                    vec![1, self.front_taken as u64],
                    vec![before.clone()],
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::element::names;
    use crate::exec::VecIter;
    use crate::tensor::Tensor;

    /// Batches `{"x": [..]}` of the given values.
    fn batches(values: &[&[i64]]) -> BoxIter {
        let n = names(&["x"]);
        VecIter::boxed(
            values
                .iter()
                .map(|v| {
                    let t = Tensor::from_slice(DType::I64, vec![v.len()], v)?;
                    Ok(Element::new(n.clone(), vec![t]))
                })
                .collect(),
        )
    }

    fn drain(mut it: Refill) -> Vec<Vec<i64>> {
        let mut out = Vec::new();
        while let Some(e) = it.next().unwrap() {
            out.push(e.tensors[0].typed::<i64>().unwrap().to_vec());
        }
        out
    }

    #[test]
    fn short_batches_are_refilled_in_order() {
        let input = batches(&[&[0, 1, 2], &[3], &[], &[5, 6, 7], &[8, 9, 10], &[11]]);
        assert_eq!(
            drain(Refill::new(input, 3, true)),
            vec![vec![0, 1, 2], vec![3, 5, 6], vec![7, 8, 9]]
        );
        let input = batches(&[&[0, 1, 2], &[3], &[], &[5, 6, 7], &[8, 9, 10], &[11]]);
        assert_eq!(
            drain(Refill::new(input, 3, false)),
            vec![vec![0, 1, 2], vec![3, 5, 6], vec![7, 8, 9], vec![10, 11]]
        );
    }

    #[test]
    fn whole_batches_pass_through_without_a_copy() {
        let t = Tensor::from_slice(DType::I64, vec![2], &[1i64, 2]).unwrap();
        let ptr = t.data_ptr();
        let input = VecIter::boxed(vec![Ok(Element::new(names(&["x"]), vec![t]))]);
        let mut r = Refill::new(input, 2, true);
        assert_eq!(r.next().unwrap().unwrap().tensors[0].data_ptr(), ptr);
    }
}
