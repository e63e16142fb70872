//! `from_tensor_slices`: element i is row i of every column, as views (no copy).

use crate::element::{Element, Names};
use crate::error::{Error, Result};
use crate::exec::ElementIter;
use crate::tensor::Tensor;

pub struct SlicesIter {
    names: Names,
    columns: Vec<Tensor>,
    next_row: usize,
    rows: usize,
}

impl SlicesIter {
    /// Every column must have the same first dimension.
    pub fn new(names: Names, columns: Vec<Tensor>) -> Result<SlicesIter> {
        let rows = slice_count(&names, &columns)?;
        Ok(SlicesIter {
            names,
            columns,
            next_row: 0,
            rows,
        })
    }
}

/// The common first dimension of `columns`.
pub fn slice_count(names: &Names, columns: &[Tensor]) -> Result<usize> {
    slice_count_in("from_tensor_slices", names, columns)
}

/// The common first dimension of `columns`, an error naming `step` when there is none.
pub fn slice_count_in(step: &str, names: &Names, columns: &[Tensor]) -> Result<usize> {
    let mut rows = None;
    for (name, c) in names.iter().zip(columns) {
        let Some(&n) = c.shape().first() else {
            return Err(Error::schema(
                step,
                format!("'{name}' is a scalar; every component needs a first dimension to slice"),
            ));
        };
        match rows {
            None => rows = Some(n),
            Some(r) if r != n => {
                return Err(Error::schema(
                    step,
                    format!("components have different first dimensions: {r} and {n} ('{name}')"),
                ))
            }
            _ => {}
        }
    }
    Ok(rows.unwrap_or(0))
}

impl SlicesIter {
    /// Restored at the row the state holds.
    pub fn restore(mut self, state: &crate::exec::State) -> Result<SlicesIter> {
        let row = state.int("from_tensor_slices", 0)? as usize;
        if row > self.rows {
            return Err(crate::exec::state::mismatch("from_tensor_slices"));
        }
        self.next_row = row;
        Ok(self)
    }
}

impl ElementIter for SlicesIter {
    fn state(&self) -> Result<crate::exec::State> {
        Ok(crate::exec::State::leaf(vec![self.next_row as u64]))
    }

    fn next(&mut self) -> Result<Option<Element>> {
        if self.next_row >= self.rows {
            return Ok(None);
        }
        let i = self.next_row;
        self.next_row += 1;
        let tensors = self
            .columns
            .iter()
            .map(|c| c.row(i))
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(Element::new(self.names.clone(), tensors)))
    }
}
