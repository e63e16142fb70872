//! `decode_image` followed by `resize_with_crop_or_pad` of its output, fused. The planner puts
//! it in place of that pair (see `fuse`), so users write the two ops.
//!
//! A PNG is decoded only as far as the crop needs. Non-interlaced 8-bit PNGs that need no
//! channel conversion (W2's photos and label maps) go through `png_window`: rows down to the
//! crop's last only, each unfiltered only up to the crop's right edge, the crop's pixels
//! written straight into the output (W2's 960x720 files cropped to 512x512 skip their last
//! 104 rows and the right 224 columns of the rest). Other non-interlaced PNGs are decoded
//! down to the crop's last row. A PNG's rows depend on the rows above them and on the pixels
//! to their left, so those are still decoded. Every chunk's CRC is still checked through
//! IEND, so a truncated or damaged file fails as it would whole. JPEGs and interlaced PNGs go
//! through the two ops unchanged; the result is bit-identical to the pair either way.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, Schema};
use stoker_core::op::{Op, OpCtx};
use stoker_core::{DType, Result, Tensor};

use crate::decode_image::{decode_field, fuse_after_decode, png_size, DecodeImage, Decoded};
use crate::fields::{build_into, out_name, put};
use crate::png_window::Png8;
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

    /// The crop (or padded image) of the encoded image `data`, as field `output`.
    fn decode_crop(&self, data: &[u8], ctx: &OpCtx<'_>, output: &str) -> Result<Tensor, String> {
        let size = (self.crop.height, self.crop.width);
        if png_size(data).is_some() {
            let (channels, max) = (self.decode.channels, self.decode.max_pixels);
            if let Some(png) = Png8::open(data, channels, max)? {
                return self.crop_png(&png, ctx, output);
            }
        }
        let (img, skip) = self.decode_top(data)?;
        // The rows from `skip` on: the crop of the whole image starts at their top.
        let (h, w, c) = (img.height - skip, img.width, img.channels);
        let rows = Tensor::view(DType::U8, vec![h, w, c], Arc::new(img.pixels), skip * w * c)
            .map_err(|e| e.to_string())?;
        crop_or_pad(OP, &rows, size, span, ctx, output).map_err(|e| e.to_string())
    }

    /// The crop of a PNG the window decoder takes: only its rows down to the crop's last, and
    /// of those only the bytes up to the crop's right edge, are unfiltered, and the crop's
    /// pixels go straight into the output.
    fn crop_png(&self, png: &Png8<'_>, ctx: &OpCtx<'_>, output: &str) -> Result<Tensor, String> {
        let (height, width, c) = (self.crop.height, self.crop.width, png.channels);
        let ((sy, dy, ny), (sx, dx, nx)) = (span(png.height, height), span(png.width, width));
        let mut failed = None;
        let shape = vec![height, width, c];
        let out = build_into(ctx, output, DType::U8, shape, |out: &mut [u8]| {
            if ny < height || nx < width {
                out.fill(0);
            }
            let put_row = |y: usize, px: &[u8]| {
                let at = ((dy + y) * width + dx) * c;
                out[at..at + px.len()].copy_from_slice(px);
            };
            failed = png.window([sy, sx, ny, nx], put_row).err();
            Ok(())
        })
        .map_err(|e| e.to_string())?;
        failed.map_or(Ok(out), Err)
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
        let output = out_name(&self.crop.field, &self.crop.output);
        let field = &self.decode.field;
        let Some(out) = decode_field(OP, field, &input, ctx, |b| self.decode_crop(b, ctx, output))?
        else {
            return Ok(None);
        };
        Ok(Some(put(input, output, out)))
    }

    fn batch_row_field(&self) -> Option<&str> {
        self.crop.batch_row_field()
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
