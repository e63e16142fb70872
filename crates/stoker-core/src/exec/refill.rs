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
use crate::exec::{BoxIter, ElementIter};

pub struct Refill {
    input: BoxIter,
    size: usize,
    drop_remainder: bool,
    /// Rows carried over, each an element without the batch dimension.
    carry: VecDeque<Element>,
    ended: bool,
}

impl Refill {
    /// Refills the batches of `input` to `size` rows.
    pub fn new(input: BoxIter, size: usize, drop_remainder: bool) -> Refill {
        Refill {
            input,
            size: size.max(1),
            drop_remainder,
            carry: VecDeque::new(),
            ended: false,
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
        stack_padded(&rows, &Padding::default())
    }
}

impl ElementIter for Refill {
    fn next(&mut self) -> Result<Option<Element>> {
        while !self.ended && self.carry.len() < self.size {
            let Some(batch) = self.input.next()? else {
                self.ended = true;
                break;
            };
            if self.carry.is_empty() && Refill::rows(&batch)? == self.size {
                return Ok(Some(batch));
            }
            self.carry_rows(&batch)?;
        }
        let n = self.carry.len().min(self.size);
        if n == self.size || (n > 0 && !self.drop_remainder) {
            return self.restack(n).map(Some);
        }
        self.carry.clear();
        Ok(None)
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
