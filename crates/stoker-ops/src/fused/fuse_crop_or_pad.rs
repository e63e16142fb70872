//! The planner's fusion of `decode_image` and `resize_with_crop_or_pad` into
//! [`DecodeCropOrPad`], with a `rescale` or `one_hot_colors` of the crop as its row op where it
//! can take one. It lives apart from the op because it reads ops by their spec ([`Known`]), and
//! the op is one of those.

use std::sync::Arc;

use stoker_core::op::Op;
use stoker_core::DType;

use crate::fused::after_decode::fuse_after_decode;
use crate::fused::crop_row_op::CropRowOp;
use crate::fused::decode_crop_or_pad::DecodeCropOrPad;
use crate::fused::known::Known;
use crate::kernels::fields::out_name;

/// Replaces each `decode_image` (to uint8) directly followed by a `resize_with_crop_or_pad`
/// of its output (which it overwrites) with the fused op, and takes a `rescale` or
/// `one_hot_colors` of the crop into it where it can (see `fuse_row_ops`). Other ops pass
/// through unchanged.
pub fn fuse(ops: &[Arc<dyn Op>]) -> Vec<Arc<dyn Op>> {
    let fused = fuse_after_decode(ops, |decode, next| match next {
        Known::ResizeWithCropOrPad(crop)
            if decode.feeds(&crop.field, crop.output.as_deref())
                && crop.height > 0
                && crop.width > 0 =>
        {
            Some(Arc::new(DecodeCropOrPad {
                decode: decode.clone(),
                crop,
                row_op: None,
            }) as Arc<dyn Op>)
        }
        _ => None,
    });
    fuse_row_ops(&fused)
}

/// Moves a `rescale` (to float32) or `one_hot_colors` of a fused decode-and-crop's output into
/// it as its row op, when it is the last op on that field, and the ops between are ones on
/// other fields that it may safely move before: single-field image ops, and none at all
/// when the row op may fail (so that the element fails with the same error as before).
fn fuse_row_ops(ops: &[Arc<dyn Op>]) -> Vec<Arc<dyn Op>> {
    let specs: Vec<Option<Known>> = ops.iter().map(Known::of).collect();
    let mut taken = vec![false; ops.len()];
    let mut out: Vec<Arc<dyn Op>> = Vec::with_capacity(ops.len());
    for (i, op) in ops.iter().enumerate() {
        if taken[i] {
            continue;
        }
        let Some(Known::DecodeCropOrPad(dcp)) = &specs[i] else {
            out.push(op.clone());
            continue;
        };
        let field = out_name(&dcp.crop.field, &dcp.crop.output);
        let later = &specs[i + 1..];
        // The first later op on the field; every op up to it must be a known one on others.
        let first = later
            .iter()
            .position(|s| s.as_ref().is_none_or(|s| !on_other_field(s, field)));
        let row_op = first.and_then(|k| {
            let op = row_op_of(later[k].as_ref()?, field)?;
            let last_on_field = later[k + 1..]
                .iter()
                .all(|s| s.as_ref().is_some_and(|s| on_other_field(s, field)));
            // Ops already moved into an earlier decode no longer run between.
            let adjacent = taken[i + 1..i + 1 + k].iter().all(|&t| t);
            (last_on_field && (adjacent || !op.may_fail())).then_some((i + 1 + k, op))
        });
        match row_op {
            Some((j, row_op)) if dcp.row_op.is_none() => {
                taken[j] = true;
                out.push(Arc::new(DecodeCropOrPad {
                    row_op: Some(row_op),
                    ..dcp.clone()
                }));
            }
            _ => out.push(op.clone()),
        }
    }
    out
}

/// Whether `spec` is a single-field image op that neither reads nor writes `field`.
fn on_other_field(spec: &Known, field: &str) -> bool {
    let (f, out) = match spec {
        Known::ReadFile(o) => (&o.field, &o.output),
        Known::DecodeImage(o) => (&o.field, &o.output),
        Known::ResizeWithCropOrPad(o) => (&o.field, &o.output),
        Known::DecodeCropOrPad(o) => {
            let writes = out_name(&o.crop.field, &o.crop.output);
            return o.decode.field != field && writes != field;
        }
        Known::Rescale(o) => (&o.field, &o.output),
        Known::OneHotColors(o) => (&o.field, &o.output),
        _ => return false,
    };
    f != field && out.as_deref().is_none_or(|o| o != field)
}

/// The row op for `spec`, if it is one that works on `field` in place.
fn row_op_of(spec: &Known, field: &str) -> Option<CropRowOp> {
    let (f, out, op) = match spec {
        Known::Rescale(o) if o.dtype == DType::F32 => {
            (&o.field, &o.output, CropRowOp::Rescale(o.clone()))
        }
        Known::OneHotColors(o) => (&o.field, &o.output, CropRowOp::OneHotColors(o.clone())),
        _ => return None,
    };
    (f == field && out.as_deref().is_none_or(|o| o == field)).then_some(op)
}
