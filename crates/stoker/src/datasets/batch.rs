//! `batch(batch_size, drop_remainder)`: stacks elements into batches.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::Schema;
use stoker_core::exec::batch::BatchIter;
use stoker_core::exec::{BoxIter, State};
use stoker_core::stats::Metered;
use stoker_core::{Error, Result, StageStats};

use super::{input_at, same, Cardinality, DatasetOp};
use crate::build::{iterate_at, BuildCtx};
use crate::plan::Plan;
use crate::spec::SpecCtx;

#[derive(Clone, Debug)]
pub struct Batch {
    pub input: Plan,
    pub batch_size: usize,
    pub drop_remainder: bool,
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

    fn shard_move(&self) -> super::ShardMove {
        super::ShardMove::Regroups
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

    fn deterministic(&self) -> bool {
        true
    }

    fn threads(&self) -> super::Threads {
        super::Threads::RowsByInputWorkers
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
        let fused = super::map::map_and_batch(&self.input, size, drop, &stats, ctx, at)?;
        if let Some(fused) = fused {
            return Ok(fused);
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
        Ok(Batch {
            input: super::input_of(input)?,
            batch_size: s.batch_size,
            drop_remainder: s.drop_remainder,
        })
    }
}
