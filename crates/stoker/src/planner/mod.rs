//! Rewrites a plan into one that computes the same elements faster.
//!
//! The rewrites are named passes ([`PASSES`]); `explain()` names those that changed the plan,
//! and `with_options(optimizations={name: False})` switches one off (for A/B checks and bug
//! reports). What they do:
//! - `fuse_decode_crop`: `decode_image` followed by `random_resized_crop` becomes one fused op
//!   that decodes only what the crop needs (DCT-domain scaling where the JPEG decoder has it);
//! - `fuse_decode_crop`: `decode_image` followed by `resize_with_crop_or_pad` becomes
//!   `decode_crop_or_pad`, which decodes a PNG only down to the crop's last row and up to its
//!   right edge, and takes in a `rescale` or `one_hot_colors` of the crop that comes later,
//!   converting each crop row as it is decoded (see
//!   `stoker_ops::fused::decode_crop_or_pad::fuse`);
//! - `fuse_pixels`: a run of flips and per-channel affine ops (`convert_image_dtype`,
//!   brightness/contrast jitter, `normalize`) becomes one `pixel_chain` pass over the pixels;
//! - `fuse_maps`: consecutive native `map`s with the same parallelism are fused into one stage;
//! - `map_after_batch`: a `map` of element-wise native ops right before a `batch` is moved
//!   after it, so the ops run once per batch (vectorised) instead of once per element. This
//!   is only done when it cannot change the result: every op is element-wise, the map's
//!   input has fixed shapes (so it can be batched), and bad records raise (under the `skip`
//!   policy a batched op would drop rows and change the batch sizes).
//! - otherwise, a tail of element-wise ops that makes each element larger (a one-hot, a
//!   uint8 → float32 conversion) is split off such a map and run after the batch, on the
//!   same conditions for the elements at the split (see `growing_tail`): the batch copies
//!   the small form and the tail writes the large one once, straight into the batch result.
//! - neither move is made when the ops that would move write their outputs straight into the
//!   batch rows themselves and the elements are large (see `fills_rows_itself`): per element
//!   they copy nothing either, and read their input while it is still in the cache.
//!
//! `shard_down` runs first: a `shard` moves towards the source, so that each shard of a
//! data-parallel job makes only its own elements (see [`shard_down`]).
//!
//! `map_and_batch` runs last: a `batch` right after a `map` that runs on more than one thread
//! (within the thread budget, which the planner shares out as the pipeline will) is marked to
//! run as one stage with it, the map's workers writing each element into its batch row. The
//! marked batch keeps its label and its saved state's form, so a state saved under one thread
//! budget restores under another.

use std::sync::Arc;

use stoker_core::element::Schema;
use stoker_core::op::Op;
use stoker_core::{ErrorPolicy, PipelineOptions, Result};

use crate::build::threads_within;
use crate::datasets::global_shuffle::GlobalShuffle;
use crate::datasets::shard::{self, Shard};
use crate::datasets::{batch::Batch, map::Map};
use crate::plan::{Plan, Step};

pub mod device_images;

/// Whether every field of `schema` has a fixed shape, so that elements can be stacked.
fn stackable(schema: &Schema) -> bool {
    !schema.dynamic
        && schema
            .fields
            .iter()
            .all(|f| f.shape.iter().all(Option::is_some))
}

/// Bytes of one element of a stackable schema; `None` when a field has no fixed size
/// (strings).
fn fixed_bytes(schema: &Schema) -> Option<usize> {
    schema.fields.iter().try_fold(0usize, |sum, f| {
        let numel: usize = f.shape.iter().map(|d| d.unwrap_or(0)).product();
        Some(sum + numel * f.dtype.size()?)
    })
}

/// Where to split `ops` (a map over `input`, right before a batch) so that its tail runs
/// after the batch: the first `k` such that `ops[k..]` are all element-wise, the elements
/// after `ops[..k]` can be stacked, and the tail makes them larger (a one-hot, a uint8 →
/// float32 conversion). The batch then copies the smaller form, and the tail writes its
/// output once, straight into the batch-sized result, instead of each element's output
/// being written and then copied into the batch. `None` when no split qualifies.
fn growing_tail(input: &Plan, ops: &[Arc<dyn Op>]) -> Result<Option<usize>> {
    let first_elementwise = ops
        .iter()
        .rposition(|o| !o.elementwise())
        .map_or(0, |i| i + 1);
    let Some(out_bytes) = ops
        .iter()
        .try_fold(input.schema().clone(), |s, op| op.output_schema(&s))
        .ok()
        .filter(stackable)
        .and_then(|s| fixed_bytes(&s))
    else {
        return Ok(None);
    };
    let mut schema = ops[..first_elementwise]
        .iter()
        .try_fold(input.schema().clone(), |s, op| op.output_schema(&s))?;
    for k in first_elementwise.max(1)..ops.len() {
        if k > first_elementwise {
            schema = ops[k - 1].output_schema(&schema)?;
        }
        if stackable(&schema) && fixed_bytes(&schema).is_some_and(|b| b < out_bytes) {
            return Ok(Some(k));
        }
    }
    Ok(None)
}

/// Elements this large (bytes, after the map) amortise a call per element. Measured with a
/// `rescale` to float32 of N x N x 3 uint8 elements, per element (in place) against after the
/// batch, elements/s: 28 x 28 (9 KB out) 1 thread +7 %, 2 threads -41 %; 64 x 64 (49 KB)
/// +22 % / +11 %; 128 x 128 (197 KB) +50 % / +30 %; 224 x 224 (602 KB) -7 % / +0 %.
const LARGE_ELEMENT_BYTES: usize = 32 << 10;

/// Whether `tail`, the ops the batch would run after it, is better left per element, before
/// the batch: each op writes its field straight into the element's batch row
/// ([`Op::batch_row_field`], no two the same field), so nothing is copied either way, and the
/// elements (`schema`, after the map) are large, so a call per element costs little beside
/// the work. Per element, the tail then reads its input while the element's earlier ops
/// have left it in the cache, and the batch never holds the smaller form. Measured on W2
/// (2 cores; the rescale and one-hot per element rather than after `batch(3)`): 230–233
/// against 223–226 pairs/s.
fn fills_rows_itself(tail: &[Arc<dyn Op>], schema: &Schema) -> bool {
    let mut fields: Vec<&str> = Vec::with_capacity(tail.len());
    let all_in_place = tail.iter().all(|op| match op.batch_row_field() {
        Some(f) if !fields.contains(&f) => {
            fields.push(f);
            true
        }
        _ => false,
    });
    all_in_place
        && !tail.is_empty()
        && fixed_bytes(schema).is_some_and(|b| b >= LARGE_ELEMENT_BYTES)
}

pub use crate::passes::{
    check_passes, enabled, FUSE_DECODE_CROP, FUSE_MAPS, FUSE_PIXELS, MAP_AFTER_BATCH,
    MAP_AND_BATCH, PASSES, SHARD_DOWN,
};

/// What the planner made of a plan.
pub struct Optimized {
    /// The plan the pipeline runs.
    pub plan: Plan,
    /// How many times each pass changed it.
    pub applied: Vec<(&'static str, usize)>,
    /// What `explain()` adds about the rewrites (where each shard went, and why).
    pub notes: Vec<String>,
    /// What the user should hear about once (a shard every rank repeats work above).
    pub warnings: Vec<String>,
    /// The stages left to choose their parallelism, which share the thread budget (see
    /// [`autotuned_stages`]).
    pub autotuned_stages: usize,
}

/// The plan the pipeline runs, with what the passes did.
pub fn optimize(plan: &Plan) -> Result<Optimized> {
    let options = plan.options();
    let mut planner = Planner {
        options,
        applied: Vec::new(),
        notes: Vec::new(),
        warnings: Vec::new(),
        autotuned_stages: 1,
    };
    let plan = if planner.on(SHARD_DOWN) {
        planner.shards_down(plan)?
    } else {
        plan.clone()
    };
    let mut out = planner.rewrite(&plan)?;
    planner.autotuned_stages = autotuned_stages(&out);
    if planner.on(MAP_AND_BATCH) {
        out = planner.map_and_batch(&out)?;
    }
    Ok(Optimized {
        plan: out,
        applied: planner.applied,
        notes: planner.notes,
        warnings: planner.warnings,
        autotuned_stages: planner.autotuned_stages,
    })
}

/// The stages that share the thread budget: those left to `AUTOTUNE` that run element by
/// element as stages of their own. Not a source's parallel reads (they wait on I/O more than
/// they compute), not a map over batches (vectorised, a small part of the work), and nothing
/// below a step that reads its input by random access (it runs no stage there).
pub fn autotuned_stages(plan: &Plan) -> usize {
    let step = plan.step();
    let here = !step.is_source()
        && matches!(
            step.parallelism_knob(),
            Some((_, Some(crate::plan::AUTOTUNE)))
        )
        && plan
            .op::<Map>()
            .is_none_or(|m| m.input.step().batch_of().is_none());
    let below: usize = if plan.op::<GlobalShuffle>().is_some() {
        0
    } else {
        step.inputs().into_iter().map(autotuned_stages).sum()
    };
    usize::from(here) + below
}

struct Planner {
    options: PipelineOptions,
    applied: Vec<(&'static str, usize)>,
    notes: Vec<String>,
    warnings: Vec<String>,
    autotuned_stages: usize,
}

impl Planner {
    fn on(&self, pass: &str) -> bool {
        enabled(&self.options, pass)
    }

    fn note(&mut self, pass: &'static str, times: usize) {
        if times == 0 {
            return;
        }
        match self.applied.iter_mut().find(|(p, _)| *p == pass) {
            Some((_, n)) => *n += times,
            None => self.applied.push((pass, times)),
        }
    }

    /// `plan` with each batch right after a map that runs on more than one thread marked to
    /// run as one stage with it, when bad records raise (under the skip policy a dropped
    /// element would leave a hole in its batch).
    fn map_and_batch(&mut self, plan: &Plan) -> Result<Plan> {
        let (step, changed) = self.with_inputs_rewritten(plan, Planner::map_and_batch)?;
        if let Some(batch) = step.as_any().downcast_ref::<Batch>() {
            // A map left to the tuner may get more workers while it runs.
            let parallel = batch.input.op::<Map>().is_some_and(|m| {
                let tuned = m.num_parallel_calls == Some(crate::plan::AUTOTUNE)
                    && self.options.autotune.unwrap_or(true);
                m.num_parallel_calls.is_some()
                    && (tuned
                        || threads_within(
                            self.options.threads(),
                            self.autotuned_stages,
                            m.num_parallel_calls,
                        ) > 1)
            });
            if parallel && self.options.on_bad_record == ErrorPolicy::Raise {
                self.note(MAP_AND_BATCH, 1);
                return Plan::new(Batch {
                    map_fused: true,
                    ..batch.clone()
                });
            }
        }
        if changed {
            Plan::of_step(step)
        } else {
            Ok(plan.clone())
        }
    }

    /// `plan` with every shard moved down (see [`shard_down`]), inputs first.
    fn shards_down(&mut self, plan: &Plan) -> Result<Plan> {
        let (step, changed) = self.with_inputs_rewritten(plan, Planner::shards_down)?;
        if let Some(shard) = step.as_any().downcast_ref::<Shard>() {
            let placed = shard::place(shard, self.options.on_bad_record)?;
            self.notes.push(placed.note(shard));
            if shard.by_rank {
                self.warnings.extend(placed.warning(shard));
            }
            if !placed.passed.is_empty() || placed.stopped.is_none() {
                self.note(SHARD_DOWN, 1);
                return Ok(placed.plan);
            }
        }
        if changed {
            Plan::of_step(step)
        } else {
            Ok(plan.clone())
        }
    }

    /// `plan`'s step over its inputs as `pass` rewrote them, and whether any changed.
    fn with_inputs_rewritten(
        &mut self,
        plan: &Plan,
        pass: fn(&mut Planner, &Plan) -> Result<Plan>,
    ) -> Result<(Arc<dyn Step>, bool)> {
        let inputs: Vec<Plan> = plan
            .step()
            .inputs()
            .into_iter()
            .map(|p| pass(self, p))
            .collect::<Result<_>>()?;
        let changed = inputs
            .iter()
            .zip(plan.step().inputs())
            .any(|(a, b)| a.id() != b.id());
        let step = if changed {
            plan.step().with_inputs(inputs)
        } else {
            plan.step_arc()
        };
        Ok((step, changed))
    }

    fn rewrite(&mut self, plan: &Plan) -> Result<Plan> {
        let (mut step, mut changed) = self.with_inputs_rewritten(plan, Planner::rewrite)?;
        if let Some(map) = step.as_any().downcast_ref::<Map>() {
            if let Some(fused) = self.fuse_ops(map) {
                step = Arc::new(fused);
                changed = true;
            }
        }
        if let Some(batch) = step.as_any().downcast_ref::<Batch>() {
            if let Some(moved) = self.map_after_batch(batch)? {
                return Ok(moved);
            }
        }
        if let Some(outer) = step.as_any().downcast_ref::<Map>() {
            if let Some(fused) = self.fuse_maps(outer)? {
                return Ok(fused);
            }
        }
        if changed {
            Plan::of_step(step)
        } else {
            Ok(plan.clone())
        }
    }

    /// `map` with its ops fused (`fuse_decode_crop`, `fuse_pixels`); `None` when none were.
    fn fuse_ops(&mut self, map: &Map) -> Option<Map> {
        let mut ops = map.ops.clone();
        if self.on(FUSE_DECODE_CROP) {
            let fused = stoker_ops::fused::decode_crop_or_pad::fuse(
                &stoker_ops::fused::decode_resized_crop::fuse(&ops),
            );
            if fused.len() != ops.len() {
                self.note(FUSE_DECODE_CROP, ops.len() - fused.len());
                ops = fused;
            }
        }
        if self.on(FUSE_PIXELS) {
            let fused = stoker_ops::fused::pixel_chain::fuse(&ops);
            if fused.len() != ops.len() {
                self.note(FUSE_PIXELS, 1);
                ops = fused;
            }
        }
        (ops.len() != map.ops.len()).then(|| Map { ops, ..map.clone() })
    }

    /// `batch` over a map with the map's element-wise ops (all, or a growing tail) moved
    /// after it (`map_after_batch`); `None` when they stay.
    fn map_after_batch(&mut self, batch: &Batch) -> Result<Option<Plan>> {
        if !self.on(MAP_AFTER_BATCH) {
            return Ok(None);
        }
        let Some(map) = batch.input.op::<Map>() else {
            return Ok(None);
        };
        let x = &map.input;
        let ops = &map.ops;
        // Where the ops after the batch start: all of them (the map's input must be
        // stackable, every field of a fixed shape), or a growing tail.
        let split = if self.options.on_bad_record != ErrorPolicy::Raise {
            None
        } else if stackable(x.schema()) && ops.iter().all(|o| o.elementwise()) {
            Some(0)
        } else {
            growing_tail(x, ops)?
        };
        let split = split.filter(|&k| !fills_rows_itself(&ops[k..], batch.input.schema()));
        let Some(k) = split else {
            return Ok(None);
        };
        self.note(MAP_AFTER_BATCH, 1);
        let (head, tail) = ops.split_at(k);
        let head = if head.is_empty() {
            x.clone()
        } else {
            Plan::new(Map {
                ops: head.to_vec(),
                ..map.clone()
            })?
        };
        let batched = Plan::new(Batch {
            input: head,
            ..batch.clone()
        })?;
        // After the batch the ops see batches: element positions do not apply (the ops moved
        // are element-wise, and draw nothing).
        Plan::new(Map {
            input: batched,
            ops: tail.to_vec(),
            positions: Default::default(),
            ..map.clone()
        })
        .map(Some)
    }

    /// `outer` fused with the map right before it into one stage (`fuse_maps`), where both
    /// run alike; `None` otherwise.
    fn fuse_maps(&mut self, outer: &Map) -> Result<Option<Plan>> {
        let Some(first) = outer.input.op::<Map>() else {
            return Ok(None);
        };
        // Fused, both would see the first one's positions.
        if !self.on(FUSE_MAPS)
            || first.num_parallel_calls != outer.num_parallel_calls
            || first.deterministic != outer.deterministic
            || first.positions != outer.positions
        {
            return Ok(None);
        }
        self.note(FUSE_MAPS, 1);
        let mut ops = first.ops.clone();
        ops.extend(outer.ops.iter().cloned());
        Plan::new(Map {
            ops,
            ..first.clone()
        })
        .map(Some)
    }
}
