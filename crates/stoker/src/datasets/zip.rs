//! `zip(datasets)`: elements of several datasets side by side, their fields prefixed.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::Schema;
use stoker_core::exec::zip::ZipIter;
use stoker_core::exec::{BoxIter, State};
use stoker_core::stats::{Metered, WaitMeter};
use stoker_core::{Error, Result, StageStats};

use super::common::{input_at, unique};
use crate::build::BuildCtx;
use crate::plan::{iterate_at, DatasetOp, Plan, SpecCtx};
use crate::properties::{Cardinality, Randomness};

#[derive(Clone, Debug)]
pub struct Zip {
    pub inputs: Vec<Plan>,
    pub prefixes: Vec<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// Each dataset as its list of steps.
    datasets: Vec<Vec<serde_json::Value>>,
    #[serde(default)]
    prefixes: Option<Vec<String>>,
}

impl DatasetOp for Zip {
    const KIND: &'static str = "zip";
    const SOURCE: bool = true;
    type Spec = Spec;

    fn inputs(&self) -> Vec<&Plan> {
        self.inputs.iter().collect()
    }

    fn inputs_mut(&mut self) -> Vec<&mut Plan> {
        self.inputs.iter_mut().collect()
    }

    fn schema(&self) -> Result<Schema> {
        if self.inputs.is_empty() || self.inputs.len() != self.prefixes.len() {
            return Err(Error::schema(
                Self::KIND,
                "zip needs at least one dataset, each with a prefix",
            ));
        }
        let mut fields = Vec::new();
        for (p, prefix) in self.inputs.iter().zip(&self.prefixes) {
            if p.schema().dynamic {
                return Ok(Schema::dynamic());
            }
            for f in &p.schema().fields {
                let mut f = f.clone();
                f.name = format!("{prefix}{}", f.name);
                fields.push(f);
            }
        }
        unique(Self::KIND, Schema::new(fields))
    }

    /// The shortest input's.
    fn cardinality(&self) -> Cardinality {
        let all: Vec<Cardinality> = self.inputs.iter().map(|p| p.step().cardinality()).collect();
        let finite = all.iter().filter_map(|c| match c {
            Cardinality::Finite(n) => Some(*n),
            _ => None,
        });
        match finite.min() {
            Some(n) if n == 0 || !all.contains(&Cardinality::Unknown) => Cardinality::Finite(n),
            _ if all.contains(&Cardinality::Unknown) => Cardinality::Unknown,
            _ => Cardinality::Infinite,
        }
    }

    fn randomness(&self) -> Randomness {
        Randomness::Fixed
    }

    fn iterate(
        &self,
        node: &Plan,
        ctx: &BuildCtx,
        stats: Arc<StageStats>,
        at: Option<&State>,
    ) -> Result<BoxIter> {
        let inners = self
            .inputs
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let inner = iterate_at(p, ctx, input_at(at, Self::KIND, i)?)?;
                Ok(WaitMeter::wrap(inner, Arc::clone(&stats)))
            })
            .collect::<Result<Vec<_>>>()?;
        let it = if node.schema().dynamic {
            ZipIter::with_prefixes(inners, self.prefixes.clone())
        } else {
            ZipIter::new(inners, node.schema().names())
        };
        Ok(Metered::wrap(Box::new(it), stats))
    }

    fn to_spec(&self, ctx: &SpecCtx) -> Result<Option<Spec>> {
        Ok(Some(Spec {
            datasets: self
                .inputs
                .iter()
                .map(|p| ctx.steps_of(p))
                .collect::<Result<_>>()?,
            prefixes: Some(self.prefixes.clone()),
        }))
    }

    fn from_spec(s: Spec, _: Option<Plan>, ctx: &SpecCtx) -> Result<Self> {
        let inputs = s
            .datasets
            .iter()
            .map(|steps| ctx.plan_of(steps))
            .collect::<Result<Vec<_>>>()?;
        let prefixes = s
            .prefixes
            .unwrap_or_else(|| (0..inputs.len()).map(|k| format!("{k}/")).collect());
        Ok(Zip { inputs, prefixes })
    }
}
