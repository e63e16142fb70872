//! `take(count)`: the first `count` elements.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::Schema;
use stoker_core::exec::take_skip::TakeIter;
use stoker_core::exec::{BoxIter, State};
use stoker_core::stats::{Metered, WaitMeter};
use stoker_core::{Result, StageStats};

use super::common::{input_at, same};
use crate::build::BuildCtx;
use crate::plan::{iterate_at, DatasetOp, Plan, SpecCtx};
use crate::properties::{Cardinality, Randomness};

#[derive(Clone, Debug)]
pub struct Take {
    pub input: Plan,
    pub count: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    count: u64,
}

impl DatasetOp for Take {
    const KIND: &'static str = "take";
    type Spec = Spec;

    one_input!();

    fn shard_move(&self) -> crate::properties::ShardMove {
        crate::properties::ShardMove::Prefix(self.count)
    }

    fn schema(&self) -> Result<Schema> {
        Ok(same(&self.input))
    }

    fn label(&self) -> String {
        format!("take({})", self.count)
    }

    fn cardinality(&self) -> Cardinality {
        match self.input.step().cardinality() {
            Cardinality::Finite(n) => Cardinality::Finite(n.min(self.count)),
            Cardinality::Infinite => Cardinality::Finite(self.count),
            Cardinality::Unknown => Cardinality::Unknown,
        }
    }

    fn randomness(&self) -> Randomness {
        Randomness::Fixed
    }

    fn batch_of(&self) -> Option<(usize, bool)> {
        self.input.step().batch_of()
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
            None => TakeIter::new(inner, self.count),
            Some(s) => TakeIter::restore(inner, s)?,
        };
        Ok(Metered::wrap(Box::new(it), stats))
    }

    fn to_spec(&self, _: &SpecCtx) -> Result<Option<Spec>> {
        Ok(Some(Spec { count: self.count }))
    }

    fn from_spec(s: Spec, input: Option<Plan>, _: &SpecCtx) -> Result<Self> {
        Ok(Take {
            input: super::common::input_of(input)?,
            count: s.count,
        })
    }
}
