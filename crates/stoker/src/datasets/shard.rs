//! `shard(num_shards, index)`: every `num_shards`-th element, from the `index`-th.
//!
//! A rank's share of a data-parallel job (`by_rank`, what the framework adapters make) is
//! the same, except that every rank gets as many elements: the input's last
//! `count % num_shards` are dropped. The planner moves a shard towards the source, where the
//! elements the other ranks keep are not made at all (see `planner::shard_down`).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::Schema;
use stoker_core::exec::shard::ShardIter;
use stoker_core::exec::{BoxIter, State};
use stoker_core::stats::{Metered, WaitMeter};
use stoker_core::{Error, Result, StageStats};

use super::{input_at, same, Cardinality, DatasetOp};
use crate::build::{iterate_at, BuildCtx};
use crate::plan::Plan;
use crate::spec::SpecCtx;

#[derive(Clone, Debug)]
pub struct Shard {
    pub input: Plan,
    pub num_shards: u64,
    pub index: u64,
    /// A rank's share: every rank as many elements, and the planner may regroup batches
    /// (each rank batches its own share, as with `DistributedSampler`).
    pub by_rank: bool,
    /// Only the input's first `limit` elements are shared out (set by the planner where it
    /// moved the shard below a `take`).
    pub limit: Option<u64>,
    /// The number of its input's elements, counted once where the plan does not know it.
    counted: Arc<std::sync::OnceLock<Cardinality>>,
    /// Whether the planner put it where it is: its count is then where it is.
    placed: bool,
}

/// The share of one shard, where a step other than `shard` takes it (a `global_shuffle`
/// reads only its positions).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Share {
    pub num_shards: u64,
    pub index: u64,
    /// Every shard as many elements: the last `count % num_shards` are left out.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub equal: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
}

impl Share {
    /// The elements in the share of `count` input elements.
    pub fn count(&self, count: u64) -> u64 {
        let n = self.num_shards.max(1);
        let mut m = self.limit.map_or(count, |l| l.min(count));
        if self.equal {
            m -= m % n;
        }
        m / n + u64::from(self.index < m % n)
    }

    /// The input position of the share's `k`-th element.
    pub fn position(&self, k: u64) -> u64 {
        self.index + k * self.num_shards
    }

    pub fn label(&self) -> String {
        let (n, i) = (self.num_shards, self.index);
        let rank = if self.equal { " by rank" } else { "" };
        match self.limit {
            None => format!("shard({n}, {i}){rank}"),
            Some(l) => format!("shard({n}, {i}){rank} of the first {l}"),
        }
    }
}

impl Shard {
    /// Its share, for a step that takes it.
    pub fn share(&self) -> Share {
        Share {
            num_shards: self.num_shards,
            index: self.index,
            equal: self.by_rank,
            limit: self.limit,
        }
    }

    pub fn new(input: Plan, num_shards: u64, index: u64, by_rank: bool) -> Shard {
        Shard {
            input,
            num_shards,
            index,
            by_rank,
            limit: None,
            counted: Arc::default(),
            placed: false,
        }
    }

    /// The same shard of the first `limit` elements of another input.
    pub fn over(&self, input: Plan, limit: Option<u64>) -> Shard {
        Shard {
            limit,
            placed: true,
            ..Shard::new(input, self.num_shards, self.index, self.by_rank)
        }
    }

    /// The input elements shared out: the first `limit`, and for a rank's share, a multiple
    /// of `num_shards` of them (`Unknown` when that needs a count the plan does not know).
    pub fn shared(&self) -> Cardinality {
        let n = self.num_shards.max(1);
        // A rank's share needs the count: where the plan does not know it, it is counted.
        let count = if self.by_rank {
            *self.counted.get_or_init(|| super::counted(&self.input))
        } else {
            self.input.step().cardinality()
        };
        let input = match (count, self.limit) {
            (Cardinality::Finite(m), Some(l)) => Cardinality::Finite(m.min(l)),
            (Cardinality::Infinite, Some(l)) => Cardinality::Finite(l),
            (c, _) => c,
        };
        if self.by_rank {
            input.map(|m| m - m % n)
        } else {
            input
        }
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    num_shards: u64,
    index: u64,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    by_rank: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    limit: Option<u64>,
}

impl DatasetOp for Shard {
    const KIND: &'static str = "shard";
    type Spec = Spec;

    one_input!();

    fn schema(&self) -> Result<Schema> {
        let (n, i) = (self.num_shards, self.index);
        if n == 0 || i >= n {
            return Err(Error::schema(
                Self::KIND,
                format!("index {i} must be in 0..num_shards ({n})"),
            ));
        }
        Ok(same(&self.input))
    }

    fn label(&self) -> String {
        self.share().label()
    }

    fn cardinality(&self) -> Cardinality {
        if self.by_rank && !self.placed {
            // Where the planner places a rank's share decides how its batches are made.
            if let Ok(placed) = crate::planner::shard_down::place_rank_share(self) {
                if !matches!(placed.step(), crate::Step::Shard(s) if s.input.id() == self.input.id())
                {
                    return placed.step().cardinality();
                }
            }
        }
        let (n, i) = (self.num_shards.max(1), self.index);
        self.shared().map(|m| m / n + u64::from(i < m % n))
    }

    fn deterministic(&self) -> bool {
        false
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
        let inner = WaitMeter::wrap(inner, Arc::clone(&stats));
        let limit = match (self.by_rank, self.shared()) {
            (false, _) => self.limit,
            (true, Cardinality::Finite(m)) => Some(m),
            (true, Cardinality::Infinite) => None,
            (true, Cardinality::Unknown) => {
                return Err(crate::planner::shard_down::unknown_count(self))
            }
        };
        let mut it = ShardIter::new(inner, self.num_shards, self.index).with_limit(limit);
        if let Some(s) = at {
            it = it.restore(s)?;
        }
        Ok(Metered::wrap(Box::new(it), stats))
    }

    fn to_spec(&self, _: &SpecCtx) -> Result<Option<Spec>> {
        Ok(Some(Spec {
            num_shards: self.num_shards,
            index: self.index,
            by_rank: self.by_rank,
            limit: self.limit,
        }))
    }

    fn from_spec(s: Spec, input: Option<Plan>, _: &SpecCtx) -> Result<Self> {
        Ok(Shard {
            limit: s.limit,
            ..Shard::new(super::input_of(input)?, s.num_shards, s.index, s.by_rank)
        })
    }
}
