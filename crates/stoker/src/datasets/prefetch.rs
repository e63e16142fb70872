//! `prefetch(buffer_size)`: a thread runs the input ahead into a bounded buffer.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::Schema;
use stoker_core::exec::prefetch::Prefetch as PrefetchIter;
use stoker_core::exec::{BoxIter, State};
use stoker_core::{Error, Result, StageStats};

use super::common::same;
use crate::build::BuildCtx;
use crate::plan::{iterate_at, DatasetOp, Plan, SpecCtx};
use crate::properties::{Cardinality, Randomness, AUTOTUNE};
use crate::random_access::RandomAccess;

#[derive(Clone, Debug)]
pub struct Prefetch {
    pub input: Plan,
    pub buffer_size: i64,
}

impl Prefetch {
    /// Elements buffered, 0 for none (`AUTOTUNE`: as many as the thread budget, at least 2).
    pub fn capacity(&self, ctx: &BuildCtx) -> usize {
        match self.buffer_size {
            AUTOTUNE => ctx.options.threads().max(2),
            n => n.max(0) as usize,
        }
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    #[serde(default = "autotune")]
    buffer_size: i64,
}

fn autotune() -> i64 {
    AUTOTUNE
}

impl Plan {
    pub fn prefetch(&self, buffer_size: i64) -> Result<Plan> {
        Plan::new(Prefetch {
            input: self.clone(),
            buffer_size,
        })
    }
}

impl DatasetOp for Prefetch {
    const KIND: &'static str = "prefetch";
    type Spec = Spec;

    one_input!();

    fn keeps_count(&self) -> bool {
        true
    }

    fn shard_move(&self) -> crate::properties::ShardMove {
        crate::properties::ShardMove::Through
    }

    fn schema(&self) -> Result<Schema> {
        if self.buffer_size < AUTOTUNE {
            return Err(Error::schema(
                Self::KIND,
                "buffer_size must be >= 0 or AUTOTUNE",
            ));
        }
        Ok(same(&self.input))
    }

    fn label(&self) -> String {
        match self.buffer_size {
            AUTOTUNE => "prefetch(AUTOTUNE)".into(),
            n => format!("prefetch({n})"),
        }
    }

    fn threads(&self) -> crate::properties::Threads {
        crate::properties::Threads::FeedsInputOnOwnThread
    }

    /// A cache belongs before the prefetch.
    fn cardinality(&self) -> Cardinality {
        self.input.step().cardinality()
    }

    fn randomness(&self) -> Randomness {
        Randomness::Fixed
    }

    /// A buffer: the cache belongs below it, where the work is.
    fn cache_after_useful(&self) -> bool {
        false
    }

    fn per_element(&self) -> bool {
        true
    }

    fn batch_of(&self) -> Option<(usize, bool)> {
        self.input.step().batch_of()
    }

    fn buffer_knob(&self) -> Option<(&'static str, i64)> {
        Some(("buffer_size", self.buffer_size))
    }

    fn iterate(
        &self,
        _: &Plan,
        ctx: &BuildCtx,
        stats: Arc<StageStats>,
        at: Option<&State>,
    ) -> Result<BoxIter> {
        // A prefetch reports its input's state (after the last element handed out).
        let inner = iterate_at(&self.input, ctx, at)?;
        if self.capacity(ctx) == 0 {
            return Ok(inner);
        }
        let (capacity, bounds) = crate::tuner::buffer(ctx, &stats, self.buffer_size);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let it = PrefetchIter::spawn_bounded(inner, capacity, 1, stats, stop, bounds)?;
        Ok(Box::new(it))
    }

    fn supports_random_access(&self) -> bool {
        self.input.step().supports_random_access()
    }

    /// Its state is its input's.
    fn random_access(&self, _: &Plan, ctx: &BuildCtx) -> Result<Option<Box<dyn RandomAccess>>> {
        self.input.step().random_access(&self.input, ctx)
    }

    fn to_spec(&self, _: &SpecCtx) -> Result<Option<Spec>> {
        Ok(Some(Spec {
            buffer_size: self.buffer_size,
        }))
    }

    fn from_spec(s: Spec, input: Option<Plan>, _: &SpecCtx) -> Result<Self> {
        Ok(Prefetch {
            input: super::common::input_of(input)?,
            buffer_size: s.buffer_size,
        })
    }
}
