//! Rewrites a plan into one that computes the same elements faster.
//!
//! The rewrites, all visible in `explain()`:
//! - `decode_image` followed by `random_resized_crop` becomes one fused op that decodes only
//!   what the crop needs (DCT-domain scaling where the JPEG decoder has it);
//! - `decode_image` followed by `resize_with_crop_or_pad` becomes `decode_crop_or_pad`, which
//!   decodes a PNG only down to the crop's last row and up to its right edge, and takes in a
//!   `rescale` or `one_hot_colors` of the crop that comes later, converting each crop row as
//!   it is decoded (see `stoker_ops::fused::decode_crop_or_pad::fuse`);
//! - a run of flips and per-channel affine ops (`convert_image_dtype`, brightness/contrast
//!   jitter, `normalize`) becomes one `pixel_chain` pass over the pixels;
//! - consecutive native `map`s with the same parallelism are fused into one stage;
//! - a `map` of element-wise native ops right before a `batch` is moved after it, so the ops
//!   run once per batch (vectorised) instead of once per element. This is only done when
//!   it cannot change the result: every op is element-wise, the map's input has fixed shapes
//!   (so it can be batched), and bad records raise (under the `skip` policy a batched op
//!   would drop rows and change the batch sizes).
//! - otherwise, a tail of element-wise ops that makes each element larger (a one-hot, a
//!   uint8 → float32 conversion) is split off such a map and run after the batch, on the
//!   same conditions for the elements at the split (see `growing_tail`): the batch copies
//!   the small form and the tail writes the large one once, straight into the batch result.
//! - neither move is made when the ops that would move write their outputs straight into the
//!   batch rows themselves and the elements are large (see `fills_rows_itself`): per element
//!   they copy nothing either, and read their input while it is still in the cache.
//!
//! A parallel `map` right before a `batch` is also fused, but when the pipeline is built
//! (`build::map_and_batch`), since whether the map runs in parallel depends on the thread
//! budget.

use std::sync::Arc;

use stoker_core::element::Schema;
use stoker_core::op::Op;
use stoker_core::{ErrorPolicy, Result};

use crate::plan::{Plan, Step};

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

pub fn optimize(plan: &Plan) -> Result<Plan> {
    let policy = plan.options().on_bad_record;
    rewrite(plan, policy)
}

fn rewrite(plan: &Plan, policy: ErrorPolicy) -> Result<Plan> {
    let inputs: Vec<Plan> = plan
        .step()
        .inputs()
        .into_iter()
        .map(|p| rewrite(p, policy))
        .collect::<Result<_>>()?;
    let changed = inputs
        .iter()
        .zip(plan.step().inputs())
        .any(|(a, b)| a.id() != b.id());
    let mut step = if changed {
        plan.step().with_inputs(inputs)
    } else {
        plan.step().clone()
    };
    let mut changed = changed;
    if let Step::Map { ops, .. } = &mut step {
        let fused = stoker_ops::fused::decode_crop_or_pad::fuse(
            &stoker_ops::fused::decode_resized_crop::fuse(ops),
        );
        let fused = stoker_ops::fused::pixel_chain::fuse(&fused);
        if fused.len() != ops.len() {
            *ops = fused;
            changed = true;
        }
    }

    match &step {
        // Not for padded batches: padding positions would go through the ops too.
        Step::Batch {
            input,
            batch_size,
            drop_remainder,
            padding: None,
        } => {
            if let Step::Map {
                input: x,
                ops,
                num_parallel_calls,
                deterministic,
                epoch,
            } = input.step()
            {
                // Where the ops after the batch start: all of them (the map's input must be
                // stackable, every field of a fixed shape), or a growing tail.
                let split = if policy != ErrorPolicy::Raise {
                    None
                } else if stackable(x.schema()) && ops.iter().all(|o| o.elementwise()) {
                    Some(0)
                } else {
                    growing_tail(x, ops)?
                };
                let split = split.filter(|&k| !fills_rows_itself(&ops[k..], input.schema()));
                if let Some(k) = split {
                    let (head, tail) = ops.split_at(k);
                    let head = if head.is_empty() {
                        x.clone()
                    } else {
                        Plan::new(Step::Map {
                            input: x.clone(),
                            ops: head.to_vec(),
                            num_parallel_calls: *num_parallel_calls,
                            deterministic: *deterministic,
                            epoch: epoch.clone(),
                        })?
                    };
                    let batched = Plan::new(Step::Batch {
                        input: head,
                        batch_size: *batch_size,
                        drop_remainder: *drop_remainder,
                        padding: None,
                    })?;
                    return Plan::new(Step::Map {
                        input: batched,
                        ops: tail.to_vec(),
                        num_parallel_calls: *num_parallel_calls,
                        deterministic: *deterministic,
                        epoch: epoch.clone(),
                    });
                }
            }
        }
        Step::Map {
            input,
            ops,
            num_parallel_calls,
            deterministic,
            ..
        } => {
            if let Step::Map {
                input: x,
                ops: first,
                num_parallel_calls: p0,
                deterministic: d0,
                epoch,
            } = input.step()
            {
                if p0 == num_parallel_calls && d0 == deterministic {
                    let mut fused = first.clone();
                    fused.extend(ops.iter().cloned());
                    return Plan::new(Step::Map {
                        input: x.clone(),
                        ops: fused,
                        num_parallel_calls: *num_parallel_calls,
                        deterministic: *deterministic,
                        epoch: epoch.clone(),
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
