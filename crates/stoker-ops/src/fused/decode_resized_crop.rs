//! `decode_random_resized_crop`: `decode_image` followed by `random_resized_crop`, fused. The
//! planner puts it in place of that pair (see `fuse`), so users write the two ops.
//!
//! The crop box is sampled from the header's size alone, exactly as `random_resized_crop`
//! samples it from the decoded image (same seed stream, same boxes). With libjpeg-turbo, a
//! JPEG is then decoded only around the box (its iMCU columns and rows, like TensorFlow's
//! `decode_and_crop_jpeg`) and at the smallest DCT scale of 1/8, 1/4, 1/2 at which the box
//! still covers the output size (see `dct_scale`), and the scaled box is resized: a 2000x1500
//! photo cropped to 30 % and resized to 224 decodes at 1/4. Pixels then differ slightly from
//! decode-then-crop (the DCT scaling is itself a resampling filter); without DCT scaling
//! (zune-jpeg, or PNG) the result is bit-identical to the pair. A non-interlaced PNG is decoded
//! only down to the box's last row, with every chunk's CRC still checked (see
//! `decode_crop_or_pad`).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, Schema};
use stoker_core::op::{Fields, Op, OpCtx};
use stoker_core::Result;

use crate::codecs::decoded::Decoded;
use crate::codecs::jpeg;
use crate::codecs::png_file::png_size;
use crate::fused::after_decode::fuse_after_decode;
use crate::fused::known::Known;
use crate::image::decode_image::{convert, decode_field, DecodeImage};
use crate::image::random_resized_crop::RandomResizedCrop;
use crate::kernels::spec_json::spec_json;

const OP: &str = "decode_random_resized_crop";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecodeRandomResizedCrop {
    pub decode: DecodeImage,
    pub crop: RandomResizedCrop,
}

/// A decoded image, the sampled box (in the original image) and that box in the decoded one.
struct Cropped {
    img: Decoded,
    bx: [usize; 4],
    scaled: [f64; 4],
}

/// The smallest `k` of 1, 2, 4, 8 such that the box scaled by `k/8` still covers `out`
/// pixels in both directions (so the resize only ever shrinks). Only these: libjpeg-turbo's
/// 1/8, 1/4 and 1/2 IDCTs are cheap reduced transforms, while its 3/8, 5/8, 6/8 and 7/8 ones
/// have no SIMD and cost more than the full-size SIMD IDCT (measured: W3 decodes slower
/// with them than without scaling).
pub fn dct_scale(box_h: usize, box_w: usize, out_h: usize, out_w: usize) -> u8 {
    [1u8, 2, 4, 8]
        .into_iter()
        .find(|&k| box_h * usize::from(k) >= out_h * 8 && box_w * usize::from(k) >= out_w * 8)
        .unwrap_or(8)
}

impl DecodeRandomResizedCrop {
    fn decode_and_crop(&self, data: &[u8], ctx: &OpCtx<'_>) -> Result<Cropped, String> {
        if let Some((width, height)) = png_size(data) {
            // Only down to the box's last row, and the rows below it that the antialiased
            // resize reads at the box's edge: its filter reaches one output pixel's worth of
            // source rows (every chunk's CRC is still checked).
            let bx = self.crop.sample(height, width, ctx);
            let rows = bx[0] + bx[2] + bx[2].div_ceil(self.crop.height.max(1)) + 1;
            let img = self.decode.decode_png_top(data, rows)?;
            let scaled = bx.map(|v| v as f64);
            return Ok(Cropped { img, bx, scaled });
        }
        let is_jpeg = data.starts_with(&[0xFF, 0xD8, 0xFF]);
        if !(is_jpeg && jpeg::DCT_SCALING) {
            let img = self.decode.decode(data)?;
            let bx = self.crop.sample(img.height, img.width, ctx);
            let scaled = bx.map(|v| v as f64);
            return Ok(Cropped { img, bx, scaled });
        }
        let (width, height, _) = jpeg::header(data)?;
        let bx = self.crop.sample(height, width, ctx);
        let k = dct_scale(bx[2], bx[3], self.crop.height, self.crop.width);
        let (d, max) = (&self.decode, self.decode.max_pixels);
        let (img, scaled) = jpeg::decode_region(data, d.channels, max, k, bx, d.dct_method)?;
        let img = convert(img, usize::from(self.decode.channels));
        Ok(Cropped { img, bx, scaled })
    }
}

impl Op for DecodeRandomResizedCrop {
    fn work(&self) -> stoker_core::op::Work {
        stoker_core::op::Work::DecodeImage
    }

    fn name(&self) -> &str {
        OP
    }

    fn seeds(&self) -> Vec<stoker_core::Seed> {
        self.crop.seeds()
    }

    fn fields(&self) -> Fields {
        self.decode.fields().and(self.crop.fields())
    }

    fn deterministic(&self) -> bool {
        false
    }

    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        self.crop.output_schema(&self.decode.output_schema(input)?)
    }

    fn apply(&self, input: Element, ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        let field = &self.decode.field;
        let Some(Cropped { img, bx, scaled }) =
            decode_field(OP, field, &input, ctx, |b| self.decode_and_crop(b, ctx))?
        else {
            return Ok(None);
        };
        let pixels = img.pixels.as_bytes();
        let out =
            self.crop
                .resize_box(pixels, [img.height, img.width, img.channels], scaled, ctx)?;
        Ok(Some(self.crop.put_outputs(input, out, bx)?))
    }

    fn batch_row_field(&self) -> Option<&str> {
        self.crop.batch_row_field()
    }

    fn spec(&self) -> Result<serde_json::Value> {
        spec_json(OP, self)
    }
}

/// Replaces each `decode_image` (to uint8) directly followed by a `random_resized_crop` of its
/// output (which it overwrites) with the fused op. Other ops pass through unchanged.
pub fn fuse(ops: &[Arc<dyn Op>]) -> Vec<Arc<dyn Op>> {
    fuse_after_decode(ops, |decode, next| match next {
        Known::RandomResizedCrop(crop)
            if decode.feeds(&crop.field, crop.output.as_deref()) && crop.validate().is_ok() =>
        {
            Some(Arc::new(DecodeRandomResizedCrop {
                decode: decode.clone(),
                crop,
            }) as Arc<dyn Op>)
        }
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dct_scale_keeps_the_box_at_least_output_sized() {
        assert_eq!(dct_scale(375, 500, 224, 224), 8); // 375 * 4/8 = 187 < 224
        assert_eq!(dct_scale(448, 500, 224, 224), 4); // exactly half
        assert_eq!(dct_scale(112, 150, 224, 224), 8); // upscaling: decode in full
        assert_eq!(dct_scale(2000, 2000, 224, 224), 1);
        assert_eq!(dct_scale(900, 300, 224, 224), 8); // 300 * 6/8 would do, 4/8 would not
    }
}
