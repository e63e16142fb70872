//! What the stages of a running pipeline share: the build context each step starts its
//! iterator with (see [`crate::plan::iterate_at`]), and what outlives one iteration.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use stoker_core::element::names;
use stoker_core::exec::memory_cache::MemoryCache;
use stoker_core::exec::slices::SlicesIter;
use stoker_core::exec::CancelFlag;
use stoker_core::{PipelineOptions, Result, Seeds, StatsRegistry, Tensor};

use crate::properties::AUTOTUNE;

/// What every stage of one pipeline shares while it runs.
#[derive(Clone)]
pub struct BuildCtx {
    pub options: PipelineOptions,
    pub stats: Arc<StatsRegistry>,
    /// Set when the pipeline's consumer is gone.
    pub cancel: CancelFlag,
    /// The epoch of the pass being built: random ops and reshuffles draw from it. It comes
    /// from the iteration over the pipeline and the passes of the `repeat`s above, so that
    /// a stage built again (on restore, or to replay its input) gets the same one.
    pub epoch: u64,
    /// What every iteration over the pipeline shares (memory caches).
    pub resources: Arc<Resources>,
    /// The thread budget that choices fixing the order are made for (how many files are
    /// read in turn): the budget of the run a restored state was saved from, so that the
    /// order stays the same whatever the budget is now.
    pub order_budget: usize,
    /// What the plan's drawn seeds stand for in this run.
    pub seeds: Arc<Seeds>,
    /// The stages left to choose their parallelism (`AUTOTUNE`): they share the budget.
    pub autotuned_stages: usize,
}

/// State that outlives one iterator: what every iteration over a pipeline shares.
#[derive(Debug, Default)]
pub struct Resources {
    /// The memory caches, by plan node.
    memory: Mutex<HashMap<u64, Arc<MemoryCache>>>,
    /// Iterators started so far.
    iterations: std::sync::atomic::AtomicU64,
    /// The RAM budget its buffers left to `AUTOTUNE` share, made on first use.
    ram: std::sync::OnceLock<Arc<stoker_core::ram::RamBudget>>,
}

impl Resources {
    pub fn new() -> Arc<Resources> {
        Arc::default()
    }

    /// The index the next new iteration over the pipeline will get.
    pub fn peek_iteration(&self) -> u64 {
        self.iterations.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The index of a new iteration over the pipeline.
    pub fn next_iteration(&self) -> u64 {
        self.iterations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// The RAM budget of the pipeline with `options` (made on first use).
    pub fn ram(&self, options: &PipelineOptions) -> Arc<stoker_core::ram::RamBudget> {
        Arc::clone(
            self.ram
                .get_or_init(|| stoker_core::ram::RamBudget::for_option(options.ram_budget)),
        )
    }

    /// Notes that iteration `iteration` runs (restored): the next new one comes after it,
    /// as it would have in the process that saved it.
    pub fn resumed_iteration(&self, iteration: u64) {
        self.iterations
            .fetch_max(iteration + 1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Threads for a stage asking for `n` (`None`: not parallel) within a budget of `budget`
/// threads that `autotuned_stages` stages left to `AUTOTUNE` share.
pub fn threads_within(budget: usize, autotuned_stages: usize, n: Option<i64>) -> usize {
    match n {
        None => 1,
        Some(AUTOTUNE) => (budget / autotuned_stages.max(1)).max(1),
        Some(n) => (n.max(1) as usize).min(budget),
    }
}

/// The epoch of iteration `iteration` over a pipeline (0 for the first).
pub fn iteration_epoch(iteration: u64) -> u64 {
    iteration << 32
}

impl BuildCtx {
    pub fn new(
        options: PipelineOptions,
        stats: Arc<StatsRegistry>,
        resources: Arc<Resources>,
        epoch: u64,
    ) -> Self {
        BuildCtx {
            order_budget: options.threads(),
            options,
            stats,
            cancel: Default::default(),
            epoch,
            resources,
            seeds: Arc::default(),
            autotuned_stages: 1,
        }
    }

    /// The number a step's seed stands for in this run.
    pub(crate) fn seed(&self, seed: stoker_core::Seed) -> u64 {
        self.seeds.resolve(seed)
    }

    /// The context of pass `pass` of a `repeat` (pass 0 of the first iteration has epoch 0,
    /// pass 1 epoch 1, and so on).
    pub(crate) fn for_pass(&self, pass: u64) -> BuildCtx {
        BuildCtx {
            epoch: self.epoch.wrapping_mul(0x100_0000_01b3).wrapping_add(pass),
            ..self.clone()
        }
    }

    /// The same context at another epoch.
    pub(crate) fn at_epoch(&self, epoch: u64) -> BuildCtx {
        BuildCtx {
            epoch,
            ..self.clone()
        }
    }

    /// The memory cache of the `cache` step of plan node `node`.
    pub(crate) fn memory_cache(&self, node: u64) -> Arc<MemoryCache> {
        let mut caches = self
            .resources
            .memory
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        Arc::clone(caches.entry(node).or_default())
    }
}

/// Elements `{name: file}` for each file.
pub(crate) fn file_names(files: &[String], field: &str) -> Result<SlicesIter> {
    SlicesIter::new(names(&[field]), vec![file_column(files)?])
}

/// The file names as a column of strings.
pub(crate) fn file_column(files: &[String]) -> Result<Tensor> {
    let values = files
        .iter()
        .map(|f| bytes::Bytes::from(f.clone().into_bytes()))
        .collect();
    Tensor::from_bytes(vec![files.len()], values, Vec::new())
}
