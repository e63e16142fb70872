//! `sample_from_datasets(datasets, weights, seed, stop_on_empty_dataset)`: elements drawn at
//! random from several datasets, each pick choosing dataset `i` with probability
//! `weights[i]` (tf.data's `Dataset.sample_from_datasets`). Also the mixing iterator that
//! `choose_from_datasets` shares, where a dataset of indices picks.
//!
//! The datasets must have the same fields, dtypes and ranks (as for `concatenate`). When a
//! picked dataset has ended: with `stop_on_empty_dataset`, the mix ends; without, the pick is
//! drawn again among the others (tf.data draws again until it picks one that has not ended;
//! a dataset of weight 0 is never picked, so the mix ends when every dataset of positive
//! weight has ended, where tf.data would draw forever).
//!
//! The picks come from a ChaCha generator seeded from `seed` (and the epoch, with
//! `rerandomize_each_iteration`); its state is the number of numbers drawn, so a restore
//! jumps the generator there directly.

use std::sync::Arc;

use rand::rngs::ChaCha12Rng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, Names, Schema};
use stoker_core::exec::shuffle::epoch_seed;
use stoker_core::exec::{BoxIter, ElementIter, State};
use stoker_core::stats::{Metered, WaitMeter};
use stoker_core::{Error, Result, Seed, StageStats};

use super::common::input_at;
use super::concatenate::{field_order, merged_schema, reordered};
use crate::build::BuildCtx;
use crate::plan::{iterate_at, DatasetOp, Plan, SpecCtx};
use crate::properties::{Cardinality, Randomness};

#[derive(Clone, Debug)]
pub struct SampleFromDatasets {
    pub inputs: Vec<Plan>,
    /// Normalised to sum to 1.
    pub weights: Vec<f64>,
    /// The seed given, or a drawn one (see [`stoker_core::seed`]).
    pub seed: Seed,
    pub stop_on_empty_dataset: bool,
    pub rerandomize_each_iteration: bool,
}

impl SampleFromDatasets {
    /// `weights: None` weighs the datasets equally; `seed: None` draws a seed.
    pub fn new(
        inputs: Vec<Plan>,
        weights: Option<Vec<f64>>,
        seed: Option<u64>,
        stop_on_empty_dataset: bool,
        rerandomize_each_iteration: bool,
    ) -> Result<SampleFromDatasets> {
        let n = inputs.len();
        let weights = weights.unwrap_or_else(|| vec![1.0; n]);
        if weights.len() != n {
            return Err(Error::invalid(
                Self::KIND,
                format!("weights: {} weights for {n} datasets", weights.len()),
            ));
        }
        if let Some(w) = weights.iter().find(|w| !w.is_finite() || **w < 0.0) {
            return Err(Error::invalid(
                Self::KIND,
                format!("weights: every weight must be a finite number >= 0, got {w}"),
            ));
        }
        let total: f64 = weights.iter().sum();
        if n > 0 && total <= 0.0 {
            return Err(Error::invalid(
                Self::KIND,
                "weights: at least one weight must be above 0",
            ));
        }
        Ok(SampleFromDatasets {
            inputs,
            weights: weights.iter().map(|w| w / total).collect(),
            seed: Seed::from_option(seed),
            stop_on_empty_dataset,
            rerandomize_each_iteration,
        })
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// Each dataset as its list of steps.
    datasets: Vec<Vec<serde_json::Value>>,
    weights: Vec<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    seed: Option<u64>,
    #[serde(default)]
    stop_on_empty_dataset: bool,
    #[serde(default)]
    rerandomize_each_iteration: bool,
}

/// The schema of elements mixed from `inputs`.
pub(crate) fn mixed_schema(kind: &str, inputs: &[Plan]) -> Result<Schema> {
    let Some(first) = inputs.first() else {
        return Err(Error::schema(kind, "needs at least one dataset"));
    };
    let mut schema = first.schema().clone();
    for p in &inputs[1..] {
        schema = merged_schema(kind, &schema, p.schema())?;
    }
    Ok(schema)
}

/// The cardinality tf.data gives a mix of `inputs` (its `DirectedInterleave`): infinite when
/// one of them is, else unknown (how the picks fall is not known before running).
pub(crate) fn mixed_cardinality(inputs: &[Plan]) -> Cardinality {
    if (inputs.iter()).any(|p| p.step().cardinality() == Cardinality::Infinite) {
        Cardinality::Infinite
    } else {
        Cardinality::Unknown
    }
}

/// Starts `inputs` (at their states in `at`, unless marked ended there), their stages'
/// waits counted in `stats`.
pub(crate) fn start_inputs(
    kind: &str,
    inputs: &[Plan],
    ctx: &BuildCtx,
    stats: &Arc<StageStats>,
    at: Option<&State>,
) -> Result<Vec<Option<BoxIter>>> {
    inputs
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let ended = at.map(|s| s.int(kind, 1 + i)).transpose()? == Some(1);
            if ended {
                return Ok(None);
            }
            let inner = iterate_at(p, ctx, input_at(at, kind, i)?)?;
            Ok(Some(WaitMeter::wrap(inner, Arc::clone(stats))))
        })
        .collect()
}

impl DatasetOp for SampleFromDatasets {
    const KIND: &'static str = "sample_from_datasets";
    const SOURCE: bool = true;
    type Spec = Spec;

    fn inputs(&self) -> Vec<&Plan> {
        self.inputs.iter().collect()
    }

    fn inputs_mut(&mut self) -> Vec<&mut Plan> {
        self.inputs.iter_mut().collect()
    }

    fn schema(&self) -> Result<Schema> {
        mixed_schema(Self::KIND, &self.inputs)
    }

    fn label(&self) -> String {
        format!("sample_from_datasets({})", self.inputs.len())
    }

    /// tf.data's: infinite when a dataset is, else unknown.
    fn cardinality(&self) -> Cardinality {
        mixed_cardinality(&self.inputs)
    }

    fn randomness(&self) -> Randomness {
        Randomness::Seeded
    }

    fn iterate(
        &self,
        node: &Plan,
        ctx: &BuildCtx,
        stats: Arc<StageStats>,
        at: Option<&State>,
    ) -> Result<BoxIter> {
        let seed = epoch_seed(
            ctx.seed(self.seed),
            if self.rerandomize_each_iteration {
                ctx.epoch
            } else {
                0
            },
        );
        let draws = at.map(|s| s.int(Self::KIND, 0)).transpose()?.unwrap_or(0);
        let mut rng = ChaCha12Rng::seed_from_u64(seed);
        // Each draw takes one u64, two of the generator's 32-bit words.
        rng.set_word_pos(u128::from(draws) * 2);
        let inputs = start_inputs(Self::KIND, &self.inputs, ctx, &stats, at)?;
        let picker = Picker::Random {
            cumulative: self
                .weights
                .iter()
                .scan(0.0, |acc, w| {
                    *acc += w;
                    Some(*acc)
                })
                .collect(),
            weights: self.weights.clone(),
            rng: Box::new(rng),
            draws,
        };
        let it = MixIter::new(
            Self::KIND,
            node,
            &self.inputs,
            inputs,
            picker,
            self.stop_on_empty_dataset,
        )
        .restored(at);
        Ok(Metered::wrap(Box::new(it), stats))
    }

    fn seeds(&self) -> Vec<Seed> {
        vec![self.seed]
    }

    fn to_spec(&self, ctx: &SpecCtx) -> Result<Option<Spec>> {
        Ok(Some(Spec {
            datasets: (self.inputs.iter())
                .map(|p| ctx.steps_of(p))
                .collect::<Result<_>>()?,
            weights: self.weights.clone(),
            seed: self.seed.given_value(),
            stop_on_empty_dataset: self.stop_on_empty_dataset,
            rerandomize_each_iteration: self.rerandomize_each_iteration,
        }))
    }

    fn from_spec(s: Spec, _: Option<Plan>, ctx: &SpecCtx) -> Result<Self> {
        let inputs = (s.datasets.iter())
            .map(|steps| ctx.plan_of(steps))
            .collect::<Result<Vec<_>>>()?;
        SampleFromDatasets::new(
            inputs,
            Some(s.weights),
            s.seed,
            s.stop_on_empty_dataset,
            s.rerandomize_each_iteration,
        )
    }
}

/// What picks the dataset of the next element.
pub(crate) enum Picker {
    /// Draws from the weights.
    Random {
        cumulative: Vec<f64>,
        weights: Vec<f64>,
        rng: Box<ChaCha12Rng>,
        /// Numbers drawn so far.
        draws: u64,
    },
    /// Reads the next index from a dataset of int64 scalars.
    Choice(BoxIter),
}

impl Picker {
    /// The next pick, or `None` when the picks have ended (a choice dataset's end, or every
    /// dataset that can be drawn has ended).
    fn next(&mut self, kind: &str, live: &[bool]) -> Result<Option<usize>> {
        match self {
            Picker::Random {
                cumulative,
                weights,
                rng,
                draws,
            } => {
                if !live.iter().zip(weights.iter()).any(|(l, w)| *l && *w > 0.0) {
                    return Ok(None);
                }
                *draws += 1;
                let u = (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
                let i = cumulative.partition_point(|&c| c <= u);
                // Rounding can leave the last cumulative weight a hair under 1: the last
                // dataset of positive weight then.
                Ok(Some(
                    i.min(weights.iter().rposition(|w| *w > 0.0).unwrap_or(0)),
                ))
            }
            Picker::Choice(choices) => {
                if !live.contains(&true) {
                    return Ok(None);
                }
                let Some(e) = choices.next()? else {
                    return Ok(None);
                };
                let value = e
                    .tensors
                    .first()
                    .filter(|t| t.shape().is_empty())
                    .and_then(|t| t.typed::<i64>())
                    .and_then(|v| v.first().copied())
                    .ok_or_else(|| {
                        Error::invalid(kind, "the choice dataset must hand out int64 scalars")
                    })?;
                usize::try_from(value)
                    .ok()
                    .filter(|&i| i < live.len())
                    .map(Some)
                    .ok_or_else(|| {
                        Error::invalid(
                            kind,
                            format!(
                                "the choice dataset picked dataset {value}, but there are {} (0..{})",
                                live.len(),
                                live.len()
                            ),
                        )
                    })
            }
        }
    }

    fn state(&self) -> Result<(u64, Option<State>)> {
        Ok(match self {
            Picker::Random { draws, .. } => (*draws, None),
            Picker::Choice(choices) => (0, Some(choices.state()?)),
        })
    }
}

/// Elements of several datasets in the order a [`Picker`] picks them. Its state: the
/// picker's draws, whether each dataset has ended, each dataset's state (an ended one's is
/// empty), then the choice dataset's.
pub(crate) struct MixIter {
    kind: &'static str,
    inputs: Vec<Option<BoxIter>>,
    /// Which inputs have not ended (what the picker draws among).
    live: Vec<bool>,
    picker: Picker,
    stop_on_empty_dataset: bool,
    names: Names,
    /// Per dataset, where its fields are among the first's order (see `field_order`).
    orders: Vec<Option<Vec<usize>>>,
    ended: bool,
    /// Bad records skipped by the datasets that ended (see [`State::skipped`]).
    closed_skipped: u64,
}

impl MixIter {
    pub(crate) fn new(
        kind: &'static str,
        node: &Plan,
        plans: &[Plan],
        inputs: Vec<Option<BoxIter>>,
        picker: Picker,
        stop_on_empty_dataset: bool,
    ) -> MixIter {
        let names = node.schema().names();
        let orders = if node.schema().dynamic {
            vec![None; plans.len()]
        } else {
            (plans.iter())
                .map(|p| field_order(&names, &p.schema().names()))
                .collect()
        };
        MixIter {
            kind,
            live: inputs.iter().map(Option::is_some).collect(),
            inputs,
            picker,
            stop_on_empty_dataset,
            names,
            orders,
            ended: false,
            closed_skipped: 0,
        }
    }

    /// Goes on from the bad records a saved state counted for the datasets that had ended.
    pub(crate) fn restored(mut self, at: Option<&State>) -> MixIter {
        self.closed_skipped = at.map_or(0, |s| s.skipped);
        self
    }

    fn close(&mut self, i: usize) {
        if let Some(ended) = self.inputs[i].take() {
            // (One that cannot report its state cannot be resumed: nothing to count.)
            self.closed_skipped += stoker_core::exec::skipped_by(&*ended).unwrap_or(0);
        }
    }
}

impl ElementIter for MixIter {
    fn next(&mut self) -> Result<Option<Element>> {
        while !self.ended {
            let Some(i) = self.picker.next(self.kind, &self.live)? else {
                self.ended = true;
                break;
            };
            let Some(input) = self.inputs[i].as_mut() else {
                if self.stop_on_empty_dataset {
                    self.ended = true;
                }
                continue;
            };
            match input.next()? {
                Some(e) => return Ok(Some(reordered(e, &self.names, self.orders[i].as_ref()))),
                None => {
                    self.close(i);
                    self.live[i] = false;
                    if self.stop_on_empty_dataset {
                        self.ended = true;
                    }
                }
            }
        }
        Ok(None)
    }

    fn state(&self) -> Result<State> {
        let (draws, choice) = self.picker.state()?;
        let mut ints = vec![draws];
        ints.extend(
            self.inputs
                .iter()
                .map(|i| u64::from(i.is_none() || self.ended)),
        );
        // Once it ended, the datasets still open count with those that ended.
        let mut skipped = self.closed_skipped;
        if self.ended {
            for it in self.inputs.iter().flatten() {
                skipped += stoker_core::exec::skipped_by(&**it)?;
            }
        }
        let mut children = (self.inputs.iter())
            .map(|i| match i {
                Some(it) if !self.ended => it.state(),
                _ => Ok(State::leaf(Vec::new())),
            })
            .collect::<Result<Vec<_>>>()?;
        children.extend(choice);
        Ok(State::new(ints, children).with_skipped(skipped))
    }
}
