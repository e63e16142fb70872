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
//! `map_and_batch`: a parallel `map` right before a `batch` is also fused, but when the
//! pipeline is built (`datasets::map::map_and_batch`), since whether the map runs in parallel
//! depends on the thread budget.

use std::sync::Arc;

use stoker_core::element::Schema;
use stoker_core::op::Op;
use stoker_core::{Error, ErrorPolicy, PipelineOptions, Result};

use crate::datasets::{batch::Batch, map::Map};
use crate::plan::{Plan, Step};

pub mod device_images;
pub mod shard_down;

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

/// The planner's passes: name and what it does.
pub const PASSES: &[(&str, &str)] = &[
    (
        SHARD_DOWN,
        "a shard moves towards the source, so that each shard makes only its own elements",
    ),
    (
        FUSE_DECODE_CROP,
        "decode_image and a crop after it become one op that decodes only the crop",
    ),
    (
        FUSE_PIXELS,
        "a run of flips and per-channel affine ops becomes one pixel_chain pass",
    ),
    (
        FUSE_MAPS,
        "consecutive native maps with the same parallelism become one stage",
    ),
    (
        MAP_AFTER_BATCH,
        "element-wise ops before a batch (or a growing tail of them) run after it, per batch",
    ),
    (
        MAP_AND_BATCH,
        "a parallel map right before a batch writes each element into its batch row",
    ),
];

pub const SHARD_DOWN: &str = "shard_down";
pub const FUSE_DECODE_CROP: &str = "fuse_decode_crop";
pub const FUSE_PIXELS: &str = "fuse_pixels";
pub const FUSE_MAPS: &str = "fuse_maps";
pub const MAP_AFTER_BATCH: &str = "map_after_batch";
/// Done when the pipeline is built (see `datasets::map::map_and_batch`), since whether the
/// map runs in parallel depends on the thread budget.
pub const MAP_AND_BATCH: &str = "map_and_batch";

/// Whether `options` leave pass `name` on.
pub fn enabled(options: &PipelineOptions, name: &str) -> bool {
    options.optimizations.get(name).copied().unwrap_or(true)
}

/// Refuses options naming a pass that does not exist.
pub fn check_passes(options: &PipelineOptions) -> Result<()> {
    for name in options.optimizations.keys() {
        if !PASSES.iter().any(|(p, _)| p == name) {
            let known: Vec<&str> = PASSES.iter().map(|(p, _)| *p).collect();
            return Err(Error::invalid(
                "optimizations",
                format!(
                    "no planner pass is named '{name}'; the passes are: {}",
                    known.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

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
}

/// The plan the pipeline runs, with what the passes did.
pub fn optimize(plan: &Plan) -> Result<Optimized> {
    let options = plan.options();
    let mut planner = Planner {
        options,
        applied: Vec::new(),
        notes: Vec::new(),
        warnings: Vec::new(),
    };
    let plan = if planner.on(SHARD_DOWN) {
        planner.shards_down(plan)?
    } else {
        plan.clone()
    };
    let out = planner.rewrite(&plan)?;
    if enabled(&planner.options, MAP_AND_BATCH) && planner.options.threads() > 1 {
        let n = count_map_and_batch(&out, planner.options.on_bad_record);
        planner.note(MAP_AND_BATCH, n);
    }
    Ok(Optimized {
        plan: out,
        applied: planner.applied,
        notes: planner.notes,
        warnings: planner.warnings,
    })
}

/// Parallel maps right before a (non-padded) batch, which run fused when bad records raise.
fn count_map_and_batch(plan: &Plan, policy: ErrorPolicy) -> usize {
    let here = match plan.step() {
        Step::Batch(b) => {
            matches!(
                b.input.step(),
                Step::Map(m) if m.num_parallel_calls.is_some_and(|n| n != 1)
            ) && policy == ErrorPolicy::Raise
        }
        _ => false,
    };
    usize::from(here)
        + plan
            .step()
            .inputs()
            .into_iter()
            .map(|p| count_map_and_batch(p, policy))
            .sum::<usize>()
}

struct Planner {
    options: PipelineOptions,
    applied: Vec<(&'static str, usize)>,
    notes: Vec<String>,
    warnings: Vec<String>,
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

    /// `plan` with every shard moved down (see [`shard_down`]), inputs first.
    fn shards_down(&mut self, plan: &Plan) -> Result<Plan> {
        let (step, changed) = self.with_inputs_rewritten(plan, Planner::shards_down)?;
        if let Step::Shard(shard) = &step {
            let placed = shard_down::place(shard, self.options.on_bad_record)?;
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
            Plan::new(step)
        } else {
            Ok(plan.clone())
        }
    }

    /// `plan`'s step over its inputs as `pass` rewrote them, and whether any changed.
    fn with_inputs_rewritten(
        &mut self,
        plan: &Plan,
        pass: fn(&mut Planner, &Plan) -> Result<Plan>,
    ) -> Result<(Step, bool)> {
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
            plan.step().clone()
        };
        Ok((step, changed))
    }

    fn rewrite(&mut self, plan: &Plan) -> Result<Plan> {
        let (mut step, mut changed) = self.with_inputs_rewritten(plan, Planner::rewrite)?;
        if let Step::Map(map) = &mut step {
            if self.on(FUSE_DECODE_CROP) {
                let fused = stoker_ops::fused::decode_crop_or_pad::fuse(
                    &stoker_ops::fused::decode_resized_crop::fuse(&map.ops),
                );
                if fused.len() != map.ops.len() {
                    self.note(FUSE_DECODE_CROP, map.ops.len() - fused.len());
                    map.ops = fused;
                    changed = true;
                }
            }
            if self.on(FUSE_PIXELS) {
                let fused = stoker_ops::fused::pixel_chain::fuse(&map.ops);
                if fused.len() != map.ops.len() {
                    self.note(FUSE_PIXELS, 1);
                    map.ops = fused;
                    changed = true;
                }
            }
        }
        let policy = self.options.on_bad_record;
        match &step {
            Step::Batch(batch) if self.on(MAP_AFTER_BATCH) => {
                if let Step::Map(map) = batch.input.step() {
                    let x = &map.input;
                    let ops = &map.ops;
                    // Where the ops after the batch start: all of them (the map's input must
                    // be stackable, every field of a fixed shape), or a growing tail.
                    let split = if policy != ErrorPolicy::Raise {
                        None
                    } else if stackable(x.schema()) && ops.iter().all(|o| o.elementwise()) {
                        Some(0)
                    } else {
                        growing_tail(x, ops)?
                    };
                    let split =
                        split.filter(|&k| !fills_rows_itself(&ops[k..], batch.input.schema()));
                    if let Some(k) = split {
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
                        // After the batch the ops see batches: element positions do not
                        // apply (the ops moved are element-wise, and draw nothing).
                        return Plan::new(Map {
                            input: batched,
                            ops: tail.to_vec(),
                            positions: Default::default(),
                            ..map.clone()
                        });
                    }
                }
            }
            Step::Map(outer) if self.on(FUSE_MAPS) => {
                if let Step::Map(first) = outer.input.step() {
                    // Fused, both would see the first one's positions.
                    if first.num_parallel_calls == outer.num_parallel_calls
                        && first.deterministic == outer.deterministic
                        && first.positions == outer.positions
                    {
                        self.note(FUSE_MAPS, 1);
                        let mut ops = first.ops.clone();
                        ops.extend(outer.ops.iter().cloned());
                        return Plan::new(Map {
                            ops,
                            ..first.clone()
                        });
                    }
                }
            }
            _ => {}
        }
        if changed {
            Plan::new(step)
        } else {
            Ok(plan.clone())
        }
    }
}
