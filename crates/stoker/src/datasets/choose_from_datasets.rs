//! `choose_from_datasets(datasets, choice_dataset, stop_on_empty_dataset)`: the next element
//! of `datasets[i]` for each `i` that `choice_dataset` (int64 scalars) hands out (tf.data's
//! `Dataset.choose_from_datasets`). A choice of a dataset that has ended ends the whole with
//! `stop_on_empty_dataset` (the default, as in tf.data), else is skipped; it ends with the
//! choices, or when every dataset has ended. A choice out of range is an error naming it.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::Schema;
use stoker_core::exec::{BoxIter, State};
use stoker_core::stats::{Metered, WaitMeter};
use stoker_core::{DType, Error, Result, StageStats};

use super::common::input_at;
use super::sample_from_datasets::{mixed_cardinality, mixed_schema, start_inputs, MixIter, Picker};
use crate::build::BuildCtx;
use crate::plan::{iterate_at, DatasetOp, Plan, SpecCtx};
use crate::properties::{Cardinality, Randomness};

#[derive(Clone, Debug)]
pub struct ChooseFromDatasets {
    pub inputs: Vec<Plan>,
    pub choices: Plan,
    pub stop_on_empty_dataset: bool,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// Each dataset as its list of steps.
    datasets: Vec<Vec<serde_json::Value>>,
    /// The dataset of choices, as its list of steps.
    choice_dataset: Vec<serde_json::Value>,
    #[serde(default = "yes")]
    stop_on_empty_dataset: bool,
}

fn yes() -> bool {
    true
}

impl DatasetOp for ChooseFromDatasets {
    const KIND: &'static str = "choose_from_datasets";
    const SOURCE: bool = true;
    type Spec = Spec;

    /// The datasets, then the choices.
    fn inputs(&self) -> Vec<&Plan> {
        self.inputs.iter().chain([&self.choices]).collect()
    }

    fn inputs_mut(&mut self) -> Vec<&mut Plan> {
        self.inputs.iter_mut().chain([&mut self.choices]).collect()
    }

    fn schema(&self) -> Result<Schema> {
        let choices = self.choices.schema();
        if !choices.dynamic {
            let ok = matches!(choices.fields.as_slice(), [f] if f.dtype == DType::I64 && f.shape.is_empty());
            if !ok {
                return Err(Error::schema(
                    Self::KIND,
                    format!(
                        "the choice dataset must hand out int64 scalars, it has {}",
                        choices.describe()
                    ),
                ));
            }
        }
        mixed_schema(Self::KIND, &self.inputs)
    }

    fn label(&self) -> String {
        format!("choose_from_datasets({})", self.inputs.len())
    }

    /// tf.data's: infinite when a dataset is, else unknown.
    fn cardinality(&self) -> Cardinality {
        mixed_cardinality(&self.inputs)
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
        let inputs = start_inputs(Self::KIND, &self.inputs, ctx, &stats, at)?;
        let choices_at = input_at(at, Self::KIND, self.inputs.len())?;
        let choices = WaitMeter::wrap(
            iterate_at(&self.choices, ctx, choices_at)?,
            Arc::clone(&stats),
        );
        let it = MixIter::new(
            Self::KIND,
            node,
            &self.inputs,
            inputs,
            Picker::Choice(choices),
            self.stop_on_empty_dataset,
        )
        .restored(at);
        Ok(Metered::wrap(Box::new(it), stats))
    }

    fn to_spec(&self, ctx: &SpecCtx) -> Result<Option<Spec>> {
        Ok(Some(Spec {
            datasets: (self.inputs.iter())
                .map(|p| ctx.steps_of(p))
                .collect::<Result<_>>()?,
            choice_dataset: ctx.steps_of(&self.choices)?,
            stop_on_empty_dataset: self.stop_on_empty_dataset,
        }))
    }

    fn from_spec(s: Spec, _: Option<Plan>, ctx: &SpecCtx) -> Result<Self> {
        Ok(ChooseFromDatasets {
            inputs: (s.datasets.iter())
                .map(|steps| ctx.plan_of(steps))
                .collect::<Result<Vec<_>>>()?,
            choices: ctx.plan_of(&s.choice_dataset)?,
            stop_on_empty_dataset: s.stop_on_empty_dataset,
        })
    }
}
