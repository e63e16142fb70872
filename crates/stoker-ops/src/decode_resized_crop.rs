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
//! (zune-jpeg, or PNG) the result is bit-identical to the pair.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, Schema};
use stoker_core::op::{Op, OpCtx};
use stoker_core::{Error, ErrorPolicy, Result};

use crate::decode_image::{convert, DecodeImage, Decoded};
use crate::fields::out_name;
use crate::jpeg;
use crate::random_resized_crop::RandomResizedCrop;
use crate::spec::OpSpec;

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
        let (img, scaled) = jpeg::decode_region(data, d.channels, max, k, bx)?;
        let img = convert(img, usize::from(self.decode.channels));
        Ok(Cropped { img, bx, scaled })
    }
}

impl Op for DecodeRandomResizedCrop {
    fn name(&self) -> &str {
        OP
    }

    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        self.crop.output_schema(&self.decode.output_schema(input)?)
    }

    fn apply(&self, input: Element, ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        let i = input.require(OP, &self.decode.field)?;
        let t = &input.tensors[i];
        let data = t
            .bytes_data()
            .filter(|_| t.shape().is_empty())
            .ok_or_else(|| {
                Error::invalid(
                    OP,
                    format!(
                        "field '{}' must be one encoded image (a scalar string)",
                        self.decode.field
                    ),
                )
            })?;
        let bytes = data.values.first().map(|b| b.as_ref()).unwrap_or_default();
        match self.decode_and_crop(bytes, ctx) {
            Ok(Cropped { img, bx, scaled }) => {
                let pixels = img.pixels.as_bytes();
                let out =
                    self.crop
                        .resize_box(pixels, img.height, img.width, img.channels, scaled)?;
                Ok(Some(self.crop.put_outputs(input, out, bx)?))
            }
            Err(reason) => {
                let err = Error::invalid_record("decode_image", data.origin(0), 0, reason);
                if ctx.policy == ErrorPolicy::Skip {
                    ctx.stats.add_skip(err.to_string());
                    Ok(None)
                } else {
                    Err(err)
                }
            }
        }
    }

    fn spec(&self) -> Result<serde_json::Value> {
        OpSpec::DecodeRandomResizedCrop(self.clone()).to_json()
    }
}

/// Replaces each `decode_image` directly followed by a `random_resized_crop` of its output
/// (which it overwrites) with the fused op. Other ops pass through unchanged.
pub fn fuse(ops: &[Arc<dyn Op>]) -> Vec<Arc<dyn Op>> {
    let spec = |op: &Arc<dyn Op>| op.spec().ok().and_then(|v| OpSpec::from_json(&v).ok());
    let mut out: Vec<Arc<dyn Op>> = Vec::with_capacity(ops.len());
    let mut i = 0;
    while i < ops.len() {
        if let (Some(OpSpec::DecodeImage(decode)), Some(Some(OpSpec::RandomResizedCrop(crop)))) =
            (spec(&ops[i]), ops.get(i + 1).map(spec))
        {
            let decoded = out_name(&decode.field, &decode.output).to_string();
            let overwrites = crop.output.as_deref().is_none_or(|o| o == decoded);
            let u8_out = decode.dtype == stoker_core::DType::U8;
            if crop.field == decoded && overwrites && u8_out && crop.validate().is_ok() {
                out.push(Arc::new(DecodeRandomResizedCrop { decode, crop }));
                i += 2;
                continue;
            }
        }
        out.push(ops[i].clone());
        i += 1;
    }
    out
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
