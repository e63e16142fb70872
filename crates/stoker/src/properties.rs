//! What a step declares about itself besides its schema: how many elements it hands out,
//! how a shard can move below it, where it runs, and what it draws on besides its input.
//! The planner, the verdict, `convert` and `global_shuffle` read these rather than asking
//! which operator a step is.

use serde::{Deserialize, Serialize};

/// `num_parallel_calls` / `buffer_size` value meaning "let stoker choose".
pub const AUTOTUNE: i64 = -1;

/// How many elements a step hands out in one pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cardinality {
    Finite(u64),
    Infinite,
    /// Not known before running it (a filter, a source of unknown length, ...).
    Unknown,
}

impl Cardinality {
    /// tf.data's number: the count, `-1` (`INFINITE_CARDINALITY`) or `-2`
    /// (`UNKNOWN_CARDINALITY`).
    pub fn as_i64(self) -> i64 {
        match self {
            Cardinality::Finite(n) => i64::try_from(n).unwrap_or(i64::MAX),
            Cardinality::Infinite => -1,
            Cardinality::Unknown => -2,
        }
    }

    /// The batches of `size` made of these elements (the last one dropped when short, with
    /// `drop_remainder`).
    pub fn batched(self, size: usize, drop_remainder: bool) -> Cardinality {
        let size = size.max(1) as u64;
        self.map(|n| {
            if drop_remainder {
                n / size
            } else {
                n.div_ceil(size)
            }
        })
    }

    /// `f` of the count of a finite pass; an infinite or unknown one stays so.
    pub fn map(self, f: impl FnOnce(u64) -> u64) -> Cardinality {
        match self {
            Cardinality::Finite(n) => Cardinality::Finite(f(n)),
            other => other,
        }
    }
}

/// How a `shard` right above a step can move below it (see [`DatasetOp::shard_move`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShardMove {
    /// Its output element `k` is made from its input element `k` alone (a prefetch, a map
    /// under the raise policy): the shard moves below it as it is. A map's ops then see the
    /// positions the elements had in the whole stream, so random ops give the same results.
    Through,
    /// It groups consecutive elements (a batch): below it each shard groups its own share,
    /// the same elements in other groups. Only a rank's share moves so.
    Regroups,
    /// It hands out its input's first `n` elements (a take): the shard moves below it and
    /// shares out those.
    Prefix(u64),
    /// It takes the shard in and makes only the share's elements (a global shuffle reads
    /// only the share's positions of its permutation).
    TakesIn,
    /// The shard stays above it, for this reason.
    Stops(String),
}

/// Where a step runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Threads {
    /// On the thread that pulls from it.
    Caller,
    /// On the caller's thread, while a thread of its own runs its input ahead (prefetch).
    FeedsInputOnOwnThread,
    /// On a pool of workers when it runs in parallel, fed by a thread running its input.
    Workers,
    /// Its rows are written by the workers of the parallel map before it, when there is one
    /// (a batch fused with that map).
    RowsByInputWorkers,
}

/// What a step draws on besides its input element by element: whether it hands out the
/// same elements in the same order on every pass given the same input. Combined over a
/// step's inputs (the most random wins, as TensorFlow's `CheckExternalState` walks a
/// dataset's inputs), it says whether a cache after the step keeps the pipeline's results.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Randomness {
    /// The same elements in the same order on every pass.
    Fixed,
    /// Draws from its seeds and the epoch (a shuffle, random ops, sampling): another pass
    /// hands out other elements or another order.
    Seeded,
    /// Runs code stoker cannot see into (a Python function or generator), or an order that
    /// depends on timing (a parallel map allowed out of order): nothing is known to repeat.
    External,
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
