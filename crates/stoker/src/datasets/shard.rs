//! `shard(num_shards, index)`: every `num_shards`-th element, from the `index`-th.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::Schema;
use stoker_core::exec::shard::ShardIter;
use stoker_core::exec::{BoxIter, State};
use stoker_core::stats::{Metered, WaitMeter};
use stoker_core::{Error, Result, StageStats};

use super::{input_at, same, Cardinality, DatasetOp};
use crate::build::{iterate_at, BuildCtx};
use crate::plan::Plan;
use crate::spec::SpecCtx;

#[derive(Clone, Debug)]
pub struct Shard {
    pub input: Plan,
    pub num_shards: u64,
    pub index: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    num_shards: u64,
    index: u64,
}

impl DatasetOp for Shard {
    const KIND: &'static str = "shard";
    type Spec = Spec;

    one_input!();

    fn schema(&self) -> Result<Schema> {
        let (n, i) = (self.num_shards, self.index);
        if n == 0 || i >= n {
            return Err(Error::schema(
                Self::KIND,
                format!("index {i} must be in 0..num_shards ({n})"),
            ));
        }
        Ok(same(&self.input))
    }

    fn label(&self) -> String {
        format!("shard({}, {})", self.num_shards, self.index)
    }

    fn cardinality(&self) -> Cardinality {
        let (n, i) = (self.num_shards.max(1), self.index);
        self.input
            .step()
            .cardinality()
            .map(|m| m / n + u64::from(i < m % n))
    }

    fn deterministic(&self) -> bool {
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
        let inner = iterate_at(&self.input, ctx, input_at(at, Self::KIND, 0)?)?;
        let inner = WaitMeter::wrap(inner, Arc::clone(&stats));
        let it = match at {
            None => ShardIter::new(inner, self.num_shards, self.index),
            Some(s) => ShardIter::restore(inner, self.num_shards, self.index, s)?,
        };
        Ok(Metered::wrap(Box::new(it), stats))
    }

    fn to_spec(&self, _: &SpecCtx) -> Result<Option<Spec>> {
        Ok(Some(Spec {
            num_shards: self.num_shards,
            index: self.index,
        }))
    }

    fn from_spec(s: Spec, input: Option<Plan>, _: &SpecCtx) -> Result<Self> {
        Ok(Shard {
            input: super::input_of(input)?,
            num_shards: s.num_shards,
            index: s.index,
        })
    }
}
