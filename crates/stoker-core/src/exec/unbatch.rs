//! `unbatch()`: each input element split along its first dimension into that many elements
//! (views of its rows, no copy), as `tf.data.Dataset.unbatch` does.

use crate::element::Element;
use crate::error::{Error, Result};
use crate::exec::slices::slice_count_in;
use crate::exec::{BoxIter, ElementIter, State};

const OP: &str = "unbatch";

pub struct UnbatchIter {
    input: BoxIter,
    /// The element being split, its number of rows and the next row.
    current: Option<(Element, usize, usize)>,
    /// Input elements taken so far (for error messages).
    taken: u64,
    /// The input's state before the element being split was taken.
    before_current: Result<State>,
}

impl UnbatchIter {
    pub fn new(input: BoxIter) -> UnbatchIter {
        let before_current = input.state();
        UnbatchIter {
            input,
            current: None,
            taken: 0,
            before_current,
        }
    }

    /// Restored: `input` is at the state saved before the element being split, which is
    /// taken again and split from the saved row on.
    pub fn restore(input: BoxIter, state: &State) -> Result<UnbatchIter> {
        let (taken, row) = (state.int(OP, 0)?, state.int(OP, 1)?);
        let mut it = UnbatchIter::new(input);
        it.taken = taken;
        if row > 0 {
            it.pull()?;
            match it.current.as_mut() {
                Some((_, rows, next)) if row <= *rows as u64 => *next = row as usize,
                _ => return Err(crate::exec::state::mismatch(OP)),
            }
        }
        Ok(it)
    }

    /// Takes the next input element to split; false at the end.
    fn pull(&mut self) -> Result<bool> {
        let before = self.input.state();
        let Some(element) = self.input.next()? else {
            return Ok(false);
        };
        let index = self.taken;
        self.taken += 1;
        let rows = slice_count_in(OP, &element.names, &element.tensors)
            .map_err(|e| Error::invalid(OP, format!("input element {index}: {e}")))?;
        self.current = Some((element, rows, 0));
        self.before_current = before;
        Ok(true)
    }
}

impl ElementIter for UnbatchIter {
    fn next(&mut self) -> Result<Option<Element>> {
        loop {
            if let Some((element, rows, next)) = self.current.as_mut() {
                if *next < *rows {
                    let i = *next;
                    *next += 1;
                    let tensors = element
                        .tensors
                        .iter()
                        .map(|t| t.row(i))
                        .collect::<Result<Vec<_>>>()?;
                    return Ok(Some(Element::new(element.names.clone(), tensors)));
                }
                self.current = None;
            }
            if !self.pull()? {
                return Ok(None);
            }
        }
    }

    fn state(&self) -> Result<State> {
        // In the middle of an element: the input before it, and the rows handed out.
        match &self.current {
            Some((_, rows, next)) if next < rows => {
                let before = self
                    .before_current
                    .as_ref()
                    .map_err(|e| crate::exec::state::unsupported(OP, &e.to_string()))?;
                let taken = self.taken - 1;
                Ok(State::new(vec![taken, *next as u64], vec![before.clone()]))
            }
            _ => Ok(State::new(vec![self.taken, 0], vec![self.input.state()?])),
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

    fn batch(values: &[i64], labels: &[i64]) -> Result<Element> {
        Ok(Element::new(
            names(&["x", "y"]),
            vec![
                Tensor::from_slice(DType::I64, vec![values.len() / 2, 2], values)?,
                Tensor::from_slice(DType::I64, vec![labels.len()], labels)?,
            ],
        ))
    }

    #[test]
    fn splits_rows_and_skips_empty_batches() {
        let input = VecIter::boxed(vec![
            batch(&[1, 2, 3, 4], &[10, 20]),
            batch(&[], &[]),
            batch(&[5, 6], &[30]),
        ]);
        let mut it = UnbatchIter::new(input);
        let mut rows = Vec::new();
        while let Some(e) = it.next().unwrap() {
            assert_eq!(e.tensors[0].shape(), &[2]);
            assert!(e.tensors[1].shape().is_empty());
            let x = e.tensors[0].typed::<i64>().unwrap().to_vec();
            let y = e.tensors[1].typed::<i64>().unwrap()[0];
            rows.push((x, y));
        }
        assert_eq!(
            rows,
            vec![(vec![1, 2], 10), (vec![3, 4], 20), (vec![5, 6], 30)]
        );
    }

    #[test]
    fn components_of_different_lengths_are_an_error_naming_the_element() {
        let input = VecIter::boxed(vec![batch(&[1, 2], &[10]), batch(&[1, 2], &[10, 20])]);
        let mut it = UnbatchIter::new(input);
        assert!(it.next().unwrap().is_some());
        let err = it.next().unwrap_err().to_string();
        assert!(err.contains("unbatch"), "{err}");
        assert!(err.contains("input element 1"), "{err}");
        assert!(err.contains("different first dimensions"), "{err}");
    }
}
