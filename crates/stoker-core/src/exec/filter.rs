//! `filter(predicate)`: keeps the elements the predicate accepts.

use std::sync::Arc;

use crate::element::Element;
use crate::error::Result;
use crate::exec::{catch_panic, BoxIter, CancelFlag, ElementIter};
use crate::op::{OpCtx, Predicate};
use crate::options::ErrorPolicy;
use crate::stats::StageStats;

pub struct FilterIter {
    input: BoxIter,
    predicate: Arc<dyn Predicate>,
    policy: ErrorPolicy,
    stats: Arc<StageStats>,
    cancel: Option<CancelFlag>,
    next_index: u64,
    /// Bad records dropped before the next element (see [`crate::exec::State::skipped`]).
    skipped: u64,
}

impl FilterIter {
    pub fn new(
        input: BoxIter,
        predicate: Arc<dyn Predicate>,
        policy: ErrorPolicy,
        stats: Arc<StageStats>,
        cancel: Option<CancelFlag>,
    ) -> Self {
        FilterIter {
            input,
            predicate,
            policy,
            stats,
            cancel,
            next_index: 0,
            skipped: 0,
        }
    }

    /// Restored: goes on counting from the bad records its state holds.
    pub fn restore(mut self, state: &crate::exec::State) -> Self {
        self.skipped = state.skipped;
        self
    }
}

impl ElementIter for FilterIter {
    fn state(&self) -> Result<crate::exec::State> {
        Ok(crate::exec::State::over(self.input.state()?).with_skipped(self.skipped))
    }

    fn next(&mut self) -> Result<Option<Element>> {
        while let Some(e) = self.stats.pull(&mut self.input)? {
            if self
                .cancel
                .as_ref()
                .is_some_and(|c| c.load(std::sync::atomic::Ordering::Relaxed))
            {
                return Ok(None);
            }
            let ctx = OpCtx {
                policy: self.policy,
                stats: &self.stats,
                element: self.next_index,
                epoch: 0,
                row: None,
                seeds: crate::seed::Seeds::none(),
                skipped: Default::default(),
            };
            self.next_index += 1;
            let kept = catch_panic(&self.stats.name, || self.predicate.test(&e, &ctx))?;
            self.skipped += ctx.skipped.get();
            if kept {
                return Ok(Some(e));
            }
        }
        Ok(None)
    }
}
