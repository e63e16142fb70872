//! `enumerate(start)`: each element with its index in field `index_name`.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::{FieldSpec, Schema};
use stoker_core::exec::enumerate::EnumerateIter;
use stoker_core::exec::{BoxIter, State};
use stoker_core::stats::{Metered, WaitMeter};
use stoker_core::{DType, Result, StageStats};

use super::common::{input_at, unique};
use crate::build::BuildCtx;
use crate::plan::{iterate_at, DatasetOp, Plan, SpecCtx};
use crate::properties::{Cardinality, Randomness};

#[derive(Clone, Debug)]
pub struct Enumerate {
    pub input: Plan,
    pub start: i64,
    pub index_name: String,
    /// Put before the names of the input's fields.
    pub prefix: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    #[serde(default)]
    start: i64,
    #[serde(default = "index")]
    index_name: String,
    #[serde(default)]
    prefix: String,
}

fn index() -> String {
    "index".into()
}

impl DatasetOp for Enumerate {
    const KIND: &'static str = "enumerate";
    type Spec = Spec;

    one_input!();

    fn schema(&self) -> Result<Schema> {
        if self.input.schema().dynamic {
            return Ok(Schema::dynamic());
        }
        let mut fields = vec![FieldSpec::fixed(self.index_name.clone(), DType::I64, &[])];
        for f in &self.input.schema().fields {
            let mut f = f.clone();
            f.name = format!("{}{}", self.prefix, f.name);
            fields.push(f);
        }
        unique(Self::KIND, Schema::new(fields))
    }

    fn cardinality(&self) -> Cardinality {
        self.input.step().cardinality()
    }

    fn randomness(&self) -> Randomness {
        Randomness::Fixed
    }

    fn iterate(
        &self,
        node: &Plan,
        ctx: &BuildCtx,
        stats: Arc<StageStats>,
        at: Option<&State>,
    ) -> Result<BoxIter> {
        let inner = iterate_at(&self.input, ctx, input_at(at, Self::KIND, 0)?)?;
        let inner = WaitMeter::wrap(inner, Arc::clone(&stats));
        let names = node.schema().names();
        let mut it = match at {
            None => EnumerateIter::new(inner, names, self.start),
            Some(s) => EnumerateIter::restore(inner, names, s)?,
        };
        if node.schema().dynamic {
            it = it.with_prefix(&self.index_name, &self.prefix);
        }
        Ok(Metered::wrap(Box::new(it), stats))
    }

    fn to_spec(&self, _: &SpecCtx) -> Result<Option<Spec>> {
        Ok(Some(Spec {
            start: self.start,
            index_name: self.index_name.clone(),
            prefix: self.prefix.clone(),
        }))
    }

    fn from_spec(s: Spec, input: Option<Plan>, _: &SpecCtx) -> Result<Self> {
        Ok(Enumerate {
            input: super::common::input_of(input)?,
            start: s.start,
            index_name: s.index_name,
            prefix: s.prefix,
        })
    }
}
