//! `with_options(...)`: pipeline-wide options; the outermost setting wins. A spec file holds
//! them once, in its `[options]` table.

use std::sync::Arc;

use stoker_core::element::Schema;
use stoker_core::exec::{BoxIter, State};
use stoker_core::{ErrorPolicy, PipelineOptions, Result, StageStats};

use super::common::same;
use crate::build::BuildCtx;
use crate::plan::{iterate_at, DatasetOp, Plan, SpecCtx};
use crate::properties::{Cardinality, Randomness};
use crate::random_access::RandomAccess;

#[derive(Clone, Debug)]
pub struct WithOptions {
    pub input: Plan,
    pub options: PipelineOptions,
}

impl DatasetOp for WithOptions {
    const KIND: &'static str = "options";
    type Spec = PipelineOptions;

    one_input!();

    fn keeps_count(&self) -> bool {
        true
    }

    fn shard_move(&self) -> crate::properties::ShardMove {
        crate::properties::ShardMove::Through
    }

    fn schema(&self) -> Result<Schema> {
        crate::passes::check_passes(&self.options)?;
        Ok(same(&self.input))
    }

    fn label(&self) -> String {
        let o = &self.options;
        let mut parts = vec![format!(
            "on_bad_record={}",
            match o.on_bad_record {
                ErrorPolicy::Raise => "raise",
                ErrorPolicy::Skip => "skip",
            }
        )];
        if let Some(t) = o.threads {
            parts.push(format!("threads={t}"));
        }
        if let Some(d) = o.deterministic {
            parts.push(format!("deterministic={d}"));
        }
        for (pass, on) in &o.optimizations {
            parts.push(format!("{pass}={}", if *on { "on" } else { "off" }));
        }
        format!("options({})", parts.join(", "))
    }

    /// Its input's; unknown when bad records are skipped (as after tf.data's
    /// `ignore_errors`).
    fn cardinality(&self) -> Cardinality {
        match self.options.on_bad_record {
            stoker_core::ErrorPolicy::Skip => Cardinality::Unknown,
            stoker_core::ErrorPolicy::Raise => self.input.step().cardinality(),
        }
    }

    fn randomness(&self) -> Randomness {
        Randomness::Fixed
    }

    fn options(&self) -> Option<&PipelineOptions> {
        Some(&self.options)
    }

    fn per_element(&self) -> bool {
        true
    }

    fn batch_of(&self) -> Option<(usize, bool)> {
        self.input.step().batch_of()
    }

    fn iterate(
        &self,
        _: &Plan,
        ctx: &BuildCtx,
        _: Arc<StageStats>,
        at: Option<&State>,
    ) -> Result<BoxIter> {
        iterate_at(&self.input, ctx, at)
    }

    fn supports_random_access(&self) -> bool {
        self.input.step().supports_random_access()
    }

    /// Its state is its input's.
    fn random_access(&self, _: &Plan, ctx: &BuildCtx) -> Result<Option<Box<dyn RandomAccess>>> {
        self.input.step().random_access(&self.input, ctx)
    }

    fn to_spec(&self, _: &SpecCtx) -> Result<Option<PipelineOptions>> {
        Ok(None)
    }

    fn from_spec(options: PipelineOptions, input: Option<Plan>, _: &SpecCtx) -> Result<Self> {
        Ok(WithOptions {
            input: super::common::input_of(input)?,
            options,
        })
    }
}
