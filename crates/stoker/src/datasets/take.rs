//! `take(count)`: the first `count` elements.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::Schema;
use stoker_core::exec::take_skip::TakeIter;
use stoker_core::exec::{BoxIter, State};
use stoker_core::stats::{Metered, WaitMeter};
use stoker_core::{Result, StageStats};

use super::{input_at, same, Cardinality, DatasetOp};
use crate::build::{iterate_at, BuildCtx};
use crate::plan::Plan;
use crate::spec::SpecCtx;

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

    fn shard_move(&self) -> super::ShardMove {
        super::ShardMove::Prefix(self.count)
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

    fn deterministic(&self) -> bool {
        true
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
            input: super::input_of(input)?,
            count: s.count,
        })
    }
}
