//! `assert_cardinality(expected)`: its input's elements unchanged, with the count the user
//! states, checked while they pass (tf.data's `experimental.assert_cardinality`). Code that
//! needs a known length (a `len()`, a rank's share, Keras's steps per epoch) gets it where the
//! plan cannot tell (after a filter, or a Python source), and a wrong statement fails at the
//! element where it shows, not as a silently short or long epoch.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, Schema};
use stoker_core::exec::{BoxIter, ElementIter, State};
use stoker_core::stats::{Metered, WaitMeter};
use stoker_core::{Error, Result, StageStats};

use super::common::{input_at, same};
use crate::build::BuildCtx;
use crate::plan::{iterate_at, DatasetOp, Plan, SpecCtx};
use crate::properties::{Cardinality, Randomness, ShardMove};

#[derive(Clone, Debug)]
pub struct AssertCardinality {
    pub input: Plan,
    pub expected: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    expected_cardinality: u64,
}

impl DatasetOp for AssertCardinality {
    const KIND: &'static str = "assert_cardinality";
    type Spec = Spec;

    one_input!();

    /// Its input's, refused when the plan knows that count to differ.
    fn schema(&self) -> Result<Schema> {
        match self.input.step().cardinality() {
            Cardinality::Finite(n) if n != self.expected => Err(Error::schema(
                Self::KIND,
                format!("expected {} elements, and its input has {n}", self.expected),
            )),
            Cardinality::Infinite => Err(Error::schema(
                Self::KIND,
                format!(
                    "expected {} elements, and its input is endless",
                    self.expected
                ),
            )),
            _ => Ok(same(&self.input)),
        }
    }

    fn label(&self) -> String {
        format!("assert_cardinality({})", self.expected)
    }

    fn cardinality(&self) -> Cardinality {
        Cardinality::Finite(self.expected)
    }

    fn randomness(&self) -> Randomness {
        Randomness::Fixed
    }

    fn per_element(&self) -> bool {
        true
    }

    fn keeps_count(&self) -> bool {
        true
    }

    fn shard_move(&self) -> ShardMove {
        ShardMove::Stops(
            "it counts the elements of the whole stream, which a shard below it would not see"
                .into(),
        )
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
        let seen = at.map(|s| s.int(Self::KIND, 0)).transpose()?.unwrap_or(0);
        let it = CountCheck {
            input: WaitMeter::wrap(inner, Arc::clone(&stats)),
            expected: self.expected,
            seen,
        };
        Ok(Metered::wrap(Box::new(it), stats))
    }

    fn to_spec(&self, _: &SpecCtx) -> Result<Option<Spec>> {
        Ok(Some(Spec {
            expected_cardinality: self.expected,
        }))
    }

    fn from_spec(s: Spec, input: Option<Plan>, _: &SpecCtx) -> Result<Self> {
        Ok(AssertCardinality {
            input: super::common::input_of(input)?,
            expected: s.expected_cardinality,
        })
    }
}

/// Hands out its input's elements, failing at the first one past `expected`, or at the end
/// when fewer came. Its state: the elements handed out, and its input's.
struct CountCheck {
    input: BoxIter,
    expected: u64,
    seen: u64,
}

impl ElementIter for CountCheck {
    fn state(&self) -> Result<State> {
        Ok(State::new(vec![self.seen], vec![self.input.state()?]))
    }

    fn next(&mut self) -> Result<Option<Element>> {
        let next = self.input.next()?;
        let expected = self.expected;
        match next {
            Some(_) if self.seen == expected => Err(Error::invalid(
                AssertCardinality::KIND,
                format!(
                    "the input was expected to contain {expected} elements, and contained at \
                     least {}",
                    expected + 1
                ),
            )),
            Some(e) => {
                self.seen += 1;
                Ok(Some(e))
            }
            None if self.seen < expected => Err(Error::invalid(
                AssertCardinality::KIND,
                format!(
                    "the input was expected to contain {expected} elements, and contained only {}",
                    self.seen
                ),
            )),
            None => Ok(None),
        }
    }
}
