//! Turns a plan into running iterators.

use std::sync::Arc;

use stoker_core::element::{names, Element, Names};
use stoker_core::exec::batch::BatchIter;
use stoker_core::exec::enumerate::EnumerateIter;
use stoker_core::exec::filter::FilterIter;
use stoker_core::exec::interleave::{InterleaveConfig, InterleaveIter, OpenFn};
use stoker_core::exec::map::{MapIter, OpChain};
use stoker_core::exec::padded_batch::PaddedBatchIter;
use stoker_core::exec::parallel_map::{ParallelMap, ParallelMapConfig};
use stoker_core::exec::parallel_map_batch::{BatchConfig, ParallelMapBatch};
use stoker_core::exec::prefetch::Prefetch;
use stoker_core::exec::refill::Refill;
use stoker_core::exec::repeat::RepeatIter;
use stoker_core::exec::shard::ShardIter;
use stoker_core::exec::shuffle::{epoch_seed, ShuffleIter};
use stoker_core::exec::slices::SlicesIter;
use stoker_core::exec::take_skip::{SkipIter, TakeIter};
use stoker_core::exec::zip::ZipIter;
use stoker_core::exec::{BoxIter, CancelFlag, Fused, MakeIter};
use stoker_core::stats::{Metered, StageStats, WaitMeter};
use stoker_core::{ErrorPolicy, PipelineOptions, Result, StatsRegistry, Tensor};

use crate::disk_cache;
use crate::plan::{Plan, Step, AUTOTUNE};
use crate::sources::{FilesIter, RangeIter, TfRecordOpener};

/// What every stage of one pipeline shares while it runs.
#[derive(Clone)]
pub struct BuildCtx {
    pub options: PipelineOptions,
    pub stats: Arc<StatsRegistry>,
    /// Set when the pipeline's consumer is gone.
    pub cancel: CancelFlag,
}

impl BuildCtx {
    /// Threads for a stage asking for `n` (`AUTOTUNE`: the whole budget), within the budget.
    fn threads_for(&self, n: Option<i64>) -> usize {
        let budget = self.options.threads();
        match n {
            None => 1,
            Some(AUTOTUNE) => budget,
            Some(n) => (n.max(1) as usize).min(budget),
        }
    }
}

/// Elements `{name: file}` for each file.
fn file_names(files: &[String], field: &str) -> Result<BoxIter> {
    let values = files
        .iter()
        .map(|f| bytes::Bytes::from(f.clone().into_bytes()))
        .collect();
    let column = Tensor::from_bytes(vec![files.len()], values, Vec::new())?;
    Ok(Box::new(SlicesIter::new(names(&[field]), vec![column])?))
}

fn field_names(plan: &Plan) -> Names {
    plan.schema().names()
}

/// How a parallel map runs: `workers` threads, two elements in flight per worker.
fn parallel_config(
    epoch: u64,
    workers: usize,
    deterministic: bool,
    policy: ErrorPolicy,
) -> ParallelMapConfig {
    ParallelMapConfig {
        epoch,
        workers,
        buffer: 2 * workers,
        deterministic,
        policy,
    }
}

/// A parallel `map` right before a `batch`, run as one stage whose workers write each element
/// into its batch row; `None` when `map_plan` is not a parallel map, or when bad records are
/// skipped (a dropped element would leave a hole in its batch).
fn map_and_batch(
    map_plan: &Plan,
    batch_size: usize,
    drop_remainder: bool,
    batch_stats: &Arc<StageStats>,
    ctx: &BuildCtx,
) -> Result<Option<BoxIter>> {
    let Step::Map {
        input,
        ops,
        num_parallel_calls,
        deterministic,
        epoch,
    } = map_plan.step()
    else {
        return Ok(None);
    };
    let workers = ctx.threads_for(*num_parallel_calls);
    let policy = ctx.options.on_bad_record;
    if num_parallel_calls.is_none() || workers <= 1 || policy != ErrorPolicy::Raise {
        return Ok(None);
    }
    let map_stats = ctx
        .stats
        .stage(map_plan.id(), &map_plan.label(), map_plan.step().kind());
    let epoch = epoch.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let inner = iterate(input, ctx)?;
    let config = parallel_config(epoch, workers, *deterministic, policy);
    let batch = BatchConfig {
        size: batch_size,
        drop_remainder,
        rows: map_plan.schema().clone(),
    };
    Ok(Some(Box::new(ParallelMapBatch::spawn(
        inner,
        Arc::from(ops.clone()),
        config,
        batch,
        map_stats,
        Arc::clone(batch_stats),
    )?)))
}

/// The size and `drop_remainder` of the batches `plan` hands out, when they come from a
/// `batch` through steps that keep its rows together.
fn batch_of(plan: &Plan) -> Option<(usize, bool)> {
    match plan.step() {
        Step::Batch {
            batch_size,
            drop_remainder,
            ..
        } => Some((*batch_size, *drop_remainder)),
        Step::Map { input, ops, .. } if !ops.iter().any(|o| o.drops_rows()) => {
            (!input.schema().dynamic && !plan.schema().dynamic)
                .then(|| batch_of(input))
                .flatten()
        }
        Step::Prefetch { input, .. }
        | Step::Shuffle { input, .. }
        | Step::Filter { input, .. }
        | Step::Take { input, .. }
        | Step::Skip { input, .. }
        | Step::Repeat { input, .. }
        | Step::Cache { input, .. }
        | Step::Shard { input, .. }
        | Step::WithOptions { input, .. } => batch_of(input),
        _ => None,
    }
}

/// Starts iterating over `plan`.
pub fn iterate(plan: &Plan, ctx: &BuildCtx) -> Result<BoxIter> {
    let stats = ctx
        .stats
        .stage(plan.id(), &plan.label(), plan.step().kind());
    let policy = ctx.options.on_bad_record;
    let it: BoxIter = match plan.step() {
        Step::Range { start, stop, step } => {
            Metered::wrap(Box::new(RangeIter::new(*start, *stop, *step)), stats)
        }
        Step::Slices { names: n, columns }
        | Step::Npz {
            names: n, columns, ..
        } => {
            let it = SlicesIter::new(names(n), columns.clone())?;
            Metered::wrap(Box::new(it), stats)
        }
        Step::ListFiles {
            files,
            shuffle,
            seed,
            epoch,
            ..
        } => {
            let mut files = files.clone();
            if *shuffle {
                use rand::seq::SliceRandom;
                use rand::SeedableRng;
                let e = epoch.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let mut rng = rand::rngs::StdRng::seed_from_u64(epoch_seed(*seed, e));
                files.shuffle(&mut rng);
            }
            Metered::wrap(file_names(&files, "filename")?, stats)
        }
        Step::TfRecord {
            files,
            compression,
            verify_crc,
            num_parallel_reads,
            ..
        } => {
            let opener = TfRecordOpener {
                compression: *compression,
                verify_crc: *verify_crc,
            };
            let parallel = match *num_parallel_reads {
                // One reader per core of the budget: on one core, reading on the consuming
                // thread beats handing every record to another thread.
                AUTOTUNE => ctx.options.threads().min(files.len().max(1)),
                n => n.max(1) as usize,
            };
            if parallel <= 1 {
                Metered::wrap(
                    Box::new(FilesIter::new(
                        files.clone(),
                        opener,
                        policy,
                        Arc::clone(&stats),
                    )),
                    stats,
                )
            } else {
                let st = Arc::clone(&stats);
                let open: OpenFn = Arc::new(move |e: &Element| {
                    let path = crate::sources::file_name_of("TFRecordDataset", e)?;
                    opener.open_path(&path, policy, &st)
                });
                let config = InterleaveConfig {
                    cycle_length: parallel,
                    block_length: 1,
                    prefetch_per_slot: 256,
                };
                Box::new(InterleaveIter::new(
                    file_names(files, "filename")?,
                    open,
                    config,
                    stats,
                ))
            }
        }
        Step::Shuffle {
            input,
            buffer_size,
            seed,
            reshuffle_each_iteration,
            epoch,
            ..
        } => {
            let e = epoch.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let seed = if *reshuffle_each_iteration {
                epoch_seed(*seed, e)
            } else {
                epoch_seed(*seed, 0)
            };
            let inner = iterate(input, ctx)?;
            Metered::wrap(
                Box::new(ShuffleIter::new(
                    inner,
                    *buffer_size,
                    seed,
                    Arc::clone(&stats),
                )),
                stats,
            )
        }
        Step::Map {
            input,
            ops,
            num_parallel_calls,
            deterministic,
            epoch,
        } => {
            let epoch = epoch.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let inner = iterate(input, ctx)?;
            let chain: OpChain = Arc::from(ops.clone());
            let workers = ctx.threads_for(*num_parallel_calls);
            let map: BoxIter = if num_parallel_calls.is_some() && workers > 1 {
                let config = parallel_config(epoch, workers, *deterministic, policy);
                Box::new(ParallelMap::spawn(inner, chain, config, stats)?)
            } else {
                Metered::wrap(
                    Box::new(MapIter::new(
                        inner,
                        chain,
                        policy,
                        Arc::clone(&stats),
                        epoch,
                    )),
                    stats,
                )
            };
            // Under the skip policy a batched op that drops bad rows leaves short batches:
            // they are refilled to the batch's size, as if the rows had been skipped before it.
            match batch_of(input) {
                Some((size, drop_remainder))
                    if policy == ErrorPolicy::Skip && ops.iter().any(|o| o.drops_rows()) =>
                {
                    Box::new(Refill::new(map, size, drop_remainder))
                }
                _ => map,
            }
        }
        Step::Batch {
            input,
            batch_size,
            drop_remainder,
            padding,
        } => {
            if padding.is_none() {
                if let Some(fused) =
                    map_and_batch(input, *batch_size, *drop_remainder, &stats, ctx)?
                {
                    return Ok(fused);
                }
            }
            let inner = iterate(input, ctx)?;
            let it: BoxIter = match padding {
                None => Box::new(BatchIter::new(
                    inner,
                    *batch_size,
                    *drop_remainder,
                    input.schema().clone(),
                    Arc::clone(&stats),
                )),
                Some(p) => Box::new(PaddedBatchIter::new(
                    inner,
                    *batch_size,
                    *drop_remainder,
                    Arc::clone(p),
                    Arc::clone(&stats),
                )),
            };
            Metered::wrap(it, stats)
        }
        Step::Interleave {
            input,
            opener,
            cycle_length,
            block_length,
            num_parallel_calls,
        } => {
            let inner = iterate(input, ctx)?;
            let opener = Arc::clone(opener);
            let child_ctx = ctx.clone();
            let st = Arc::clone(&stats);
            let open: OpenFn = Arc::new(move |e: &Element| opener.open(e, &child_ctx, &st));
            let cycle = cycle_length.unwrap_or_else(|| ctx.options.threads());
            let prefetch = if num_parallel_calls.is_some() {
                (*block_length).max(64)
            } else {
                0
            };
            let config = InterleaveConfig {
                cycle_length: cycle,
                block_length: *block_length,
                prefetch_per_slot: prefetch,
            };
            Box::new(InterleaveIter::new(inner, open, config, stats))
        }
        Step::Filter { input, predicate } => {
            let inner = iterate(input, ctx)?;
            Metered::wrap(
                Box::new(FilterIter::new(
                    inner,
                    Arc::clone(predicate),
                    policy,
                    Arc::clone(&stats),
                    Some(Arc::clone(&ctx.cancel)),
                )),
                stats,
            )
        }
        Step::Take { input, count } => {
            let inner = WaitMeter::wrap(iterate(input, ctx)?, Arc::clone(&stats));
            Metered::wrap(Box::new(TakeIter::new(inner, *count)), stats)
        }
        Step::Skip { input, count } => {
            let inner = WaitMeter::wrap(iterate(input, ctx)?, Arc::clone(&stats));
            Metered::wrap(Box::new(SkipIter::new(inner, *count)), stats)
        }
        Step::Repeat { input, count } => {
            let (input, child_ctx, st) = (input.clone(), ctx.clone(), Arc::clone(&stats));
            let make: MakeIter = Box::new(move || {
                Ok(WaitMeter::wrap(
                    iterate(&input, &child_ctx)?,
                    Arc::clone(&st),
                ))
            });
            Metered::wrap(Box::new(RepeatIter::new(make, *count)), stats)
        }
        Step::Cache {
            input,
            filename,
            memory,
        } => {
            let (input_plan, child_ctx, st) = (input.clone(), ctx.clone(), Arc::clone(&stats));
            let mut make: MakeIter = Box::new(move || {
                Ok(WaitMeter::wrap(
                    iterate(&input_plan, &child_ctx)?,
                    Arc::clone(&st),
                ))
            });
            let it = match filename {
                None => memory.iterate(&mut make)?,
                Some(path) => disk_cache::iterate(path, input.schema(), make)?,
            };
            Metered::wrap(it, stats)
        }
        Step::Prefetch { input, buffer_size } => {
            let inner = iterate(input, ctx)?;
            match *buffer_size {
                0 => inner,
                AUTOTUNE => Box::new(Prefetch::spawn(inner, ctx.options.threads().max(2), stats)?),
                n => Box::new(Prefetch::spawn(inner, n as usize, stats)?),
            }
        }
        Step::Shard {
            input,
            num_shards,
            index,
        } => {
            let inner = WaitMeter::wrap(iterate(input, ctx)?, Arc::clone(&stats));
            Metered::wrap(Box::new(ShardIter::new(inner, *num_shards, *index)), stats)
        }
        Step::Zip { inputs, .. } => {
            let inners = inputs
                .iter()
                .map(|p| Ok(WaitMeter::wrap(iterate(p, ctx)?, Arc::clone(&stats))))
                .collect::<Result<Vec<_>>>()?;
            Metered::wrap(Box::new(ZipIter::new(inners, field_names(plan))), stats)
        }
        Step::Enumerate { input, start, .. } => {
            let inner = WaitMeter::wrap(iterate(input, ctx)?, Arc::clone(&stats));
            Metered::wrap(
                Box::new(EnumerateIter::new(inner, field_names(plan), *start)),
                stats,
            )
        }
        Step::WithOptions { input, .. } => iterate(input, ctx)?,
    };
    Ok(it)
}

/// Starts `plan` ending for good after its first error.
pub fn iterate_fused(plan: &Plan, ctx: &BuildCtx) -> Result<BoxIter> {
    Ok(Fused::wrap(iterate(plan, ctx)?))
}
