//! `zip(a, b, ...)`: one element from each input, fields concatenated; ends with the shortest.

use crate::element::{Element, Names, NamesOf};
use crate::error::Result;
use crate::exec::{BoxIter, ElementIter, State};

pub struct ZipIter {
    inputs: Vec<BoxIter>,
    names: Names,
    /// Where an input's fields are known only when its elements come: their names behind
    /// each input's prefix.
    dynamic: Option<NamesOf>,
}

impl ZipIter {
    /// `names` are the output field names: the inputs' fields in order, already made unique.
    pub fn new(inputs: Vec<BoxIter>, names: Names) -> Self {
        ZipIter {
            inputs,
            names,
            dynamic: None,
        }
    }

    /// For inputs whose fields are known only when their elements come: each element's field
    /// names are its inputs' behind their `prefixes`.
    pub fn with_prefixes(inputs: Vec<BoxIter>, prefixes: Vec<String>) -> Self {
        ZipIter {
            inputs,
            names: crate::element::names::<&str>(&[]),
            dynamic: Some(NamesOf::new(&[], prefixes)),
        }
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
        let mut parts = Vec::new();
        for input in &mut self.inputs {
            match input.next()? {
                Some(e) => {
                    if self.dynamic.is_some() {
                        parts.push(e.names);
                    }
                    tensors.extend(e.tensors);
                }
                None => return Ok(None),
            }
        }
        let names = match &mut self.dynamic {
            Some(d) => d.of(&parts),
            None => self.names.clone(),
        };
        Ok(Some(Element::new(names, tensors)))
    }
}
