//! `enumerate(start)`: prepends an int64 counter field.

use crate::dtype::DType;
use crate::element::{Element, Names};
use crate::error::Result;
use crate::exec::{BoxIter, ElementIter, State};
use crate::tensor::Tensor;

pub struct EnumerateIter {
    input: BoxIter,
    names: Names,
    next_index: i64,
}

impl EnumerateIter {
    /// `names`: the counter's name followed by the input's field names.
    pub fn new(input: BoxIter, names: Names, start: i64) -> Self {
        EnumerateIter {
            input,
            names,
            next_index: start,
        }
    }
}

impl EnumerateIter {
    /// Restored at the index the state holds.
    pub fn restore(input: BoxIter, names: Names, state: &State) -> Result<Self> {
        Ok(EnumerateIter::new(
            input,
            names,
            state.int("enumerate", 0)? as i64,
        ))
    }
}

impl ElementIter for EnumerateIter {
    fn state(&self) -> Result<State> {
        Ok(State::new(
            vec![self.next_index as u64],
            vec![self.input.state()?],
        ))
    }

    fn next(&mut self) -> Result<Option<Element>> {
        let Some(e) = self.input.next()? else {
            return Ok(None);
        };
        let mut tensors = Vec::with_capacity(e.tensors.len() + 1);
        tensors.push(Tensor::from_slice(DType::I64, vec![], &[self.next_index])?);
        tensors.extend(e.tensors);
        self.next_index += 1;
        Ok(Some(Element::new(self.names.clone(), tensors)))
    }
}
