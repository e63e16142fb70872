//! `skip(count)`: all but the first `count` elements.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::Schema;
use stoker_core::exec::take_skip::SkipIter;
use stoker_core::exec::{BoxIter, State};
use stoker_core::stats::{Metered, WaitMeter};
use stoker_core::{Result, StageStats};

use super::common::{input_at, same};
use crate::build::BuildCtx;
use crate::plan::{iterate_at, DatasetOp, Plan, SpecCtx};
use crate::properties::{Cardinality, Randomness};

#[derive(Clone, Debug)]
pub struct Skip {
    pub input: Plan,
    pub count: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    count: u64,
}

impl Skip {
    /// The input's state past the skipped elements, where it has random access.
    fn skipped_by_access(&self, ctx: &BuildCtx) -> Result<Option<State>> {
        if self.count == 0 || !self.input.step().supports_random_access() {
            return Ok(None);
        }
        let Some(access) = self.input.step().random_access(&self.input, ctx)? else {
            return Ok(None);
        };
        // Bad elements skipped on the way make positions differ from elements counted.
        if access.may_skip() {
            return Ok(None);
        }
        let upto = self.count.min(access.count()?);
        access.state_at(upto).map(Some)
    }
}

impl DatasetOp for Skip {
    const KIND: &'static str = "skip";
    type Spec = Spec;

    one_input!();

    fn schema(&self) -> Result<Schema> {
        Ok(same(&self.input))
    }

    fn label(&self) -> String {
        format!("skip({})", self.count)
    }

    fn cardinality(&self) -> Cardinality {
        self.input
            .step()
            .cardinality()
            .map(|n| n.saturating_sub(self.count))
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
        let it = match at {
            None => match self.skipped_by_access(ctx)? {
                // Where the input has random access, it starts past the skipped elements
                // instead of reading them.
                Some(past) => {
                    let inner = iterate_at(&self.input, ctx, Some(&past))?;
                    SkipIter::new(WaitMeter::wrap(inner, Arc::clone(&stats)), 0)
                }
                None => {
                    let inner = iterate_at(&self.input, ctx, None)?;
                    SkipIter::new(WaitMeter::wrap(inner, Arc::clone(&stats)), self.count)
                }
            },
            Some(s) => {
                let inner = iterate_at(&self.input, ctx, input_at(at, Self::KIND, 0)?)?;
                SkipIter::restore(WaitMeter::wrap(inner, Arc::clone(&stats)), s)?
            }
        };
        Ok(Metered::wrap(Box::new(it), stats))
    }

    fn to_spec(&self, _: &SpecCtx) -> Result<Option<Spec>> {
        Ok(Some(Spec { count: self.count }))
    }

    fn from_spec(s: Spec, input: Option<Plan>, _: &SpecCtx) -> Result<Self> {
        Ok(Skip {
            input: super::common::input_of(input)?,
            count: s.count,
        })
    }
}
