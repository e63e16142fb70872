//! `concatenate(dataset)`: the input's elements, then `dataset`'s (tf.data's
//! `Dataset.concatenate`). The two must have the same fields with the same dtypes and ranks; a
//! dimension the two disagree on is unknown in the result.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, FieldSpec, Names, Schema};
use stoker_core::exec::{BoxIter, ElementIter, State};
use stoker_core::stats::{Metered, WaitMeter};
use stoker_core::{Error, Result, StageStats};

use super::common::input_at;
use crate::build::BuildCtx;
use crate::plan::{iterate_at, DatasetOp, Plan, SpecCtx};
use crate::properties::{Cardinality, Randomness};

#[derive(Clone, Debug)]
pub struct Concatenate {
    pub input: Plan,
    /// The dataset whose elements follow.
    pub other: Plan,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// The dataset that follows, as its list of steps.
    dataset: Vec<serde_json::Value>,
}

impl DatasetOp for Concatenate {
    const KIND: &'static str = "concatenate";
    type Spec = Spec;

    fn inputs(&self) -> Vec<&Plan> {
        vec![&self.input, &self.other]
    }

    fn inputs_mut(&mut self) -> Vec<&mut Plan> {
        vec![&mut self.input, &mut self.other]
    }

    fn schema(&self) -> Result<Schema> {
        merged_schema(Self::KIND, self.input.schema(), self.other.schema())
    }

    fn label(&self) -> String {
        "concatenate".into()
    }

    /// As tf.data: infinite if either is, else unknown if either is, else the sum.
    fn cardinality(&self) -> Cardinality {
        use Cardinality::*;
        match (
            self.input.step().cardinality(),
            self.other.step().cardinality(),
        ) {
            (Infinite, _) | (_, Infinite) => Infinite,
            (Unknown, _) | (_, Unknown) => Unknown,
            (Finite(a), Finite(b)) => Finite(a.saturating_add(b)),
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
        let second_started = at.map(|s| s.int(Self::KIND, 0)).transpose()? == Some(1);
        let inner_at = input_at(at, Self::KIND, 0)?;
        // The second dataset's fields in the first's order.
        let names = node.schema().names();
        let order = field_order(&names, &self.other.schema().names());
        let (other, parent, st) = (self.other.clone(), ctx.clone(), Arc::clone(&stats));
        let open: OpenSecond =
            Box::new(move |at| Ok(WaitMeter::wrap(iterate_at(&other, &parent, at)?, st)));
        let it = if second_started {
            ConcatIter {
                current: open(inner_at)?,
                second: None,
                names,
                order,
                first_skipped: at.map_or(0, |s| s.skipped),
            }
        } else {
            let first = iterate_at(&self.input, ctx, inner_at)?;
            ConcatIter {
                current: WaitMeter::wrap(first, Arc::clone(&stats)),
                second: Some(open),
                names,
                order,
                first_skipped: 0,
            }
        };
        Ok(Metered::wrap(Box::new(it), stats))
    }

    fn to_spec(&self, ctx: &SpecCtx) -> Result<Option<Spec>> {
        Ok(Some(Spec {
            dataset: ctx.steps_of(&self.other)?,
        }))
    }

    fn from_spec(s: Spec, input: Option<Plan>, ctx: &SpecCtx) -> Result<Self> {
        Ok(Concatenate {
            input: super::common::input_of(input)?,
            other: ctx.plan_of(&s.dataset)?,
        })
    }
}

/// The schema of elements that come from either of two datasets (concatenated or mixed):
/// the same fields with the same dtypes and ranks; a dimension the two disagree on is
/// unknown. The fields are in the first's order.
pub(crate) fn merged_schema(kind: &str, first: &Schema, second: &Schema) -> Result<Schema> {
    if first.dynamic || second.dynamic {
        return Ok(Schema::dynamic());
    }
    let bad = |why: String| Error::schema(kind, why);
    let mut fields = Vec::with_capacity(first.fields.len());
    for f in &first.fields {
        let g = second.field(&f.name).ok_or_else(|| {
            bad(format!(
                "field '{}' of the first dataset is not in the second ({})",
                f.name,
                second.describe()
            ))
        })?;
        if g.dtype != f.dtype {
            return Err(bad(format!(
                "field '{}' is {} in the first dataset, {} in the second",
                f.name,
                f.dtype.name(),
                g.dtype.name()
            )));
        }
        if g.shape.len() != f.shape.len() {
            return Err(bad(format!(
                "field '{}' has {} dimensions in the first dataset, {} in the second",
                f.name,
                f.shape.len(),
                g.shape.len()
            )));
        }
        let shape = (f.shape.iter().zip(&g.shape))
            .map(|(a, b)| if a == b { *a } else { None })
            .collect();
        fields.push(FieldSpec::new(f.name.clone(), f.dtype, shape));
    }
    if let Some(g) = second
        .fields
        .iter()
        .find(|g| first.field(&g.name).is_none())
    {
        return Err(bad(format!(
            "field '{}' of the second dataset is not in the first ({})",
            g.name,
            first.describe()
        )));
    }
    Ok(Schema::new(fields))
}

/// Where each of `names` is among `theirs`, when the orders differ (`None`: the same order).
pub(crate) fn field_order(names: &Names, theirs: &Names) -> Option<Vec<usize>> {
    (names != theirs)
        .then(|| {
            (names.iter())
                .map(|n| theirs.iter().position(|t| t == n))
                .collect::<Option<Vec<_>>>()
        })
        .flatten()
}

/// `e`'s fields in the order `order` gives (see [`field_order`]), named `names`.
pub(crate) fn reordered(e: Element, names: &Names, order: Option<&Vec<usize>>) -> Element {
    match order {
        Some(order) => Element::new(
            names.clone(),
            order.iter().map(|&k| e.tensors[k].clone()).collect(),
        ),
        None => e,
    }
}

/// Starts the second dataset (at a saved state, for a restore).
type OpenSecond = Box<dyn FnOnce(Option<&State>) -> Result<BoxIter> + Send>;

/// The first dataset's elements, then the second's, which is started only once the first
/// has ended. Its state: whether the second has started, and the current one's state.
struct ConcatIter {
    current: BoxIter,
    /// Until the first dataset has ended.
    second: Option<OpenSecond>,
    names: Names,
    /// Where each field of the first dataset's order is among the second's fields, when
    /// their orders differ.
    order: Option<Vec<usize>>,
    /// Bad records the first dataset skipped, once it ended (see [`State::skipped`]).
    first_skipped: u64,
}

impl ElementIter for ConcatIter {
    fn next(&mut self) -> Result<Option<Element>> {
        loop {
            if let Some(e) = self.current.next()? {
                if self.second.is_some() {
                    return Ok(Some(e));
                }
                return Ok(Some(reordered(e, &self.names, self.order.as_ref())));
            }
            match self.second.take() {
                Some(open) => {
                    // (One that cannot report its state cannot be resumed: nothing to count.)
                    self.first_skipped = stoker_core::exec::skipped_by(&*self.current).unwrap_or(0);
                    self.current = open(None)?;
                }
                None => return Ok(None),
            }
        }
    }

    fn state(&self) -> Result<State> {
        Ok(State::new(
            vec![u64::from(self.second.is_none())],
            vec![self.current.state()?],
        )
        .with_skipped(self.first_skipped))
    }
}
