//! Sequential `map`: applies a chain of ops in the calling thread.

use std::sync::Arc;

use crate::element::Element;
use crate::error::Result;
use crate::exec::{catch_panic, BoxIter, ElementIter};
use crate::op::{Op, OpCtx};
use crate::options::ErrorPolicy;
use crate::row_slots::RowSlots;
use crate::seed::Seeds;
use crate::stats::StageStats;

/// The ops of one map stage, applied in order.
pub type OpChain = Arc<[Arc<dyn Op>]>;

/// The position a map's ops see for the `k`-th element of its input: `offset + k * stride`.
/// A map whose input a shard was moved below sees its rank's share of the stream; these
/// positions are those the elements had in the whole stream, so that random ops, which draw
/// from the position, give an element the same result whatever the number of ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Positions {
    pub stride: u64,
    pub offset: u64,
}

impl Default for Positions {
    fn default() -> Self {
        Positions {
            stride: 1,
            offset: 0,
        }
    }
}

impl Positions {
    /// The position of input element `k`.
    pub fn at(self, k: u64) -> u64 {
        self.offset.wrapping_add(k.wrapping_mul(self.stride))
    }

    /// These positions for a map whose input is now every `num_shards`-th element of what it
    /// was, from the `index`-th.
    pub fn below_shard(self, num_shards: u64, index: u64) -> Positions {
        Positions {
            stride: self.stride.wrapping_mul(num_shards),
            offset: self.at(index),
        }
    }

    pub fn is_identity(self) -> bool {
        self == Positions::default()
    }
}

/// Applies `ops` to `element`: the element, `None` when an op skipped it, and the bad records
/// the ops dropped (under the skip policy; rows of a batch or the element itself). `row`: the
/// element's batch row, offered to the ops (see [`RowSlots`]).
pub fn apply_chain(
    ops: &[Arc<dyn Op>],
    element: Element,
    policy: ErrorPolicy,
    stats: &StageStats,
    position: (u64, u64),
    row: Option<&RowSlots>,
    seeds: &Seeds,
) -> Result<(Option<Element>, u64)> {
    let (index, epoch) = position;
    let ctx = OpCtx {
        policy,
        stats,
        element: index,
        epoch,
        row,
        seeds,
        skipped: Default::default(),
    };
    let mut e = element;
    for op in ops {
        // The clock is read only while tracing, so that an untraced op costs nothing more.
        let traced = crate::trace::enabled().then(std::time::Instant::now);
        let out = op.apply(e, &ctx);
        if let Some(t) = traced {
            crate::trace::span(op.name(), crate::trace::Category::Op, t, Some(index));
        }
        match out? {
            Some(next) => e = next,
            None => return Ok((None, ctx.skipped.get())),
        }
    }
    Ok((Some(e), ctx.skipped.get()))
}

pub struct MapIter {
    input: BoxIter,
    ops: OpChain,
    policy: ErrorPolicy,
    stats: Arc<StageStats>,
    epoch: u64,
    seeds: Arc<Seeds>,
    next_index: u64,
    positions: Positions,
    /// Bad records dropped before the next element (see [`crate::exec::State::skipped`]).
    skipped: u64,
}

impl MapIter {
    pub fn new(
        input: BoxIter,
        ops: OpChain,
        policy: ErrorPolicy,
        stats: Arc<StageStats>,
        epoch: u64,
        seeds: Arc<Seeds>,
    ) -> Self {
        MapIter {
            input,
            ops,
            policy,
            stats,
            epoch,
            seeds,
            next_index: 0,
            positions: Positions::default(),
            skipped: 0,
        }
    }

    /// The positions its ops see (see [`Positions`]).
    pub fn with_positions(mut self, positions: Positions) -> Self {
        self.positions = positions;
        self
    }
}

impl MapIter {
    fn next_with(&mut self, row: Option<&RowSlots>) -> Result<Option<Element>> {
        loop {
            let Some(e) = self.stats.pull(&mut self.input)? else {
                return Ok(None);
            };
            let position = (self.positions.at(self.next_index), self.epoch);
            self.next_index += 1;
            let (out, skipped) = catch_panic(&self.stats.name, || {
                apply_chain(
                    &self.ops,
                    e,
                    self.policy,
                    &self.stats,
                    position,
                    row,
                    &self.seeds,
                )
            })?;
            self.skipped += skipped;
            if let Some(out) = out {
                return Ok(Some(out));
            }
        }
    }
}

impl MapIter {
    /// Restored: the next element is element `next_index` of the pass (from the state).
    pub fn restore(mut self, state: &crate::exec::State) -> Result<MapIter> {
        self.next_index = state.int("map", 0)?;
        self.skipped = state.skipped;
        Ok(self)
    }
}

impl ElementIter for MapIter {
    fn state(&self) -> Result<crate::exec::State> {
        Ok(
            crate::exec::State::new(vec![self.next_index], vec![self.input.state()?])
                .with_skipped(self.skipped),
        )
    }

    fn next(&mut self) -> Result<Option<Element>> {
        self.next_with(None)
    }

    fn next_into(&mut self, row: &RowSlots) -> Result<Option<Element>> {
        self.next_with(Some(row))
    }
}
