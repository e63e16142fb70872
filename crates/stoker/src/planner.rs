//! Rewrites a plan into one that computes the same elements faster.
//!
//! Four rewrites, all visible in `explain()`:
//! - `decode_image` followed by `random_resized_crop` becomes one fused op that decodes only
//!   what the crop needs (DCT-domain scaling where the JPEG decoder has it);
//! - a run of flips and per-channel affine ops (`convert_image_dtype`, brightness/contrast
//!   jitter, `normalize`) becomes one `pixel_chain` pass over the pixels;
//! - consecutive native `map`s with the same parallelism are fused into one stage;
//! - a `map` of element-wise native ops right before a `batch` is moved after it, so the ops
//!   run once per batch (vectorised) instead of once per element. This is only done when
//!   it cannot change the result: every op is element-wise, the map's input has fixed shapes
//!   (so it can be batched), and bad records raise (under the `skip` policy a batched op
//!   would drop rows and change the batch sizes).
//!
//! A parallel `map` right before a `batch` is also fused, but when the pipeline is built
//! (`build::map_and_batch`), since whether the map runs in parallel depends on the thread
//! budget.

use stoker_core::{ErrorPolicy, Result};

use crate::plan::{Plan, Step};

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
        let fused = stoker_ops::pixel_chain::fuse(&stoker_ops::decode_resized_crop::fuse(ops));
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
                // Batching the map's input must be possible: every field of a fixed shape.
                let stackable = !x.schema().dynamic
                    && x.schema()
                        .fields
                        .iter()
                        .all(|f| f.shape.iter().all(Option::is_some));
                if policy == ErrorPolicy::Raise && stackable && ops.iter().all(|o| o.elementwise())
                {
                    let batched = Plan::new(Step::Batch {
                        input: x.clone(),
                        batch_size: *batch_size,
                        drop_remainder: *drop_remainder,
                        padding: None,
                    })?;
                    return Plan::new(Step::Map {
                        input: batched,
                        ops: ops.clone(),
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
