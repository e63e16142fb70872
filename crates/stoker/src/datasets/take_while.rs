//! `take_while(predicate)`: the elements up to the first for which the predicate does not
//! hold (tf.data's `take_while`). It stops pulling its input there, so it ends an endless one.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, Schema};
use stoker_core::exec::{catch_panic, BoxIter, CancelFlag, ElementIter, State};
use stoker_core::op::{OpCtx, Predicate};
use stoker_core::stats::Metered;
use stoker_core::{ErrorPolicy, Result, StageStats};

use super::common::{input_at, not_loadable, same};
use crate::build::BuildCtx;
use crate::plan::{iterate_at, DatasetOp, Plan, SpecCtx};
use crate::properties::{Cardinality, Randomness, ShardMove};

#[derive(Clone, Debug)]
pub struct TakeWhile {
    pub input: Plan,
    pub predicate: Arc<dyn Predicate>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    predicate: serde_json::Value,
}

impl DatasetOp for TakeWhile {
    const KIND: &'static str = "take_while";
    type Spec = Spec;

    one_input!();

    fn schema(&self) -> Result<Schema> {
        Ok(same(&self.input))
    }

    fn label(&self) -> String {
        format!("take_while[{}]", self.predicate.name())
    }

    /// Known only once the predicate has failed.
    fn cardinality(&self) -> Cardinality {
        Cardinality::Unknown
    }

    /// Predicates are Python functions.
    fn randomness(&self) -> Randomness {
        Randomness::External
    }

    fn transforms(&self) -> bool {
        true
    }

    fn shard_move(&self) -> ShardMove {
        ShardMove::Stops(
            "where it stops is known only once the elements are made, so the shares below it \
             would differ from those of its output"
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
        let ended = at.map(|s| s.int(Self::KIND, 0)).transpose()?.unwrap_or(0) == 1;
        let it = WhileIter {
            input: inner,
            predicate: Arc::clone(&self.predicate),
            policy: ctx.options.on_bad_record,
            stats: Arc::clone(&stats),
            cancel: Arc::clone(&ctx.cancel),
            ended,
            skipped: at.map_or(0, |s| s.skipped),
        };
        Ok(Metered::wrap(Box::new(it), stats))
    }

    fn to_spec(&self, _: &SpecCtx) -> Result<Option<Spec>> {
        Ok(Some(Spec {
            predicate: self.predicate.spec()?,
        }))
    }

    fn from_spec(_: Spec, _: Option<Plan>, _: &SpecCtx) -> Result<Self> {
        Err(not_loadable(
            "take_while predicates are Python functions and cannot be loaded from a spec",
        ))
    }
}

/// Hands out its input's elements until the predicate fails on one, then nothing more. An
/// element the predicate could not be tested on, under the skip policy, is skipped (counted)
/// and the elements after it are tested. Its state: whether it ended, and its input's.
struct WhileIter {
    input: BoxIter,
    predicate: Arc<dyn Predicate>,
    policy: ErrorPolicy,
    stats: Arc<StageStats>,
    cancel: CancelFlag,
    ended: bool,
    /// Bad records dropped before the next element (see [`State::skipped`]).
    skipped: u64,
}

impl ElementIter for WhileIter {
    fn state(&self) -> Result<State> {
        Ok(
            State::new(vec![u64::from(self.ended)], vec![self.input.state()?])
                .with_skipped(self.skipped),
        )
    }

    fn next(&mut self) -> Result<Option<Element>> {
        while !self.ended {
            // Skipped elements may follow each other: a Ctrl-C ends the run meanwhile.
            if self.cancel.load(std::sync::atomic::Ordering::Relaxed) {
                return Ok(None);
            }
            let Some(e) = self.stats.pull(&mut self.input)? else {
                return Ok(None);
            };
            let ctx = OpCtx {
                policy: self.policy,
                stats: &self.stats,
                element: 0,
                epoch: 0,
                row: None,
                seeds: stoker_core::seed::Seeds::none(),
                skipped: Default::default(),
            };
            let tested = catch_panic(&self.stats.name, || self.predicate.test_or_skip(&e, &ctx))?;
            self.skipped += ctx.skipped.get();
            match tested {
                Some(true) => return Ok(Some(e)),
                Some(false) => self.ended = true,
                None => {}
            }
        }
        Ok(None)
    }
}
