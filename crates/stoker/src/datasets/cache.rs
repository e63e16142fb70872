//! `cache(filename)`: the first complete pass is recorded, in memory or in a file; later
//! passes replay it.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::Schema;
use stoker_core::exec::{BoxIter, MakeIter, State};
use stoker_core::stats::{Metered, WaitMeter};
use stoker_core::{Result, StageStats};

use super::common::same;
use crate::build::BuildCtx;
use crate::disk_cache;
use crate::plan::{iterate, DatasetOp, Plan, SpecCtx};
use crate::properties::{Cardinality, Randomness};

#[derive(Clone, Debug)]
pub struct Cache {
    pub input: Plan,
    /// `None`: in memory (held by the pipeline, shared by its iterations).
    pub filename: Option<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    filename: Option<String>,
}

impl Plan {
    pub fn cache(&self, filename: Option<String>) -> Result<Plan> {
        Plan::new(Cache {
            input: self.clone(),
            filename,
        })
    }
}

impl DatasetOp for Cache {
    const KIND: &'static str = "cache";
    type Spec = Spec;

    one_input!();

    fn shard_move(&self) -> crate::properties::ShardMove {
        crate::properties::ShardMove::Stops(
            "what it holds would be a shard's share, not every element".into(),
        )
    }

    fn schema(&self) -> Result<Schema> {
        Ok(same(&self.input))
    }

    fn label(&self) -> String {
        match &self.filename {
            Some(f) => format!("cache({f})"),
            None => "cache(memory)".into(),
        }
    }

    /// Already cached.
    fn cardinality(&self) -> Cardinality {
        self.input.step().cardinality()
    }

    fn randomness(&self) -> Randomness {
        Randomness::Fixed
    }

    /// A cache after a cache repeats it.
    fn cache_after_useful(&self) -> bool {
        false
    }

    fn batch_of(&self) -> Option<(usize, bool)> {
        self.input.step().batch_of()
    }

    fn iterate(
        &self,
        node: &Plan,
        ctx: &BuildCtx,
        stats: Arc<StageStats>,
        at: Option<&State>,
    ) -> Result<BoxIter> {
        let (input, parent, st) = (self.input.clone(), ctx.clone(), Arc::clone(&stats));
        // The input of the pass that fills the cache, at that pass's epoch.
        let mut make_at = move |epoch: u64| -> Result<BoxIter> {
            let inner = iterate(&input, &parent.at_epoch(epoch))?;
            Ok(WaitMeter::wrap(inner, Arc::clone(&st)))
        };
        let it = match (&self.filename, at) {
            (None, None) => ctx
                .memory_cache(node.id())
                .iterate(ctx.epoch, &mut make_at)?,
            (None, Some(s)) => ctx.memory_cache(node.id()).restore(&mut make_at, s)?,
            (Some(path), at) => {
                let epoch = ctx.epoch;
                let make: MakeIter = Box::new(move || make_at(epoch));
                disk_cache::iterate_at(path, self.input.schema(), make, at)?
            }
        };
        Ok(Metered::wrap(it, stats))
    }

    fn to_spec(&self, ctx: &SpecCtx) -> Result<Option<Spec>> {
        Ok(Some(Spec {
            filename: self.filename.as_deref().map(|f| ctx.save_path(f)),
        }))
    }

    fn from_spec(s: Spec, input: Option<Plan>, ctx: &SpecCtx) -> Result<Self> {
        Ok(Cache {
            input: super::common::input_of(input)?,
            filename: s.filename.map(|f| ctx.load_path(&f)),
        })
    }
}
