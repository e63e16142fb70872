//! A runnable pipeline: the optimised plan, its stats, and how to start it.

use std::sync::Arc;

use stoker_core::exec::prefetch::Prefetch;
use stoker_core::exec::BoxIter;
use stoker_core::stats::StageSnapshot;
use stoker_core::{Result, StatsRegistry};

use crate::build::{iterate, iterate_fused, BuildCtx};
use crate::plan::{Plan, Step, AUTOTUNE};
use crate::planner::optimize;

pub struct Pipeline {
    plan: Plan,
    ctx: BuildCtx,
}

impl Pipeline {
    /// Optimises `plan` once; every iteration of the pipeline adds to the same stats.
    pub fn new(plan: &Plan) -> Result<Pipeline> {
        let optimized = optimize(plan)?;
        Ok(Pipeline {
            ctx: BuildCtx {
                options: optimized.options(),
                stats: StatsRegistry::new(),
                cancel: Default::default(),
            },
            plan: optimized,
        })
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Iterates on the calling thread (asynchronous stages still use their own threads).
    pub fn iter(&self) -> Result<BoxIter> {
        iterate_fused(&self.plan, &self.ctx)
    }

    /// Runs the pipeline on a driver thread, so that the consumer can wait with a time limit
    /// (e.g. to notice Ctrl-C). A final `prefetch` becomes the driver; otherwise a
    /// one-element buffer is added.
    pub fn start(&self) -> Result<Prefetch> {
        // A fresh cancel flag for this run: dropping the driver sets it.
        let ctx = BuildCtx {
            cancel: Default::default(),
            ..self.ctx.clone()
        };
        let (inner, capacity, stats) = match self.plan.step() {
            Step::Prefetch { input, buffer_size } if *buffer_size != 0 => {
                let cap = match *buffer_size {
                    AUTOTUNE => self.ctx.options.threads().max(2),
                    n => n as usize,
                };
                let st = self
                    .ctx
                    .stats
                    .stage(self.plan.id(), &self.plan.label(), "prefetch");
                (iterate(input, &ctx)?, cap, st)
            }
            _ => (
                iterate(&self.plan, &ctx)?,
                1,
                self.ctx.stats.stage(0, "driver", "prefetch"),
            ),
        };
        Prefetch::spawn_with_stop(inner, capacity, 1, stats, ctx.cancel)
    }

    pub fn stats(&self) -> Vec<StageSnapshot> {
        self.ctx.stats.snapshot()
    }

    pub fn registry(&self) -> &Arc<StatsRegistry> {
        &self.ctx.stats
    }

    /// The optimised plan, sink first.
    pub fn explain(&self) -> String {
        self.plan.describe()
    }
}
