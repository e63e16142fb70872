//! A few elements held in memory, as a dataset: a window of `group_by_window`, handed to the
//! function that reduces it. Not a public operator: it has no spec form.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, Schema};
use stoker_core::exec::{BoxIter, ElementIter, State};
use stoker_core::stats::Metered;
use stoker_core::{Error, Result, StageStats};

use super::common::not_loadable;
use crate::build::BuildCtx;
use crate::plan::{DatasetOp, Plan, SpecCtx};
use crate::properties::{Cardinality, Randomness};

#[derive(Clone, Debug)]
pub struct Elements {
    pub elements: Arc<Vec<Element>>,
    pub schema: Schema,
}

/// Never read: held elements cannot be saved in a spec.
#[derive(Serialize, Deserialize)]
pub struct Spec {}

impl DatasetOp for Elements {
    const KIND: &'static str = "elements";
    const SOURCE: bool = true;
    type Spec = Spec;

    no_inputs!();

    fn schema(&self) -> Result<Schema> {
        Ok(self.schema.clone())
    }

    fn label(&self) -> String {
        format!("elements({})", self.elements.len())
    }

    fn cardinality(&self) -> Cardinality {
        Cardinality::Finite(self.elements.len() as u64)
    }

    fn randomness(&self) -> Randomness {
        Randomness::Fixed
    }

    fn iterate(
        &self,
        _: &Plan,
        _: &BuildCtx,
        stats: Arc<StageStats>,
        at: Option<&State>,
    ) -> Result<BoxIter> {
        let next = at.map(|s| s.int(Self::KIND, 0)).transpose()?.unwrap_or(0);
        let it = ElementsIter {
            elements: Arc::clone(&self.elements),
            next: usize::try_from(next).unwrap_or(usize::MAX),
        };
        Ok(Metered::wrap(Box::new(it), stats))
    }

    fn to_spec(&self, _: &SpecCtx) -> Result<Option<Spec>> {
        Err(Error::Spec(
            "elements held in memory (a window) cannot be saved in a spec".into(),
        ))
    }

    fn from_spec(_: Spec, _: Option<Plan>, _: &SpecCtx) -> Result<Self> {
        Err(not_loadable("its elements live in memory"))
    }
}

struct ElementsIter {
    elements: Arc<Vec<Element>>,
    next: usize,
}

impl ElementIter for ElementsIter {
    fn next(&mut self) -> Result<Option<Element>> {
        let e = self.elements.get(self.next).cloned();
        if e.is_some() {
            self.next += 1;
        }
        Ok(e)
    }

    fn state(&self) -> Result<State> {
        Ok(State::leaf(vec![self.next as u64]))
    }
}
