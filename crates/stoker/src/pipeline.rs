//! A runnable pipeline: the optimised plan, its stats, and how to start it.

use std::sync::Arc;

use stoker_core::exec::prefetch::Prefetch;
use stoker_core::exec::BoxIter;
use stoker_core::stats::StageSnapshot;
use stoker_core::{Result, StatsRegistry};

use crate::build::{iterate, iterate_fused, BuildCtx, Resources, RunState};
use crate::plan::{Plan, Step};
use crate::planner::optimize;

pub struct Pipeline {
    plan: Plan,
    options: stoker_core::PipelineOptions,
    stats: Arc<StatsRegistry>,
    /// What its iterations share (memory caches).
    resources: Arc<Resources>,
    /// The planner's rewrites, for `explain()`.
    passes: Vec<(&'static str, usize)>,
}

impl Pipeline {
    /// Optimises `plan` once; every iteration of the pipeline adds to the same stats.
    pub fn new(plan: &Plan) -> Result<Pipeline> {
        let (optimized, passes) = optimize(plan)?;
        Ok(Pipeline {
            options: optimized.options(),
            stats: StatsRegistry::new(),
            resources: Resources::new(),
            plan: optimized,
            passes,
        })
    }

    /// The context of a new run over the pipeline.
    fn run(&self) -> BuildCtx {
        BuildCtx::new(
            self.options.clone(),
            Arc::clone(&self.stats),
            RunState::start(&self.resources),
        )
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Iterates on the calling thread (asynchronous stages still use their own threads).
    pub fn iter(&self) -> Result<BoxIter> {
        iterate_fused(&self.plan, &self.run())
    }

    /// Runs the pipeline on a driver thread, so that the consumer can wait with a time limit
    /// (e.g. to notice Ctrl-C). A final `prefetch` becomes the driver; otherwise a
    /// one-element buffer is added.
    pub fn start(&self) -> Result<Prefetch> {
        // A fresh cancel flag for this run: dropping the driver sets it.
        let ctx = self.run();
        let (inner, capacity, stats) = match self.plan.step() {
            Step::Prefetch(p) if p.capacity(&ctx) != 0 => {
                let st = crate::build::stage_stats(&self.plan, &ctx);
                (iterate(&p.input, &ctx)?, p.capacity(&ctx), st)
            }
            _ => (
                iterate(&self.plan, &ctx)?,
                1,
                self.stats.stage(0, "driver", "prefetch"),
            ),
        };
        Prefetch::spawn_with_stop(inner, capacity, 1, stats, ctx.cancel)
    }

    pub fn stats(&self) -> Vec<StageSnapshot> {
        self.stats.snapshot()
    }

    pub fn registry(&self) -> &Arc<StatsRegistry> {
        &self.stats
    }

    /// The planner's rewrites that changed the plan, with how many times each did.
    pub fn passes(&self) -> &[(&'static str, usize)] {
        &self.passes
    }

    /// The optimised plan, sink first, and a last line naming the planner's rewrites that
    /// made it (each can be switched off with `with_options(optimizations=...)`).
    pub fn explain(&self) -> String {
        let passes: Vec<String> = self
            .passes
            .iter()
            .map(|(name, n)| format!("{name} x{n}"))
            .collect();
        let passes = if passes.is_empty() {
            "none".to_string()
        } else {
            passes.join(", ")
        };
        format!("{}rewrites: {passes}\n", self.plan.describe())
    }
}
