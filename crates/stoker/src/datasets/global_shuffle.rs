//! `global_shuffle(seed, reshuffle_each_iteration)`: every element of the input exactly once
//! per epoch, in a seeded pseudo-random permutation of the whole pass computed position by
//! position ([`IndexShuffle`]), read by random access. Its state is (position, seed).

use std::collections::VecDeque;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, Schema};
use stoker_core::exec::index_shuffle::IndexShuffle;
use stoker_core::exec::shuffle::epoch_seed;
use stoker_core::exec::{BoxIter, ElementIter, State};
use stoker_core::stats::Metered;
use stoker_core::{Error, Result, Seed, StageStats};

use super::common::same;
use crate::build::BuildCtx;
use crate::plan::{DatasetOp, Plan, SpecCtx};
use crate::properties::{Cardinality, Randomness, Share};
use crate::random_access::RandomAccess;

#[derive(Clone, Debug)]
pub struct GlobalShuffle {
    pub input: Plan,
    /// The seed given, or a drawn one (see [`stoker_core::seed`]).
    pub seed: Seed,
    pub reshuffle_each_iteration: bool,
    /// The shard it hands out, where the planner moved one into it: only the share's
    /// positions of the permutation are read (rank `r` of `n` takes positions `r, r + n, ...`,
    /// as `DistributedSampler` does).
    pub share: Option<Share>,
    /// Its input's elements, counted through its random access where the plan does not
    /// know them (TFRecord files: their indexes), once.
    counted: Arc<std::sync::OnceLock<Cardinality>>,
}

impl GlobalShuffle {
    /// `seed: None` draws one.
    pub fn new(input: Plan, seed: Option<u64>, reshuffle_each_iteration: bool) -> GlobalShuffle {
        GlobalShuffle {
            input,
            seed: Seed::from_option(seed),
            reshuffle_each_iteration,
            share: None,
            counted: Arc::default(),
        }
    }

    /// The same, handing out only `share` of its permutation.
    pub fn taking(&self, share: Share) -> GlobalShuffle {
        GlobalShuffle {
            share: Some(share),
            ..self.clone()
        }
    }

    /// The number of elements of its input: as the plan knows it, else counted by random
    /// access (a permutation of the whole pass needs the count anyway).
    fn input_count(&self) -> Cardinality {
        *self
            .counted
            .get_or_init(|| crate::plan::counted(&self.input))
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    seed: Option<u64>,
    #[serde(default = "yes")]
    reshuffle_each_iteration: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    shard: Option<Share>,
}

fn yes() -> bool {
    true
}

/// Elements read at a time (sorted by where they are, for the reads' sake).
const CHUNK: u64 = 256;

impl DatasetOp for GlobalShuffle {
    const KIND: &'static str = "global_shuffle";
    type Spec = Spec;

    one_input!();

    fn shard_move(&self) -> crate::properties::ShardMove {
        match self.share {
            None => crate::properties::ShardMove::TakesIn,
            Some(_) => crate::properties::ShardMove::Stops("it hands out a shard already".into()),
        }
    }

    fn schema(&self) -> Result<Schema> {
        if !self.input.step().supports_random_access() {
            return Err(Error::schema(
                Self::KIND,
                format!(
                    "needs random access to its input, which {} has not: use it on \
                     uncompressed TFRecord files, from_tensor_slices, from_npz, list_files, \
                     image_folder or range, and element-wise maps over them",
                    self.input.label()
                ),
            ));
        }
        Ok(same(&self.input))
    }

    fn label(&self) -> String {
        match &self.share {
            None => Self::KIND.to_string(),
            Some(share) => format!("{} taking {}", Self::KIND, share.label()),
        }
    }

    fn cardinality(&self) -> Cardinality {
        let input = self.input_count();
        match &self.share {
            None => input,
            Some(share) => input.map(|m| share.count(m)),
        }
    }

    fn randomness(&self) -> Randomness {
        Randomness::Seeded
    }

    fn take_in(&self, share: Share) -> Option<Self> {
        Some(self.taking(share))
    }

    fn iterate(
        &self,
        _: &Plan,
        ctx: &BuildCtx,
        stats: Arc<StageStats>,
        at: Option<&State>,
    ) -> Result<BoxIter> {
        // The permutation is over the input's elements in their order on one thread (files
        // one after the other), so that it does not depend on the thread budget.
        let one_thread = BuildCtx {
            order_budget: 1,
            ..ctx.clone()
        };
        let access = self
            .input
            .step()
            .random_access(&self.input, &one_thread)?
            .ok_or_else(|| Error::invalid(Self::KIND, "its input has no random access"))?;
        let epoch = if self.reshuffle_each_iteration {
            ctx.epoch
        } else {
            0
        };
        let (position, seed) = match at {
            Some(s) => (s.int(Self::KIND, 0)?, s.int(Self::KIND, 1)?),
            None => (0, epoch_seed(ctx.seed(self.seed), epoch)),
        };
        // The positions the saved run had read ahead: what they held was counted there.
        let counted = match at {
            Some(s) if s.ints.len() > 2 => s.int(Self::KIND, 2)?,
            _ => position,
        };
        let order = IndexShuffle::new(access.count()?, seed);
        // Losses without a position are the whole source's: of shares that split the work
        // (not equal ranks, which each report their own), one counts them.
        let unplaced = if at.is_none() && self.share.is_none_or(|s| s.equal || s.index == 0) {
            access.count_unplaced_losses()
        } else {
            0
        };
        let len = self.share.map_or(order.len(), |s| s.count(order.len()));
        if position > len {
            return Err(stoker_core::exec::state::mismatch(Self::KIND));
        }
        let it = GlobalShuffleIter {
            access,
            order,
            share: self.share,
            len,
            seed,
            handed_out: position,
            fetched: position,
            counted,
            ready: VecDeque::new(),
            skipped: at.map_or(unplaced, |s| s.skipped),
        };
        Ok(Metered::wrap(Box::new(it), stats))
    }

    fn seeds(&self) -> Vec<Seed> {
        vec![self.seed]
    }

    fn to_spec(&self, _: &SpecCtx) -> Result<Option<Spec>> {
        Ok(Some(Spec {
            seed: self.seed.given_value(),
            reshuffle_each_iteration: self.reshuffle_each_iteration,
            shard: self.share,
        }))
    }

    fn from_spec(s: Spec, input: Option<Plan>, _: &SpecCtx) -> Result<Self> {
        Ok(GlobalShuffle {
            share: s.shard,
            ..GlobalShuffle::new(
                super::common::input_of(input)?,
                s.seed,
                s.reshuffle_each_iteration,
            )
        })
    }
}

struct GlobalShuffleIter {
    access: Box<dyn RandomAccess>,
    order: IndexShuffle,
    /// The shard taken, if any: the positions of the order it reads.
    share: Option<Share>,
    /// Positions handed out in the pass: the order's, or the share's.
    len: u64,
    seed: u64,
    /// Positions of the order passed: handed out, or skipped as bad (the skip policy).
    handed_out: u64,
    /// Positions read so far (`ready` holds those not passed yet).
    fetched: u64,
    /// Positions whose reads were counted in the stats already (read ahead by the run a
    /// restore goes on from): read again without counting.
    counted: u64,
    /// What each position read holds: `None` where its element was bad and skipped (counted
    /// by the stage that found it).
    ready: VecDeque<Option<Element>>,
    /// Bad elements passed over, and losses without a position counted at the pass's start
    /// (see [`State::skipped`]).
    skipped: u64,
}

impl ElementIter for GlobalShuffleIter {
    fn next(&mut self) -> Result<Option<Element>> {
        loop {
            if self.ready.is_empty() {
                if self.fetched == self.len {
                    return Ok(None);
                }
                let mut end = (self.fetched + CHUNK).min(self.len);
                let count = self.fetched >= self.counted;
                if !count {
                    end = end.min(self.counted);
                }
                let wanted: Vec<u64> = (self.fetched..end)
                    .map(|k| self.order.at(self.share.map_or(k, |s| s.position(k))))
                    .collect();
                self.ready.extend(self.access.get_or_skip(&wanted, count)?);
                self.fetched = end;
            }
            let Some(e) = self.ready.pop_front() else {
                continue;
            };
            self.handed_out += 1;
            if e.is_some() {
                return Ok(e);
            }
            self.skipped += 1;
        }
    }

    fn state(&self) -> Result<State> {
        let counted = self.fetched.max(self.counted);
        Ok(State::leaf(vec![self.handed_out, self.seed, counted]).with_skipped(self.skipped))
    }
}
