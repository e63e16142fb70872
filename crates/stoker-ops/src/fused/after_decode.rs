//! The decode fusions' common walk: a `decode_image` and the op right after it.

use std::sync::Arc;

use stoker_core::op::Op;
use stoker_core::DType;

use crate::fused::known::Known;
use crate::image::decode_image::DecodeImage;

/// Replaces each uint8 `decode_image` directly followed by an op that `with` fuses it with
/// (given the decode and that op's spec) by the fused op; other ops pass through unchanged.
pub(crate) fn fuse_after_decode(
    ops: &[Arc<dyn Op>],
    with: impl Fn(&DecodeImage, Known) -> Option<Arc<dyn Op>>,
) -> Vec<Arc<dyn Op>> {
    let spec = Known::of;
    let mut out: Vec<Arc<dyn Op>> = Vec::with_capacity(ops.len());
    let mut i = 0;
    while i < ops.len() {
        if let Some(Known::DecodeImage(decode)) = spec(&ops[i]).filter(|_| i + 1 < ops.len()) {
            let fused = (decode.dtype == DType::U8)
                .then(|| ops.get(i + 1).and_then(spec))
                .flatten()
                .and_then(|next| with(&decode, next));
            if let Some(fused) = fused {
                out.push(fused);
                i += 2;
                continue;
            }
        }
        out.push(ops[i].clone());
        i += 1;
    }
    out
}
