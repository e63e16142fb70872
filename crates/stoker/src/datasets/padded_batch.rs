//! `padded_batch(batch_size, padded_shapes, padding_values, drop_remainder)`: batches of
//! elements of different shapes, padded to a common one.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::Schema;
use stoker_core::exec::padded_batch::{PadValue, PaddedBatchIter, Padding};
use stoker_core::exec::{BoxIter, State};
use stoker_core::stats::Metered;
use stoker_core::{Error, Result, StageStats};

use super::batch::{batch_label, batched};
use super::common::{input_at, same};
use crate::build::BuildCtx;
use crate::plan::{iterate_at, DatasetOp, Plan, SpecCtx};
use crate::properties::{Cardinality, Randomness};

#[derive(Clone, Debug)]
pub struct PaddedBatch {
    pub input: Plan,
    pub batch_size: usize,
    pub drop_remainder: bool,
    pub padding: Arc<Padding>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    batch_size: usize,
    #[serde(default)]
    drop_remainder: bool,
    #[serde(default)]
    padded_shapes: BTreeMap<String, Vec<Option<usize>>>,
    #[serde(default)]
    padding_values: BTreeMap<String, PadValue>,
    /// The padding value of the fields `padding_values` does not name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    padding_value: Option<PadValue>,
}

impl Plan {
    pub fn padded_batch(
        &self,
        batch_size: usize,
        drop_remainder: bool,
        padding: Padding,
    ) -> Result<Plan> {
        Plan::new(PaddedBatch {
            input: self.clone(),
            batch_size,
            drop_remainder,
            padding: Arc::new(padding),
        })
    }
}

impl DatasetOp for PaddedBatch {
    const KIND: &'static str = "padded_batch";
    type Spec = Spec;

    one_input!();

    fn shard_move(&self) -> crate::properties::ShardMove {
        crate::properties::ShardMove::Regroups
    }

    fn schema(&self) -> Result<Schema> {
        if self.batch_size == 0 {
            return Err(Error::schema(Self::KIND, "batch_size must be at least 1"));
        }
        let mut s = same(&self.input);
        pad_schema(&mut s, &self.padding)?;
        batched(Self::KIND, s, self.batch_size, self.drop_remainder)
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
        let inner = iterate_at(&self.input, ctx, input_at(at, Self::KIND, 0)?)?;
        let it = PaddedBatchIter::new(
            inner,
            self.batch_size,
            self.drop_remainder,
            Arc::clone(&self.padding),
            Arc::clone(&stats),
        );
        Ok(Metered::wrap(Box::new(it), stats))
    }

    fn to_spec(&self, _: &SpecCtx) -> Result<Option<Spec>> {
        Ok(Some(Spec {
            batch_size: self.batch_size,
            drop_remainder: self.drop_remainder,
            padded_shapes: self.padding.shapes.clone(),
            padding_values: self.padding.values.clone(),
            padding_value: self.padding.default.clone(),
        }))
    }

    fn from_spec(s: Spec, input: Option<Plan>, _: &SpecCtx) -> Result<Self> {
        Ok(PaddedBatch {
            input: super::common::input_of(input)?,
            batch_size: s.batch_size,
            drop_remainder: s.drop_remainder,
            padding: Arc::new(Padding {
                shapes: s.padded_shapes,
                values: s.padding_values,
                default: s.padding_value,
            }),
        })
    }
}

/// The schema after `padded_batch`'s padding (before the batch axis): fixed padded sizes
/// replace the fields' sizes.
fn pad_schema(schema: &mut Schema, padding: &Padding) -> Result<()> {
    const STEP: &str = PaddedBatch::KIND;
    for name in padding.shapes.keys().chain(padding.values.keys()) {
        // (Unknown before a Python function has run: checked per batch then.)
        if !schema.dynamic && !schema.fields.iter().any(|f| &f.name == name) {
            return Err(Error::schema(STEP, format!("no field '{name}' to pad")));
        }
    }
    for f in &mut schema.fields {
        let Some(fixed) = padding.shapes.get(&f.name) else {
            continue;
        };
        if !schema.dynamic && fixed.len() != f.shape.len() {
            return Err(Error::schema(
                STEP,
                format!(
                    "field '{}' has rank {} but its padded shape {fixed:?} has rank {}",
                    f.name,
                    f.shape.len(),
                    fixed.len()
                ),
            ));
        }
        for (dim, want) in f.shape.iter_mut().zip(fixed) {
            match (*dim, want) {
                (Some(have), Some(w)) if have > *w => {
                    return Err(Error::schema(
                        STEP,
                        format!(
                            "field '{}' has size {have} where the padded shape asks for {w}",
                            f.name
                        ),
                    ))
                }
                (_, Some(w)) => *dim = Some(*w),
                _ => {}
            }
        }
    }
    Ok(())
}
