//! `repeat(count)`: the input `count` times over (for ever when `None`), each pass a fresh
//! iterator over it.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::Schema;
use stoker_core::exec::repeat::{MakePass, RepeatIter};
use stoker_core::exec::{BoxIter, State};
use stoker_core::stats::{Metered, WaitMeter};
use stoker_core::{Result, StageStats};

use super::common::same;
use crate::build::BuildCtx;
use crate::plan::{iterate_at, DatasetOp, Plan, SpecCtx};
use crate::properties::{Cardinality, Randomness};

#[derive(Clone, Debug)]
pub struct Repeat {
    pub input: Plan,
    pub count: Option<u64>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    count: Option<u64>,
}

impl DatasetOp for Repeat {
    const KIND: &'static str = "repeat";
    type Spec = Spec;

    one_input!();

    fn shard_move(&self) -> crate::properties::ShardMove {
        crate::properties::ShardMove::Stops(
            "each pass of its input would be shared out from its own start, not the stream \
             of passes"
                .into(),
        )
    }

    fn schema(&self) -> Result<Schema> {
        Ok(same(&self.input))
    }

    fn label(&self) -> String {
        match self.count {
            Some(c) => format!("repeat({c})"),
            None => "repeat".into(),
        }
    }

    /// A cache after a repeat would hold every pass (or never complete).
    fn cardinality(&self) -> Cardinality {
        match (self.input.step().cardinality(), self.count) {
            (Cardinality::Finite(0), _) => Cardinality::Finite(0),
            (Cardinality::Finite(n), Some(c)) => Cardinality::Finite(n.saturating_mul(c)),
            (Cardinality::Unknown, Some(_)) => Cardinality::Unknown,
            // An input of unknown length repeated forever: infinite, as tf.data counts it
            // (it would be empty only if its input is).
            (Cardinality::Unknown, None) => Cardinality::Infinite,
            (Cardinality::Infinite, _) | (Cardinality::Finite(_), None) => Cardinality::Infinite,
        }
    }

    fn randomness(&self) -> Randomness {
        Randomness::Fixed
    }

    /// Its passes repeat already: a cache belongs below it, over one pass.
    fn cache_after_useful(&self) -> bool {
        false
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
        let (input, parent, st) = (self.input.clone(), ctx.clone(), Arc::clone(&stats));
        // Each pass is built at its own epoch, so that it reshuffles.
        let make: MakePass = Box::new(move |pass, at| {
            let inner = iterate_at(&input, &parent.for_pass(pass), at)?;
            Ok(WaitMeter::wrap(inner, Arc::clone(&st)))
        });
        let it = match at {
            None => RepeatIter::new(make, self.count),
            Some(s) => RepeatIter::restore(make, self.count, s)?,
        };
        Ok(Metered::wrap(Box::new(it), stats))
    }

    fn to_spec(&self, _: &SpecCtx) -> Result<Option<Spec>> {
        Ok(Some(Spec { count: self.count }))
    }

    fn from_spec(s: Spec, input: Option<Plan>, _: &SpecCtx) -> Result<Self> {
        Ok(Repeat {
            input: super::common::input_of(input)?,
            count: s.count,
        })
    }
}
