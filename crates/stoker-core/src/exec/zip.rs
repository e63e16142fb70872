//! `zip(a, b, ...)`: one element from each input, fields concatenated; ends with the shortest.

use crate::element::{Element, Names};
use crate::error::Result;
use crate::exec::{BoxIter, ElementIter, State};

pub struct ZipIter {
    inputs: Vec<BoxIter>,
    names: Names,
}

impl ZipIter {
    /// `names` are the output field names: the inputs' fields in order, already made unique.
    pub fn new(inputs: Vec<BoxIter>, names: Names) -> Self {
        ZipIter { inputs, names }
    }
}

impl ElementIter for ZipIter {
    fn state(&self) -> Result<State> {
        let inputs = self
            .inputs
            .iter()
            .map(|i| i.state())
            .collect::<Result<_>>()?;
        Ok(State::new(Vec::new(), inputs))
    }

    fn next(&mut self) -> Result<Option<Element>> {
        let mut tensors = Vec::with_capacity(self.names.len());
        for input in &mut self.inputs {
            match input.next()? {
                Some(e) => tensors.extend(e.tensors),
                None => return Ok(None),
            }
        }
        Ok(Some(Element::new(self.names.clone(), tensors)))
    }
}
