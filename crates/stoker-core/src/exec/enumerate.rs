//! `enumerate(start)`: prepends an int64 counter field.

use crate::dtype::DType;
use crate::element::{Element, Names, NamesOf};
use crate::error::Result;
use crate::exec::{BoxIter, ElementIter, State};
use crate::tensor::Tensor;

pub struct EnumerateIter {
    input: BoxIter,
    names: Names,
    /// Where the input's fields are known only when its elements come: the counter's name,
    /// then theirs behind a prefix.
    dynamic: Option<NamesOf>,
    next_index: i64,
}

impl EnumerateIter {
    /// `names`: the counter's name followed by the input's field names.
    pub fn new(input: BoxIter, names: Names, start: i64) -> Self {
        EnumerateIter {
            input,
            names,
            dynamic: None,
            next_index: start,
        }
    }

    /// For an input whose fields are known only when its elements come: the counter's
    /// `index_name`, then the element's field names behind `prefix`.
    pub fn with_prefix(mut self, index_name: &str, prefix: &str) -> Self {
        self.dynamic = Some(NamesOf::new(&[index_name], vec![prefix.to_string()]));
        self
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
        let names = match &mut self.dynamic {
            Some(d) => d.of(std::slice::from_ref(&e.names)),
            None => self.names.clone(),
        };
        Ok(Some(Element::new(names, tensors)))
    }
}
