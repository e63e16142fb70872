//! `batch(batch_size, drop_remainder)`: stacks elements into batches.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::Schema;
use stoker_core::exec::batch::BatchIter;
use stoker_core::exec::{BoxIter, State};
use stoker_core::stats::Metered;
use stoker_core::{Error, Result, StageStats};

use super::common::{input_at, same};
use crate::build::BuildCtx;
use crate::plan::{iterate_at, DatasetOp, Plan, SpecCtx};
use crate::properties::{Cardinality, Randomness};

#[derive(Clone, Debug)]
pub struct Batch {
    pub input: Plan,
    pub batch_size: usize,
    pub drop_remainder: bool,
    /// Set by the planner (`map_and_batch`): the parallel map right before it runs as one
    /// stage with it, its workers writing each element into its batch row.
    pub map_fused: bool,
}

impl Batch {
    pub fn new(input: Plan, batch_size: usize, drop_remainder: bool) -> Batch {
        Batch {
            input,
            batch_size,
            drop_remainder,
            map_fused: false,
        }
    }
}

impl Plan {
    pub fn batch(&self, batch_size: usize, drop_remainder: bool) -> Result<Plan> {
        Plan::new(Batch::new(self.clone(), batch_size, drop_remainder))
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    batch_size: usize,
    #[serde(default)]
    drop_remainder: bool,
}

/// The schema of batches of `batch_size` elements of `element` (a leading dimension, known
/// when every batch is full).
pub(crate) fn batched(
    step: &str,
    mut element: Schema,
    batch_size: usize,
    drop_remainder: bool,
) -> Result<Schema> {
    if batch_size == 0 {
        return Err(Error::schema(step, "batch_size must be at least 1"));
    }
    for f in &mut element.fields {
        f.shape.insert(0, drop_remainder.then_some(batch_size));
    }
    Ok(element)
}

/// How a batch step is labelled in `explain()`.
pub(crate) fn batch_label(kind: &str, batch_size: usize, drop_remainder: bool) -> String {
    let drop = if drop_remainder {
        ", drop_remainder"
    } else {
        ""
    };
    format!("{kind}({batch_size}{drop})")
}

impl DatasetOp for Batch {
    const KIND: &'static str = "batch";
    type Spec = Spec;

    one_input!();

    fn shard_move(&self) -> crate::properties::ShardMove {
        crate::properties::ShardMove::Regroups
    }

    fn schema(&self) -> Result<Schema> {
        batched(
            Self::KIND,
            same(&self.input),
            self.batch_size,
            self.drop_remainder,
        )
    }

    fn label(&self) -> String {
        batch_label(Self::KIND, self.batch_size, self.drop_remainder)
    }

    fn cardinality(&self) -> Cardinality {
        self.input
            .step()
            .cardinality()
            .batched(self.batch_size, self.drop_remainder)
    }

    fn randomness(&self) -> Randomness {
        Randomness::Fixed
    }

    fn threads(&self) -> crate::properties::Threads {
        crate::properties::Threads::RowsByInputWorkers
    }

    fn batch_of(&self) -> Option<(usize, bool)> {
        Some((self.batch_size, self.drop_remainder))
    }

    fn iterate(
        &self,
        _: &Plan,
        ctx: &BuildCtx,
        stats: Arc<StageStats>,
        at: Option<&State>,
    ) -> Result<BoxIter> {
        let (size, drop) = (self.batch_size, self.drop_remainder);
        if self.map_fused {
            return super::map::map_and_batch(&self.input, size, drop, &stats, ctx, at);
        }
        let inner = iterate_at(&self.input, ctx, input_at(at, Self::KIND, 0)?)?;
        let schema = self.input.schema().clone();
        let it = BatchIter::new(inner, size, drop, schema, Arc::clone(&stats));
        Ok(Metered::wrap(Box::new(it), stats))
    }

    fn to_spec(&self, _: &SpecCtx) -> Result<Option<Spec>> {
        Ok(Some(Spec {
            batch_size: self.batch_size,
            drop_remainder: self.drop_remainder,
        }))
    }

    fn from_spec(s: Spec, input: Option<Plan>, _: &SpecCtx) -> Result<Self> {
        Ok(Batch::new(
            super::common::input_of(input)?,
            s.batch_size,
            s.drop_remainder,
        ))
    }
}
