//! `range(start, stop, step)`: int64 scalars in field `value`.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::{names, Element, FieldSpec, Schema};
use stoker_core::exec::{BoxIter, State};
use stoker_core::stats::Metered;
use stoker_core::{DType, Error, Result, StageStats, Tensor};

use crate::build::BuildCtx;
use crate::plan::{DatasetOp, Plan, SpecCtx};
use crate::properties::{Cardinality, Randomness};
use crate::random_access::RandomAccess;
use crate::sources::RangeIter;

#[derive(Clone, Debug)]
pub struct Range {
    pub start: i64,
    pub stop: i64,
    pub step: i64,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    #[serde(default)]
    start: i64,
    stop: i64,
    #[serde(default = "one")]
    step_size: i64,
}

fn one() -> i64 {
    1
}

impl DatasetOp for Range {
    const KIND: &'static str = "range";
    const SOURCE: bool = true;
    type Spec = Spec;

    no_inputs!();

    fn schema(&self) -> Result<Schema> {
        if self.step == 0 {
            return Err(Error::schema("range", "step must not be 0"));
        }
        Ok(Schema::new(vec![FieldSpec::fixed(
            "value",
            DType::I64,
            &[],
        )]))
    }

    fn cardinality(&self) -> Cardinality {
        Cardinality::Finite(self.count())
    }

    fn randomness(&self) -> Randomness {
        Randomness::Fixed
    }

    fn iterate(
        &self,
        _: &Plan,
        _: &BuildCtx,
        stats: Arc<StageStats>,
        at: Option<&State>,
    ) -> Result<BoxIter> {
        let it = match at {
            None => RangeIter::new(self.start, self.stop, self.step),
            Some(s) => RangeIter::restore(self.start, self.stop, self.step, s)?,
        };
        Ok(Metered::wrap(Box::new(it), stats))
    }

    fn supports_random_access(&self) -> bool {
        true
    }

    fn random_access(&self, _: &Plan, _: &BuildCtx) -> Result<Option<Box<dyn RandomAccess>>> {
        Ok(Some(Box::new(self.clone())))
    }

    fn to_spec(&self, _: &SpecCtx) -> Result<Option<Spec>> {
        Ok(Some(Spec {
            start: self.start,
            stop: self.stop,
            step_size: self.step,
        }))
    }

    fn from_spec(s: Spec, _: Option<Plan>, _: &SpecCtx) -> Result<Self> {
        Ok(Range {
            start: s.start,
            stop: s.stop,
            step: s.step_size,
        })
    }
}

impl Range {
    fn count(&self) -> u64 {
        let span = if self.step > 0 {
            self.stop.saturating_sub(self.start)
        } else {
            self.start.saturating_sub(self.stop)
        };
        let step = self.step.unsigned_abs();
        (span.max(0) as u64).div_ceil(step.max(1))
    }
}

impl RandomAccess for Range {
    fn count(&self) -> Result<u64> {
        Ok(self.count())
    }

    fn get(&self, positions: &[u64]) -> Result<Vec<Element>> {
        let names = names(&["value"]);
        positions
            .iter()
            .map(|&p| {
                let v = self.start + p as i64 * self.step;
                let t = Tensor::from_slice(DType::I64, vec![], &[v])?;
                Ok(Element::new(names.clone(), vec![t]))
            })
            .collect()
    }

    fn state_at(&self, upto: u64) -> Result<State> {
        Ok(State::leaf(vec![upto.min(self.count())]))
    }
}
