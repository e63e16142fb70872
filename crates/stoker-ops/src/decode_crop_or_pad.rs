//! `decode_image` followed by `resize_with_crop_or_pad` of its output, fused. The planner puts
//! it in place of that pair (see `fuse`), so users write the two ops.
//!
//! Where the crop ends above the image's last row, a non-interlaced PNG is decoded only down to
//! it: W2's 960x720 photos and label maps cropped to 512x512 skip their last 104 rows (a
//! PNG's rows depend on the rows above them, so the rows above the crop are still decoded).
//! Every chunk's CRC is still checked through IEND, so a truncated or damaged file fails as it
//! would whole. Other images go through the two ops unchanged; the result is bit-identical to
//! the pair either way.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, Schema};
use stoker_core::op::{Op, OpCtx};
use stoker_core::{DType, Result, Tensor};

use crate::decode_image::{decode_field, fuse_after_decode, png_size, DecodeImage, Decoded};
use crate::fields::{out_name, put};
use crate::resize_with_crop_or_pad::{crop_or_pad, span, ResizeWithCropOrPad};
use crate::spec::OpSpec;

const OP: &str = "decode_crop_or_pad";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecodeCropOrPad {
    pub decode: DecodeImage,
    pub crop: ResizeWithCropOrPad,
}

impl DecodeCropOrPad {
    /// The decoded image, and how many of its top rows the crop skips.
    fn decode_top(&self, data: &[u8]) -> Result<(Decoded, usize), String> {
        if let Some((_, height)) = png_size(data) {
            let (skip, _, keep) = span(height, self.crop.height);
            if skip + keep < height {
                let img = self.decode.decode_png_top(data, skip + keep)?;
                // An interlaced PNG comes back whole: the crop then starts where it would.
                let skip = if img.height == skip + keep { skip } else { 0 };
                return Ok((img, skip));
            }
        }
        Ok((self.decode.decode(data)?, 0))
    }
}

impl Op for DecodeCropOrPad {
    fn name(&self) -> &str {
        OP
    }

    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        self.crop.output_schema(&self.decode.output_schema(input)?)
    }

    fn apply(&self, input: Element, ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        let field = &self.decode.field;
        let Some((img, skip)) = decode_field(OP, field, &input, ctx, |b| self.decode_top(b))?
        else {
            return Ok(None);
        };
        // The rows from `skip` on: the crop of the whole image starts at their top.
        let (h, w, c) = (img.height - skip, img.width, img.channels);
        let rows = Tensor::view(DType::U8, vec![h, w, c], Arc::new(img.pixels), skip * w * c)?;
        let (size, output) = (
            (self.crop.height, self.crop.width),
            out_name(&self.crop.field, &self.crop.output),
        );
        let out = crop_or_pad(OP, &rows, size, span, ctx, output)?;
        Ok(Some(put(input, output, out)))
    }

    fn spec(&self) -> Result<serde_json::Value> {
        OpSpec::DecodeCropOrPad(self.clone()).to_json()
    }
}

/// Replaces each `decode_image` (to uint8) directly followed by a `resize_with_crop_or_pad`
/// of its output (which it overwrites) with the fused op. Other ops pass through unchanged.
pub fn fuse(ops: &[Arc<dyn Op>]) -> Vec<Arc<dyn Op>> {
    fuse_after_decode(ops, |decode, next| match next {
        OpSpec::ResizeWithCropOrPad(crop)
            if decode.feeds(&crop.field, crop.output.as_deref())
                && crop.height > 0
                && crop.width > 0 =>
        {
            Some(Arc::new(DecodeCropOrPad {
                decode: decode.clone(),
                crop,
            }) as Arc<dyn Op>)
        }
        _ => None,
    })
}
