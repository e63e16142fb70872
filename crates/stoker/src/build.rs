//! Turns a plan into running iterators. Each step starts its own (see [`crate::datasets`]);
//! this module holds what they share while a pipeline runs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use stoker_core::element::names;
use stoker_core::exec::memory_cache::MemoryCache;
use stoker_core::exec::slices::SlicesIter;
use stoker_core::exec::{BoxIter, CancelFlag, Fused};
use stoker_core::stats::StageStats;
use stoker_core::{PipelineOptions, Result, StatsRegistry, Tensor};

use crate::plan::{Plan, AUTOTUNE};

/// What every stage of one pipeline shares while it runs.
#[derive(Clone)]
pub struct BuildCtx {
    pub options: PipelineOptions,
    pub stats: Arc<StatsRegistry>,
    /// Set when the pipeline's consumer is gone.
    pub cancel: CancelFlag,
    /// The state of this run (one iterator over the pipeline).
    pub run: Arc<RunState>,
}

/// State that outlives one iterator: what every iteration over a pipeline shares.
#[derive(Debug, Default)]
pub struct Resources {
    /// The memory caches, by plan node.
    memory: Mutex<HashMap<u64, Arc<MemoryCache>>>,
    /// Iterators started so far.
    iterations: std::sync::atomic::AtomicU64,
}

impl Resources {
    pub fn new() -> Arc<Resources> {
        Arc::default()
    }
}

/// The state of one run over a pipeline: which iteration it is, and how many passes each
/// step has started in it (`repeat` and `interleave` start their inputs again).
#[derive(Debug)]
pub struct RunState {
    iteration: u64,
    passes: Mutex<HashMap<u64, u64>>,
    resources: Arc<Resources>,
}

impl RunState {
    /// The state of a new iteration over the pipeline owning `resources`.
    pub fn start(resources: &Arc<Resources>) -> Arc<RunState> {
        let iteration = resources
            .iterations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Arc::new(RunState {
            iteration,
            passes: Mutex::default(),
            resources: Arc::clone(resources),
        })
    }
}

impl BuildCtx {
    pub fn new(options: PipelineOptions, stats: Arc<StatsRegistry>, run: Arc<RunState>) -> Self {
        BuildCtx {
            options,
            stats,
            cancel: Default::default(),
            run,
        }
    }

    /// Threads for a stage asking for `n` (`AUTOTUNE`: the whole budget), within the budget.
    pub(crate) fn threads_for(&self, n: Option<i64>) -> usize {
        let budget = self.options.threads();
        match n {
            None => 1,
            Some(AUTOTUNE) => budget,
            Some(n) => (n.max(1) as usize).min(budget),
        }
    }

    /// The epoch of the pass `node` starts now: 0, 1, 2… within the first iteration over the
    /// pipeline; later iterations get other epochs, so that they reshuffle.
    pub(crate) fn next_pass(&self, node: &Plan) -> u64 {
        let mut passes = self.run.passes.lock().unwrap_or_else(|e| e.into_inner());
        let count = passes.entry(node.id()).or_insert(0);
        let pass = *count;
        *count += 1;
        pass + (self.run.iteration << 32)
    }

    /// The memory cache of the `cache` step `node`.
    pub(crate) fn memory_cache(&self, node: &Plan) -> Arc<MemoryCache> {
        let mut caches = self
            .run
            .resources
            .memory
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        Arc::clone(caches.entry(node.id()).or_default())
    }
}

/// Elements `{name: file}` for each file.
pub(crate) fn file_names(files: &[String], field: &str) -> Result<BoxIter> {
    let values = files
        .iter()
        .map(|f| bytes::Bytes::from(f.clone().into_bytes()))
        .collect();
    let column = Tensor::from_bytes(vec![files.len()], values, Vec::new())?;
    Ok(Box::new(SlicesIter::new(names(&[field]), vec![column])?))
}

/// The counters of `plan`'s stage.
pub(crate) fn stage_stats(plan: &Plan, ctx: &BuildCtx) -> Arc<StageStats> {
    ctx.stats
        .stage(plan.id(), &plan.label(), plan.step().kind())
}

/// Starts iterating over `plan`.
pub fn iterate(plan: &Plan, ctx: &BuildCtx) -> Result<BoxIter> {
    plan.step().iterate(plan, ctx, stage_stats(plan, ctx))
}

/// Starts `plan` ending for good after its first error.
pub fn iterate_fused(plan: &Plan, ctx: &BuildCtx) -> Result<BoxIter> {
    Ok(Fused::wrap(iterate(plan, ctx)?))
}
