//! `filter(predicate)`: keeps the elements for which the predicate holds.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::Schema;
use stoker_core::exec::filter::FilterIter;
use stoker_core::exec::{BoxIter, State};
use stoker_core::op::Predicate;
use stoker_core::stats::Metered;
use stoker_core::{Result, StageStats};

use super::common::{input_at, not_loadable, same};
use crate::build::BuildCtx;
use crate::plan::{iterate_at, DatasetOp, Plan, SpecCtx};
use crate::properties::{Cardinality, Randomness};

#[derive(Clone, Debug)]
pub struct Filter {
    pub input: Plan,
    pub predicate: Arc<dyn Predicate>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    predicate: serde_json::Value,
}

impl DatasetOp for Filter {
    const KIND: &'static str = "filter";
    type Spec = Spec;

    one_input!();

    fn shard_move(&self) -> crate::properties::ShardMove {
        crate::properties::ShardMove::Stops(
            "it keeps a number of elements that is known only once they are made, so the \
             shares below it would differ from those of its output"
                .into(),
        )
    }

    fn schema(&self) -> Result<Schema> {
        Ok(same(&self.input))
    }

    fn label(&self) -> String {
        format!("filter[{}]", self.predicate.name())
    }

    /// Predicates are Python functions, which may draw random numbers.
    fn cardinality(&self) -> Cardinality {
        Cardinality::Unknown
    }

    fn randomness(&self) -> Randomness {
        Randomness::External
    }

    fn transforms(&self) -> bool {
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
        let it = FilterIter::new(
            inner,
            Arc::clone(&self.predicate),
            ctx.options.on_bad_record,
            Arc::clone(&stats),
            Some(Arc::clone(&ctx.cancel)),
        );
        let it = match at {
            Some(at) => it.restore(at),
            None => it,
        };
        Ok(Metered::wrap(Box::new(it), stats))
    }

    fn to_spec(&self, _: &SpecCtx) -> Result<Option<Spec>> {
        Ok(Some(Spec {
            predicate: self.predicate.spec()?,
        }))
    }

    fn from_spec(_: Spec, _: Option<Plan>, _: &SpecCtx) -> Result<Self> {
        Err(not_loadable(
            "filter predicates are Python functions and cannot be loaded from a spec",
        ))
    }
}
