//! `unbatch()`: splits each element along its first dimension, as tf.data does.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::Schema;
use stoker_core::exec::unbatch::UnbatchIter;
use stoker_core::exec::{BoxIter, State};
use stoker_core::stats::{Metered, WaitMeter};
use stoker_core::{Error, Result, StageStats};

use super::common::input_at;
use crate::build::BuildCtx;
use crate::plan::{iterate_at, DatasetOp, Plan, SpecCtx};
use crate::properties::{Cardinality, Randomness};

#[derive(Clone, Debug)]
pub struct Unbatch {
    pub input: Plan,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {}

impl DatasetOp for Unbatch {
    const KIND: &'static str = "unbatch";
    type Spec = Spec;

    one_input!();

    fn schema(&self) -> Result<Schema> {
        let mut schema = self.input.schema().clone();
        for f in &mut schema.fields {
            if f.shape.is_empty() {
                return Err(Error::schema(
                    Self::KIND,
                    format!(
                        "field '{}' is a scalar; unbatch needs a first dimension",
                        f.name
                    ),
                ));
            }
            f.shape.remove(0);
        }
        Ok(schema)
    }

    fn cardinality(&self) -> Cardinality {
        Cardinality::Unknown
    }

    fn randomness(&self) -> Randomness {
        Randomness::Fixed
    }

    fn per_element(&self) -> bool {
        true
    }

    fn iterate(
        &self,
        _: &Plan,
        ctx: &BuildCtx,
        stats: Arc<StageStats>,
        at: Option<&State>,
    ) -> Result<BoxIter> {
        let inner = iterate_at(&self.input, ctx, input_at(at, Self::KIND, 0)?)?;
        let inner = WaitMeter::wrap(inner, Arc::clone(&stats));
        let it = match at {
            None => UnbatchIter::new(inner),
            Some(s) => UnbatchIter::restore(inner, s)?,
        };
        Ok(Metered::wrap(Box::new(it), stats))
    }

    fn to_spec(&self, _: &SpecCtx) -> Result<Option<Spec>> {
        Ok(Some(Spec {}))
    }

    fn from_spec(_: Spec, input: Option<Plan>, _: &SpecCtx) -> Result<Self> {
        Ok(Unbatch {
            input: super::common::input_of(input)?,
        })
    }
}
