//! Decoding on a device: every `map` whose image chain a device can take (see
//! `stoker_ops::fused::device_image`) keeps only the chain's CPU half, which reads each JPEG's
//! header and draws the crop box, flips and affine coefficients; the loader that asked makes
//! the pixels on its device. Asked for by a loader (`stoker.torch.loader(decode_on=...)`), not
//! by the planner: the elements change from pixels to compressed bytes plus those draws.

use std::sync::Arc;

use stoker_core::{ErrorPolicy, Result};
use stoker_ops::fused::device_image::{self, DeviceImage};

use crate::datasets::map::Map;
use crate::datasets::options::WithOptions;
use crate::plan::{Plan, Step};

/// `plan` with its image chains split, and the device halves (outermost first); or, when
/// none could be, why not (one reason per `map` looked at).
pub fn split(
    plan: &Plan,
    cpu_share: f64,
    auto_share: bool,
) -> Result<std::result::Result<(Plan, Vec<DeviceImage>), String>> {
    let mut found = Vec::new();
    let mut reasons = Vec::new();
    let out = walk(
        plan,
        (cpu_share, auto_share),
        None,
        &mut found,
        &mut reasons,
    )?;
    if found.is_empty() {
        if reasons.is_empty() {
            reasons.push("the pipeline has no map".into());
        }
        return Ok(Err(reasons.join("; ")));
    }
    Ok(Ok((out, found)))
}

fn walk(
    plan: &Plan,
    share: (f64, bool),
    policy: Option<ErrorPolicy>,
    found: &mut Vec<DeviceImage>,
    reasons: &mut Vec<String>,
) -> Result<Plan> {
    // The outermost `with_options` sets the policy.
    let policy = policy.or_else(|| plan.op::<WithOptions>().map(|o| o.options.on_bad_record));
    let mut step: Arc<dyn Step> = plan.step_arc();
    let mut changed = false;
    if let Some(map) = plan.op::<Map>() {
        match device_image::split(&map.ops, share.0, share.1) {
            Ok(_) if policy == Some(ErrorPolicy::Skip) => reasons.push(
                "on_bad_record='skip': a damaged image found on the device cannot be left out \
                 of a batch already made"
                    .into(),
            ),
            Ok((ops, device)) => {
                step = Arc::new(Map { ops, ..map.clone() });
                found.push(device);
                changed = true;
            }
            Err(reason) => reasons.push(reason),
        }
    }
    let inputs: Vec<Plan> = step
        .inputs()
        .into_iter()
        .map(|p| walk(p, share, policy, found, reasons))
        .collect::<Result<_>>()?;
    let inputs_changed = inputs
        .iter()
        .zip(step.inputs())
        .any(|(a, b)| a.id() != b.id());
    if inputs_changed {
        step = step.with_inputs(inputs);
    }
    if changed || inputs_changed {
        Plan::of_step(step)
    } else {
        Ok(plan.clone())
    }
}
